// rmw_ferry: identity, errors, init options, contexts, nodes and guard conditions.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "rcutils/logging_macros.h"
#include "rcutils/strdup.h"
#include "rmw/allocators.h"
#include "rmw/error_handling.h"
#include "rmw/features.h"
#include "rmw/impl/cpp/macros.hpp"
#include "rmw/init.h"
#include "rmw/init_options.h"
#include "rmw/rmw.h"
#include "rmw/security_options.h"
#include "rmw/validate_namespace.h"
#include "rmw/validate_node_name.h"

#include "internal.hpp"

namespace rmw_ferry
{

const char * const identifier = "rmw_ferry_cpp";
const char * const serialization_format = "cdr";

uint64_t random_id()
{
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      v = (static_cast<uint64_t>(getpid()) << 40) ^ static_cast<uint64_t>(ts.tv_nsec) ^
        (static_cast<uint64_t>(ts.tv_sec) << 20);
    }
  }
  return v;
}

int64_t system_now_ns()
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void set_error(const char * fmt, ...)
{
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  RMW_SET_ERROR_MSG(buf);
}

rmw_ret_t ferry_fail(const char * what, ferry_err err)
{
  if (err == FERRY_ESYS) {
    set_error("%s: %s (%s)", what, ferry_strerror(err), strerror(errno));
  } else {
    set_error("%s: %s", what, ferry_strerror(err));
  }
  return err == FERRY_ENOMEM ? RMW_RET_BAD_ALLOC : RMW_RET_ERROR;
}

void log_warn(const char * fmt, ...)
{
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  RCUTILS_LOG_WARN_NAMED("rmw_ferry_cpp", "%s", buf);
}

rmw_ret_t check_node(const rmw_node_t * node)
{
  return check_handle(node, "node");
}

void graph_changed(Context * ctx)
{
  std::lock_guard<std::mutex> guard(ctx->lock);
  for (Node * n : ctx->nodes) {
    auto * gc = static_cast<GuardCondition *>(n->graph_guard->data);
    gc->triggered.store(true);
    uint64_t one = 1;
    ssize_t r = write(gc->fd, &one, sizeof one);
    (void)r;
  }
}

// The ferry log, into ROS's: warnings and errors as such, the rest at debug level.
static void ferry_log(void *, ferry_log_level level, const char * message)
{
  switch (level) {
    case FERRY_LOG_ERROR:
      RCUTILS_LOG_ERROR_NAMED("rmw_ferry_cpp", "%s", message);
      break;
    case FERRY_LOG_WARN:
      RCUTILS_LOG_WARN_NAMED("rmw_ferry_cpp", "%s", message);
      break;
    default:
      RCUTILS_LOG_DEBUG_NAMED("rmw_ferry_cpp", "%s", message);
      break;
  }
}

static rmw_guard_condition_t * guard_condition_make(rmw_context_t * context)
{
  auto * gc = new (std::nothrow) GuardCondition();
  if (!gc) {
    RMW_SET_ERROR_MSG("out of memory");
    return nullptr;
  }
  gc->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (gc->fd < 0) {
    set_error("eventfd: %s", strerror(errno));
    delete gc;
    return nullptr;
  }
  rmw_guard_condition_t * h = rmw_guard_condition_allocate();
  if (!h) {
    close(gc->fd);
    delete gc;
    RMW_SET_ERROR_MSG("out of memory");
    return nullptr;
  }
  h->implementation_identifier = identifier;
  h->data = gc;
  h->context = context;
  return h;
}

static void guard_condition_free(rmw_guard_condition_t * h)
{
  auto * gc = static_cast<GuardCondition *>(h->data);
  close(gc->fd);
  delete gc;
  rmw_guard_condition_free(h);
}

}  // namespace rmw_ferry

using namespace rmw_ferry;

