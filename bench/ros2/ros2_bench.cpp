// One side of the ROS 2 pipeline benchmark (bench/ros2/run.sh drives it): ordinary rclcpp code,
// the same whichever RMW carries it.
//
//   ros2_bench pub image W H HZ COUNT      sensor_msgs/msg/Image rgb8, every byte written
//   ros2_bench pub string BYTES HZ COUNT   std_msgs/msg/String of BYTES characters
//   ros2_bench sub image|string COUNT SECONDS
//
// Latencies leave out the first half second (15 images, 500 strings): start-up.
// Both use reliable, keep-last 10 (ROS 2's default profile). The publisher waits for the
// subscription, publishes COUNT messages at HZ and stays a second; each message carries its
// number (header.frame_id, or the string's first characters) and its publish time on
// CLOCK_MONOTONIC (header.stamp, or the string's next characters), taken just before publish().
// The subscriber takes the latency at the start of its callback (CLOCK_MONOTONIC then minus the
// publish time: publish-to-callback), reads every byte of the message, and counts the numbers
// that never came.
// Each side prints one line of key=value pairs: the subscriber's latency p50/p99/max in
// microseconds, lost, and both sides' whole-process CPU (user + system, every thread: the RMW's
// own included) per message, over the messages' span.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "rclcpp/rclcpp.hpp"
#include "sensor_msgs/msg/image.hpp"
#include "std_msgs/msg/string.hpp"

using namespace std::chrono_literals;

namespace
{

using namespace ros2_bench;


int pub_main(const std::string & kind, const std::vector<std::string> & a)
{
  auto node = rclcpp::Node::make_shared("bench_pub");
  bool image = kind == "image";
  uint32_t w = 0, h = 0;
  size_t bytes = 0;
  double hz;
  int count;
  if (image) {
    w = static_cast<uint32_t>(std::stoul(a.at(0)));
    h = static_cast<uint32_t>(std::stoul(a.at(1)));
    hz = std::stod(a.at(2));
    count = std::stoi(a.at(3));
  } else {
    bytes = std::stoul(a.at(0));
    hz = std::stod(a.at(1));
    count = std::stoi(a.at(2));
  }
  rclcpp::PublisherBase::SharedPtr base;
  rclcpp::Publisher<sensor_msgs::msg::Image>::SharedPtr ipub;
  rclcpp::Publisher<std_msgs::msg::String>::SharedPtr spub;
  if (image) {
    ipub = node->create_publisher<sensor_msgs::msg::Image>("/bench/image", qos());
    if (!wait_subscription(node, ipub)) {
      fprintf(stderr, "ros2_bench pub: no subscription\n");
      return 1;
    }
  } else {
    spub = node->create_publisher<std_msgs::msg::String>("/bench/string", qos());
    if (!wait_subscription(node, spub)) {
      fprintf(stderr, "ros2_bench pub: no subscription\n");
      return 1;
    }
  }
  int64_t period = static_cast<int64_t>(1e9 / hz);
  int64_t cpu0 = cpu_ns(), t0 = mono_ns(), next = t0;
  for (int i = 1; i <= count; i++) {
    if (image) {
      auto m = std::make_unique<sensor_msgs::msg::Image>();
      m->height = h;
      m->width = w;
      m->encoding = "rgb8";
      m->step = w * 3;
      m->header.frame_id = std::to_string(i);
      m->data.resize(static_cast<size_t>(m->step) * h);
      // The camera writes every byte of its frame.
      memset(m->data.data(), i & 0xff, m->data.size());
      int64_t now = mono_ns();
      m->header.stamp.sec = static_cast<int32_t>(now / 1000000000);
      m->header.stamp.nanosec = static_cast<uint32_t>(now % 1000000000);
      ipub->publish(std::move(m));
    } else {
      std_msgs::msg::String m;
      m.data.assign(std::max<size_t>(bytes, 40), 'x');
      int64_t now = mono_ns();
      int n = snprintf(&m.data[0], 40, "%d %" PRId64 " ", i, now);
      m.data[static_cast<size_t>(n)] = 'x';
      spub->publish(m);
    }
    rclcpp::spin_some(node);
    next += period;
    int64_t sleep = next - mono_ns();
    if (sleep > 0) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(sleep));
    }
  }
  int64_t span = mono_ns() - t0, cpu = cpu_ns() - cpu0;
  printf("pub count=%d seconds=%.2f cpu_us_per_msg=%.1f\n", count, span / 1e9, cpu / 1e3 / count);
  fflush(stdout);
  auto end = std::chrono::steady_clock::now() + 1s;
  while (std::chrono::steady_clock::now() < end) {
    rclcpp::spin_some(node);
    std::this_thread::sleep_for(5ms);
  }
  return 0;
}

int sub_main(const std::string & kind, int count, int seconds)
{
  auto node = rclcpp::Node::make_shared("bench_sub");
  Receiver r(count, kind == "image" ? 15 : 500);
  rclcpp::SubscriptionBase::SharedPtr sub;
  if (kind == "image") {
    sub = node->create_subscription<sensor_msgs::msg::Image>(
      "/bench/image", qos(), [&](sensor_msgs::msg::Image::ConstSharedPtr m) {
        int64_t now = mono_ns();
        // The consumer reads every byte of the frame.
        const uint64_t * p = reinterpret_cast<const uint64_t *>(m->data.data());
        for (size_t k = 0; k < m->data.size() / 8; k++) {
          r.sum += p[k];
        }
        int64_t sent = static_cast<int64_t>(m->header.stamp.sec) * 1000000000 +
        m->header.stamp.nanosec;
        r.account(std::atoi(m->header.frame_id.c_str()), sent, now);
      });
  } else {
    sub = node->create_subscription<std_msgs::msg::String>(
      "/bench/string", qos(), [&](std_msgs::msg::String::ConstSharedPtr m) {
        int64_t now = mono_ns();
        for (char c : m->data) {
          r.sum += static_cast<uint8_t>(c);
        }
        int number = 0;
        int64_t sent = 0;
        sscanf(m->data.c_str(), "%d %" SCNd64, &number, &sent);
        r.account(number, sent, now);
      });
  }
  r.spin(node, count, seconds);
  return r.report(count, "");
}

}  // namespace

int main(int argc, char ** argv)
{
  rclcpp::init(argc, argv);
  std::vector<std::string> a(argv + 1, argv + argc);
  int rc = 2;
  try {
    if (a.size() >= 2 && a[0] == "pub") {
      rc = pub_main(a[1], std::vector<std::string>(a.begin() + 2, a.end()));
    } else if (a.size() == 4 && a[0] == "sub") {
      rc = sub_main(a[1], std::stoi(a[2]), std::stoi(a[3]));
    } else {
      fprintf(stderr, "usage: ros2_bench pub image W H HZ COUNT | pub string BYTES HZ COUNT | "
        "sub image|string COUNT SECONDS\n");
    }
  } catch (const std::exception & e) {
    fprintf(stderr, "ros2_bench: %s\n", e.what());
    rc = 1;
  }
  rclcpp::shutdown();
  return rc;
}
