/*
 * Names and kinds: the ferry and DDS types the bridge carries and how their names map onto each
 * other, the --topic patterns, the reliability and durability a DDS endpoint asks for, the names
 * of QoS policies, and the mark in the user data of a bridge's DDS endpoints that tells the
 * bridges of one ferry domain from all others.
 */
#include "bridge_internal.h"

#include <ferry/msg.h>

#include "ros2_sensor_msgs.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------
 * Names and kinds
 * ------------------------------------------------------------------------------------------- */

/* Every kind the bridge carries and the DDS type ROS 2 gives it; the ferry types are ros2.h's. */
static const struct kind_names {
    ferry_ros2_kind kind;
    const dds_topic_descriptor_t *dds;
} kinds[] = {
    {FERRY_ROS2_IMAGE, &sensor_msgs_msg_dds__Image__desc},
    {FERRY_ROS2_CLOUD, &sensor_msgs_msg_dds__PointCloud2__desc},
    {FERRY_ROS2_CAMERA_INFO, &sensor_msgs_msg_dds__CameraInfo__desc},
    {FERRY_ROS2_COMPRESSED, &sensor_msgs_msg_dds__CompressedImage__desc},
    {FERRY_ROS2_IMU, &sensor_msgs_msg_dds__Imu__desc},
};

static const struct kind_names *kind_entry(ferry_ros2_kind k)
{
    size_t i;

    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].kind == k)
            return &kinds[i];
    return &kinds[0];
}

ferry_ros2_kind ferry__bridge_kind_of_ferry(const char *type_name, uint64_t hash)
{
    ferry_ros2_kind k = ferry_ros2_kind_of_ferry(type_name, hash);
    size_t i;

    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].kind == k)
            return k;
    return FERRY_ROS2_NONE; /* a kind without a DDS type (tensors) is not carried */
}

ferry_ros2_kind ferry__bridge_kind_of_dds(const char *type_name)
{
    size_t i;

    if (type_name == NULL)
        return FERRY_ROS2_NONE;
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(type_name, kinds[i].dds->m_typename) == 0)
            return kinds[i].kind;
    return FERRY_ROS2_NONE;
}

const char *ferry__bridge_ferry_type(ferry_ros2_kind k)
{
    return ferry_ros2_ferry_type(kind_entry(k)->kind);
}

uint64_t ferry__bridge_ferry_hash_of(ferry_ros2_kind k)
{
    return ferry_ros2_ferry_hash(kind_entry(k)->kind);
}

const dds_topic_descriptor_t *ferry__bridge_descriptor(ferry_ros2_kind k)
{
    return kind_entry(k)->dds;
}

/* The ferry name with a leading '/', or false when it does not fit. */
bool ferry__bridge_normalise(const char *topic, char out[FERRY_TOPIC_MAX + 2])
{
    int n = snprintf(out, FERRY_TOPIC_MAX + 2, "%s%s", topic[0] == '/' ? "" : "/", topic);

    return n > 0 && (size_t)n < FERRY_TOPIC_MAX + 2;
}

bool ferry__bridge_pattern_match(const ferry_bridge *b, const char *topic)
{
    size_t i;

    if (b->o.npatterns == 0)
        return true;
    for (i = 0; i < b->o.npatterns; i++)
        if (fnmatch(b->patterns[i], topic, 0) == 0)
            return true;
    return false;
}

bool ferry__bridge_is_bridge_node(const char *name)
{
    return strcmp(name, FERRY_BRIDGE_NODE_NAME) == 0;
}

/* The key that tells bridges of one ferry domain (machine, directory, domain) apart from others:
 * network namespaces of one machine share /etc/machine-id but not, in practice, a directory. */
void ferry__bridge_make_mark(ferry_bridge *b)
{
    char machine[64] = "", text[sizeof machine + PATH_MAX + 32];
    FILE *f = fopen("/etc/machine-id", "r");

    if (f != NULL) {
        if (fgets(machine, sizeof machine, f) == NULL)
            machine[0] = '\0';
        fclose(f);
        machine[strcspn(machine, "\r\n")] = '\0';
    }
    if (machine[0] == '\0' && gethostname(machine, sizeof machine - 1) != 0)
        machine[0] = '\0';
    snprintf(text, sizeof text, "%s|%s|%" PRIu32, machine, b->dir_real, b->o.domain);
    snprintf(b->mark, sizeof b->mark, MARK_PREFIX "%016" PRIx64, ferry_hash(text));
}