extern "C" {

const char * rmw_get_implementation_identifier()
{
  return identifier;
}

const char * rmw_get_serialization_format()
{
  return serialization_format;
}

rmw_ret_t rmw_set_log_severity(rmw_log_severity_t severity)
{
  (void)severity;  // ferry's log goes through rcutils, whose own severity applies
  return RMW_RET_OK;
}

bool rmw_feature_supported(rmw_feature_t feature)
{
  // The publisher's sequence number comes with every sample; a reception count does not.
  return feature == RMW_FEATURE_MESSAGE_INFO_PUBLICATION_SEQUENCE_NUMBER;
}

rmw_ret_t rmw_init_options_init(rmw_init_options_t * init_options, rcutils_allocator_t allocator)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(init_options, RMW_RET_INVALID_ARGUMENT);
  RCUTILS_CHECK_ALLOCATOR(&allocator, return RMW_RET_INVALID_ARGUMENT);
  if (init_options->implementation_identifier) {
    RMW_SET_ERROR_MSG("expected zero-initialized init_options");
    return RMW_RET_INVALID_ARGUMENT;
  }
  init_options->instance_id = 0;
  init_options->implementation_identifier = identifier;
  init_options->allocator = allocator;
  init_options->impl = nullptr;
  init_options->localhost_only = RMW_LOCALHOST_ONLY_DEFAULT;
  init_options->domain_id = RMW_DEFAULT_DOMAIN_ID;
  init_options->enclave = nullptr;
  init_options->security_options = rmw_get_zero_initialized_security_options();
  return RMW_RET_OK;
}

rmw_ret_t rmw_init_options_copy(const rmw_init_options_t * src, rmw_init_options_t * dst)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(src, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(dst, RMW_RET_INVALID_ARGUMENT);
  if (!src->implementation_identifier) {
    RMW_SET_ERROR_MSG("expected initialized src");
    return RMW_RET_INVALID_ARGUMENT;
  }
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    src, src->implementation_identifier, identifier,
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION);
  if (dst->implementation_identifier) {
    RMW_SET_ERROR_MSG("expected zero-initialized dst");
    return RMW_RET_INVALID_ARGUMENT;
  }
  const rcutils_allocator_t * a = &src->allocator;
  rmw_init_options_t tmp = *src;
  tmp.enclave = rcutils_strdup(src->enclave, *a);
  if (src->enclave && !tmp.enclave) {
    return RMW_RET_BAD_ALLOC;
  }
  tmp.security_options = rmw_get_zero_initialized_security_options();
  rmw_ret_t ret = rmw_security_options_copy(&src->security_options, a, &tmp.security_options);
  if (ret != RMW_RET_OK) {
    a->deallocate(tmp.enclave, a->state);
    return ret;
  }
  *dst = tmp;
  return RMW_RET_OK;
}

rmw_ret_t rmw_init_options_fini(rmw_init_options_t * init_options)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(init_options, RMW_RET_INVALID_ARGUMENT);
  if (!init_options->implementation_identifier) {
    RMW_SET_ERROR_MSG("expected initialized init_options");
    return RMW_RET_INVALID_ARGUMENT;
  }
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    init_options, init_options->implementation_identifier, identifier,
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION);
  rcutils_allocator_t * a = &init_options->allocator;
  RCUTILS_CHECK_ALLOCATOR(a, return RMW_RET_INVALID_ARGUMENT);
  a->deallocate(init_options->enclave, a->state);
  rmw_ret_t ret = rmw_security_options_fini(&init_options->security_options, a);
  *init_options = rmw_get_zero_initialized_init_options();
  return ret;
}

