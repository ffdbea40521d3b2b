// rmw_ferry: publishers and subscriptions, messages in and out, loans, serialised messages.
//
// A ROS topic is the ferry topic of the same name, its ferry type the ROS type's name
// ("std_msgs/msg/String") with the hash of its structure. A message travels as CDR (what
// rmw_cyclonedds writes: ferry's recorder and bridge read it as they read DDS), except a plain
// type's (no string, no sequence), which travels as it lies in memory: that is what a loan hands
// out, so a loaned message is never copied. The publisher writes into a ferry loan and the
// subscriber reads the publisher's pages: one copy each side for CDR, none for a loan.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "rcutils/logging_macros.h"
#include "rmw/allocators.h"
#include "rmw/error_handling.h"
#include "rmw/get_network_flow_endpoints.h"
#include "rmw/impl/cpp/macros.hpp"
#include "rmw/rmw.h"
#include "rmw/validate_full_topic_name.h"

#include "internal.hpp"

extern "C" {
#include "ros2.h"
}

namespace rmw_ferry
{

// Largest message: a ferry publisher's pool is sparse, so the cap costs nothing until used.
constexpr size_t kMaxMessage = 256u << 20;
constexpr size_t kPoolBytes = 512u << 20;
// Queue of a KEEP_ALL subscription (per publisher) and history kept for TRANSIENT_LOCAL.
constexpr uint32_t kKeepAllDepth = 1024;
constexpr uint32_t kHistoryMax = 128;
constexpr uint32_t kMaxChunks = 512;

rmw_qos_profile_t qos_resolve(const rmw_qos_profile_t & q)
{
  rmw_qos_profile_t r = q;
  if (r.history == RMW_QOS_POLICY_HISTORY_SYSTEM_DEFAULT ||
    r.history == RMW_QOS_POLICY_HISTORY_UNKNOWN)
  {
    r.history = RMW_QOS_POLICY_HISTORY_KEEP_LAST;
  }
  if (r.history == RMW_QOS_POLICY_HISTORY_KEEP_LAST && r.depth == 0) {
    r.depth = 1;
  }
  if (r.reliability == RMW_QOS_POLICY_RELIABILITY_SYSTEM_DEFAULT ||
    r.reliability == RMW_QOS_POLICY_RELIABILITY_UNKNOWN)
  {
    r.reliability = RMW_QOS_POLICY_RELIABILITY_RELIABLE;
  }
  if (r.durability == RMW_QOS_POLICY_DURABILITY_SYSTEM_DEFAULT ||
    r.durability == RMW_QOS_POLICY_DURABILITY_UNKNOWN)
  {
    r.durability = RMW_QOS_POLICY_DURABILITY_VOLATILE;
  }
  if (r.liveliness == RMW_QOS_POLICY_LIVELINESS_SYSTEM_DEFAULT ||
    r.liveliness == RMW_QOS_POLICY_LIVELINESS_UNKNOWN)
  {
    r.liveliness = RMW_QOS_POLICY_LIVELINESS_AUTOMATIC;
  }
  auto unspecified = [](const rmw_time_t & t) {
      return t.sec == kDurationUnspecified.sec && t.nsec == kDurationUnspecified.nsec;
    };
  if (unspecified(r.deadline)) {
    r.deadline = kDurationInfinite;
  }
  if (unspecified(r.lifespan)) {
    r.lifespan = kDurationInfinite;
  }
  if (unspecified(r.liveliness_lease_duration)) {
    r.liveliness_lease_duration = kDurationInfinite;
  }
  return r;
}

bool qos_valid(const rmw_qos_profile_t & q)
{
  if (q.history == RMW_QOS_POLICY_HISTORY_UNKNOWN ||
    q.reliability == RMW_QOS_POLICY_RELIABILITY_UNKNOWN ||
    q.durability == RMW_QOS_POLICY_DURABILITY_UNKNOWN ||
    q.liveliness == RMW_QOS_POLICY_LIVELINESS_UNKNOWN)
  {
    RMW_SET_ERROR_MSG("a QoS policy is UNKNOWN: give a value or SYSTEM_DEFAULT");
    return false;
  }
  return true;
}

static bool infinite(const rmw_time_t & t)
{
  return t.sec == kDurationInfinite.sec && t.nsec == kDurationInfinite.nsec;
}

// What ferry cannot honour is said once per process and kind, not refused: a node written for
// DDS keeps working, as it does where rmw_cyclonedds lacks a policy.
static void qos_note(const char * topic, const rmw_qos_profile_t & q)
{
  static std::atomic<bool> deadline_told{false}, lifespan_told{false}, manual_told{false};
  if (strcmp(topic, "/rosout") == 0) {
    return;  // rcl's own log topic asks for a lifespan of its own accord
  }
  if (!infinite(q.deadline) && !deadline_told.exchange(true)) {
    log_warn("%s: the deadline QoS policy is not enforced by rmw_ferry_cpp (no deadline events)",
      topic);
  }
  if (!infinite(q.lifespan) && !lifespan_told.exchange(true)) {
    log_warn("%s: the lifespan QoS policy is not enforced by rmw_ferry_cpp", topic);
  }
  if (q.liveliness == RMW_QOS_POLICY_LIVELINESS_MANUAL_BY_TOPIC && !manual_told.exchange(true)) {
    log_warn("%s: manual liveliness is treated as automatic by rmw_ferry_cpp (a process's "
      "endpoints live as long as it does)", topic);
  }
}

bool ferry_topic_of(const char * ros_name, const char * prefix, std::string * out)
{
  std::string t = std::string(prefix) + ros_name;
  ferry_err err = ferry_topic_validate(t.c_str());
  if (err) {
    set_error(
      "the topic %s cannot be a ferry topic (%s; ferry topics are at most %u bytes)", ros_name,
      ferry_strerror(err), FERRY_TOPIC_MAX);
    return false;
  }
  *out = t;
  return true;
}

static uint64_t wire_hash(const MessageType * t, Encoding e)
{
  return type_hash(t) ^ (e == Encoding::plain ? 0x706c61696e000000ull : 0);
}

rmw_ret_t publisher_open(
  Publisher * p, Node * node, const MessageType * type, const std::string & ros_name,
  const std::string & ferry_topic, const rmw_qos_profile_t & qos)
{
  p->node = node;
  p->type = type;
  p->encoding = is_plain(type) ? Encoding::plain : Encoding::cdr;
  p->topic = ros_name;
  p->ferry_topic = ferry_topic;
  p->qos = qos_resolve(qos);
  qos_note(ros_name.c_str(), p->qos);
  ferry_publisher_options o;
  ferry_publisher_options_init(&o);
  o.max_sample_size = kMaxMessage;
  o.pool_bytes = kPoolBytes;
  o.max_subscribers = 64;
  o.max_chunks = kMaxChunks;
  o.on_pool_exhausted = FERRY_POOL_BLOCK;
  // A KEEP_ALL reliable subscription may hold the publisher up (100 ms at most a message), as a
  // KEEP_ALL DDS reader does its writer; the others drop their oldest when full.
  o.admit_blocking = p->qos.reliability == RMW_QOS_POLICY_RELIABILITY_RELIABLE;
  // Matched as DDS matches: a reliable subscription does not take a best-effort publisher, a
  // transient-local one does not take a volatile publisher (one without history).
  o.best_effort = p->qos.reliability == RMW_QOS_POLICY_RELIABILITY_BEST_EFFORT;
  if (p->qos.durability == RMW_QOS_POLICY_DURABILITY_TRANSIENT_LOCAL) {
    o.history = p->qos.history == RMW_QOS_POLICY_HISTORY_KEEP_ALL ? kHistoryMax :
      static_cast<uint32_t>(std::min<size_t>(p->qos.depth, kHistoryMax));
  }
  ferry_err err = ferry_publisher_create(
    &p->fpub, node->fnode, ferry_topic.c_str(), type_name(type).c_str(),
    wire_hash(type, p->encoding), &o);
  if (err) {
    if (err == FERRY_ETYPE) {
      set_error(
        "%s: a live publisher of the topic uses another type or another definition of %s",
        ros_name.c_str(), type_name(type).c_str());
      return RMW_RET_ERROR;
    }
    return ferry_fail(ros_name.c_str(), err);
  }
  ferry_publisher_stats st;
  ferry_publisher_stats_get(p->fpub, &st);
  p->gid = rmw_gid_t();
  p->gid.implementation_identifier = identifier;
  memcpy(p->gid.data, &st.id, sizeof st.id);
  Context * ctx = node->context;
  {
    std::lock_guard<std::mutex> guard(ctx->lock);
    ctx->publishers.push_back(p);
  }
  topic_sync(ctx, ferry_topic);
  return RMW_RET_OK;
}

void topic_sync(Context * ctx, const std::string & ferry_topic)
{
  // No allocation: a match count is asked for on real-time paths (and ROS's tests check it).
  std::lock_guard<std::mutex> guard(ctx->lock);
  bool any_pub = false, any_sub = false;
  for (Publisher * p : ctx->publishers) {
    any_pub |= p->ferry_topic == ferry_topic;
  }
  for (Subscription * s : ctx->subscriptions) {
    any_sub |= s->ferry_topic == ferry_topic;
  }
  if (!any_pub || !any_sub) {
    return;
  }
  // Hello (subscriptions), welcome (publishers), then the welcome taken in (subscriptions).
  auto subs_housekeep = [ctx, &ferry_topic]() {
      for (Subscription * s : ctx->subscriptions) {
        if (s->ferry_topic != ferry_topic) {
          continue;
        }
        std::unique_lock<std::mutex> sg(s->lock, std::try_to_lock);
        if (sg.owns_lock() && s->fsub) {
          ferry_subscriber_wait_publishers(s->fsub, UINT32_MAX, 0);
        }
      }
    };
  subs_housekeep();
  for (Publisher * p : ctx->publishers) {
    if (p->ferry_topic == ferry_topic) {
      publisher_housekeep(p);
    }
  }
  subs_housekeep();
}

void publisher_close(Publisher * p)
{
  if (!p->fpub) {
    return;
  }
  Context * ctx = p->node->context;
  {
    std::lock_guard<std::mutex> guard(ctx->lock);
    auto & v = ctx->publishers;
    v.erase(std::remove(v.begin(), v.end(), p), v.end());
  }
  std::lock_guard<std::mutex> guard(p->lock);
  ferry_publisher_destroy(p->fpub);
  p->fpub = nullptr;
}

void publisher_housekeep(Publisher * p)
{
  std::unique_lock<std::mutex> guard(p->lock, std::try_to_lock);
  if (guard.owns_lock() && p->fpub) {
    ferry_publisher_poll(p->fpub, 0);
  }
}

rmw_ret_t subscription_open(
  Subscription * s, Node * node, const MessageType * type, const std::string & ros_name,
  const std::string & ferry_topic, const rmw_qos_profile_t & qos)
{
  s->node = node;
  s->type = type;
  s->encoding = is_plain(type) ? Encoding::plain : Encoding::cdr;
  s->topic = ros_name;
  s->ferry_topic = ferry_topic;
  s->qos = qos_resolve(qos);
  qos_note(ros_name.c_str(), s->qos);
  ferry_subscriber_options o;
  ferry_subscriber_options_init(&o);
  bool keep_all = s->qos.history == RMW_QOS_POLICY_HISTORY_KEEP_ALL;
  o.depth = keep_all ? kKeepAllDepth :
    static_cast<uint32_t>(std::min<size_t>(std::max<size_t>(s->qos.depth, 1), 4096));
  o.overflow = keep_all && s->qos.reliability == RMW_QOS_POLICY_RELIABILITY_RELIABLE ?
    FERRY_OVERFLOW_BLOCK : FERRY_OVERFLOW_DROP_OLDEST;
  if (s->qos.durability == RMW_QOS_POLICY_DURABILITY_TRANSIENT_LOCAL) {
    o.history = keep_all ? kHistoryMax : std::min<uint32_t>(o.depth, kHistoryMax);
    o.require |= FERRY_QOS_DURABLE;
  }
  if (s->qos.reliability == RMW_QOS_POLICY_RELIABILITY_RELIABLE) {
    o.require |= FERRY_QOS_RELIABLE;
  }
  o.max_publishers = 128;
  o.max_held = 64;
  s->native_kind = ferry_ros2_kind_of_name(type_name(type).c_str());
  ferry_err err = ferry_subscriber_create(
    &s->fsub, node->fnode, ferry_topic.c_str(),
    s->native_kind ? nullptr : type_name(type).c_str(), wire_hash(type, s->encoding), &o);
  if (err) {
    if (err == FERRY_ETYPE) {
      set_error(
        "%s: a live publisher of the topic uses another type or another definition of %s",
        ros_name.c_str(), type_name(type).c_str());
      return RMW_RET_ERROR;
    }
    return ferry_fail(ros_name.c_str(), err);
  }
  ferry_subscriber_fd(s->fsub, &s->fd);
  {
    std::lock_guard<std::mutex> guard(node->context->lock);
    node->context->subscriptions.push_back(s);
  }
  topic_sync(node->context, ferry_topic);
  s->gid = rmw_gid_t();
  s->gid.implementation_identifier = identifier;
  uint64_t id = random_id();
  memcpy(s->gid.data, &id, sizeof id);
  return RMW_RET_OK;
}

void subscription_close(Subscription * s)
{
  if (s->fsub) {
    Context * ctx = s->node->context;
    std::lock_guard<std::mutex> guard(ctx->lock);
    auto & v = ctx->subscriptions;
    v.erase(std::remove(v.begin(), v.end(), s), v.end());
  }
  std::lock_guard<std::mutex> guard(s->lock);
  if (!s->fsub) {
    return;
  }
  if (s->stashed) {
    ferry_release(s->fsub, &s->stash);
    s->stashed = false;
  }
  for (auto & l : s->loans) {
    ferry_release(s->fsub, &l);
  }
  s->loans.clear();
  ferry_subscriber_destroy(s->fsub);
  s->fsub = nullptr;
}

rmw_ret_t publish_message(Publisher * p, const RequestHeader * header, const void * msg)
{
  size_t head = header ? sizeof *header : 0;
  size_t body = p->encoding == Encoding::plain ? message_size(p->type) : cdr_size(p->type, msg);
  if (body > kMaxMessage - head) {
    set_error(
      "%s: a message of %zu bytes is over rmw_ferry_cpp's largest, %zu", p->topic.c_str(), body,
      kMaxMessage - head);
    return RMW_RET_ERROR;
  }
  std::lock_guard<std::mutex> guard(p->lock);
  void * loan = nullptr;
  ferry_err err = ferry_loan(p->fpub, head + body, &loan);
  if (err) {
    return ferry_fail(p->topic.c_str(), err);
  }
  auto * out = static_cast<uint8_t *>(loan);
  if (header) {
    memcpy(out, header, head);
  }
  if (p->encoding == Encoding::plain) {
    memcpy(out + head, msg, body);
  } else {
    cdr_write(p->type, msg, out + head, body);
  }
  err = ferry_publish(p->fpub, loan, head + body);
  if (err) {
    ferry_loan_release(p->fpub, loan);
    if (err == FERRY_ETIMEDOUT) {
      set_error(
        "%s: a reliable KEEP_ALL subscription made no room within 100 ms", p->topic.c_str());
      return RMW_RET_TIMEOUT;
    }
    return ferry_fail(p->topic.c_str(), err);
  }
  return RMW_RET_OK;
}

// True when the sample comes from a publisher of the subscription's own context.
static bool from_local(Subscription * s, const ferry_sample & smp)
{
  Context * ctx = s->node->context;
  std::lock_guard<std::mutex> guard(ctx->lock);
  for (Publisher * p : ctx->publishers) {
    uint64_t id;
    memcpy(&id, p->gid.data, sizeof id);
    if (id == smp.publisher_id) {
      return true;
    }
  }
  return false;
}

// The next sample of s (the stashed one first); false when none is queued. With
// ignore_local_publications, the context's own are dropped on the way.
static bool next_sample(Subscription * s, ferry_sample * out)
{
  for (;;) {
    if (s->stashed) {
      *out = s->stash;
      s->stashed = false;
    } else if (ferry_take(s->fsub, out) != FERRY_OK) {
      return false;
    }
    if (!s->ignore_local || !from_local(s, *out)) {
      return true;
    }
    ferry_release(s->fsub, out);
  }
}

bool subscription_ready(Subscription * s, uint64_t accept_client)
{
  std::unique_lock<std::mutex> guard(s->lock, std::try_to_lock);
  if (!guard.owns_lock()) {
    return false;  // another thread takes from it now; its descriptor is polled anyway
  }
  if (!s->fsub) {
    return false;
  }
  for (;;) {
    // A take that finds nothing arms the descriptor, which rmw_wait then polls.
    if (!s->stashed && ferry_take(s->fsub, &s->stash) == FERRY_OK) {
      s->stashed = true;
    }
    if (!s->stashed || !accept_client) {
      return s->stashed;
    }
    RequestHeader h{};
    if (s->stash.size >= sizeof h) {
      memcpy(&h, s->stash.data, sizeof h);
    }
    if (h.client_id == accept_client) {
      return true;
    }
    ferry_release(s->fsub, &s->stash);  // another client's response
    s->stashed = false;
  }
}

static void fill_info(const ferry_sample & smp, rmw_message_info_t * info)
{
  if (!info) {
    return;
  }
  int64_t now_rt = system_now_ns();
  int64_t age = ferry_now().ns - smp.publish_time.ns;
  info->source_timestamp = now_rt - (age > 0 ? age : 0);
  info->received_timestamp = now_rt;
  info->publication_sequence_number = smp.sequence;
  info->reception_sequence_number = RMW_MESSAGE_INFO_SEQUENCE_NUMBER_UNSUPPORTED;
  info->publisher_gid = rmw_gid_t();
  info->publisher_gid.implementation_identifier = identifier;
  memcpy(info->publisher_gid.data, &smp.publisher_id, sizeof smp.publisher_id);
  info->from_intra_process = false;
}

// The bytes of a sample in the subscription's wire form: the sample itself, or for a topic a
// ferry-native publisher feeds, its CDR made from it (the one copy that path costs). False for a
// sample that is neither (another type on an untyped subscription), which is dropped.
static bool sample_bytes(
  Subscription * s, const ferry_sample & smp, const uint8_t ** data, size_t * size)
{
  if (!s->native_kind) {
    *data = static_cast<const uint8_t *>(smp.data);
    *size = smp.size;
    return true;
  }
  if (s->wire == 0) {
    const char * name = nullptr;
    uint64_t hash = 0;
    if (ferry_subscriber_type(s->fsub, &name, &hash) != FERRY_OK) {
      return false;
    }
    auto kind = static_cast<ferry_ros2_kind>(s->native_kind);
    if (name == type_name(s->type) && hash == wire_hash(s->type, s->encoding)) {
      s->wire = 1;
    } else if (strcmp(name, ferry_ros2_ferry_type(kind)) == 0 &&
      hash == ferry_ros2_ferry_hash(kind))
    {
      s->wire = 2;
    } else {
      s->wire = 3;
      log_warn(
        "%s: its publishers' type is %s (hash %016llx), neither %s as ROS 2 nodes send it nor "
        "ferry's own %s: nothing is taken", s->topic.c_str(), name,
        static_cast<unsigned long long>(hash), type_name(s->type).c_str(),
        ferry_ros2_ferry_type(kind));
    }
  }
  if (s->wire == 1) {
    *data = static_cast<const uint8_t *>(smp.data);
    *size = smp.size;
    return true;
  }
  if (s->wire != 2) {
    return false;
  }
  auto cdr = std::make_unique<ferry_ros2_cdr>();
  if (ferry_ros2_cdr_encode(static_cast<ferry_ros2_kind>(s->native_kind), &smp, cdr.get()) !=
    FERRY_OK)
  {
    return false;
  }
  s->scratch.resize(cdr->size);
  size_t at = 0;
  for (unsigned i = 0; i < cdr->niov; i++) {
    memcpy(s->scratch.data() + at, cdr->iov[i].iov_base, cdr->iov[i].iov_len);
    at += cdr->iov[i].iov_len;
  }
  *data = s->scratch.data();
  *size = at;
  return true;
}

// Told once per subscription and kind: a sample that does not parse is dropped and counted.
static void malformed(Subscription * s, const ferry_sample & smp)
{
  if (s->malformed++ == 0) {
    log_warn(
      "%s: dropped a sample of %zu bytes that is not a valid %s (publisher %016llx); further "
      "ones are counted silently", s->topic.c_str(), smp.size, type_name(s->type).c_str(),
      static_cast<unsigned long long>(smp.publisher_id));
  }
}

rmw_ret_t take_message(
  Subscription * s, void * msg, bool * taken, rmw_message_info_t * info, RequestHeader * header,
  uint64_t accept_client)
{
  *taken = false;
  std::lock_guard<std::mutex> guard(s->lock);
  if (!s->fsub) {
    RMW_SET_ERROR_MSG("subscription is closed");
    return RMW_RET_ERROR;
  }
  size_t head = header ? sizeof *header : 0;
  ferry_sample smp;
  while (next_sample(s, &smp)) {
    const uint8_t * in = nullptr;
    size_t in_size = 0;
    if (!sample_bytes(s, smp, &in, &in_size)) {
      ferry_release(s->fsub, &smp);
      continue;
    }
    bool ok = in_size >= head;
    if (ok && header) {
      memcpy(header, in, head);
      if (accept_client && header->client_id != accept_client) {
        ferry_release(s->fsub, &smp);  // another client's response
        continue;
      }
    }
    if (ok && s->encoding == Encoding::plain) {
      ok = in_size - head == message_size(s->type);
      if (ok) {
        memcpy(msg, in + head, in_size - head);
      }
    } else if (ok) {
      ok = cdr_read(s->type, in + head, in_size - head, msg);
    }
    if (!ok) {
      malformed(s, smp);
      ferry_release(s->fsub, &smp);
      continue;
    }
    fill_info(smp, info);
    ferry_release(s->fsub, &smp);
    *taken = true;
    return RMW_RET_OK;
  }
  return RMW_RET_OK;
}

static rmw_ret_t check_publisher(const rmw_publisher_t * publisher)
{
  return check_handle(publisher, "publisher");
}

static rmw_ret_t check_subscription(const rmw_subscription_t * subscription)
{
  return check_handle(subscription, "subscription");
}

static bool topic_name_ok(const char * topic_name, bool avoid_ros_conventions)
{
  if (!topic_name || !*topic_name) {
    RMW_SET_ERROR_MSG("topic_name is empty");
    return false;
  }
  if (avoid_ros_conventions) {
    return true;
  }
  int result = RMW_TOPIC_VALID;
  size_t index = 0;
  if (rmw_validate_full_topic_name(topic_name, &result, &index) != RMW_RET_OK) {
    return false;
  }
  if (result != RMW_TOPIC_VALID) {
    set_error("invalid topic name: %s", rmw_full_topic_name_validation_result_string(result));
    return false;
  }
  return true;
}

// The arguments rmw_create_publisher and rmw_create_subscription share, checked in rmw's order,
// and what they resolve to: the message type and the ferry topic. False with the error set.
static bool endpoint_args(
  const rmw_node_t * node, const rosidl_message_type_support_t * type_supports,
  const char * topic_name, const rmw_qos_profile_t * qos_policies, const void * options,
  const MessageType ** type, std::string * ftopic)
{
  if (check_node(node) != RMW_RET_OK) {
    return false;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(type_supports, false);
  RMW_CHECK_ARGUMENT_FOR_NULL(topic_name, false);
  RMW_CHECK_ARGUMENT_FOR_NULL(qos_policies, false);
  if (!qos_valid(*qos_policies)) {
    return false;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(options, false);
  if (!topic_name_ok(topic_name, qos_policies->avoid_ros_namespace_conventions)) {
    return false;
  }
  *type = message_type_get(type_supports);
  return *type && ferry_topic_of(topic_name, "", ftopic);
}

GraphEntry graph_entry(
  GraphEntry::Kind kind, Node * n, const std::string & name, const std::string & type,
  const rmw_gid_t & gid, const rmw_qos_profile_t & qos)
{
  GraphEntry e;
  e.kind = kind;
  e.id = random_id();
  e.node_id = n->graph_id;
  e.name = name;
  e.type = type;
  memcpy(e.gid, gid.data, sizeof e.gid);
  e.qos = qos;
  return e;
}

// Makes a publisher's or a subscription's handle: Impl opened on the ferry topic, its entry (and
// its type's definition) in the node's graph, and the handle's common fields; nullptr with the
// error set and nothing left behind.
template<class Impl, class Handle, class Options>
static Handle * endpoint_create(
  const rmw_node_t * node, const rosidl_message_type_support_t * type_supports,
  const char * topic_name, const rmw_qos_profile_t * qos_policies, const Options * options,
  GraphEntry::Kind kind, Handle * (*allocate)(), void (*release)(Handle *),
  rmw_ret_t (*open)(
    Impl *, Node *, const MessageType *, const std::string &, const std::string &,
    const rmw_qos_profile_t &),
  void (*close)(Impl *))
{
  const MessageType * type = nullptr;
  std::string ftopic;
  if (!endpoint_args(node, type_supports, topic_name, qos_policies, options, &type, &ftopic)) {
    return nullptr;
  }
  auto * n = static_cast<Node *>(node->data);
  auto * impl = new (std::nothrow) Impl();
  Handle * h = allocate();
  if (!impl || !h) {
    delete impl;
    release(h);
    RMW_SET_ERROR_MSG("out of memory");
    return nullptr;
  }
  if (open(impl, n, type, topic_name, ftopic, *qos_policies) != RMW_RET_OK) {
    delete impl;
    release(h);
    return nullptr;
  }
  GraphEntry e = graph_entry(kind, n, topic_name, type_name(type), impl->gid, impl->qos);
  impl->graph_id = e.id;
  if (!graph_add(n, e, type)) {
    close(impl);
    delete impl;
    release(h);
    return nullptr;
  }
  h->implementation_identifier = identifier;
  h->data = impl;
  h->topic_name = impl->topic.c_str();
  h->options = *options;
  h->can_loan_messages = impl->encoding == Encoding::plain;
  return h;
}

bool graph_add(Node * n, const GraphEntry & e, const MessageType * type)
{
  Context * ctx = n->context;
  std::lock_guard<std::mutex> guard(ctx->lock);
  if (!ctx->graph) {
    RMW_SET_ERROR_MSG("the context has no graph");
    return false;
  }
  if (type) {
    Encoding enc = is_plain(type) ? Encoding::plain : Encoding::cdr;
    if (!ctx->graph->add_definition(type_name(type), wire_hash(type, enc),
      enc == Encoding::plain ? "plain" : "cdr", definition(type)))
    {
      return false;
    }
  }
  return ctx->graph->add(e);
}

void graph_remove(Node * n, uint64_t id)
{
  Context * ctx = n->context;
  std::lock_guard<std::mutex> guard(ctx->lock);
  if (ctx->graph) {
    ctx->graph->remove(id);
  }
}

}  // namespace rmw_ferry

using namespace rmw_ferry;

extern "C" {

rmw_ret_t rmw_init_publisher_allocation(
  const rosidl_message_type_support_t *, const rosidl_runtime_c__Sequence__bound *,
  rmw_publisher_allocation_t *)
{
  RMW_SET_ERROR_MSG("rmw_init_publisher_allocation: unsupported");
  return RMW_RET_UNSUPPORTED;
}

rmw_ret_t rmw_fini_publisher_allocation(rmw_publisher_allocation_t *)
{
  RMW_SET_ERROR_MSG("rmw_fini_publisher_allocation: unsupported");
  return RMW_RET_UNSUPPORTED;
}

rmw_ret_t rmw_init_subscription_allocation(
  const rosidl_message_type_support_t *, const rosidl_runtime_c__Sequence__bound *,
  rmw_subscription_allocation_t *)
{
  RMW_SET_ERROR_MSG("rmw_init_subscription_allocation: unsupported");
  return RMW_RET_UNSUPPORTED;
}

rmw_ret_t rmw_fini_subscription_allocation(rmw_subscription_allocation_t *)
{
  RMW_SET_ERROR_MSG("rmw_fini_subscription_allocation: unsupported");
  return RMW_RET_UNSUPPORTED;
}

rmw_publisher_t * rmw_create_publisher(
  const rmw_node_t * node, const rosidl_message_type_support_t * type_supports,
  const char * topic_name, const rmw_qos_profile_t * qos_policies,
  const rmw_publisher_options_t * publisher_options)
{
  return endpoint_create<Publisher>(
    node, type_supports, topic_name, qos_policies, publisher_options, GraphEntry::publisher,
    rmw_publisher_allocate, rmw_publisher_free, publisher_open, publisher_close);
}

rmw_ret_t rmw_destroy_publisher(rmw_node_t * node, rmw_publisher_t * publisher)
{
  return handle_destroy<Publisher>(
    node, publisher, check_publisher, rmw_publisher_free, [](Publisher * p) {
      graph_remove(p->node, p->graph_id);
      publisher_close(p);
    });
}

rmw_ret_t rmw_publish(
  const rmw_publisher_t * publisher, const void * ros_message, rmw_publisher_allocation_t *)
{
  rmw_ret_t ret = check_publisher(publisher);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(ros_message, RMW_RET_INVALID_ARGUMENT);
  return publish_message(static_cast<Publisher *>(publisher->data), nullptr, ros_message);
}

rmw_ret_t rmw_publish_serialized_message(
  const rmw_publisher_t * publisher, const rmw_serialized_message_t * serialized_message,
  rmw_publisher_allocation_t *)
{
  rmw_ret_t ret = check_publisher(publisher);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(serialized_message, RMW_RET_INVALID_ARGUMENT);
  auto * p = static_cast<Publisher *>(publisher->data);
  if (p->encoding == Encoding::plain) {
    // Plain types travel as they lie in memory: parse once into one.
    std::vector<uint8_t> tmp(message_size(p->type) + 16);
    void * msg = tmp.data();
    message_init(p->type, msg);
    bool ok = cdr_read(
      p->type, serialized_message->buffer, serialized_message->buffer_length, msg);
    ret = ok ? publish_message(p, nullptr, msg) : RMW_RET_ERROR;
    if (!ok) {
      set_error("%s: not a valid serialised %s", p->topic.c_str(), type_name(p->type).c_str());
    }
    message_fini(p->type, msg);
    return ret;
  }
  if (serialized_message->buffer_length > kMaxMessage) {
    RMW_SET_ERROR_MSG("serialised message too large");
    return RMW_RET_ERROR;
  }
  std::lock_guard<std::mutex> guard(p->lock);
  ferry_err err = ferry_publish_copy(
    p->fpub, serialized_message->buffer, serialized_message->buffer_length);
  return err ? ferry_fail(p->topic.c_str(), err) : RMW_RET_OK;
}

rmw_ret_t rmw_borrow_loaned_message(
  const rmw_publisher_t * publisher, const rosidl_message_type_support_t * type_support,
  void ** ros_message)
{
  rmw_ret_t ret = check_publisher(publisher);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(type_support, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(ros_message, RMW_RET_INVALID_ARGUMENT);
  if (*ros_message) {
    RMW_SET_ERROR_MSG("ros_message is not NULL");
    return RMW_RET_INVALID_ARGUMENT;
  }
  auto * p = static_cast<Publisher *>(publisher->data);
  if (p->encoding != Encoding::plain) {
    set_error(
      "%s: %s has strings or sequences: it cannot be loaned", p->topic.c_str(),
      type_name(p->type).c_str());
    return RMW_RET_UNSUPPORTED;
  }
  std::lock_guard<std::mutex> guard(p->lock);
  void * loan = nullptr;
  ferry_err err = ferry_loan(p->fpub, message_size(p->type), &loan);
  if (err) {
    if (p->loans_refused++ == 0) {
      log_warn(
        "%s: a loan was refused (%s); the caller falls back to a copy", p->topic.c_str(),
        ferry_strerror(err));
    }
    return ferry_fail(p->topic.c_str(), err);
  }
  message_init(p->type, loan);
  *ros_message = loan;
  return RMW_RET_OK;
}

rmw_ret_t rmw_return_loaned_message_from_publisher(
  const rmw_publisher_t * publisher, void * loaned_message)
{
  rmw_ret_t ret = check_publisher(publisher);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(loaned_message, RMW_RET_INVALID_ARGUMENT);
  auto * p = static_cast<Publisher *>(publisher->data);
  if (p->encoding != Encoding::plain) {
    RMW_SET_ERROR_MSG("this publisher gives no loans");
    return RMW_RET_UNSUPPORTED;
  }
  std::lock_guard<std::mutex> guard(p->lock);
  ferry_err err = ferry_loan_release(p->fpub, loaned_message);
  if (err) {
    ferry_fail("returning a loan", err);
    return RMW_RET_INVALID_ARGUMENT;
  }
  return RMW_RET_OK;
}

rmw_ret_t rmw_publish_loaned_message(
  const rmw_publisher_t * publisher, void * ros_message, rmw_publisher_allocation_t *)
{
  rmw_ret_t ret = check_publisher(publisher);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(ros_message, RMW_RET_INVALID_ARGUMENT);
  auto * p = static_cast<Publisher *>(publisher->data);
  if (p->encoding != Encoding::plain) {
    RMW_SET_ERROR_MSG("this publisher gives no loans");
    return RMW_RET_UNSUPPORTED;
  }
  std::lock_guard<std::mutex> guard(p->lock);
  ferry_err err = ferry_publish(p->fpub, ros_message, message_size(p->type));
  if (err == FERRY_EFOREIGN || err == FERRY_ESTATE) {
    ferry_fail("publishing a loan", err);
    return RMW_RET_INVALID_ARGUMENT;
  }
  if (err == FERRY_ETIMEDOUT) {
    ferry_loan_release(p->fpub, ros_message);
    set_error("%s: a reliable KEEP_ALL subscription made no room within 100 ms", p->topic.c_str());
    return RMW_RET_TIMEOUT;
  }
  return err ? ferry_fail(p->topic.c_str(), err) : RMW_RET_OK;
}

rmw_ret_t rmw_publisher_count_matched_subscriptions(
  const rmw_publisher_t * publisher, size_t * subscription_count)
{
  rmw_ret_t ret = check_publisher(publisher);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(subscription_count, RMW_RET_INVALID_ARGUMENT);
  auto * p = static_cast<Publisher *>(publisher->data);
  topic_sync(p->node->context, p->ferry_topic);
  std::lock_guard<std::mutex> guard(p->lock);
  ferry_publisher_poll(p->fpub, 0);
  ferry_publisher_stats st;
  ferry_err err = ferry_publisher_stats_get(p->fpub, &st);
  if (err) {
    return ferry_fail("publisher counters", err);
  }
  *subscription_count = st.subscribers;
  return RMW_RET_OK;
}

rmw_ret_t rmw_publisher_get_actual_qos(const rmw_publisher_t * publisher, rmw_qos_profile_t * qos)
{
  rmw_ret_t ret = check_publisher(publisher);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(qos, RMW_RET_INVALID_ARGUMENT);
  *qos = static_cast<Publisher *>(publisher->data)->qos;
  return RMW_RET_OK;
}

rmw_ret_t rmw_publisher_assert_liveliness(const rmw_publisher_t * publisher)
{
  return check_publisher(publisher);
}

rmw_ret_t rmw_publisher_wait_for_all_acked(const rmw_publisher_t * publisher, rmw_time_t)
{
  // A publication is in every subscriber's queue when rmw_publish returns: nothing is in flight.
  return check_publisher(publisher);
}

rmw_ret_t rmw_get_gid_for_publisher(const rmw_publisher_t * publisher, rmw_gid_t * gid)
{
  rmw_ret_t ret = check_publisher(publisher);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(gid, RMW_RET_INVALID_ARGUMENT);
  *gid = static_cast<Publisher *>(publisher->data)->gid;
  return RMW_RET_OK;
}

rmw_ret_t rmw_compare_gids_equal(const rmw_gid_t * gid1, const rmw_gid_t * gid2, bool * result)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(gid1, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    gid1, gid1->implementation_identifier, identifier,
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION);
  RMW_CHECK_ARGUMENT_FOR_NULL(gid2, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    gid2, gid2->implementation_identifier, identifier,
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION);
  RMW_CHECK_ARGUMENT_FOR_NULL(result, RMW_RET_INVALID_ARGUMENT);
  *result = memcmp(gid1->data, gid2->data, sizeof gid1->data) == 0;
  return RMW_RET_OK;
}

rmw_ret_t rmw_publisher_get_network_flow_endpoints(
  const rmw_publisher_t * publisher, rcutils_allocator_t *, rmw_network_flow_endpoint_array_t *)
{
  rmw_ret_t ret = check_publisher(publisher);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_SET_ERROR_MSG("rmw_ferry_cpp has no network flows (shared memory on one host)");
  return RMW_RET_UNSUPPORTED;
}

rmw_ret_t rmw_subscription_get_network_flow_endpoints(
  const rmw_subscription_t * subscription, rcutils_allocator_t *,
  rmw_network_flow_endpoint_array_t *)
{
  rmw_ret_t ret = check_subscription(subscription);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_SET_ERROR_MSG("rmw_ferry_cpp has no network flows (shared memory on one host)");
  return RMW_RET_UNSUPPORTED;
}

rmw_ret_t rmw_get_serialized_message_size(
  const rosidl_message_type_support_t *, const rosidl_runtime_c__Sequence__bound *, size_t *)
{
  RMW_SET_ERROR_MSG("rmw_get_serialized_message_size: unsupported");
  return RMW_RET_UNSUPPORTED;
}

rmw_ret_t rmw_serialize(
  const void * ros_message, const rosidl_message_type_support_t * type_support,
  rmw_serialized_message_t * serialized_message)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(ros_message, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(type_support, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(serialized_message, RMW_RET_INVALID_ARGUMENT);
  const MessageType * t = message_type_get(type_support);
  if (!t) {
    return RMW_RET_ERROR;
  }
  size_t n = cdr_size(t, ros_message);
  if (serialized_message->buffer_capacity < n &&
    rmw_serialized_message_resize(serialized_message, n) != RMW_RET_OK)
  {
    return RMW_RET_BAD_ALLOC;
  }
  cdr_write(t, ros_message, serialized_message->buffer, n);
  serialized_message->buffer_length = n;
  return RMW_RET_OK;
}

rmw_ret_t rmw_deserialize(
  const rmw_serialized_message_t * serialized_message,
  const rosidl_message_type_support_t * type_support, void * ros_message)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(serialized_message, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(type_support, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(ros_message, RMW_RET_INVALID_ARGUMENT);
  const MessageType * t = message_type_get(type_support);
  if (!t) {
    return RMW_RET_ERROR;
  }
  if (!cdr_read(t, serialized_message->buffer, serialized_message->buffer_length, ros_message)) {
    set_error("not a valid serialised %s", type_name(t).c_str());
    return RMW_RET_ERROR;
  }
  return RMW_RET_OK;
}

rmw_subscription_t * rmw_create_subscription(
  const rmw_node_t * node, const rosidl_message_type_support_t * type_supports,
  const char * topic_name, const rmw_qos_profile_t * qos_policies,
  const rmw_subscription_options_t * subscription_options)
{
  rmw_subscription_t * h = endpoint_create<Subscription>(
    node, type_supports, topic_name, qos_policies, subscription_options,
    GraphEntry::subscription, rmw_subscription_allocate, rmw_subscription_free,
    subscription_open, subscription_close);
  if (h) {
    static_cast<Subscription *>(h->data)->ignore_local =
      subscription_options->ignore_local_publications;
    h->options.content_filter_options = nullptr;
    h->is_cft_enabled = false;
  }
  return h;
}

rmw_ret_t rmw_destroy_subscription(rmw_node_t * node, rmw_subscription_t * subscription)
{
  return handle_destroy<Subscription>(
    node, subscription, check_subscription, rmw_subscription_free, [](Subscription * s) {
      graph_remove(s->node, s->graph_id);
      subscription_close(s);
    });
}

rmw_ret_t rmw_subscription_count_matched_publishers(
  const rmw_subscription_t * subscription, size_t * publisher_count)
{
  rmw_ret_t ret = check_subscription(subscription);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(publisher_count, RMW_RET_INVALID_ARGUMENT);
  auto * s = static_cast<Subscription *>(subscription->data);
  topic_sync(s->node->context, s->ferry_topic);
  std::lock_guard<std::mutex> guard(s->lock);
  ferry_subscriber_wait_publishers(s->fsub, UINT32_MAX, 0);  // housekeeping only
  ferry_subscriber_stats st;
  ferry_err err = ferry_subscriber_stats_get(s->fsub, &st);
  if (err) {
    return ferry_fail("subscriber counters", err);
  }
  *publisher_count = st.publishers;
  return RMW_RET_OK;
}

rmw_ret_t rmw_subscription_get_actual_qos(
  const rmw_subscription_t * subscription, rmw_qos_profile_t * qos)
{
  rmw_ret_t ret = check_subscription(subscription);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(qos, RMW_RET_INVALID_ARGUMENT);
  *qos = static_cast<Subscription *>(subscription->data)->qos;
  return RMW_RET_OK;
}

rmw_ret_t rmw_subscription_set_content_filter(
  rmw_subscription_t *, const rmw_subscription_content_filter_options_t *)
{
  RMW_SET_ERROR_MSG("rmw_ferry_cpp has no content filters");
  return RMW_RET_UNSUPPORTED;
}

rmw_ret_t rmw_subscription_get_content_filter(
  const rmw_subscription_t *, rcutils_allocator_t *, rmw_subscription_content_filter_options_t *)
{
  RMW_SET_ERROR_MSG("rmw_ferry_cpp has no content filters");
  return RMW_RET_UNSUPPORTED;
}

rmw_ret_t rmw_take(
  const rmw_subscription_t * subscription, void * ros_message, bool * taken,
  rmw_subscription_allocation_t *)
{
  rmw_ret_t ret = check_subscription(subscription);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(ros_message, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(taken, RMW_RET_INVALID_ARGUMENT);
  return take_message(
    static_cast<Subscription *>(subscription->data), ros_message, taken, nullptr, nullptr, 0);
}

rmw_ret_t rmw_take_with_info(
  const rmw_subscription_t * subscription, void * ros_message, bool * taken,
  rmw_message_info_t * message_info, rmw_subscription_allocation_t *)
{
  rmw_ret_t ret = check_subscription(subscription);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(ros_message, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(taken, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(message_info, RMW_RET_INVALID_ARGUMENT);
  return take_message(
    static_cast<Subscription *>(subscription->data), ros_message, taken, message_info, nullptr,
    0);
}

rmw_ret_t rmw_take_sequence(
  const rmw_subscription_t * subscription, size_t count, rmw_message_sequence_t * message_sequence,
  rmw_message_info_sequence_t * message_info_sequence, size_t * taken,
  rmw_subscription_allocation_t *)
{
  rmw_ret_t ret = check_subscription(subscription);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(message_sequence, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(message_info_sequence, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(taken, RMW_RET_INVALID_ARGUMENT);
  if (count == 0) {
    RMW_SET_ERROR_MSG("count cannot be 0");
    return RMW_RET_INVALID_ARGUMENT;
  }
  if (count > message_sequence->capacity || count > message_info_sequence->capacity) {
    RMW_SET_ERROR_MSG("count is larger than the sequences' capacity");
    return RMW_RET_INVALID_ARGUMENT;
  }
  auto * s = static_cast<Subscription *>(subscription->data);
  *taken = 0;
  while (*taken < count) {
    bool one = false;
    ret = take_message(
      s, message_sequence->data[*taken], &one, &message_info_sequence->data[*taken], nullptr, 0);
    if (ret != RMW_RET_OK || !one) {
      break;
    }
    ++*taken;
  }
  message_sequence->size = *taken;
  message_info_sequence->size = *taken;
  return ret;
}

static rmw_ret_t take_serialized(
  const rmw_subscription_t * subscription, rmw_serialized_message_t * serialized_message,
  bool * taken, rmw_message_info_t * message_info)
{
  rmw_ret_t ret = check_subscription(subscription);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(serialized_message, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(taken, RMW_RET_INVALID_ARGUMENT);
  auto * s = static_cast<Subscription *>(subscription->data);
  *taken = false;
  std::lock_guard<std::mutex> guard(s->lock);
  ferry_sample smp;
  while (next_sample(s, &smp)) {
    const uint8_t * bytes = nullptr;
    size_t nbytes = 0;
    if (!sample_bytes(s, smp, &bytes, &nbytes)) {
      ferry_release(s->fsub, &smp);
      continue;
    }
    const void * msg = bytes;
    size_t n = 0;
    if (s->encoding == Encoding::plain) {
      if (nbytes != message_size(s->type)) {
        malformed(s, smp);
        ferry_release(s->fsub, &smp);
        continue;
      }
      n = cdr_size(s->type, msg);
    } else {
      n = nbytes;
    }
    if (serialized_message->buffer_capacity < n &&
      rmw_serialized_message_resize(serialized_message, n) != RMW_RET_OK)
    {
      ferry_release(s->fsub, &smp);
      return RMW_RET_BAD_ALLOC;
    }
    if (s->encoding == Encoding::plain) {
      cdr_write(s->type, msg, serialized_message->buffer, n);
    } else {
      memcpy(serialized_message->buffer, msg, n);
    }
    serialized_message->buffer_length = n;
    fill_info(smp, message_info);
    ferry_release(s->fsub, &smp);
    *taken = true;
    break;
  }
  return RMW_RET_OK;
}

rmw_ret_t rmw_take_serialized_message(
  const rmw_subscription_t * subscription, rmw_serialized_message_t * serialized_message,
  bool * taken, rmw_subscription_allocation_t *)
{
  return take_serialized(subscription, serialized_message, taken, nullptr);
}

rmw_ret_t rmw_take_serialized_message_with_info(
  const rmw_subscription_t * subscription, rmw_serialized_message_t * serialized_message,
  bool * taken, rmw_message_info_t * message_info, rmw_subscription_allocation_t *)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(message_info, RMW_RET_INVALID_ARGUMENT);
  return take_serialized(subscription, serialized_message, taken, message_info);
}

static rmw_ret_t take_loaned(
  const rmw_subscription_t * subscription, void ** loaned_message, bool * taken,
  rmw_message_info_t * message_info)
{
  rmw_ret_t ret = check_subscription(subscription);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(loaned_message, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(taken, RMW_RET_INVALID_ARGUMENT);
  if (*loaned_message) {
    RMW_SET_ERROR_MSG("loaned_message is not NULL");
    return RMW_RET_INVALID_ARGUMENT;
  }
  auto * s = static_cast<Subscription *>(subscription->data);
  if (s->encoding != Encoding::plain) {
    set_error(
      "%s: %s has strings or sequences: it cannot be loaned", s->topic.c_str(),
      type_name(s->type).c_str());
    return RMW_RET_UNSUPPORTED;
  }
  *taken = false;
  std::lock_guard<std::mutex> guard(s->lock);
  ferry_sample smp;
  while (next_sample(s, &smp)) {
    if (smp.size != message_size(s->type)) {
      malformed(s, smp);
      ferry_release(s->fsub, &smp);
      continue;
    }
    s->loans.push_back(smp);
    // The publisher's own pages, mapped read-only: the message is never copied.
    *loaned_message = const_cast<void *>(smp.data);
    fill_info(smp, message_info);
    *taken = true;
    break;
  }
  return RMW_RET_OK;
}

rmw_ret_t rmw_take_loaned_message(
  const rmw_subscription_t * subscription, void ** loaned_message, bool * taken,
  rmw_subscription_allocation_t *)
{
  return take_loaned(subscription, loaned_message, taken, nullptr);
}

rmw_ret_t rmw_take_loaned_message_with_info(
  const rmw_subscription_t * subscription, void ** loaned_message, bool * taken,
  rmw_message_info_t * message_info, rmw_subscription_allocation_t *)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(message_info, RMW_RET_INVALID_ARGUMENT);
  return take_loaned(subscription, loaned_message, taken, message_info);
}

rmw_ret_t rmw_return_loaned_message_from_subscription(
  const rmw_subscription_t * subscription, void * loaned_message)
{
  rmw_ret_t ret = check_subscription(subscription);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(loaned_message, RMW_RET_INVALID_ARGUMENT);
  auto * s = static_cast<Subscription *>(subscription->data);
  if (s->encoding != Encoding::plain) {
    RMW_SET_ERROR_MSG("this subscription gives no loans");
    return RMW_RET_UNSUPPORTED;
  }
  std::lock_guard<std::mutex> guard(s->lock);
  for (auto it = s->loans.begin(); it != s->loans.end(); ++it) {
    if (it->data == loaned_message) {
      ferry_release(s->fsub, &*it);
      s->loans.erase(it);
      return RMW_RET_OK;
    }
  }
  // rmw.h and test_subscription: a message that was never loaned is RMW_RET_ERROR.
  RMW_SET_ERROR_MSG("not a message this subscription loaned");
  return RMW_RET_ERROR;
}

rmw_ret_t rmw_subscription_set_on_new_message_callback(
  rmw_subscription_t *, rmw_event_callback_t, const void *)
{
  RMW_SET_ERROR_MSG("rmw_ferry_cpp: on-new-message callbacks are not supported");
  return RMW_RET_UNSUPPORTED;
}

}  // extern "C"
