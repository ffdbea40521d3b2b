// rmw_ferry's own structures: what hangs off the rmw handles' data pointers, and the helpers the
// files of the implementation share. docs/ros2.md says what rmw_ferry does; docs/DESIGN.md
// ("ROS 2 middleware") how.
#ifndef RMW_FERRY_INTERNAL_HPP
#define RMW_FERRY_INTERNAL_HPP

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ferry/ferry.h>

#include "rmw/event.h"
#include "rmw/rmw.h"
#include "rmw/types.h"

#include "graph.hpp"
#include "typesupport.hpp"

namespace rmw_ferry
{

extern const char * const identifier;  // "rmw_ferry_cpp"
extern const char * const serialization_format;  // "cdr"

// Drops a result nothing can be done about (a fini on a path that fails already).
template<class T>
inline void discard(T) {}

// ROS's infinite and unspecified durations as values (the macros are initialisers).
constexpr rmw_time_t kDurationInfinite = RMW_DURATION_INFINITE;
constexpr rmw_time_t kDurationUnspecified = RMW_DURATION_UNSPECIFIED;

// A process-wide random 64-bit value (getrandom), never 0: gids, client ids.
uint64_t random_id();

// Nanoseconds of CLOCK_REALTIME: ROS message timestamps (source/received) are system time.
int64_t system_now_ns();

// rmw_set_error_string with printf formatting.
void set_error(const char * fmt, ...) __attribute__((format(printf, 1, 2)));

// The rmw_ret_t of a ferry error, with the error string set ("what: ferry's reason").
rmw_ret_t ferry_fail(const char * what, ferry_err err);

// Log through rcutils (the node's logger name is "rmw_ferry_cpp").
void log_warn(const char * fmt, ...) __attribute__((format(printf, 1, 2)));

struct Node;

// A guard condition: an eventfd, so that rmw_wait can poll it beside the ferry descriptors.
struct GuardCondition
{
  int fd = -1;
  std::atomic<bool> triggered{false};
  struct Context * graph_of = nullptr;  // a node's graph guard condition: its context
};

// One rmw context (rmw_init .. rmw_context_fini): the graph of its nodes.
struct Context
{
  uint32_t domain = 0;
  std::string enclave;
  std::mutex lock;
  bool shutdown = false;
  std::unique_ptr<Graph> graph;  // made with the first node
  std::vector<Node *> nodes;
  // Publishers of the context whose housekeeping rmw_wait runs (a ROS publisher is in no wait
  // set, yet it must accept subscribers while its node spins without publishing).
  std::vector<struct Publisher *> publishers;
  std::vector<struct Subscription *> subscriptions;
  int64_t publishers_polled = 0;  // CLOCK_MONOTONIC of rmw_wait's last look at them
};

struct Node
{
  Context * context = nullptr;
  ferry_node * fnode = nullptr;
  std::string name, ns;
  uint64_t graph_id = 0;
  rmw_guard_condition_t * graph_guard = nullptr;
};

// The wire form of a topic's messages.
enum class Encoding : uint8_t
{
  cdr,  // CDR with its encapsulation header, as rmw_cyclonedds writes it
  plain,  // a plain (fixed-size) type as it lies in memory: what a loan is
};

// The QoS rmw_ferry gives: rmw's with its defaults resolved.
rmw_qos_profile_t qos_resolve(const rmw_qos_profile_t & requested);
// False, with the error set, when a policy is RMW_QOS_POLICY_*_UNKNOWN: what rmw_get_actual_qos
// reports for a policy it cannot tell, never one to create an endpoint with.
bool qos_valid(const rmw_qos_profile_t & requested);

// Publisher side of a topic (also a service's responses and a client's requests).
struct Publisher
{
  Node * node = nullptr;
  const MessageType * type = nullptr;
  Encoding encoding = Encoding::cdr;
  std::string topic;  // ROS name
  std::string ferry_topic;
  rmw_qos_profile_t qos{};
  rmw_gid_t gid{};
  ferry_publisher * fpub = nullptr;
  std::mutex lock;  // ferry's publisher is used by one thread at a time
  std::atomic<uint64_t> loans_refused{0};
  uint64_t graph_id = 0;
  uint64_t incompatible_reported = 0;  // offered-QoS-incompatible events already reported
};

// Subscriber side (also a service's requests and a client's responses).
struct Subscription
{
  Node * node = nullptr;
  const MessageType * type = nullptr;
  Encoding encoding = Encoding::cdr;
  std::string topic;
  std::string ferry_topic;
  rmw_qos_profile_t qos{};
  rmw_gid_t gid{};
  ferry_subscriber * fsub = nullptr;
  int fd = -1;
  std::mutex lock;
  // A sample taken by rmw_wait to find out whether one is there, handed to the next take.
  bool stashed = false;
  ferry_sample stash{};
  std::vector<ferry_sample> loans;  // samples out on loan (rmw_take_loaned_message)
  // A type ferry also has natively (sensor_msgs/msg/Image, ...: ferry_ros2_kind): the ferry
  // subscriber is untyped and takes either wire form, the CDR of ROS publishers or the ferry
  // layout of ferry's own (`ferry pub --image`), which it turns into CDR before parsing.
  bool ignore_local = false;  // the option ignore_local_publications: this context's are dropped
  int native_kind = 0;
  int wire = 0;  // 0 unknown yet, 1 the ROS form, 2 ferry's native form, 3 neither (refused)
  std::vector<uint8_t> scratch;  // the CDR of a native sample
  uint64_t graph_id = 0;
  uint64_t malformed = 0;  // samples dropped for not parsing
  // Message-lost events: the drops already reported.
  uint64_t lost_reported = 0;
  // Liveliness-changed events: the publisher counts already reported.
  uint32_t alive_reported = 0;
  uint64_t gone_reported = 0;
  uint64_t incompatible_reported = 0;  // requested-QoS-incompatible events already reported
};

// Services and clients: a request topic and a response topic, each message prefixed by a
// request header (the client's id and the request's sequence number).
struct RequestHeader
{
  uint64_t client_id;
  int64_t sequence;
};
static_assert(sizeof(RequestHeader) == 16, "request header is 16 bytes");

struct Service
{
  Node * node = nullptr;
  const MessageType * request_type = nullptr;
  const MessageType * response_type = nullptr;
  std::string name;
  Subscription requests;
  Publisher responses;
};

struct Client
{
  Node * node = nullptr;
  const MessageType * request_type = nullptr;
  const MessageType * response_type = nullptr;
  std::string name;
  uint64_t id = 0;
  std::atomic<int64_t> next_sequence{1};
  Publisher requests;
  Subscription responses;
};

// Ferry topic of a ROS topic or service part; false (error set) when it cannot be one.
bool ferry_topic_of(const char * ros_name, const char * prefix, std::string * out);

// Opening and closing the ferry ends of a publisher or subscription (shared by topics,
// services and clients). The graph entry is the caller's.
rmw_ret_t publisher_open(
  Publisher * p, Node * node, const MessageType * type, const std::string & ros_name,
  const std::string & ferry_topic, const rmw_qos_profile_t & qos);
void publisher_close(Publisher * p);
rmw_ret_t subscription_open(
  Subscription * s, Node * node, const MessageType * type, const std::string & ros_name,
  const std::string & ferry_topic, const rmw_qos_profile_t & qos);
void subscription_close(Subscription * s);

// Publishes msg (a ROS message of p's type) with an optional request header in front.
rmw_ret_t publish_message(Publisher * p, const RequestHeader * header, const void * msg);

// Takes the next sample of s into msg; *taken false when none is queued. With header, the
// sample's request header is read into it; a sample whose header fails accept (not for this
// client) is dropped and the next one tried.
rmw_ret_t take_message(
  Subscription * s, void * msg, bool * taken, rmw_message_info_t * info, RequestHeader * header,
  uint64_t accept_client);

// True when a sample is queued (stashed for the next take); arms s->fd when none is. With
// accept_client, samples whose request header names another client are dropped first.
bool subscription_ready(Subscription * s, uint64_t accept_client = 0);

// Housekeeping of a publisher that no thread publishes on (try-lock: never waits).
void publisher_housekeep(Publisher * p);

// Completes the handshakes between the context's own publishers and subscriptions of a ferry
// topic: ferry starts no thread, so a publisher and a subscription that one thread drives
// (the same process, not spinning) connect only when each side's housekeeping runs. Called when
// an endpoint is made and when a match count is asked for.
void topic_sync(Context * ctx, const std::string & ferry_topic);

// This node's entry in its context's graph file (false with the error set), with the
// definition of its message type when there is one.
// A new entry of node n's graph (a fresh id) for an endpoint, service or client.
GraphEntry graph_entry(
  GraphEntry::Kind kind, Node * n, const std::string & name, const std::string & type,
  const rmw_gid_t & gid, const rmw_qos_profile_t & qos);
bool graph_add(Node * n, const GraphEntry & e, const MessageType * type = nullptr);
void graph_remove(Node * n, uint64_t id);

// Graph change: wakes every graph guard condition of the context.
void graph_changed(Context * ctx);

rmw_ret_t check_node(const rmw_node_t * node);

// A handle checked as RMW_CHECK_ARGUMENT_FOR_NULL and RMW_CHECK_TYPE_IDENTIFIERS_MATCH check one,
// with their error messages (what names the handle): RMW_RET_INVALID_ARGUMENT when it is null,
// RMW_RET_INCORRECT_RMW_IMPLEMENTATION when another implementation made it.
template<class Handle>
rmw_ret_t check_handle(const Handle * handle, const char * what)
{
  if (!handle) {
    set_error("%s argument is null", what);
    return RMW_RET_INVALID_ARGUMENT;
  }
  const char * id = handle->implementation_identifier;
  if (id != identifier) {
    set_error(
      "%s implementation '%s'(%p) does not match rmw implementation '%s'(%p)", what, id,
      static_cast<const void *>(id), identifier, static_cast<const void *>(identifier));
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION;
  }
  return RMW_RET_OK;
}

// What rmw_destroy_publisher, _subscription, _service and _client share: the node and the
// handle checked, then close (the graph entry removed and the ferry ends closed), Impl deleted
// and the handle freed.
template<class Impl, class Handle, class Close>
rmw_ret_t handle_destroy(
  const rmw_node_t * node, Handle * h, rmw_ret_t (*check)(const Handle *),
  void (*release)(Handle *), Close close)
{
  rmw_ret_t ret = check_node(node);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  if ((ret = check(h)) != RMW_RET_OK) {
    return ret;
  }
  auto * impl = static_cast<Impl *>(h->data);
  close(impl);
  delete impl;
  release(h);
  return RMW_RET_OK;
}

}  // namespace rmw_ferry

#endif  // RMW_FERRY_INTERNAL_HPP
