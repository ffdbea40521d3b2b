// rmw_ferry: questions about the graph (nodes, topics, services, endpoints), answered from the
// graph files of the domain (graph.hpp).
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "rcutils/strdup.h"
#include "rmw/error_handling.h"
#include "rmw/get_node_info_and_types.h"
#include "rmw/get_service_names_and_types.h"
#include "rmw/get_topic_endpoint_info.h"
#include "rmw/get_topic_names_and_types.h"
#include "rmw/impl/cpp/macros.hpp"
#include "rmw/names_and_types.h"
#include "rmw/qos_profiles.h"
#include "rmw/rmw.h"
#include "rmw/sanity_checks.h"
#include "rmw/topic_endpoint_info_array.h"
#include "rmw/validate_namespace.h"
#include "rmw/validate_node_name.h"
#include "rmw_dds_common/qos.hpp"

#include "internal.hpp"

namespace rmw_ferry
{

static std::vector<GraphEntry> snapshot_of(const rmw_node_t * node)
{
  Context * ctx = static_cast<Node *>(node->data)->context;
  std::lock_guard<std::mutex> guard(ctx->lock);
  return ctx->graph ? ctx->graph->snapshot() : std::vector<GraphEntry>();
}

static rmw_ret_t names_and_types_fill(
  const std::map<std::string, std::set<std::string>> & m, rcutils_allocator_t * allocator,
  rmw_names_and_types_t * out)
{
  if (m.empty()) {
    return RMW_RET_OK;
  }
  rmw_ret_t ret = rmw_names_and_types_init(out, m.size(), allocator);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  size_t i = 0;
  for (const auto & kv : m) {
    out->names.data[i] = rcutils_strdup(kv.first.c_str(), *allocator);
    if (!out->names.data[i] ||
      rcutils_string_array_init(&out->types[i], kv.second.size(), allocator) != RCUTILS_RET_OK)
    {
      discard(rmw_names_and_types_fini(out));
      RMW_SET_ERROR_MSG("out of memory");
      return RMW_RET_BAD_ALLOC;
    }
    size_t j = 0;
    for (const auto & t : kv.second) {
      out->types[i].data[j] = rcutils_strdup(t.c_str(), *allocator);
      if (!out->types[i].data[j]) {
        discard(rmw_names_and_types_fini(out));
        RMW_SET_ERROR_MSG("out of memory");
        return RMW_RET_BAD_ALLOC;
      }
      j++;
    }
    i++;
  }
  return RMW_RET_OK;
}

static rmw_ret_t by_node(
  const rmw_node_t * node, rcutils_allocator_t * allocator, const char * node_name,
  const char * node_namespace, rmw_names_and_types_t * out, GraphEntry::Kind kind)
{
  rmw_ret_t ret = check_node(node);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RCUTILS_CHECK_ALLOCATOR_WITH_MSG(
    allocator, "allocator argument is invalid", return RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(node_name, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(node_namespace, RMW_RET_INVALID_ARGUMENT);
  int validation = RMW_NODE_NAME_VALID;
  size_t index = 0;
  if (rmw_validate_node_name(node_name, &validation, &index) != RMW_RET_OK) {
    return RMW_RET_ERROR;
  }
  if (validation != RMW_NODE_NAME_VALID) {
    set_error("node_name argument is invalid: %s",
      rmw_node_name_validation_result_string(validation));
    return RMW_RET_INVALID_ARGUMENT;
  }
  if (rmw_validate_namespace(node_namespace, &validation, &index) != RMW_RET_OK) {
    return RMW_RET_ERROR;
  }
  if (validation != RMW_NAMESPACE_VALID) {
    set_error("node_namespace argument is invalid: %s",
      rmw_namespace_validation_result_string(validation));
    return RMW_RET_INVALID_ARGUMENT;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(out, RMW_RET_INVALID_ARGUMENT);
  if (rmw_names_and_types_check_zero(out) != RMW_RET_OK) {
    return RMW_RET_INVALID_ARGUMENT;
  }
  auto entries = snapshot_of(node);
  bool found = false;
  std::map<std::string, std::set<std::string>> m;
  for (const auto & e : entries) {
    if (e.kind == GraphEntry::node) {
      found |= e.name == node_name && e.ns == node_namespace;
    } else if (e.kind == kind && e.node_name == node_name && e.ns == node_namespace) {
      m[e.name].insert(e.type);
    }
  }
  if (!found) {
    set_error("node %s%s%s not found", node_namespace,
      strcmp(node_namespace, "/") == 0 ? "" : "/", node_name);
    return RMW_RET_NODE_NAME_NON_EXISTENT;
  }
  return names_and_types_fill(m, allocator, out);
}

static rmw_ret_t count(
  const rmw_node_t * node, const char * topic_name, size_t * n, GraphEntry::Kind kind)
{
  rmw_ret_t ret = check_node(node);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(topic_name, RMW_RET_INVALID_ARGUMENT);
  int validation = RMW_TOPIC_VALID;
  size_t index = 0;
  if (rmw_validate_full_topic_name(topic_name, &validation, &index) != RMW_RET_OK) {
    return RMW_RET_ERROR;
  }
  if (validation != RMW_TOPIC_VALID) {
    set_error("topic_name argument is invalid: %s",
      rmw_full_topic_name_validation_result_string(validation));
    return RMW_RET_INVALID_ARGUMENT;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(n, RMW_RET_INVALID_ARGUMENT);
  *n = 0;
  for (const auto & e : snapshot_of(node)) {
    *n += e.kind == kind && e.name == topic_name;
  }
  return RMW_RET_OK;
}

static rmw_ret_t endpoints_info(
  const rmw_node_t * node, rcutils_allocator_t * allocator, const char * topic_name,
  rmw_topic_endpoint_info_array_t * out, GraphEntry::Kind kind)
{
  rmw_ret_t ret = check_node(node);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RCUTILS_CHECK_ALLOCATOR_WITH_MSG(
    allocator, "allocator argument is invalid", return RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(topic_name, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(out, RMW_RET_INVALID_ARGUMENT);
  if (rmw_topic_endpoint_info_array_check_zero(out) != RMW_RET_OK) {
    return RMW_RET_INVALID_ARGUMENT;
  }
  std::vector<GraphEntry> match;
  for (auto & e : snapshot_of(node)) {
    if (e.kind == kind && e.name == topic_name) {
      match.push_back(std::move(e));
    }
  }
  if (match.empty()) {
    return RMW_RET_OK;
  }
  if ((ret = rmw_topic_endpoint_info_array_init_with_size(out, match.size(), allocator)) !=
    RMW_RET_OK)
  {
    return ret;
  }
  for (size_t i = 0; i < match.size(); i++) {
    rmw_topic_endpoint_info_t * info = &out->info_array[i];
    *info = rmw_get_zero_initialized_topic_endpoint_info();
    const GraphEntry & e = match[i];
    if ((ret = rmw_topic_endpoint_info_set_node_name(info, e.node_name.c_str(), allocator)) ||
      (ret = rmw_topic_endpoint_info_set_node_namespace(info, e.ns.c_str(), allocator)) ||
      (ret = rmw_topic_endpoint_info_set_topic_type(info, e.type.c_str(), allocator)) ||
      (ret = rmw_topic_endpoint_info_set_endpoint_type(
        info, kind == GraphEntry::publisher ? RMW_ENDPOINT_PUBLISHER :
        RMW_ENDPOINT_SUBSCRIPTION)) ||
      (ret = rmw_topic_endpoint_info_set_gid(info, e.gid, sizeof e.gid)) ||
      (ret = rmw_topic_endpoint_info_set_qos_profile(info, &e.qos)))
    {
      discard(rmw_topic_endpoint_info_array_fini(out, allocator));
      return ret;
    }
  }
  return RMW_RET_OK;
}

}  // namespace rmw_ferry

using namespace rmw_ferry;

extern "C" {

// The nodes of the graph; enclaves may be null (rmw_get_node_names).
static rmw_ret_t node_names_get(
  const rmw_node_t * node, rcutils_string_array_t * node_names,
  rcutils_string_array_t * node_namespaces, rcutils_string_array_t * enclaves)
{
  rmw_ret_t ret = check_node(node);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  if (rmw_check_zero_rmw_string_array(node_names) != RMW_RET_OK ||
    rmw_check_zero_rmw_string_array(node_namespaces) != RMW_RET_OK ||
    (enclaves && rmw_check_zero_rmw_string_array(enclaves) != RMW_RET_OK))
  {
    return RMW_RET_INVALID_ARGUMENT;
  }
  std::vector<GraphEntry> nodes;
  for (auto & e : snapshot_of(node)) {
    if (e.kind == GraphEntry::node) {
      nodes.push_back(std::move(e));
    }
  }
  rcutils_allocator_t a = rcutils_get_default_allocator();
  if (rcutils_string_array_init(node_names, nodes.size(), &a) != RCUTILS_RET_OK ||
    rcutils_string_array_init(node_namespaces, nodes.size(), &a) != RCUTILS_RET_OK ||
    (enclaves && rcutils_string_array_init(enclaves, nodes.size(), &a) != RCUTILS_RET_OK))
  {
    discard(rcutils_string_array_fini(node_names));
    discard(rcutils_string_array_fini(node_namespaces));
    if (enclaves) {
      discard(rcutils_string_array_fini(enclaves));
    }
    RMW_SET_ERROR_MSG("out of memory");
    return RMW_RET_BAD_ALLOC;
  }
  for (size_t i = 0; i < nodes.size(); i++) {
    node_names->data[i] = rcutils_strdup(nodes[i].name.c_str(), a);
    node_namespaces->data[i] = rcutils_strdup(nodes[i].ns.c_str(), a);
    if (enclaves) {
      enclaves->data[i] = rcutils_strdup(nodes[i].enclave.c_str(), a);
    }
    if (!node_names->data[i] || !node_namespaces->data[i] || (enclaves && !enclaves->data[i])) {
      discard(rcutils_string_array_fini(node_names));
      discard(rcutils_string_array_fini(node_namespaces));
      if (enclaves) {
        discard(rcutils_string_array_fini(enclaves));
      }
      RMW_SET_ERROR_MSG("out of memory");
      return RMW_RET_BAD_ALLOC;
    }
  }
  return RMW_RET_OK;
}

rmw_ret_t rmw_get_node_names_with_enclaves(
  const rmw_node_t * node, rcutils_string_array_t * node_names,
  rcutils_string_array_t * node_namespaces, rcutils_string_array_t * enclaves)
{
  rmw_ret_t ret = check_node(node);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(enclaves, RMW_RET_INVALID_ARGUMENT);
  return node_names_get(node, node_names, node_namespaces, enclaves);
}

rmw_ret_t rmw_get_node_names(
  const rmw_node_t * node, rcutils_string_array_t * node_names,
  rcutils_string_array_t * node_namespaces)
{
  return node_names_get(node, node_names, node_namespaces, nullptr);
}

rmw_ret_t rmw_get_topic_names_and_types(
  const rmw_node_t * node, rcutils_allocator_t * allocator, bool no_demangle,
  rmw_names_and_types_t * topic_names_and_types)
{
  (void)no_demangle;  // ferry topics are ROS names: nothing to demangle
  rmw_ret_t ret = check_node(node);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RCUTILS_CHECK_ALLOCATOR_WITH_MSG(
    allocator, "allocator argument is invalid", return RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(topic_names_and_types, RMW_RET_INVALID_ARGUMENT);
  if (rmw_names_and_types_check_zero(topic_names_and_types) != RMW_RET_OK) {
    return RMW_RET_INVALID_ARGUMENT;
  }
  std::map<std::string, std::set<std::string>> m;
  for (const auto & e : snapshot_of(node)) {
    if (e.kind == GraphEntry::publisher || e.kind == GraphEntry::subscription) {
      m[e.name].insert(e.type);
    }
  }
  return names_and_types_fill(m, allocator, topic_names_and_types);
}

rmw_ret_t rmw_get_service_names_and_types(
  const rmw_node_t * node, rcutils_allocator_t * allocator,
  rmw_names_and_types_t * service_names_and_types)
{
  rmw_ret_t ret = check_node(node);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RCUTILS_CHECK_ALLOCATOR_WITH_MSG(
    allocator, "allocator argument is invalid", return RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(service_names_and_types, RMW_RET_INVALID_ARGUMENT);
  if (rmw_names_and_types_check_zero(service_names_and_types) != RMW_RET_OK) {
    return RMW_RET_INVALID_ARGUMENT;
  }
  std::map<std::string, std::set<std::string>> m;
  for (const auto & e : snapshot_of(node)) {
    if (e.kind == GraphEntry::service || e.kind == GraphEntry::client) {
      m[e.name].insert(e.type);
    }
  }
  return names_and_types_fill(m, allocator, service_names_and_types);
}

rmw_ret_t rmw_get_subscriber_names_and_types_by_node(
  const rmw_node_t * node, rcutils_allocator_t * allocator, const char * node_name,
  const char * node_namespace, bool, rmw_names_and_types_t * out)
{
  return by_node(node, allocator, node_name, node_namespace, out, GraphEntry::subscription);
}

rmw_ret_t rmw_get_publisher_names_and_types_by_node(
  const rmw_node_t * node, rcutils_allocator_t * allocator, const char * node_name,
  const char * node_namespace, bool, rmw_names_and_types_t * out)
{
  return by_node(node, allocator, node_name, node_namespace, out, GraphEntry::publisher);
}

rmw_ret_t rmw_get_service_names_and_types_by_node(
  const rmw_node_t * node, rcutils_allocator_t * allocator, const char * node_name,
  const char * node_namespace, rmw_names_and_types_t * out)
{
  return by_node(node, allocator, node_name, node_namespace, out, GraphEntry::service);
}

rmw_ret_t rmw_get_client_names_and_types_by_node(
  const rmw_node_t * node, rcutils_allocator_t * allocator, const char * node_name,
  const char * node_namespace, rmw_names_and_types_t * out)
{
  return by_node(node, allocator, node_name, node_namespace, out, GraphEntry::client);
}

rmw_ret_t rmw_count_publishers(const rmw_node_t * node, const char * topic_name, size_t * n)
{
  return count(node, topic_name, n, GraphEntry::publisher);
}

rmw_ret_t rmw_count_subscribers(const rmw_node_t * node, const char * topic_name, size_t * n)
{
  return count(node, topic_name, n, GraphEntry::subscription);
}

rmw_ret_t rmw_get_publishers_info_by_topic(
  const rmw_node_t * node, rcutils_allocator_t * allocator, const char * topic_name, bool,
  rmw_topic_endpoint_info_array_t * publishers_info)
{
  return endpoints_info(node, allocator, topic_name, publishers_info, GraphEntry::publisher);
}

rmw_ret_t rmw_get_subscriptions_info_by_topic(
  const rmw_node_t * node, rcutils_allocator_t * allocator, const char * topic_name, bool,
  rmw_topic_endpoint_info_array_t * subscriptions_info)
{
  return endpoints_info(
    node, allocator, topic_name, subscriptions_info, GraphEntry::subscription);
}

rmw_ret_t rmw_qos_profile_check_compatible(
  const rmw_qos_profile_t publisher_profile, const rmw_qos_profile_t subscription_profile,
  rmw_qos_compatibility_type_t * compatibility, char * reason, size_t reason_size)
{
  return rmw_dds_common::qos_profile_check_compatible(
    publisher_profile, subscription_profile, compatibility, reason, reason_size);
}

}  // extern "C"
