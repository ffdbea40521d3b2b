// What both programs of the ROS 2 benchmark share (ros2_bench.cpp, loan/ros2_loan_bench.cpp):
// the clocks, the QoS profile, the publisher's wait for its subscription and the subscriber's
// accounting and result line. Header-only: the
// loaned-message program is built in a ROS package of its own.
#ifndef FERRY_BENCH_ROS2_BENCH_UTIL_HPP
#define FERRY_BENCH_ROS2_BENCH_UTIL_HPP

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

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

// The subscriber's side: what came, what was lost, the latencies past the warm-up and the
// process's CPU from the first message on.
struct Receiver
{
  explicit Receiver(int count, int warmup_count)
  : warmup(warmup_count)
  {
    lat.reserve(static_cast<size_t>(count));
  }

  // now: CLOCK_MONOTONIC at the callback's start (publish-to-callback), before the message is
  // read. The first messages (pools carved, pages first touched, connections made) are start-up,
  // left out of the latencies as ferry's demo does; they are counted for losses.
  void account(int number, int64_t sent, int64_t now)
  {
    if (received == 0) {
      cpu0 = cpu_ns();
      t0 = now;
    }
    if (number > warmup) {
      lat.push_back(now - sent);
    }
    lost += number > last + 1 ? number - last - 1 : 0;
    last = std::max(last, number);
    received++;
  }

  // Spins node's callbacks until message count came or seconds passed.
  void spin(const rclcpp::Node::SharedPtr & node, int count, int seconds)
  {
    rclcpp::executors::SingleThreadedExecutor exec;
    exec.add_node(node);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (rclcpp::ok() && last < count && std::chrono::steady_clock::now() < end) {
      exec.spin_once(100ms);
    }
  }

  // Prints the key=value result line (extra goes before the checksum); 0 when anything came.
  int report(int count, const std::string & extra)
  {
    int64_t span = received ? mono_ns() - t0 : 0, cpu = received ? cpu_ns() - cpu0 : 0;
    lost += count - last;
    std::sort(lat.begin(), lat.end());
    auto pct = [&](double q) {
        if (lat.empty()) {
          return 0.0;
        }
        size_t i = std::min(lat.size() - 1, static_cast<size_t>(q * lat.size()));
        return lat[i] / 1e3;
      };
    printf(
      "sub received=%d lost=%d p50_us=%.1f p99_us=%.1f max_us=%.1f cpu_us_per_msg=%.1f "
      "seconds=%.2f%s checksum=%" PRIu64 "\n", received, lost, pct(0.5), pct(0.99),
      lat.empty() ? 0.0 : lat.back() / 1e3, received > 1 ? cpu / 1e3 / (received - 1) : 0.0,
      span / 1e9, extra.c_str(), sum);
    return received > 0 ? 0 : 1;
  }

  int warmup;
  std::vector<int64_t> lat;
  int received = 0, last = 0, lost = 0;
  uint64_t sum = 0;  // of every byte read: the reads cannot be left out
  int64_t cpu0 = 0, t0 = 0;
};

}  // namespace ros2_bench

#endif