rmw_ret_t rmw_init(const rmw_init_options_t * options, rmw_context_t * context)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(options, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(context, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_FOR_NULL_WITH_MSG(
    options->implementation_identifier, "expected initialized init options",
    return RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    options, options->implementation_identifier, identifier,
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION);
  RMW_CHECK_FOR_NULL_WITH_MSG(
    options->enclave, "expected non-null enclave", return RMW_RET_INVALID_ARGUMENT);
  if (context->implementation_identifier) {
    RMW_SET_ERROR_MSG("expected a zero-initialized context");
    return RMW_RET_INVALID_ARGUMENT;
  }
  size_t domain = options->domain_id == RMW_DEFAULT_DOMAIN_ID ? 0 : options->domain_id;
  if (domain > FERRY_DOMAIN_MAX) {
    set_error("domain id %zu is over ferry's largest, %u", domain, FERRY_DOMAIN_MAX);
    return RMW_RET_INVALID_ARGUMENT;
  }
  auto * ctx = new (std::nothrow) Context();
  if (!ctx) {
    RMW_SET_ERROR_MSG("out of memory");
    return RMW_RET_BAD_ALLOC;
  }
  ctx->domain = static_cast<uint32_t>(domain);
  ctx->enclave = options->enclave;
  context->instance_id = options->instance_id;
  context->implementation_identifier = identifier;
  context->actual_domain_id = domain;
  context->options = rmw_get_zero_initialized_init_options();
  rmw_ret_t ret = rmw_init_options_copy(options, &context->options);
  if (ret != RMW_RET_OK) {
    delete ctx;
    *context = rmw_get_zero_initialized_context();
    return ret;
  }
  context->impl = reinterpret_cast<rmw_context_impl_t *>(ctx);
  return RMW_RET_OK;
}

rmw_ret_t rmw_shutdown(rmw_context_t * context)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(context, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_FOR_NULL_WITH_MSG(
    context->impl, "expected initialized context", return RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    context, context->implementation_identifier, identifier,
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION);
  auto * ctx = reinterpret_cast<Context *>(context->impl);
  std::lock_guard<std::mutex> guard(ctx->lock);
  ctx->shutdown = true;
  return RMW_RET_OK;
}

rmw_ret_t rmw_context_fini(rmw_context_t * context)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(context, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_FOR_NULL_WITH_MSG(
    context->impl, "expected initialized context", return RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    context, context->implementation_identifier, identifier,
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION);
  auto * ctx = reinterpret_cast<Context *>(context->impl);
  if (!ctx->shutdown) {
    RMW_SET_ERROR_MSG("context has not been shutdown");
    return RMW_RET_INVALID_ARGUMENT;
  }
  if (!ctx->nodes.empty()) {
    RMW_SET_ERROR_MSG("context still has nodes");
    return RMW_RET_ERROR;
  }
  rmw_ret_t ret = rmw_init_options_fini(&context->options);
  delete ctx;
  *context = rmw_get_zero_initialized_context();
  return ret;
}

rmw_node_t * rmw_create_node(rmw_context_t * context, const char * name, const char * namespace_)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(context, nullptr);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    context, context->implementation_identifier, identifier, return nullptr);
  RMW_CHECK_FOR_NULL_WITH_MSG(context->impl, "expected initialized context", return nullptr);
  RMW_CHECK_ARGUMENT_FOR_NULL(name, nullptr);
  RMW_CHECK_ARGUMENT_FOR_NULL(namespace_, nullptr);
  auto * ctx = reinterpret_cast<Context *>(context->impl);
  if (ctx->shutdown) {
    RMW_SET_ERROR_MSG("context has been shutdown");
    return nullptr;
  }
  int validation = RMW_NODE_NAME_VALID;
  size_t invalid_index = 0;
  if (rmw_validate_node_name(name, &validation, &invalid_index) != RMW_RET_OK) {
    return nullptr;
  }
  if (validation != RMW_NODE_NAME_VALID) {
    set_error("invalid node name: %s", rmw_node_name_validation_result_string(validation));
    return nullptr;
  }
  if (rmw_validate_namespace(namespace_, &validation, &invalid_index) != RMW_RET_OK) {
    return nullptr;
  }
  if (validation != RMW_NAMESPACE_VALID) {
    set_error("invalid node namespace: %s", rmw_namespace_validation_result_string(validation));
    return nullptr;
  }

  auto * n = new (std::nothrow) Node();
  if (!n) {
    RMW_SET_ERROR_MSG("out of memory");
    return nullptr;
  }
  n->context = ctx;
  n->name = name;
  n->ns = namespace_;
  // The ferry node carries the ROS node's name as far as ferry's names allow (63 bytes of
  // letters, digits, '_' and '-'): ferry's own tools (ferry topics, ferry info) show it.
  std::string fname = n->name.substr(0, FERRY_NODE_NAME_MAX);
  ferry_node_options fo;
  ferry_node_options_init(&fo);
  const char * dir = getenv("FERRY_DIR");
  fo.dir = dir && *dir ? dir : nullptr;
  fo.domain = ctx->domain;
  fo.name = fname.c_str();
  fo.log = ferry_log;
  fo.log_level = FERRY_LOG_WARN;
  ferry_err err = ferry_node_create(&n->fnode, &fo);
  if (err) {
    ferry_fail("cannot create the ferry node", err);
    delete n;
    return nullptr;
  }
  rmw_node_t * h = rmw_node_allocate();
  n->graph_guard = guard_condition_make(context);
  if (!h || !n->graph_guard) {
    if (n->graph_guard) {
      guard_condition_free(n->graph_guard);
    }
    rmw_node_free(h);
    ferry_node_destroy(n->fnode);
    delete n;
    return nullptr;
  }
  static_cast<GuardCondition *>(n->graph_guard->data)->graph_of = ctx;
  {
    std::lock_guard<std::mutex> guard(ctx->lock);
    if (!ctx->graph) {
      ctx->graph.reset(Graph::open(ferry_node_dir(n->fnode), ctx->enclave));
    }
    GraphEntry e;
    e.kind = GraphEntry::node;
    e.id = n->graph_id = random_id();
    e.name = n->name;
    e.ns = n->ns;
    if (!ctx->graph || !ctx->graph->add(e)) {
      guard_condition_free(n->graph_guard);
      rmw_node_free(h);
      ferry_node_destroy(n->fnode);
      delete n;
      return nullptr;
    }
    ctx->nodes.push_back(n);
  }
  h->implementation_identifier = identifier;
  h->data = n;
  h->name = n->name.c_str();
  h->namespace_ = n->ns.c_str();
  h->context = context;
  return h;
}

