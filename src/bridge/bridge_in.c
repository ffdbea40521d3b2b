/*
 * The DDS -> ferry direction. An in route reads a DDS topic and publishes each sample on the
 * ferry topic of the same name. A sample is read from the serialised bytes Cyclone received
 * (bridge_cdr.h), validated (it comes from the network) and its data (pixels, points,
 * compressed bytes; the whole message for camera infos and IMU samples) copied once into a ferry
 * loan; an encapsulation the CDR reader does not take is deserialised by Cyclone first. Samples
 * of DDS writers of bridges of this ferry domain are dropped.
 */
#include "bridge_internal.h"
#include "bridge_cdr.h"

#include <ferry/msg.h>

/* Cyclone's atomics header writes the GNU keyword "asm", which strict C11 does not have. */
#define asm __asm__
#include <dds/ddsi/ddsi_serdata.h>
#undef asm

#include "ros2_sensor_msgs.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAKE_BATCH 8
/* Each invalid DDS sample is logged, up to this many lines a second. */
#define IN_INVALID_LINES_PER_S 20u

/* ---------------------------------------------------------------------------------------------
 * In routes: DDS -> ferry
 * ------------------------------------------------------------------------------------------- */

void ferry__bridge_in_destroy(ferry_bridge *b, in_route *r)
{
    int fd;

    if (r->reader > 0) dds_delete(r->reader);
    if (r->dtopic > 0) dds_delete(r->dtopic);
    if (r->pub != NULL) {
        if (ferry_publisher_fd(r->pub, &fd) == FERRY_OK) ferry__bridge_unwatch_fd(b, fd);
        ferry_publisher_destroy(r->pub);
    }
    free(r);
}

/* Creates the DDS reader and the ferry publisher of r; false (logged) when one is refused. */
bool ferry__bridge_in_open(ferry_bridge *b, in_route *r, bool log)
{
    ferry_publisher_options po;
    ferry_publisher_stats ps;
    char dds_name[FERRY_TOPIC_MAX + 8];
    dds_data_representation_id_t rep[2] = {DDS_DATA_REPRESENTATION_XCDR1,
                                           DDS_DATA_REPRESENTATION_XCDR2};
    dds_qos_t *q;
    ferry_err err;
    int fd;

    ferry_publisher_options_init(&po);
    err = ferry_publisher_create(&r->pub, b->node, r->topic, ferry__bridge_ferry_type(r->kind),
                                 ferry__bridge_ferry_hash_of(r->kind), &po);
    if (err != FERRY_OK) {
        if (log)
            ferry__bridge_log(b, FERRY_LOG_WARN,
                              "in %s: cannot publish on the ferry topic: %s (retrying)", r->topic,
                              ferry_strerror(err));
        r->pub = NULL;
        return false;
    }
    memset(&ps, 0, sizeof ps);
    ferry_publisher_stats_get(r->pub, &ps);
    r->pub_id = ps.id;
    snprintf(dds_name, sizeof dds_name, "rt%s", r->topic);
    r->dtopic =
        dds_create_topic(b->participant, ferry__bridge_descriptor(r->kind), dds_name, NULL, NULL);
    if (r->dtopic < 0) {
        if (log)
            ferry__bridge_log(b, FERRY_LOG_WARN, "in %s: dds_create_topic: %s", r->topic,
                              dds_strretcode(r->dtopic));
        goto fail;
    }
    q = dds_create_qos();
    dds_qset_reliability(q, r->reliable ? DDS_RELIABILITY_RELIABLE : DDS_RELIABILITY_BEST_EFFORT,
                         DDS_MSECS(WRITE_BLOCK_MS));
    dds_qset_history(q, DDS_HISTORY_KEEP_LAST, (int32_t)b->o.depth);
    dds_qset_durability(q, DDS_DURABILITY_VOLATILE);
    dds_qset_data_representation(q, 2, rep);
    dds_qset_ignorelocal(q, DDS_IGNORELOCAL_PARTICIPANT);
    r->reader = dds_create_reader(b->participant, r->dtopic, q, b->listener);
    dds_delete_qos(q);
    if (r->reader < 0) {
        if (log)
            ferry__bridge_log(b, FERRY_LOG_WARN, "in %s: dds_create_reader: %s", r->topic,
                              dds_strretcode(r->reader));
        goto fail;
    }
    if (ferry_publisher_fd(r->pub, &fd) == FERRY_OK) ferry__bridge_watch_fd(b, fd);
    ferry__bridge_log(b, FERRY_LOG_INFO, "in %s -> %s (%s, %s, depth %" PRIu32 ")", dds_name,
                      r->topic, ferry__bridge_ferry_type(r->kind),
                      r->reliable ? "reliable" : "best effort", b->o.depth);
    return true;
fail:
    if (r->dtopic > 0) dds_delete(r->dtopic);
    r->dtopic = 0;
    r->reader = 0;
    ferry_publisher_destroy(r->pub);
    r->pub = NULL;
    return false;
}

