// rmw_ferry: wait sets, rmw_wait and events.
//
// rmw_wait polls the descriptors ferry hands out (one per subscriber, armed by a take that found
// nothing), an eventfd per guard condition, and, while a graph guard condition is waited on,
// the graph's inotify descriptor and a pidfd per peer process. It also polls the descriptors of
// the context's publishers and runs their housekeeping when they fire: a ROS publisher is in no
// wait set, yet it must accept subscribers while its node spins without publishing. No thread.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "rmw/allocators.h"
#include "rmw/error_handling.h"
#include "rmw/impl/cpp/macros.hpp"
#include "rmw/rmw.h"

#include "internal.hpp"

namespace rmw_ferry
{

struct WaitSet
{
  std::mutex lock;  // one rmw_wait at a time per wait set
  std::vector<pollfd> fds;
  std::vector<Publisher *> pubs;
};

static int64_t mono_ns()
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Runs the housekeeping of the context's publishers whose descriptor is readable, when the last
// look is 5 ms old or more: a poll of their descriptors with no wait.
static void housekeep_publishers(Context * ctx, int64_t now)
{
  std::lock_guard<std::mutex> guard(ctx->lock);
  if (now - ctx->publishers_polled < 5000000) {
    return;
  }
  ctx->publishers_polled = now;
  std::vector<pollfd> fds;
  fds.reserve(ctx->publishers.size());
  for (Publisher * p : ctx->publishers) {
    int fd = -1;
    if (!p->fpub || ferry_publisher_fd(p->fpub, &fd) != FERRY_OK) {
      fd = -1;  // poll skips it
    }
    fds.push_back({fd, POLLIN, 0});
  }
  if (poll(fds.data(), fds.size(), 0) <= 0) {
    return;
  }
  for (size_t i = 0; i < fds.size(); i++) {
    if (fds[i].revents) {
      publisher_housekeep(ctx->publishers[i]);
    }
  }
}

static bool guard_take(GuardCondition * gc)
{
  if (!gc->triggered.exchange(false)) {
    return false;
  }
  uint64_t v;
  ssize_t r = read(gc->fd, &v, sizeof v);  // empty the eventfd; it may be empty already
  (void)r;
  return true;
}

// The index of the subscription whose steady stream's next sample is anticipated first, and when
// to wake for it (ferry_subscriber_wake_at); n when none is.
static size_t soonest_subscription(rmw_subscriptions_t * subs, size_t n, int64_t * at)
{
  size_t first = n;
  *at = 0;
  for (size_t i = 0; i < n; i++) {
    auto * s = static_cast<Subscription *>(subs->subscribers[i]);
    if (!s) {
      continue;
    }
    std::unique_lock<std::mutex> guard(s->lock, std::try_to_lock);
    int64_t a = 0;
    if (guard.owns_lock() && s->fsub && ferry_subscriber_wake_at(s->fsub, &a) == FERRY_OK &&
      a != 0 && (first == n || a < *at))
    {
      first = i;
      *at = a;
    }
  }
  return first;
}

// The policy of the FERRY_QOS_* bits a refused peer lacked (reliability first, as DDS says one).
static rmw_qos_policy_kind_t policy_kind(uint32_t bits)
{
  return (bits & FERRY_QOS_RELIABLE) ? RMW_QOS_POLICY_RELIABILITY :
         (bits & FERRY_QOS_DURABLE) ? RMW_QOS_POLICY_DURABILITY : RMW_QOS_POLICY_INVALID;
}

static bool publisher_event_ready(Publisher * p)
{
  std::unique_lock<std::mutex> guard(p->lock, std::try_to_lock);
  ferry_publisher_stats st;
  return guard.owns_lock() && p->fpub && ferry_publisher_stats_get(p->fpub, &st) == FERRY_OK &&
         st.incompatible > p->incompatible_reported;
}

// An event's data is its publisher or subscription (rmw_event_fini frees nothing of ours).
static bool event_ready(const rmw_event_t * ev)
{
  if (!ev->data) {
    return false;
  }
  if (ev->event_type == RMW_EVENT_OFFERED_QOS_INCOMPATIBLE) {
    return publisher_event_ready(static_cast<Publisher *>(ev->data));
  }
  if (ev->event_type != RMW_EVENT_MESSAGE_LOST &&
    ev->event_type != RMW_EVENT_LIVELINESS_CHANGED &&
    ev->event_type != RMW_EVENT_REQUESTED_QOS_INCOMPATIBLE)
  {
    return false;
  }
  auto * s = static_cast<Subscription *>(ev->data);
  std::unique_lock<std::mutex> guard(s->lock, std::try_to_lock);
  if (!guard.owns_lock() || !s->fsub) {
    return false;
  }
  ferry_subscriber_stats st;
  if (ferry_subscriber_stats_get(s->fsub, &st) != FERRY_OK) {
    return false;
  }
  if (ev->event_type == RMW_EVENT_MESSAGE_LOST) {
    return st.dropped > s->lost_reported;
  }
  if (ev->event_type == RMW_EVENT_REQUESTED_QOS_INCOMPATIBLE) {
    return st.incompatible > s->incompatible_reported;
  }
  return st.publishers != s->alive_reported || st.publishers_lost != s->gone_reported;
}

}  // namespace rmw_ferry

