// rmw_ferry: services and clients.
//
// A service /s is two ferry topics: requests on /_srv_rq/s (clients publish, services
// subscribe) and responses on /_srv_rr/s (services publish, clients subscribe). Each message
// starts with a 16-byte request header: the client's id and the request's sequence number; a
// client keeps the responses that carry its id. Both are reliable KEEP_ALL by default (as
// rmw_qos_profile_services_default asks), so a request is not dropped while a service is slow.
#include <cstring>

#include "rmw/allocators.h"
#include "rmw/error_handling.h"
#include "rmw/impl/cpp/macros.hpp"
#include "rmw/rmw.h"
#include "rmw/validate_full_topic_name.h"

#include "internal.hpp"

namespace rmw_ferry
{

static const char * const kRequestPrefix = "/_srv_rq";
static const char * const kResponsePrefix = "/_srv_rr";

// "pkg/srv/Name" from the request type's "pkg/srv/Name_Request".
static std::string service_type_name(const MessageType * request)
{
  std::string n = type_name(request);
  const std::string suffix = "_Request";
  if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
    n.resize(n.size() - suffix.size());
  }
  return n;
}

static bool service_name_ok(const char * name)
{
  int result = RMW_TOPIC_VALID;
  size_t index = 0;
  if (rmw_validate_full_topic_name(name, &result, &index) != RMW_RET_OK) {
    return false;
  }
  if (result != RMW_TOPIC_VALID) {
    set_error("invalid service name: %s", rmw_full_topic_name_validation_result_string(result));
    return false;
  }
  return true;
}

// The checks both rmw_create_service and rmw_create_client make, and what they open: the
// request and response types and the two ferry topics. False with the error set.
static bool service_args(
  const rmw_node_t * node, const rosidl_service_type_support_t * type_supports,
  const char * service_name, const rmw_qos_profile_t * qos_policies,
  const MessageType ** request, const MessageType ** response, std::string * rq, std::string * rr)
{
  if (check_node(node) != RMW_RET_OK) {
    return false;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(type_supports, false);
  RMW_CHECK_ARGUMENT_FOR_NULL(service_name, false);
  RMW_CHECK_ARGUMENT_FOR_NULL(qos_policies, false);
  if (!qos_valid(*qos_policies)) {
    return false;
  }
  if (!*service_name) {
    RMW_SET_ERROR_MSG("service_name is empty");
    return false;
  }
  if (!qos_policies->avoid_ros_namespace_conventions && !service_name_ok(service_name)) {
    return false;
  }
  return service_types_get(type_supports, request, response) &&
         ferry_topic_of(service_name, kRequestPrefix, rq) &&
         ferry_topic_of(service_name, kResponsePrefix, rr);
}

static rmw_ret_t check_service(const rmw_service_t * service)
{
  return check_handle(service, "service");
}

static rmw_ret_t check_client(const rmw_client_t * client)
{
  return check_handle(client, "client");
}

}  // namespace rmw_ferry

using namespace rmw_ferry;