/* Whether samples of this DDS writer are dropped: writers of bridges of this ferry domain. */
static bool writer_ignored(ferry_bridge *b, in_route *r, dds_instance_handle_t h)
{
    dds_builtintopic_endpoint_t *ep;
    unsigned i;
    bool ignore = false;

    for (i = 0; i < r->nwriters; i++)
        if (r->writers[i].handle == h) return r->writers[i].ignore;
    ep = dds_get_matched_publication_data(r->reader, h);
    if (ep != NULL) {
        ignore =
            ferry__bridge_has_mark(b, ep->qos) ||
            memcmp(&ep->participant_key, &b->participant_guid, sizeof ep->participant_key) == 0;
        dds_builtintopic_free_endpoint(ep);
    }
    i = r->nwriters < WRITER_CACHE ? r->nwriters++ : (r->next_writer++ % WRITER_CACHE);
    r->writers[i].handle = h;
    r->writers[i].ignore = ignore;
    return ignore;
}

static bool bounded_string(const char *s, size_t max)
{
    return s != NULL && strnlen(s, max + 1) <= max;
}

typedef enum carry { CARRY_OK, CARRY_INVALID, CARRY_DROPPED } carry;

static carry carry_image(ferry_bridge *b, in_route *r, const ferry_bridge_image_msg *m,
                         const char **why)
{
    ferry_image_layout layout;
    ferry_image img;
    ferry_err err;

    if (!bounded_string(m->encoding, FERRY_ENCODING_MAX)) return (*why = "encoding", CARRY_INVALID);
    if (!bounded_string(m->frame_id, FERRY_MSG_FRAME_ID_MAX))
        return (*why = "frame_id too long", CARRY_INVALID);
    if (m->is_bigendian > 1) return (*why = "is_bigendian", CARRY_INVALID);
    if (m->nanosec >= 1000000000u) return (*why = "stamp", CARRY_INVALID);
    if (ferry_image_layout_get(m->encoding, m->width, m->height, m->step, &layout) != FERRY_OK)
        return (*why = "encoding, geometry or step", CARRY_INVALID);
    if (m->data == NULL || layout.data_size != (uint64_t)m->data_size)
        return (*why = "data size", CARRY_INVALID);
    err = ferry_image_loan(r->pub, m->width, m->height, m->encoding, m->step, &img);
    if (err == FERRY_EINVAL || err == FERRY_ETOOBIG) return (*why = ferry_strerror(err), CARRY_INVALID);
    if (err != FERRY_OK) return (*why = ferry_strerror(err), CARRY_DROPPED);
    memcpy(img.data, m->data, img.data_size);
    img.header->stamp.sec = m->sec;
    img.header->stamp.nanosec = m->nanosec;
    memcpy(img.header->frame_id, m->frame_id, strlen(m->frame_id) + 1);
    img.header->is_bigendian = m->is_bigendian;
    err = ferry_image_publish(r->pub, &img);
    if (err != FERRY_OK) {
        ferry_image_loan_release(r->pub, &img);
        *why = ferry_strerror(err);
        return CARRY_DROPPED;
    }
    (void)b;
    return CARRY_OK;
}