using namespace rmw_ferry;

extern "C" {

rmw_wait_set_t * rmw_create_wait_set(rmw_context_t * context, size_t max_conditions)
{
  (void)max_conditions;
  RMW_CHECK_ARGUMENT_FOR_NULL(context, nullptr);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    context, context->implementation_identifier, identifier, return nullptr);
  auto * ws = new (std::nothrow) WaitSet();
  rmw_wait_set_t * h = rmw_wait_set_allocate();
  if (!ws || !h) {
    delete ws;
    rmw_wait_set_free(h);
    RMW_SET_ERROR_MSG("out of memory");
    return nullptr;
  }
  h->implementation_identifier = identifier;
  h->data = ws;
  h->guard_conditions = nullptr;
  return h;
}

rmw_ret_t rmw_destroy_wait_set(rmw_wait_set_t * wait_set)
{
  // RMW_RET_ERROR, which test_wait_set checks and rmw_cyclonedds_cpp returns (rmw.h says
  // RMW_RET_INVALID_ARGUMENT; rcl never passes a null wait set).
  RMW_CHECK_ARGUMENT_FOR_NULL(wait_set, RMW_RET_ERROR);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    wait_set, wait_set->implementation_identifier, identifier,
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION);
  delete static_cast<WaitSet *>(wait_set->data);
  rmw_wait_set_free(wait_set);
  return RMW_RET_OK;
}

