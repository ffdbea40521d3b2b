// The loaned-message row of the ROS 2 benchmark (bench/ros2/run.sh drives it): ordinary rclcpp
// code with ROS 2's loan API, the same whichever RMW carries it.
//
//   ros2_loan_bench pub HZ COUNT        ferry_bench_msgs/msg/Frame (6,220,800 bytes, fixed size)
//   ros2_loan_bench sub COUNT SECONDS
//
// The publisher asks for a loan (borrow_loaned_message(): the RMW's memory where it can loan,
// else rclcpp allocates one), writes every byte of the frame as a camera does, stamps it on
// CLOCK_MONOTONIC and publishes it (the loan goes back to the RMW). The subscription takes the
// latency at the start of its callback (a const reference: rclcpp hands over the RMW's loan where
// it can take one, with ROS_DISABLE_LOANED_MESSAGES=0 in Humble), reads every byte, and counts
// the numbers that never came. Both sides print one key=value line as ros2_bench does, with
// whether the RMW loaned; latencies leave out the first 15 frames (start-up).
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../bench_util.hpp"
#include "ferry_bench_msgs/msg/frame.hpp"
#include "rclcpp/rclcpp.hpp"

using namespace std::chrono_literals;
using Frame = ferry_bench_msgs::msg::Frame;

namespace
{

using namespace ros2_bench;


int pub_main(double hz, int count)
{
  auto node = rclcpp::Node::make_shared("loan_pub");
  auto pub = node->create_publisher<Frame>("/bench/frame", qos());
  if (!wait_subscription(node, pub)) {
    fprintf(stderr, "ros2_loan_bench pub: no subscription\n");
    return 1;
  }
  int64_t period = static_cast<int64_t>(1e9 / hz);
  int64_t cpu0 = cpu_ns(), t0 = mono_ns(), next = t0;
  for (int i = 1; i <= count; i++) {
    auto loaned = pub->borrow_loaned_message();
    Frame & m = loaned.get();
    m.number = static_cast<uint32_t>(i);
    // The camera writes every byte of its frame.
    memset(m.data.data(), i & 0xff, m.data.size());
    m.stamp_ns = mono_ns();
    pub->publish(std::move(loaned));
    rclcpp::spin_some(node);
    next += period;
    int64_t sleep = next - mono_ns();
    if (sleep > 0) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(sleep));
    }
  }
  int64_t span = mono_ns() - t0, cpu = cpu_ns() - cpu0;
  printf("pub count=%d seconds=%.2f cpu_us_per_msg=%.1f loaned=%d\n", count, span / 1e9,
    cpu / 1e3 / count, pub->can_loan_messages() ? 1 : 0);
  fflush(stdout);
  auto linger = std::chrono::steady_clock::now() + 1s;
  while (std::chrono::steady_clock::now() < linger) {
    rclcpp::spin_some(node);
    std::this_thread::sleep_for(5ms);
  }
  return 0;
}

int sub_main(int count, int seconds)
{
  auto node = rclcpp::Node::make_shared("loan_sub");
  Receiver r(count, 15);
  auto sub = node->create_subscription<Frame>(
    "/bench/frame", qos(), [&](const Frame & m) {
      int64_t now = mono_ns();
      const uint64_t * p = reinterpret_cast<const uint64_t *>(m.data.data());
      for (size_t k = 0; k < m.data.size() / 8; k++) {
        r.sum += p[k];
      }
      r.account(static_cast<int>(m.number), m.stamp_ns, now);
    });
  r.spin(node, count, seconds);
  return r.report(count, std::string(" loaned=") + (sub->can_loan_messages() ? "1" : "0"));
}

}  // namespace

int main(int argc, char ** argv)
{
  rclcpp::init(argc, argv);
  std::vector<std::string> a(argv + 1, argv + argc);
  int rc = 2;
  try {
    if (a.size() == 3 && a[0] == "pub") {
      rc = pub_main(std::stod(a[1]), std::stoi(a[2]));
    } else if (a.size() == 3 && a[0] == "sub") {
      rc = sub_main(std::stoi(a[1]), std::stoi(a[2]));
    } else {
      fprintf(stderr, "usage: ros2_loan_bench pub HZ COUNT | sub COUNT SECONDS\n");
    }
  } catch (const std::exception & e) {
    fprintf(stderr, "ros2_loan_bench: %s\n", e.what());
    rc = 1;
  }
  rclcpp::shutdown();
  return rc;
}