static carry carry_cloud(ferry_bridge *b, in_route *r, const ferry_bridge_cloud_msg *m,
                         const char **why)
{
    ferry_point_field fields[FERRY_POINTCLOUD_FIELDS_MAX];
    ferry_pointcloud pc;
    uint64_t row, size;
    ferry_err err;
    uint32_t i;

    if (m->is_bigendian > 1 || m->is_dense > 1)
        return (*why = "boolean neither 0 nor 1", CARRY_INVALID);
    if (m->nfields == 0 || m->nfields > FERRY_POINTCLOUD_FIELDS_MAX)
        return (*why = "number of fields", CARRY_INVALID);
    if (!bounded_string(m->frame_id, FERRY_MSG_FRAME_ID_MAX))
        return (*why = "frame_id too long", CARRY_INVALID);
    if (m->nanosec >= 1000000000u) return (*why = "stamp", CARRY_INVALID);
    memset(fields, 0, sizeof fields);
    for (i = 0; i < m->nfields; i++) {
        const ferry_bridge_field_msg *f = &m->fields[i];

        if (!bounded_string(f->name, FERRY_FIELD_NAME_MAX) || f->name[0] == '\0')
            return (*why = "field name", CARRY_INVALID);
        memcpy(fields[i].name, f->name, strlen(f->name) + 1);
        fields[i].offset = f->offset;
        fields[i].datatype = f->datatype;
        fields[i].count = f->count;
    }
    if (m->point_step == 0) return (*why = "point_step", CARRY_INVALID);
    row = (uint64_t)m->width * m->point_step;
    if (row != m->row_step) return (*why = "row_step", CARRY_INVALID);
    size = row * m->height; /* both below 2^32: no overflow */
    if (size != (uint64_t)m->data_size || (size != 0 && m->data == NULL))
        return (*why = "data size", CARRY_INVALID);
    err = ferry_pointcloud_loan(r->pub, m->width, m->height, fields, m->nfields, m->point_step,
                                &pc);
    if (err == FERRY_EINVAL || err == FERRY_ETOOBIG) return (*why = "fields or size", CARRY_INVALID);
    if (err != FERRY_OK) return (*why = ferry_strerror(err), CARRY_DROPPED);
    if (pc.data_size != size || pc.header->point_step != m->point_step) {
        ferry_pointcloud_loan_release(r->pub, &pc);
        return (*why = "point_step", CARRY_INVALID);
    }
    if (size != 0) memcpy(pc.data, m->data, size);
    pc.header->stamp.sec = m->sec;
    pc.header->stamp.nanosec = m->nanosec;
    memcpy(pc.header->frame_id, m->frame_id, strlen(m->frame_id) + 1);
    pc.header->is_bigendian = m->is_bigendian;
    pc.header->is_dense = m->is_dense;
    err = ferry_pointcloud_publish(r->pub, &pc);
    if (err != FERRY_OK) {
        ferry_pointcloud_loan_release(r->pub, &pc);
        *why = ferry_strerror(err);
        return CARRY_DROPPED;
    }
    (void)b;
    return CARRY_OK;
}

/* The checks every type's header gets: a frame_id that fits, a stamp in range. */
static bool header_ok(int32_t sec, uint32_t nanosec, const char *frame_id, const char **why)
{
    (void)sec;
    if (!bounded_string(frame_id, FERRY_MSG_FRAME_ID_MAX))
        return (*why = "frame_id too long", false);
    if (nanosec >= 1000000000u) return (*why = "stamp", false);
    return true;
}

/* What a loan's error means for the sample: too big or refused is the sample's fault. */
static carry loan_failed(ferry_err err, const char **why)
{
    *why = ferry_strerror(err);
    return err == FERRY_EINVAL || err == FERRY_ETOOBIG ? CARRY_INVALID : CARRY_DROPPED;
}