rmw_ret_t rmw_wait(
  rmw_subscriptions_t * subs, rmw_guard_conditions_t * gcs, rmw_services_t * srvs,
  rmw_clients_t * cls, rmw_events_t * evs, rmw_wait_set_t * wait_set,
  const rmw_time_t * wait_timeout)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(wait_set, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    wait_set, wait_set->implementation_identifier, identifier,
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION);
  auto * ws = static_cast<WaitSet *>(wait_set->data);
  std::lock_guard<std::mutex> ws_guard(ws->lock);

  size_t nsubs = subs ? subs->subscriber_count : 0;
  size_t ngcs = gcs ? gcs->guard_condition_count : 0;
  size_t nsrvs = srvs ? srvs->service_count : 0;
  size_t ncls = cls ? cls->client_count : 0;
  size_t nevs = evs ? evs->event_count : 0;

  int64_t deadline = -1;
  if (wait_timeout) {
    uint64_t ns = wait_timeout->sec >= static_cast<uint64_t>(INT64_MAX / 2000000000) ?
      static_cast<uint64_t>(INT64_MAX / 2) : wait_timeout->sec * 1000000000ull + wait_timeout->nsec;
    deadline = mono_ns() + static_cast<int64_t>(ns);
  }

  // Whose graph is waited on, and which contexts' publishers to keep.
  std::vector<Context *> graphs;
  for (size_t i = 0; i < ngcs; i++) {
    auto * gc = static_cast<GuardCondition *>(gcs->guard_conditions[i]);
    if (gc && gc->graph_of &&
      std::find(graphs.begin(), graphs.end(), gc->graph_of) == graphs.end())
    {
      graphs.push_back(gc->graph_of);
    }
  }

  // The publishers of every context this wait set's entities belong to.
  std::vector<Context *> ctxs = graphs;
  auto add_ctx = [&ctxs](Node * n) {
      if (n && std::find(ctxs.begin(), ctxs.end(), n->context) == ctxs.end()) {
        ctxs.push_back(n->context);
      }
    };
  for (size_t i = 0; i < nsubs; i++) {
    auto * s = static_cast<Subscription *>(subs->subscribers[i]);
    add_ctx(s ? s->node : nullptr);
  }
  for (size_t i = 0; i < nsrvs; i++) {
    auto * sv = static_cast<Service *>(srvs->services[i]);
    add_ctx(sv ? sv->node : nullptr);
  }
  for (size_t i = 0; i < ncls; i++) {
    auto * cl = static_cast<Client *>(cls->clients[i]);
    add_ctx(cl ? cl->node : nullptr);
  }
  for (size_t i = 0; i < nevs; i++) {
    auto * ev = static_cast<const rmw_event_t *>(evs->events[i]);
    if (ev && ev->data && ev->event_type == RMW_EVENT_OFFERED_QOS_INCOMPATIBLE) {
      add_ctx(static_cast<Publisher *>(ev->data)->node);
    } else if (ev && ev->data && ev->event_type != RMW_EVENT_LIVELINESS_LOST) {
      add_ctx(static_cast<Subscription *>(ev->data)->node);  // a subscription's event
    }
  }
  // An executor that only ever polls (spin_some: a zero timeout) still serves its publishers'
  // housekeeping, at most every 5 ms.
  for (Context * ctx : ctxs) {
    housekeep_publishers(ctx, mono_ns());
  }

  std::vector<uint8_t> ready_subs(nsubs), ready_gcs(ngcs), ready_srvs(nsrvs), ready_cls(ncls),
  ready_evs(nevs);
  for (;;) {
    bool any = false;
    for (size_t i = 0; i < nsubs; i++) {
      auto * s = static_cast<Subscription *>(subs->subscribers[i]);
      any |= (ready_subs[i] = s && subscription_ready(s));
    }
    for (size_t i = 0; i < ngcs; i++) {
      auto * gc = static_cast<GuardCondition *>(gcs->guard_conditions[i]);
      any |= (ready_gcs[i] = gc && guard_take(gc));
    }
    for (size_t i = 0; i < nsrvs; i++) {
      auto * sv = static_cast<Service *>(srvs->services[i]);
      any |= (ready_srvs[i] = sv && subscription_ready(&sv->requests));
    }
    for (size_t i = 0; i < ncls; i++) {
      auto * cl = static_cast<Client *>(cls->clients[i]);
      any |= (ready_cls[i] = cl && subscription_ready(&cl->responses, cl->id));
    }
    for (size_t i = 0; i < nevs; i++) {
      auto * ev = static_cast<const rmw_event_t *>(evs->events[i]);
      any |= (ready_evs[i] = ev && event_ready(ev));
    }
    int64_t left = deadline < 0 ? -1 : deadline - mono_ns();
    if (any || (deadline >= 0 && left <= 0)) {
      break;
    }

    // Nothing yet: poll every descriptor that could change that.
    ws->fds.clear();
    ws->pubs.clear();
    for (size_t i = 0; i < nsubs; i++) {
      auto * s = static_cast<Subscription *>(subs->subscribers[i]);
      if (s && s->fd >= 0) {
        ws->fds.push_back({s->fd, POLLIN, 0});
      }
    }
    for (size_t i = 0; i < ngcs; i++) {
      auto * gc = static_cast<GuardCondition *>(gcs->guard_conditions[i]);
      if (gc) {
        ws->fds.push_back({gc->fd, POLLIN, 0});
      }
    }
    for (size_t i = 0; i < nsrvs; i++) {
      auto * sv = static_cast<Service *>(srvs->services[i]);
      if (sv && sv->requests.fd >= 0) {
        ws->fds.push_back({sv->requests.fd, POLLIN, 0});
      }
    }
    for (size_t i = 0; i < ncls; i++) {
      auto * cl = static_cast<Client *>(cls->clients[i]);
      if (cl && cl->responses.fd >= 0) {
        ws->fds.push_back({cl->responses.fd, POLLIN, 0});
      }
    }
    size_t graph_first = ws->fds.size();
    for (Context * ctx : graphs) {
      std::lock_guard<std::mutex> guard(ctx->lock);
      if (ctx->graph) {
        ctx->graph->poll_fds(&ws->fds);
      }
    }
    size_t pubs_first = ws->fds.size();
    for (Context * ctx : ctxs) {
      std::lock_guard<std::mutex> guard(ctx->lock);
      for (Publisher * p : ctx->publishers) {
        int fd = -1;
        if (p->fpub && ferry_publisher_fd(p->fpub, &fd) == FERRY_OK) {
          ws->fds.push_back({fd, POLLIN, 0});
          ws->pubs.push_back(p);
        }
      }
    }
    // Events have no descriptor (a drop is the publisher's doing): look again within 100 ms.
    int64_t sleep_ns = left;
    if (nevs > 0 && (sleep_ns < 0 || sleep_ns > 100000000)) {
      sleep_ns = 100000000;
    }
    // A steady stream's next sample (a camera): awake a little before it is due and spin across
    // its arrival (ferry_subscriber_catch) rather than pay a wake-up from sleep for each frame.
    int64_t catch_at = 0;
    size_t soon_i = soonest_subscription(subs, nsubs, &catch_at);
    int64_t now = mono_ns();
    Subscription * soon = nullptr;
    if (soon_i < nsubs && (sleep_ns < 0 || catch_at - now < sleep_ns)) {
      soon = static_cast<Subscription *>(subs->subscribers[soon_i]);
      sleep_ns = std::max<int64_t>(catch_at - now, 0);
    }
    timespec ts{};
    if (sleep_ns >= 0) {
      ts.tv_sec = static_cast<time_t>(sleep_ns / 1000000000);
      ts.tv_nsec = static_cast<long>(sleep_ns % 1000000000);
    }
    int r = ppoll(ws->fds.data(), ws->fds.size(), sleep_ns < 0 ? nullptr : &ts, nullptr);
    if (r < 0 && errno != EINTR) {
      set_error("poll: %s", strerror(errno));
      return RMW_RET_ERROR;
    }
    if (r == 0 && soon) {
      bool caught = false;
      {
        std::unique_lock<std::mutex> guard(soon->lock, std::try_to_lock);
        caught = guard.owns_lock() && soon->fsub &&
          ferry_subscriber_catch(soon->fsub, catch_at) == FERRY_OK;
      }
      // The frame it caught is returned at once: looking at every other entity first (each
      // idle subscription runs its housekeeping after a long sleep) would delay it by as much
      // as the anticipation saved. They are looked at on the next wait.
      // (Every ready flag is clear here: the loop sleeps only when nothing was ready.)
      if (caught && subscription_ready(soon)) {
        ready_subs[soon_i] = 1;
        break;
      }
    }
    if (r <= 0) {
      continue;
    }
    // Publisher housekeeping: under the lock of the context, so the publisher still lives.
    for (Context * ctx : ctxs) {
      std::lock_guard<std::mutex> guard(ctx->lock);
      for (size_t k = 0; k < ws->pubs.size(); k++) {
        if (ws->fds[pubs_first + k].revents &&
          std::find(ctx->publishers.begin(), ctx->publishers.end(), ws->pubs[k]) !=
          ctx->publishers.end())
        {
          publisher_housekeep(ws->pubs[k]);
        }
      }
    }
    for (Context * ctx : graphs) {
      bool changed = false;
      {
        std::lock_guard<std::mutex> guard(ctx->lock);
        changed = ctx->graph &&
          ctx->graph->consume(ws->fds.data() + graph_first, pubs_first - graph_first);
      }
      if (changed) {
        graph_changed(ctx);
      }
    }
  }

  for (size_t i = 0; i < nsubs; i++) {
    if (!ready_subs[i]) {
      subs->subscribers[i] = nullptr;
    }
  }
  for (size_t i = 0; i < ngcs; i++) {
    if (!ready_gcs[i]) {
      gcs->guard_conditions[i] = nullptr;
    }
  }
  for (size_t i = 0; i < nsrvs; i++) {
    if (!ready_srvs[i]) {
      srvs->services[i] = nullptr;
    }
  }
  for (size_t i = 0; i < ncls; i++) {
    if (!ready_cls[i]) {
      cls->clients[i] = nullptr;
    }
  }
  for (size_t i = 0; i < nevs; i++) {
    if (!ready_evs[i]) {
      evs->events[i] = nullptr;
    }
  }
  bool any = std::any_of(ready_subs.begin(), ready_subs.end(), [](uint8_t v) {return v;}) ||
    std::any_of(ready_gcs.begin(), ready_gcs.end(), [](uint8_t v) {return v;}) ||
    std::any_of(ready_srvs.begin(), ready_srvs.end(), [](uint8_t v) {return v;}) ||
    std::any_of(ready_cls.begin(), ready_cls.end(), [](uint8_t v) {return v;}) ||
    std::any_of(ready_evs.begin(), ready_evs.end(), [](uint8_t v) {return v;});
  return any ? RMW_RET_OK : RMW_RET_TIMEOUT;
}

