// An ordinary rclcpp program, written as any ROS 2 user writes one (nothing of ferry in it), for
// the tests of rmw_ferry_cpp: they run it with RMW_IMPLEMENTATION=rmw_ferry_cpp.
//
//   rmw_node talker TOPIC COUNT HZ          std_msgs/String "hello N", N = 1..COUNT
//   rmw_node listener TOPIC COUNT SECONDS   exits 0 once "hello 1".."hello COUNT" came in order
//   rmw_node image-pub TOPIC W H COUNT HZ   sensor_msgs/Image rgb8, every byte from its number
//   rmw_node image-sub TOPIC COUNT SECONDS  checks every byte of COUNT images; prints latencies
//   rmw_node server SERVICE SECONDS         rcl_interfaces/srv/GetParameterTypes: answers each
//                                           name with its length
//   rmw_node client SERVICE COUNT SECONDS   COUNT calls, each answer checked
//   rmw_node loan-talker TOPIC COUNT HZ     geometry_msgs/Vector3 (a fixed-size type) through
//                                           borrow_loaned_message(), x = 1..COUNT; fails when
//                                           the RMW cannot loan it
//   rmw_node loan-listener TOPIC COUNT SECONDS  exits 0 once x = 1..COUNT came in order
//   rmw_node publishers TOPIC N SECONDS     exits 0 once N publishers (by gid) each sent it 5
//                                           messages or more
//   rmw_node incompatible pub|sub TOPIC POLICY SECONDS
//                                           POLICY reliability: a best-effort publisher and a
//                                           reliable subscription; durability: a volatile
//                                           publisher and a transient-local subscription. Each
//                                           side runs SECONDS (the publisher at 20 Hz) and exits
//                                           0 when its QoS-incompatible event named POLICY and
//                                           nothing matched: no message received, no peer counted
//
// A publisher waits for a subscription (RMW_NODE_SUBSCRIPTIONS=N: N of them) before it starts (at
// most 30 s); every mode prints one
// result line and exits 0 on success, 1 on failure. With RMW_NODE_JOIN_LATE=1 the listeners
// (listener, image-sub, loan-listener) may join a stream late, as across a bridge, where a far
// publisher starts once the bridge subscribed and before the far end matched: their first
// message may be any up to COUNT / 2 + 1, every later one must follow it in order to COUNT.
// loan-talker publishes by value where the RMW loans nothing (rmw_cyclonedds without shared
// memory), and loan-listener requires loans from rmw_ferry_cpp only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rcl_interfaces/srv/get_parameter_types.hpp"
#include "geometry_msgs/msg/vector3.hpp"
#include "rclcpp/rclcpp.hpp"
#include "rmw/rmw.h"
#include "sensor_msgs/msg/image.hpp"
#include "std_msgs/msg/string.hpp"

using namespace std::chrono_literals;

