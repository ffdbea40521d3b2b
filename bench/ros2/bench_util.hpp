// What both programs of the ROS 2 benchmark share (ros2_bench.cpp, loan/ros2_loan_bench.cpp):
// the clocks, the QoS profile and the publisher's wait for its subscription. Header-only: the
// loaned-message program is built in a ROS package of its own.
#ifndef FERRY_BENCH_ROS2_BENCH_UTIL_HPP
#define FERRY_BENCH_ROS2_BENCH_UTIL_HPP

#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <thread>

#include "rclcpp/rclcpp.hpp"

namespace ros2_bench
{

using namespace std::chrono_literals;

inline int64_t mono_ns()
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline int64_t cpu_ns()
{
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (static_cast<int64_t>(ru.ru_utime.tv_sec) + ru.ru_stime.tv_sec) * 1000000000 +
         (static_cast<int64_t>(ru.ru_utime.tv_usec) + ru.ru_stime.tv_usec) * 1000;
}

inline rclcpp::QoS qos()
{
  return rclcpp::QoS(rclcpp::KeepLast(10)).reliable();
}

template<class Pub>
bool wait_subscription(const rclcpp::Node::SharedPtr & node, const Pub & pub)
{
  auto end = std::chrono::steady_clock::now() + 30s;
  while (pub->get_subscription_count() == 0) {
    if (std::chrono::steady_clock::now() > end) {
      return false;
    }
    rclcpp::spin_some(node);
    std::this_thread::sleep_for(5ms);
  }
  // A moment for the subscription's side of the match (DDS matches each side on its own).
  auto settle = std::chrono::steady_clock::now() + 500ms;
  while (std::chrono::steady_clock::now() < settle) {
    rclcpp::spin_some(node);
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

}  // namespace ros2_bench

#endif