static carry carry_camera_info(in_route *r, const ferry_bridge_camera_info_msg *m,
                               const char **why)
{
    ferry_camera_info ci;
    ferry_camera_info_header *h;
    ferry_err err;

    if (!header_ok(m->sec, m->nanosec, m->frame_id, why)) return CARRY_INVALID;
    if (!bounded_string(m->distortion_model, FERRY_DISTORTION_MODEL_MAX))
        return (*why = "distortion_model too long", CARRY_INVALID);
    if (m->d_count > FERRY_CAMERA_INFO_D_MAX)
        return (*why = "too many coefficients in d", CARRY_INVALID);
    if (m->roi_do_rectify > 1) return (*why = "boolean neither 0 nor 1", CARRY_INVALID);
    err = ferry_camera_info_loan(r->pub, &ci);
    if (err != FERRY_OK) return loan_failed(err, why);
    h = ci.header;
    h->stamp.sec = m->sec;
    h->stamp.nanosec = m->nanosec;
    memcpy(h->frame_id, m->frame_id, strlen(m->frame_id) + 1);
    h->height = m->height;
    h->width = m->width;
    memcpy(h->distortion_model, m->distortion_model, strlen(m->distortion_model) + 1);
    h->d_count = m->d_count;
    memcpy(h->d, m->d, m->d_count * sizeof h->d[0]);
    memcpy(h->k, m->k, sizeof h->k);
    memcpy(h->r, m->r, sizeof h->r);
    memcpy(h->p, m->p, sizeof h->p);
    h->binning_x = m->binning_x;
    h->binning_y = m->binning_y;
    h->roi.x_offset = m->roi_x_offset;
    h->roi.y_offset = m->roi_y_offset;
    h->roi.height = m->roi_height;
    h->roi.width = m->roi_width;
    h->roi.do_rectify = m->roi_do_rectify;
    err = ferry_camera_info_publish(r->pub, &ci);
    if (err != FERRY_OK) {
        ferry_camera_info_loan_release(r->pub, &ci);
        return (*why = ferry_strerror(err), CARRY_DROPPED);
    }
    return CARRY_OK;
}

static carry carry_compressed(in_route *r, const ferry_bridge_compressed_msg *m, const char **why)
{
    ferry_compressed_image ci;
    ferry_err err;

    if (!header_ok(m->sec, m->nanosec, m->frame_id, why)) return CARRY_INVALID;
    if (!bounded_string(m->format, FERRY_COMPRESSED_FORMAT_MAX))
        return (*why = "format too long", CARRY_INVALID);
    if (m->data == NULL && m->data_size != 0) return (*why = "data size", CARRY_INVALID);
    err = ferry_compressed_image_loan(r->pub, m->format, m->data_size, &ci);
    if (err != FERRY_OK) return loan_failed(err, why);
    if (m->data_size != 0) memcpy(ci.data, m->data, m->data_size);
    ci.header->stamp.sec = m->sec;
    ci.header->stamp.nanosec = m->nanosec;
    memcpy(ci.header->frame_id, m->frame_id, strlen(m->frame_id) + 1);
    err = ferry_compressed_image_publish(r->pub, &ci);
    if (err != FERRY_OK) {
        ferry_compressed_image_loan_release(r->pub, &ci);
        return (*why = ferry_strerror(err), CARRY_DROPPED);
    }
    return CARRY_OK;
}

static carry carry_imu(in_route *r, const ferry_bridge_imu_msg *m, const char **why)
{
    ferry_imu imu;
    ferry_imu_header *h;
    ferry_err err;

    if (!header_ok(m->sec, m->nanosec, m->frame_id, why)) return CARRY_INVALID;
    err = ferry_imu_loan(r->pub, &imu);
    if (err != FERRY_OK) return loan_failed(err, why);
    h = imu.header;
    h->stamp.sec = m->sec;
    h->stamp.nanosec = m->nanosec;
    memcpy(h->frame_id, m->frame_id, strlen(m->frame_id) + 1);
    h->orientation = m->orientation;
    memcpy(h->orientation_covariance, m->orientation_covariance, sizeof h->orientation_covariance);
    h->angular_velocity = m->angular_velocity;
    memcpy(h->angular_velocity_covariance, m->angular_velocity_covariance,
           sizeof h->angular_velocity_covariance);
    h->linear_acceleration = m->linear_acceleration;
    memcpy(h->linear_acceleration_covariance, m->linear_acceleration_covariance,
           sizeof h->linear_acceleration_covariance);
    err = ferry_imu_publish(r->pub, &imu);
    if (err != FERRY_OK) {
        ferry_imu_loan_release(r->pub, &imu);
        return (*why = ferry_strerror(err), CARRY_DROPPED);
    }
    return CARRY_OK;
}

static void vector3_of(ferry_vector3 *to, const geometry_msgs_msg_dds__Vector3_ *from)
{
    to->x = from->x_;
    to->y = from->y_;
    to->z = from->z_;
}