static rmw_ret_t event_init(
  rmw_event_t * rmw_event, Publisher * pub, Subscription * sub, rmw_event_type_t event_type)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(rmw_event, RMW_RET_INVALID_ARGUMENT);
  if (rmw_event->implementation_identifier) {
    RMW_SET_ERROR_MSG("expected a zero-initialized event");
    return RMW_RET_INVALID_ARGUMENT;
  }
  switch (event_type) {
    case RMW_EVENT_MESSAGE_LOST:
      if (!sub) {
        RMW_SET_ERROR_MSG("message-lost events are a subscription's");
        return RMW_RET_INVALID_ARGUMENT;
      }
      break;
    case RMW_EVENT_LIVELINESS_CHANGED:
      // A publisher is alive while its process holds its connection: connections made and
      // lost are what changes.
      if (!sub) {
        RMW_SET_ERROR_MSG("liveliness-changed events are a subscription's");
        return RMW_RET_INVALID_ARGUMENT;
      }
      break;
    case RMW_EVENT_LIVELINESS_LOST:
      // A publisher's own liveliness cannot be lost while its process lives: never raised.
      break;
    case RMW_EVENT_REQUESTED_QOS_INCOMPATIBLE:
      // Publishers that refused this subscription: it requires reliability or durability
      // that they do not offer (ferry_subscriber_options.require).
      if (!sub) {
        RMW_SET_ERROR_MSG("requested-QoS-incompatible events are a subscription's");
        return RMW_RET_INVALID_ARGUMENT;
      }
      break;
    case RMW_EVENT_OFFERED_QOS_INCOMPATIBLE:
      // Subscriptions this publisher refused for the same reason.
      if (!pub) {
        RMW_SET_ERROR_MSG("offered-QoS-incompatible events are a publisher's");
        return RMW_RET_INVALID_ARGUMENT;
      }
      break;
    default:
      set_error("rmw_ferry_cpp: event type %d is not supported", static_cast<int>(event_type));
      return RMW_RET_UNSUPPORTED;
  }
  rmw_event->implementation_identifier = identifier;
  rmw_event->data = pub ? static_cast<void *>(pub) : static_cast<void *>(sub);
  rmw_event->event_type = event_type;
  return RMW_RET_OK;
}