rmw_ret_t rmw_destroy_node(rmw_node_t * node)
{
  rmw_ret_t ret = check_node(node);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  auto * n = static_cast<Node *>(node->data);
  Context * ctx = n->context;
  {
    std::lock_guard<std::mutex> guard(ctx->lock);
    ctx->nodes.erase(std::remove(ctx->nodes.begin(), ctx->nodes.end(), n), ctx->nodes.end());
    if (ctx->graph) {
      ctx->graph->remove(n->graph_id);
      if (ctx->nodes.empty()) {
        ctx->graph.reset();  // the context's file goes with its last node
      }
    }
  }
  ferry_err err = ferry_node_destroy(n->fnode);
  guard_condition_free(n->graph_guard);
  n->graph_guard = nullptr;
  rmw_node_free(node);
  if (err == FERRY_EBUSY) {
    // Publishers, subscriptions, services or clients of the node were never destroyed: the node
    // goes from the graph, as a DDS participant would, and what it holds stays until those are
    // destroyed or the process ends (their handles still point at it).
    log_warn("node %s destroyed with live publishers, subscriptions, services or clients",
      n->name.c_str());
    return RMW_RET_OK;
  }
  delete n;
  return err ? ferry_fail("destroying the ferry node", err) : RMW_RET_OK;
}

const rmw_guard_condition_t * rmw_node_get_graph_guard_condition(const rmw_node_t * node)
{
  if (check_node(node) != RMW_RET_OK) {
    return nullptr;
  }
  return static_cast<Node *>(node->data)->graph_guard;
}

rmw_guard_condition_t * rmw_create_guard_condition(rmw_context_t * context)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(context, nullptr);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    context, context->implementation_identifier, identifier, return nullptr);
  return guard_condition_make(context);
}

rmw_ret_t rmw_destroy_guard_condition(rmw_guard_condition_t * guard_condition)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(guard_condition, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    guard_condition, guard_condition->implementation_identifier, identifier,
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION);
  guard_condition_free(guard_condition);
  return RMW_RET_OK;
}

rmw_ret_t rmw_trigger_guard_condition(const rmw_guard_condition_t * guard_condition)
{
  RMW_CHECK_ARGUMENT_FOR_NULL(guard_condition, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_TYPE_IDENTIFIERS_MATCH(
    guard_condition, guard_condition->implementation_identifier, identifier,
    return RMW_RET_INCORRECT_RMW_IMPLEMENTATION);
  auto * gc = static_cast<GuardCondition *>(guard_condition->data);
  gc->triggered.store(true);
  uint64_t one = 1;
  if (write(gc->fd, &one, sizeof one) < 0 && errno != EAGAIN) {
    set_error("guard condition: %s", strerror(errno));
    return RMW_RET_ERROR;
  }
  return RMW_RET_OK;
}

}  // extern "C"