/* The slow path of the types without a bulk of data: deserialised by Cyclone, then carried as
 * from the CDR reader. */
static carry carry_deserialised_small(in_route *r, const struct ddsi_serdata *sd, size_t *bytes,
                                      const char **why)
{
    carry c = (*why = "cannot deserialise", CARRY_INVALID);

    if (r->kind == KIND_CAMERA_INFO) {
        sensor_msgs_msg_dds__CameraInfo_ s;
        ferry_bridge_camera_info_msg m;

        memset(&s, 0, sizeof s);
        memset(&m, 0, sizeof m);
        if (ddsi_serdata_to_sample(sd, &s, NULL, NULL)) {
            m.sec = s.header_.stamp_.sec_;
            m.nanosec = s.header_.stamp_.nanosec_;
            m.frame_id = s.header_.frame_id_;
            m.height = s.height_;
            m.width = s.width_;
            m.distortion_model = s.distortion_model_;
            m.d_count = s.d_._buffer != NULL ? s.d_._length : 0;
            if (m.d_count <= FERRY_CAMERA_INFO_D_MAX)
                memcpy(m.d, s.d_._buffer, m.d_count * sizeof m.d[0]);
            memcpy(m.k, s.k_, sizeof m.k);
            memcpy(m.r, s.r_, sizeof m.r);
            memcpy(m.p, s.p_, sizeof m.p);
            m.binning_x = s.binning_x_;
            m.binning_y = s.binning_y_;
            m.roi_x_offset = s.roi_.x_offset_;
            m.roi_y_offset = s.roi_.y_offset_;
            m.roi_height = s.roi_.height_;
            m.roi_width = s.roi_.width_;
            memcpy(&m.roi_do_rectify, &s.roi_.do_rectify_, 1);
            *bytes = sizeof(ferry_camera_info_header);
            c = carry_camera_info(r, &m, why);
        }
        dds_sample_free(&s, ferry__bridge_descriptor(r->kind), DDS_FREE_CONTENTS);
    } else if (r->kind == KIND_COMPRESSED) {
        sensor_msgs_msg_dds__CompressedImage_ s;
        ferry_bridge_compressed_msg m;

        memset(&s, 0, sizeof s);
        if (ddsi_serdata_to_sample(sd, &s, NULL, NULL)) {
            m.sec = s.header_.stamp_.sec_;
            m.nanosec = s.header_.stamp_.nanosec_;
            m.frame_id = s.header_.frame_id_;
            m.format = s.format_;
            m.data = s.data_._buffer;
            m.data_size = s.data_._buffer != NULL ? s.data_._length : 0;
            *bytes = m.data_size;
            c = carry_compressed(r, &m, why);
        }
        dds_sample_free(&s, ferry__bridge_descriptor(r->kind), DDS_FREE_CONTENTS);
    } else {
        sensor_msgs_msg_dds__Imu_ s;
        ferry_bridge_imu_msg m;

        memset(&s, 0, sizeof s);
        if (ddsi_serdata_to_sample(sd, &s, NULL, NULL)) {
            m.sec = s.header_.stamp_.sec_;
            m.nanosec = s.header_.stamp_.nanosec_;
            m.frame_id = s.header_.frame_id_;
            m.orientation.x = s.orientation_.x_;
            m.orientation.y = s.orientation_.y_;
            m.orientation.z = s.orientation_.z_;
            m.orientation.w = s.orientation_.w_;
            memcpy(m.orientation_covariance, s.orientation_covariance_,
                   sizeof m.orientation_covariance);
            vector3_of(&m.angular_velocity, &s.angular_velocity_);
            memcpy(m.angular_velocity_covariance, s.angular_velocity_covariance_,
                   sizeof m.angular_velocity_covariance);
            vector3_of(&m.linear_acceleration, &s.linear_acceleration_);
            memcpy(m.linear_acceleration_covariance, s.linear_acceleration_covariance_,
                   sizeof m.linear_acceleration_covariance);
            *bytes = sizeof(ferry_imu_header);
            c = carry_imu(r, &m, why);
        }
        dds_sample_free(&s, ferry__bridge_descriptor(r->kind), DDS_FREE_CONTENTS);
    }
    return c;
}