extern "C" {

rmw_service_t * rmw_create_service(
  const rmw_node_t * node, const rosidl_service_type_support_t * type_supports,
  const char * service_name, const rmw_qos_profile_t * qos_policies)
{
  const MessageType * request = nullptr;
  const MessageType * response = nullptr;
  std::string rq, rr;
  if (!service_args(
      node, type_supports, service_name, qos_policies, &request, &response, &rq, &rr))
  {
    return nullptr;
  }
  auto * n = static_cast<Node *>(node->data);
  auto * sv = new (std::nothrow) Service();
  rmw_service_t * h = rmw_service_allocate();
  if (!sv || !h) {
    delete sv;
    rmw_service_free(h);
    RMW_SET_ERROR_MSG("out of memory");
    return nullptr;
  }
  sv->node = n;
  sv->request_type = request;
  sv->response_type = response;
  sv->name = service_name;
  if (subscription_open(&sv->requests, n, request, sv->name, rq, *qos_policies) != RMW_RET_OK) {
    delete sv;
    rmw_service_free(h);
    return nullptr;
  }
  if (publisher_open(&sv->responses, n, response, sv->name, rr, *qos_policies) != RMW_RET_OK) {
    subscription_close(&sv->requests);
    delete sv;
    rmw_service_free(h);
    return nullptr;
  }
  GraphEntry e = graph_entry(
    GraphEntry::service, n, sv->name, service_type_name(request), sv->responses.gid,
    sv->requests.qos);
  sv->requests.graph_id = e.id;
  if (!graph_add(n, e)) {
    publisher_close(&sv->responses);
    subscription_close(&sv->requests);
    delete sv;
    rmw_service_free(h);
    return nullptr;
  }
  h->implementation_identifier = identifier;
  h->data = sv;
  h->service_name = sv->name.c_str();
  return h;
}

rmw_ret_t rmw_destroy_service(rmw_node_t * node, rmw_service_t * service)
{
  return handle_destroy<Service>(
    node, service, check_service, rmw_service_free, [](Service * sv) {
      graph_remove(sv->node, sv->requests.graph_id);
      publisher_close(&sv->responses);
      subscription_close(&sv->requests);
    });
}

rmw_ret_t rmw_take_request(
  const rmw_service_t * service, rmw_service_info_t * request_header, void * ros_request,
  bool * taken)
{
  rmw_ret_t ret = check_service(service);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(request_header, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(ros_request, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(taken, RMW_RET_INVALID_ARGUMENT);
  auto * sv = static_cast<Service *>(service->data);
  RequestHeader hdr{};
  rmw_message_info_t info{};
  ret = take_message(&sv->requests, ros_request, taken, &info, &hdr, 0);
  if (ret == RMW_RET_OK && *taken) {
    request_header->source_timestamp = info.source_timestamp;
    request_header->received_timestamp = info.received_timestamp;
    memset(request_header->request_id.writer_guid, 0, sizeof request_header->request_id.writer_guid);
    memcpy(request_header->request_id.writer_guid, &hdr.client_id, sizeof hdr.client_id);
    request_header->request_id.sequence_number = hdr.sequence;
  }
  return ret;
}

rmw_ret_t rmw_send_response(
  const rmw_service_t * service, rmw_request_id_t * request_header, void * ros_response)
{
  rmw_ret_t ret = check_service(service);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(request_header, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(ros_response, RMW_RET_INVALID_ARGUMENT);
  auto * sv = static_cast<Service *>(service->data);
  RequestHeader hdr{};
  memcpy(&hdr.client_id, request_header->writer_guid, sizeof hdr.client_id);
  hdr.sequence = request_header->sequence_number;
  return publish_message(&sv->responses, &hdr, ros_response);
}

rmw_ret_t rmw_service_response_publisher_get_actual_qos(
  const rmw_service_t * service, rmw_qos_profile_t * qos)
{
  rmw_ret_t ret = check_service(service);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(qos, RMW_RET_INVALID_ARGUMENT);
  *qos = static_cast<Service *>(service->data)->responses.qos;
  return RMW_RET_OK;
}

rmw_ret_t rmw_service_request_subscription_get_actual_qos(
  const rmw_service_t * service, rmw_qos_profile_t * qos)
{
  rmw_ret_t ret = check_service(service);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(qos, RMW_RET_INVALID_ARGUMENT);
  *qos = static_cast<Service *>(service->data)->requests.qos;
  return RMW_RET_OK;
}

rmw_client_t * rmw_create_client(
  const rmw_node_t * node, const rosidl_service_type_support_t * type_supports,
  const char * service_name, const rmw_qos_profile_t * qos_policies)
{
  const MessageType * request = nullptr;
  const MessageType * response = nullptr;
  std::string rq, rr;
  if (!service_args(
      node, type_supports, service_name, qos_policies, &request, &response, &rq, &rr))
  {
    return nullptr;
  }
  auto * n = static_cast<Node *>(node->data);
  auto * cl = new (std::nothrow) Client();
  rmw_client_t * h = rmw_client_allocate();
  if (!cl || !h) {
    delete cl;
    rmw_client_free(h);
    RMW_SET_ERROR_MSG("out of memory");
    return nullptr;
  }
  cl->node = n;
  cl->request_type = request;
  cl->response_type = response;
  cl->name = service_name;
  cl->id = random_id();
  if (publisher_open(&cl->requests, n, request, cl->name, rq, *qos_policies) != RMW_RET_OK) {
    delete cl;
    rmw_client_free(h);
    return nullptr;
  }
  if (subscription_open(&cl->responses, n, response, cl->name, rr, *qos_policies) !=
    RMW_RET_OK)
  {
    publisher_close(&cl->requests);
    delete cl;
    rmw_client_free(h);
    return nullptr;
  }
  GraphEntry e = graph_entry(
    GraphEntry::client, n, cl->name, service_type_name(request), cl->requests.gid,
    cl->requests.qos);
  cl->requests.graph_id = e.id;
  if (!graph_add(n, e)) {
    subscription_close(&cl->responses);
    publisher_close(&cl->requests);
    delete cl;
    rmw_client_free(h);
    return nullptr;
  }
  h->implementation_identifier = identifier;
  h->data = cl;
  h->service_name = cl->name.c_str();
  return h;
}

rmw_ret_t rmw_destroy_client(rmw_node_t * node, rmw_client_t * client)
{
  return handle_destroy<Client>(
    node, client, check_client, rmw_client_free, [](Client * cl) {
      graph_remove(cl->node, cl->requests.graph_id);
      subscription_close(&cl->responses);
      publisher_close(&cl->requests);
    });
}

rmw_ret_t rmw_send_request(
  const rmw_client_t * client, const void * ros_request, int64_t * sequence_id)
{
  rmw_ret_t ret = check_client(client);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(ros_request, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(sequence_id, RMW_RET_INVALID_ARGUMENT);
  auto * cl = static_cast<Client *>(client->data);
  RequestHeader hdr{cl->id, cl->next_sequence.fetch_add(1)};
  ret = publish_message(&cl->requests, &hdr, ros_request);
  if (ret == RMW_RET_OK) {
    *sequence_id = hdr.sequence;
  }
  return ret;
}

rmw_ret_t rmw_take_response(
  const rmw_client_t * client, rmw_service_info_t * request_header, void * ros_response,
  bool * taken)
{
  rmw_ret_t ret = check_client(client);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(request_header, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(ros_response, RMW_RET_INVALID_ARGUMENT);
  RMW_CHECK_ARGUMENT_FOR_NULL(taken, RMW_RET_INVALID_ARGUMENT);
  auto * cl = static_cast<Client *>(client->data);
  RequestHeader hdr{};
  rmw_message_info_t info{};
  ret = take_message(&cl->responses, ros_response, taken, &info, &hdr, cl->id);
  if (ret == RMW_RET_OK && *taken) {
    request_header->source_timestamp = info.source_timestamp;
    request_header->received_timestamp = info.received_timestamp;
    memset(request_header->request_id.writer_guid, 0, sizeof request_header->request_id.writer_guid);
    memcpy(request_header->request_id.writer_guid, &hdr.client_id, sizeof hdr.client_id);
    request_header->request_id.sequence_number = hdr.sequence;
  }
  return ret;
}

rmw_ret_t rmw_client_request_publisher_get_actual_qos(
  const rmw_client_t * client, rmw_qos_profile_t * qos)
{
  rmw_ret_t ret = check_client(client);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(qos, RMW_RET_INVALID_ARGUMENT);
  *qos = static_cast<Client *>(client->data)->requests.qos;
  return RMW_RET_OK;
}

rmw_ret_t rmw_client_response_subscription_get_actual_qos(
  const rmw_client_t * client, rmw_qos_profile_t * qos)
{
  rmw_ret_t ret = check_client(client);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(qos, RMW_RET_INVALID_ARGUMENT);
  *qos = static_cast<Client *>(client->data)->responses.qos;
  return RMW_RET_OK;
}

rmw_ret_t rmw_service_server_is_available(
  const rmw_node_t * node, const rmw_client_t * client, bool * is_available)
{
  // rmw's contract (and test_rmw_implementation): a null argument here is RMW_RET_ERROR, not
  // RMW_RET_INVALID_ARGUMENT as elsewhere.
  RMW_CHECK_ARGUMENT_FOR_NULL(node, RMW_RET_ERROR);
  RMW_CHECK_ARGUMENT_FOR_NULL(client, RMW_RET_ERROR);
  RMW_CHECK_ARGUMENT_FOR_NULL(is_available, RMW_RET_ERROR);
  rmw_ret_t ret = check_node(node);
  if (ret != RMW_RET_OK) {
    return ret;
  }
  if ((ret = check_client(client)) != RMW_RET_OK) {
    return ret;
  }
  RMW_CHECK_ARGUMENT_FOR_NULL(is_available, RMW_RET_INVALID_ARGUMENT);
  auto * cl = static_cast<Client *>(client->data);
  topic_sync(cl->node->context, cl->requests.ferry_topic);
  topic_sync(cl->node->context, cl->responses.ferry_topic);
  // Available when a service takes this client's requests and this client takes its
  // responses: both connections made, so that neither a request nor its response is lost.
  ferry_publisher_stats ps{};
  {
    std::lock_guard<std::mutex> guard(cl->requests.lock);
    ferry_publisher_poll(cl->requests.fpub, 0);
    ferry_publisher_stats_get(cl->requests.fpub, &ps);
  }
  ferry_subscriber_stats ss{};
  {
    std::lock_guard<std::mutex> guard(cl->responses.lock);
    ferry_subscriber_wait_publishers(cl->responses.fsub, UINT32_MAX, 0);
    ferry_subscriber_stats_get(cl->responses.fsub, &ss);
  }
  *is_available = ps.subscribers > 0 && ss.publishers > 0;
  return RMW_RET_OK;
}

rmw_ret_t rmw_service_set_on_new_request_callback(
  rmw_service_t *, rmw_event_callback_t, const void *)
{
  RMW_SET_ERROR_MSG("rmw_ferry_cpp: on-new-request callbacks are not supported");
  return RMW_RET_UNSUPPORTED;
}

rmw_ret_t rmw_client_set_on_new_response_callback(
  rmw_client_t *, rmw_event_callback_t, const void *)
{
  RMW_SET_ERROR_MSG("rmw_ferry_cpp: on-new-response callbacks are not supported");
  return RMW_RET_UNSUPPORTED;
}

}  // extern "C"