bool ferry__bridge_has_mark(const ferry_bridge *b, const dds_qos_t *qos)
{
    void *value = NULL;
    size_t size = 0;
    bool same;

    if (qos == NULL || !dds_qget_userdata(qos, &value, &size) || value == NULL)
        return false;
    same = size == strlen(b->mark) && memcmp(value, b->mark, size) == 0;
    dds_free(value);
    return same;
}

bool ferry__bridge_qos_reliable(const dds_qos_t *qos)
{
    dds_reliability_kind_t kind = DDS_RELIABILITY_BEST_EFFORT;
    dds_duration_t block;

    return qos != NULL && dds_qget_reliability(qos, &kind, &block) &&
           kind == DDS_RELIABILITY_RELIABLE;
}

bool ferry__bridge_qos_transient(const dds_qos_t *qos, uint32_t *depth)
{
    dds_durability_kind_t kind = DDS_DURABILITY_VOLATILE;
    dds_history_kind_t hkind = DDS_HISTORY_KEEP_LAST;
    int32_t hdepth = 1, a, b, c;
    dds_duration_t delay;

    if (qos == NULL || !dds_qget_durability(qos, &kind) || kind == DDS_DURABILITY_VOLATILE)
        return false;
    /* What the writer keeps for late joiners: its durability service history (ROS 2's
     * rmw_cyclonedds sets it to the publisher's history); KEEP_ALL counts as no bound. */
    if (depth != NULL) {
        if (!dds_qget_durability_service(qos, &delay, &hkind, &hdepth, &a, &b, &c))
            hdepth = 1;
        *depth = hkind == DDS_HISTORY_KEEP_ALL ? UINT32_MAX : hdepth > 0 ? (uint32_t)hdepth : 1u;
    }
    return true;
}

const char *ferry__bridge_qos_policy_name(uint32_t id)
{
    switch ((dds_qos_policy_id_t)id) {
    case DDS_USERDATA_QOS_POLICY_ID:
        return "USER_DATA";
    case DDS_DURABILITY_QOS_POLICY_ID:
        return "DURABILITY";
    case DDS_PRESENTATION_QOS_POLICY_ID:
        return "PRESENTATION";
    case DDS_DEADLINE_QOS_POLICY_ID:
        return "DEADLINE";
    case DDS_LATENCYBUDGET_QOS_POLICY_ID:
        return "LATENCY_BUDGET";
    case DDS_OWNERSHIP_QOS_POLICY_ID:
        return "OWNERSHIP";
    case DDS_OWNERSHIPSTRENGTH_QOS_POLICY_ID:
        return "OWNERSHIP_STRENGTH";
    case DDS_LIVELINESS_QOS_POLICY_ID:
        return "LIVELINESS";
    case DDS_TIMEBASEDFILTER_QOS_POLICY_ID:
        return "TIME_BASED_FILTER";
    case DDS_PARTITION_QOS_POLICY_ID:
        return "PARTITION";
    case DDS_RELIABILITY_QOS_POLICY_ID:
        return "RELIABILITY";
    case DDS_DESTINATIONORDER_QOS_POLICY_ID:
        return "DESTINATION_ORDER";
    case DDS_HISTORY_QOS_POLICY_ID:
        return "HISTORY";
    case DDS_RESOURCELIMITS_QOS_POLICY_ID:
        return "RESOURCE_LIMITS";
    case DDS_LIFESPAN_QOS_POLICY_ID:
        return "LIFESPAN";
    case DDS_DURABILITYSERVICE_QOS_POLICY_ID:
        return "DURABILITY_SERVICE";
    case DDS_TYPE_CONSISTENCY_ENFORCEMENT_QOS_POLICY_ID:
        return "TYPE_CONSISTENCY";
    case DDS_DATA_REPRESENTATION_QOS_POLICY_ID:
        return "DATA_REPRESENTATION";
    default:
        return "another policy";
    }
}