/* The slow path, for encapsulations the CDR reader does not take (XCDR2): Cyclone deserialises
 * the sample onto the heap, and it is carried from there. */
static carry carry_deserialised(ferry_bridge *b, in_route *r, const struct ddsi_serdata *sd,
                                size_t *bytes, const char **why)
{
    carry c;

    if (r->kind != KIND_IMAGE && r->kind != KIND_CLOUD)
        return carry_deserialised_small(r, sd, bytes, why);
    if (r->kind == KIND_IMAGE) {
        sensor_msgs_msg_dds__Image_ s;
        ferry_bridge_image_msg m;

        memset(&s, 0, sizeof s);
        if (!ddsi_serdata_to_sample(sd, &s, NULL, NULL)) {
            c = (*why = "cannot deserialise", CARRY_INVALID);
        } else {
            m.sec = s.header_.stamp_.sec_;
            m.nanosec = s.header_.stamp_.nanosec_;
            m.frame_id = s.header_.frame_id_;
            m.height = s.height_;
            m.width = s.width_;
            m.encoding = s.encoding_;
            m.is_bigendian = s.is_bigendian_;
            m.step = s.step_;
            m.data = s.data_._buffer;
            m.data_size = s.data_._length;
            *bytes = m.data_size;
            c = carry_image(b, r, &m, why);
        }
        dds_sample_free(&s, ferry__bridge_descriptor(KIND_IMAGE), DDS_FREE_CONTENTS);
    } else {
        sensor_msgs_msg_dds__PointCloud2_ s;
        ferry_bridge_cloud_msg m;
        uint32_t i;

        memset(&s, 0, sizeof s);
        memset(&m, 0, sizeof m);
        if (!ddsi_serdata_to_sample(sd, &s, NULL, NULL)) {
            c = (*why = "cannot deserialise", CARRY_INVALID);
        } else {
            m.sec = s.header_.stamp_.sec_;
            m.nanosec = s.header_.stamp_.nanosec_;
            m.frame_id = s.header_.frame_id_;
            m.height = s.height_;
            m.width = s.width_;
            m.nfields = s.fields_._buffer != NULL ? s.fields_._length : 0;
            for (i = 0; i < m.nfields && i < FERRY_POINTCLOUD_FIELDS_MAX; i++) {
                m.fields[i].name = s.fields_._buffer[i].name_;
                m.fields[i].offset = s.fields_._buffer[i].offset_;
                m.fields[i].datatype = s.fields_._buffer[i].datatype_;
                m.fields[i].count = s.fields_._buffer[i].count_;
            }
            /* The booleans are bytes from the network: read them as bytes, a bool of another
             * value than 0 or 1 would be undefined behaviour. */
            memcpy(&m.is_bigendian, &s.is_bigendian_, 1);
            memcpy(&m.is_dense, &s.is_dense_, 1);
            m.point_step = s.point_step_;
            m.row_step = s.row_step_;
            m.data = s.data_._buffer;
            m.data_size = s.data_._length;
            *bytes = m.data_size;
            c = carry_cloud(b, r, &m, why);
        }
        dds_sample_free(&s, ferry__bridge_descriptor(KIND_CLOUD), DDS_FREE_CONTENTS);
    }
    return c;
}

/* The fast path: the message is read from the serialised bytes Cyclone received (already
 * reassembled from their fragments and checked by its normaliser), and the pixels or points
 * are copied once, from there into the ferry loan. */