namespace
{

using Clock = std::chrono::steady_clock;

bool join_late()
{
  const char * v = getenv("RMW_NODE_JOIN_LATE");
  return v != nullptr && strcmp(v, "1") == 0;
}

bool on_ferry()
{
  return strcmp(rmw_get_implementation_identifier(), "rmw_ferry_cpp") == 0;
}

// The first number a late listener may start from.
int late_start_max(int count) {return count / 2 + 1;}

template<class Pub>
bool wait_for_subscription(const std::shared_ptr<rclcpp::Node> & node, const Pub & pub)
{
  // RMW_NODE_SUBSCRIPTIONS=N: wait for N subscriptions (default 1).
  const char * want_env = getenv("RMW_NODE_SUBSCRIPTIONS");
  size_t want = want_env != nullptr ? static_cast<size_t>(std::max(1, atoi(want_env))) : 1;
  auto end = Clock::now() + 30s;
  while (pub->get_subscription_count() < want) {
    if (Clock::now() > end || !rclcpp::ok()) {
      fprintf(stderr, "%s: not %zu subscription(s) within 30 s\n", node->get_name(), want);
      return false;
    }
    rclcpp::spin_some(node);
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

uint8_t pixel(uint32_t frame, size_t i)
{
  return static_cast<uint8_t>((i * 7 + frame * 13) ^ (i >> 11));
}

int talker(const std::string & topic, int count, double hz)
{
  auto node = rclcpp::Node::make_shared("talker");
  auto pub = node->create_publisher<std_msgs::msg::String>(topic, rclcpp::QoS(10).reliable());
  if (!wait_for_subscription(node, pub)) {
    return 1;
  }
  rclcpp::WallRate rate(hz);
  for (int i = 1; i <= count && rclcpp::ok(); i++) {
    std_msgs::msg::String m;
    m.data = "hello " + std::to_string(i);
    pub->publish(m);
    if (i == 10) {
      printf("talker: 10 published\n");
      fflush(stdout);
    }
    rclcpp::spin_some(node);
    rate.sleep();
  }
  // Stay a moment so that the subscription takes the last ones while this publisher lives.
  auto end = Clock::now() + 1s;
  while (Clock::now() < end) {
    rclcpp::spin_some(node);
    std::this_thread::sleep_for(10ms);
  }
  printf("talker: published %d\n", count);
  return 0;
}

int listener(const std::string & topic, int count, int seconds)
{
  auto node = rclcpp::Node::make_shared("listener");
  int next = 1, first = 1;
  bool bad = false;
  auto sub = node->create_subscription<std_msgs::msg::String>(
    topic, rclcpp::QoS(std::max(count, 10)).reliable(),
    [&](const std_msgs::msg::String & m) {
      if (next == 1 && join_late() && m.data.rfind("hello ", 0) == 0) {
        next = std::min(std::atoi(m.data.c_str() + 6), late_start_max(count));
        first = next;
      }
      std::string want = "hello " + std::to_string(next);
      if (m.data != want) {
        fprintf(stderr, "listener: got \"%s\", wanted \"%s\"\n", m.data.c_str(), want.c_str());
        bad = true;
      }
      next++;
    });
  auto end = Clock::now() + std::chrono::seconds(seconds);
  while (rclcpp::ok() && next <= count && !bad && Clock::now() < end) {
    rclcpp::spin_some(node);
    std::this_thread::sleep_for(1ms);
  }
  printf("listener: received %d of %d from %d%s\n", next - first, count, first,
    bad ? " (out of order)" : "");
  return next > count && !bad ? 0 : 1;
}

int image_pub(const std::string & topic, uint32_t w, uint32_t h, int count, double hz)
{
  auto node = rclcpp::Node::make_shared("camera");
  auto pub = node->create_publisher<sensor_msgs::msg::Image>(topic, rclcpp::QoS(10).reliable());
  if (!wait_for_subscription(node, pub)) {
    return 1;
  }
  rclcpp::WallRate rate(hz);
  for (int i = 1; i <= count && rclcpp::ok(); i++) {
    sensor_msgs::msg::Image m;
    m.header.frame_id = "camera";
    m.header.stamp = node->now();
    m.height = h;
    m.width = w;
    m.encoding = "rgb8";
    m.step = w * 3;
    m.data.resize(static_cast<size_t>(m.step) * h);
    for (size_t k = 0; k < m.data.size(); k++) {
      m.data[k] = pixel(static_cast<uint32_t>(i), k);
    }
    pub->publish(m);
    rclcpp::spin_some(node);
    rate.sleep();
  }
  auto end = Clock::now() + 1s;
  while (Clock::now() < end) {
    rclcpp::spin_some(node);
    std::this_thread::sleep_for(10ms);
  }
  printf("image-pub: published %d\n", count);
  return 0;
}

int image_sub(const std::string & topic, int count, int seconds)
{
  auto node = rclcpp::Node::make_shared("viewer");
  int got = 0, first = 1;
  bool bad = false;
  std::vector<double> latency_ms;
  auto sub = node->create_subscription<sensor_msgs::msg::Image>(
    topic, rclcpp::QoS(10).reliable(),
    [&](const sensor_msgs::msg::Image & m) {
      double ms = (node->now() - rclcpp::Time(m.header.stamp)).seconds() * 1e3;
      latency_ms.push_back(ms);
      if (got == 0 && join_late() && !m.data.empty()) {
        // pixel(frame, 0) is 13 * frame mod 256, and 197 is 13's inverse mod 256.
        first = std::min(static_cast<int>((m.data[0] * 197u) & 0xffu), late_start_max(count));
        first = std::max(first, 1);
      }
      uint32_t frame = static_cast<uint32_t>(first + got);
      bool ok = m.encoding == "rgb8" && m.header.frame_id == "camera" &&
      m.data.size() == static_cast<size_t>(m.step) * m.height && m.step == m.width * 3;
      for (size_t k = 0; ok && k < m.data.size(); k++) {
        ok = m.data[k] == pixel(frame, k);
      }
      if (!ok) {
        fprintf(stderr, "image-sub: image %u is not what was published\n", frame);
        bad = true;
      }
      got++;
    });
  auto end = Clock::now() + std::chrono::seconds(seconds);
  while (rclcpp::ok() && first + got <= count && !bad && Clock::now() < end) {
    rclcpp::spin_some(node);
    std::this_thread::sleep_for(1ms);
  }
  std::sort(latency_ms.begin(), latency_ms.end());
  double p50 = latency_ms.empty() ? 0 : latency_ms[latency_ms.size() / 2];
  printf("image-sub: received %d of %d from %d, every byte checked%s; latency p50 %.2f ms\n", got,
    count, first, bad ? " (WRONG BYTES)" : "", p50);
  return first + got > count && !bad ? 0 : 1;
}

int loan_talker(const std::string & topic, int count, double hz)
{
  auto node = rclcpp::Node::make_shared("loan_talker");
  auto pub = node->create_publisher<geometry_msgs::msg::Vector3>(topic, rclcpp::QoS(10).reliable());
  bool loans = pub->can_loan_messages();
  if (!loans && on_ferry()) {
    fprintf(stderr, "loan-talker: the RMW does not loan geometry_msgs/msg/Vector3\n");
    return 1;
  }
  if (!wait_for_subscription(node, pub)) {
    return 1;
  }
  rclcpp::WallRate rate(hz);
  for (int i = 1; i <= count && rclcpp::ok(); i++) {
    if (loans) {
      auto loaned = pub->borrow_loaned_message();
      loaned.get().x = i;
      loaned.get().y = -i;
      loaned.get().z = 0.5 * i;
      pub->publish(std::move(loaned));
    } else {
      geometry_msgs::msg::Vector3 v;
      v.x = i;
      v.y = -i;
      v.z = 0.5 * i;
      pub->publish(v);
    }
    rclcpp::spin_some(node);
    rate.sleep();
  }
  auto end = Clock::now() + 1s;
  while (Clock::now() < end) {
    rclcpp::spin_some(node);
    std::this_thread::sleep_for(10ms);
  }
  printf("loan-talker: published %d %s\n", count, loans ? "loaned messages" : "messages by value");
  return 0;
}

int loan_listener(const std::string & topic, int count, int seconds)
{
  auto node = rclcpp::Node::make_shared("loan_listener");
  int next = 1, first = 1;
  bool bad = false;
  auto sub = node->create_subscription<geometry_msgs::msg::Vector3>(
    topic, rclcpp::QoS(std::max(count, 10)).reliable(),
    [&](const geometry_msgs::msg::Vector3 & m) {
      if (next == 1 && join_late() && m.x >= 1) {
        next = first = std::min(static_cast<int>(m.x), late_start_max(count));
      }
      if (m.x != next || m.y != -next || m.z != 0.5 * next) {
        fprintf(stderr, "loan-listener: got (%g, %g, %g), wanted x = %d\n", m.x, m.y, m.z, next);
        bad = true;
      }
      next++;
    });
  auto end = Clock::now() + std::chrono::seconds(seconds);
  while (rclcpp::ok() && next <= count && !bad && Clock::now() < end) {
    rclcpp::spin_some(node);
    std::this_thread::sleep_for(1ms);
  }
  printf("loan-listener: received %d of %d from %d%s (loans: %s)\n", next - first, count, first,
    bad ? " (wrong)" : "", sub->can_loan_messages() ? "yes" : "no");
  return next > count && !bad && (sub->can_loan_messages() || !on_ferry()) ? 0 : 1;
}

int publishers(const std::string & topic, size_t want, int seconds)
{
  auto node = rclcpp::Node::make_shared("survivor");
  std::map<std::vector<uint8_t>, int> seen;
  auto sub = node->create_subscription<std_msgs::msg::String>(
    topic, rclcpp::QoS(100).reliable(),
    [&](const std_msgs::msg::String &, const rclcpp::MessageInfo & info) {
      const auto & gid = info.get_rmw_message_info().publisher_gid;
      seen[std::vector<uint8_t>(gid.data, gid.data + sizeof gid.data)]++;
    });
  auto enough = [&]() {
      size_t n = 0;
      for (const auto & kv : seen) {
        n += kv.second >= 5;
      }
      return n;
    };
  auto end = Clock::now() + std::chrono::seconds(seconds);
  while (rclcpp::ok() && enough() < want && Clock::now() < end) {
    rclcpp::spin_some(node);
    std::this_thread::sleep_for(1ms);
  }
  printf("publishers: %zu publishers sent 5 messages or more (%zu seen)\n", enough(), seen.size());
  return enough() >= want ? 0 : 1;
}

using GetTypes = rcl_interfaces::srv::GetParameterTypes;

int server(const std::string & name, int seconds)
{
  auto node = rclcpp::Node::make_shared("server");
  int served = 0;
  auto srv = node->create_service<GetTypes>(
    name, [&](const std::shared_ptr<GetTypes::Request> rq, std::shared_ptr<GetTypes::Response> rs) {
      for (const auto & n : rq->names) {
        rs->types.push_back(static_cast<uint8_t>(n.size()));
      }
      served++;
    });
  auto end = Clock::now() + std::chrono::seconds(seconds);
  while (rclcpp::ok() && Clock::now() < end) {
    rclcpp::spin_some(node);
    std::this_thread::sleep_for(1ms);
  }
  printf("server: served %d\n", served);
  return 0;
}

int client(const std::string & name, int count, int seconds)
{
  auto node = rclcpp::Node::make_shared("client");
  auto cl = node->create_client<GetTypes>(name);
  if (!cl->wait_for_service(std::chrono::seconds(seconds))) {
    fprintf(stderr, "client: no service %s within %d s\n", name.c_str(), seconds);
    return 1;
  }
  for (int i = 1; i <= count; i++) {
    auto rq = std::make_shared<GetTypes::Request>();
    rq->names = {std::string(static_cast<size_t>(i), 'x'), "ab"};
    auto f = cl->async_send_request(rq);
    if (rclcpp::spin_until_future_complete(node, f, std::chrono::seconds(seconds)) !=
      rclcpp::FutureReturnCode::SUCCESS)
    {
      fprintf(stderr, "client: call %d got no answer\n", i);
      return 1;
    }
    auto rs = f.get();
    if (rs->types.size() != 2 || rs->types[0] != i || rs->types[1] != 2) {
      fprintf(stderr, "client: call %d got a wrong answer\n", i);
      return 1;
    }
  }
  printf("client: %d calls answered\n", count);
  return 0;
}

}  // namespace

// Either side of a pair of endpoints whose QoS DDS would not match (see the usage above).
int incompatible(const std::string & side, const std::string & topic, const std::string & policy,
  int seconds)
{
  bool reliability = policy == "reliability";
  auto node = rclcpp::Node::make_shared("incompatible_" + side);
  int events = 0, received = 0;
  rmw_qos_policy_kind_t last = RMW_QOS_POLICY_INVALID;
  auto on_event = [&](rclcpp::QOSOfferedIncompatibleQoSInfo & info) {
      events = info.total_count;
      last = info.last_policy_kind;
    };
  std::shared_ptr<rclcpp::Publisher<std_msgs::msg::String>> pub;
  std::shared_ptr<rclcpp::Subscription<std_msgs::msg::String>> sub;
  if (side == "pub") {
    rclcpp::PublisherOptions o;
    o.event_callbacks.incompatible_qos_callback = on_event;
    rclcpp::QoS q(10);
    if (reliability) {
      q.best_effort();
    }
    pub = node->create_publisher<std_msgs::msg::String>(topic, q, o);
  } else {
    rclcpp::SubscriptionOptions o;
    o.event_callbacks.incompatible_qos_callback = on_event;
    rclcpp::QoS q(10);
    q.reliable();
    if (!reliability) {
      q.transient_local();
    }
    sub = node->create_subscription<std_msgs::msg::String>(
      topic, q, [&](const std_msgs::msg::String &) {received++;}, o);
  }
  auto end = Clock::now() + std::chrono::seconds(seconds);
  auto next = Clock::now();
  while (rclcpp::ok() && Clock::now() < end) {
    if (pub && Clock::now() >= next) {
      std_msgs::msg::String m;
      m.data = "unmatched";
      pub->publish(m);
      next += 50ms;
    }
    rclcpp::spin_some(node);
    std::this_thread::sleep_for(5ms);
  }
  rmw_qos_policy_kind_t want = reliability ? RMW_QOS_POLICY_RELIABILITY :
    RMW_QOS_POLICY_DURABILITY;
  size_t peers = pub ? pub->get_subscription_count() : sub->get_publisher_count();
  printf("incompatible %s: %d event(s), last policy %d (want %d), %zu matched, %d received\n",
    side.c_str(), events, static_cast<int>(last), static_cast<int>(want), peers, received);
  return events >= 1 && last == want && peers == 0 && received == 0 ? 0 : 1;
}

int main(int argc, char ** argv)
{
  rclcpp::init(argc, argv);
  std::vector<std::string> a(argv + 1, argv + argc);
  int rc = 2;
  if (a.size() == 4 && a[0] == "talker") {
    rc = talker(a[1], std::stoi(a[2]), std::stod(a[3]));
  } else if (a.size() == 4 && a[0] == "listener") {
    rc = listener(a[1], std::stoi(a[2]), std::stoi(a[3]));
  } else if (a.size() == 6 && a[0] == "image-pub") {
    rc = image_pub(a[1], std::stoul(a[2]), std::stoul(a[3]), std::stoi(a[4]), std::stod(a[5]));
  } else if (a.size() == 4 && a[0] == "image-sub") {
    rc = image_sub(a[1], std::stoi(a[2]), std::stoi(a[3]));
  } else if (a.size() == 3 && a[0] == "server") {
    rc = server(a[1], std::stoi(a[2]));
  } else if (a.size() == 4 && a[0] == "loan-talker") {
    rc = loan_talker(a[1], std::stoi(a[2]), std::stod(a[3]));
  } else if (a.size() == 4 && a[0] == "loan-listener") {
    rc = loan_listener(a[1], std::stoi(a[2]), std::stoi(a[3]));
  } else if (a.size() == 4 && a[0] == "publishers") {
    rc = publishers(a[1], std::stoul(a[2]), std::stoi(a[3]));
  } else if (a.size() == 5 && a[0] == "incompatible") {
    rc = incompatible(a[1], a[2], a[3], std::stoi(a[4]));
  } else if (a.size() == 4 && a[0] == "client") {
    rc = client(a[1], std::stoi(a[2]), std::stoi(a[3]));
  } else {
    fprintf(stderr, "usage: rmw_node talker|listener|image-pub|image-sub|server|client ...\n");
  }
  rclcpp::shutdown();
  return rc;
}