rmw_ret_t rmw_publisher_event_init(
  rmw_event_t * rmw_event, const rmw_publisher_t * publisher, rmw_event_type_t event_type)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(publisher, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    publisher, publisher->implementation_identifier, identifier,
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION);
  return event_init(rmw_event, static_cast<Publisher *>(publisher->data), nullptr, event_type);
}

rmw_ret_t rmw_subscription_event_init(
  rmw_event_t * rmw_event, const rmw_subscription_t * subscription, rmw_event_type_t event_type)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(subscription, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    subscription, subscription->implementation_identifier, identifier,
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION);
  return event_init(
    rmw_event, nullptr, static_cast<Subscription *>(subscription->data), event_type);
}

rmw_ret_t rmw_take_event(const rmw_event_t * event_handle, void * event_info, bool * taken)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(event_handle, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    event_handle, event_handle->implementation_identifier, identifier,
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION);
  RMW_CHECK_ARGUMENT_FOR_NULL(event_info, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(taken, RMW_RET_INVALID_ARGUMENT);
  *taken = false;
  switch (event_handle->event_type) {
    case RMW_EVENT_MESSAGE_LOST: {
        auto * s = static_cast<Subscription *>(event_handle->data);
        std::lock_guard<std::mutex> guard(s->lock);
        ferry_subscriber_stats st{};
        if (s->fsub) {
          ferry_subscriber_stats_get(s->fsub, &st);
        }
        auto * info = static_cast<rmw_message_lost_status_t *>(event_info);
        info->total_count = st.dropped;
        info->total_count_change = st.dropped - s->lost_reported;
        s->lost_reported = st.dropped;
        *taken = true;
        return RMW_RET_OK;
      }
    case RMW_EVENT_LIVELINESS_CHANGED: {
        auto * s = static_cast<Subscription *>(event_handle->data);
        std::lock_guard<std::mutex> guard(s->lock);
        ferry_subscriber_stats st{};
        if (s->fsub) {
          ferry_subscriber_stats_get(s->fsub, &st);
        }
        auto * info = static_cast<rmw_liveliness_changed_status_t *>(event_info);
        info->alive_count = static_cast<int32_t>(st.publishers);
        info->not_alive_count = static_cast<int32_t>(st.publishers_lost);
        info->alive_count_change =
          static_cast<int32_t>(st.publishers) - static_cast<int32_t>(s->alive_reported);
        info->not_alive_count_change = static_cast<int32_t>(st.publishers_lost - s->gone_reported);
        s->alive_reported = st.publishers;
        s->gone_reported = st.publishers_lost;
        *taken = true;
        return RMW_RET_OK;
      }
    case RMW_EVENT_LIVELINESS_LOST: {
        auto * info = static_cast<rmw_liveliness_lost_status_t *>(event_info);
        info->total_count = 0;
        info->total_count_change = 0;
        *taken = true;
        return RMW_RET_OK;
      }
    case RMW_EVENT_REQUESTED_QOS_INCOMPATIBLE: {
        auto * s = static_cast<Subscription *>(event_handle->data);
        std::lock_guard<std::mutex> guard(s->lock);
        ferry_subscriber_stats st{};
        if (s->fsub) {
          ferry_subscriber_stats_get(s->fsub, &st);
        }
        auto * info = static_cast<rmw_qos_incompatible_event_status_t *>(event_info);
        info->total_count = static_cast<int32_t>(st.incompatible);
        info->total_count_change = static_cast<int32_t>(st.incompatible - s->incompatible_reported);
        info->last_policy_kind = policy_kind(st.incompatible_policies);
        s->incompatible_reported = st.incompatible;
        *taken = true;
        return RMW_RET_OK;
      }
    case RMW_EVENT_OFFERED_QOS_INCOMPATIBLE: {
        auto * p = static_cast<Publisher *>(event_handle->data);
        std::lock_guard<std::mutex> guard(p->lock);
        ferry_publisher_stats st{};
        if (p->fpub) {
          ferry_publisher_poll(p->fpub, 0);
          ferry_publisher_stats_get(p->fpub, &st);
        }
        auto * info = static_cast<rmw_qos_incompatible_event_status_t *>(event_info);
        info->total_count = static_cast<int32_t>(st.incompatible);
        info->total_count_change = static_cast<int32_t>(st.incompatible - p->incompatible_reported);
        info->last_policy_kind = policy_kind(st.incompatible_policies);
        p->incompatible_reported = st.incompatible;
        *taken = true;
        return RMW_RET_OK;
      }
    default:
      RMW_SET_ERROR_MSG("unsupported event type");
      return RMW_RET_UNSUPPORTED;
  }
}

rmw_ret_t rmw_event_set_callback(rmw_event_t *, rmw_event_callback_t, const void *)
{
  RMW_SET_ERROR_MSG("rmw_ferry_cpp: event callbacks are not supported");
  return RMW_RET_UNSUPPORTED;
}

}  // extern "C"