static carry carry_serdata(ferry_bridge *b, in_route *r, struct ddsi_serdata *sd, size_t *bytes,
                           const char **why)
{
    uint32_t size = ddsi_serdata_size(sd);
    ferry_bridge_cdr_result res;
    struct ddsi_serdata *ref;
    ddsrt_iovec_t iov;
    carry c = CARRY_INVALID;

    if (size < 4) return (*why = "malformed CDR", CARRY_INVALID);
    ref = ddsi_serdata_to_ser_ref(sd, 0, size, &iov);
    if (r->kind == KIND_IMAGE) {
        ferry_bridge_image_msg m;

        res = ferry_bridge_cdr_image(iov.iov_base, iov.iov_len, &m);
        if (res == FERRY_BRIDGE_CDR_OK) {
            *bytes = m.data_size;
            c = carry_image(b, r, &m, why);
        }
    } else if (r->kind == KIND_CLOUD) {
        ferry_bridge_cloud_msg m;

        res = ferry_bridge_cdr_cloud(iov.iov_base, iov.iov_len, &m);
        if (res == FERRY_BRIDGE_CDR_OK) {
            *bytes = m.data_size;
            c = carry_cloud(b, r, &m, why);
        }
    } else if (r->kind == KIND_CAMERA_INFO) {
        ferry_bridge_camera_info_msg m;

        res = ferry_bridge_cdr_camera_info(iov.iov_base, iov.iov_len, &m);
        if (res == FERRY_BRIDGE_CDR_OK) {
            *bytes = sizeof(ferry_camera_info_header);
            c = carry_camera_info(r, &m, why);
        }
    } else if (r->kind == KIND_COMPRESSED) {
        ferry_bridge_compressed_msg m;

        res = ferry_bridge_cdr_compressed(iov.iov_base, iov.iov_len, &m);
        if (res == FERRY_BRIDGE_CDR_OK) {
            *bytes = m.data_size;
            c = carry_compressed(r, &m, why);
        }
    } else {
        ferry_bridge_imu_msg m;

        res = ferry_bridge_cdr_imu(iov.iov_base, iov.iov_len, &m);
        if (res == FERRY_BRIDGE_CDR_OK) {
            *bytes = sizeof(ferry_imu_header);
            c = carry_imu(r, &m, why);
        }
    }
    if (res == FERRY_BRIDGE_CDR_UNSUPPORTED)
        c = carry_deserialised(b, r, sd, bytes, why);
    else if (res == FERRY_BRIDGE_CDR_MALFORMED)
        c = (*why = "malformed CDR", CARRY_INVALID);
    ddsi_serdata_to_ser_unref(ref, &iov);
    return c;
}

void ferry__bridge_in_pump(ferry_bridge *b, in_route *r)
{
    if (r->pub == NULL || r->reader <= 0) return;
    ferry_publisher_poll(r->pub, 0);
    for (;;) {
        struct ddsi_serdata *sd[TAKE_BATCH];
        dds_sample_info_t info[TAKE_BATCH];
        dds_return_t n = dds_takecdr(r->reader, sd, TAKE_BATCH, info, DDS_ANY_STATE);
        dds_return_t i;

        if (n <= 0) {
            if (n < 0 && ferry__bridge_rate_ok(&b->log_limit))
                ferry__bridge_log(b, FERRY_LOG_WARN, "in %s: dds_takecdr: %s", r->topic,
                                  dds_strretcode(n));
            return;
        }
        for (i = 0; i < n; i++) {
            const char *why = "";
            size_t bytes = 0;
            carry c;

            if (!info[i].valid_data) {
                ddsi_serdata_unref(sd[i]);
                continue;
            }
            if (writer_ignored(b, r, info[i].publication_handle)) {
                b->st.in_ignored++;
                ddsi_serdata_unref(sd[i]);
                continue;
            }
            b->st.in_received++;
            c = carry_serdata(b, r, sd[i], &bytes, &why);
            ddsi_serdata_unref(sd[i]);
            if (c == CARRY_OK) {
                b->st.in_published++;
                b->st.in_bytes += bytes;
                r->samples++;
                r->bytes += bytes;
            } else if (c == CARRY_INVALID) {
                b->st.in_invalid++;
                if (ferry__bridge_rate_ok_n(&b->log_in_invalid, IN_INVALID_LINES_PER_S))
                    ferry__bridge_log(
                        b, FERRY_LOG_WARN,
                        "in rt%s: dropped a sample that cannot be carried (%s); %" PRIu64 " so far",
                        r->topic, why, b->st.in_invalid);
            } else {
                b->st.in_dropped++;
                if (ferry__bridge_rate_ok(&b->log_in_dropped))
                    ferry__bridge_log(b, FERRY_LOG_WARN,
                                      "in rt%s: dropped a sample (%s); %" PRIu64 " so far",
                                      r->topic, why, b->st.in_dropped);
            }
        }
    }
}
