/*
 * A plain Cyclone DDS program, as a ROS 2 camera or IMU driver and its consumers would be, for
 * sensor_msgs/CameraInfo, CompressedImage and Imu with its own copy of the ROS 2 types. Links no
 * ferry code. As a publisher ("pub") it writes COUNT samples at RATE_HZ whose every field is a
 * function of the sequence number (sensor_values.h), with ROS 2's default QoS (reliable, keep
 * last 10, volatile, XCDR1), after waiting up to 10 s for a reader. As a subscriber ("sub") it
 * checks every field of every sample, prints "seq=N" per good one, and exits 0 once COUNT good
 * samples came and none was bad; 1 otherwise (timeout, a bad sample), 2 on usage.
 *
 * The environment changes the QoS, as other ROS 2 nodes would have it: PLAIN_DURABILITY=
 * transient_local (a latched publisher, whose durability service keeps its last 10 as
 * rmw_cyclonedds does, or a subscriber that asks for the history), PLAIN_RELIABILITY=best_effort
 * (the sensor-data profile). A publisher: PLAIN_SEQ0=N numbers its samples from N + 1 (two
 * publishers of one topic told apart), PLAIN_WAIT=0 writes without waiting for a reader,
 * PLAIN_LINGER_S=S stays S seconds after its last sample (its writer still there for late
 * joiners).
 *
 * usage: bridge_plain_sensor pub|sub camera_info|compressed|imu TOPIC FRAME_ID COUNT
 * RATE_HZ|TIMEOUT_S
 */
#include "ros2_image_types.h"
#include "sensor_values.h"

#include <dds/dds.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum kind { CAMERA_INFO, COMPRESSED, IMU };

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static bool env_is(const char *name, const char *value)
{
    const char *v = getenv(name);

    return v != NULL && strcmp(v, value) == 0;
}

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);

    return v != NULL && v[0] != '\0' ? strtol(v, NULL, 10) : dflt;
}

static int same(const double *a, const double *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

static void write_one(dds_entity_t wr, enum kind k, uint32_t seq, char *frame_id, uint8_t *buf)
{
    if (k == CAMERA_INFO) {
        sensor_msgs_msg_dds__CameraInfo_ m;
        sv_camera_info v;

        sv_camera_info_of(seq, &v);
        memset(&m, 0, sizeof m);
        m.header_.stamp_.sec_ = v.sec;
        m.header_.stamp_.nanosec_ = v.nanosec;
        m.header_.frame_id_ = frame_id;
        m.height_ = v.height;
        m.width_ = v.width;
        m.distortion_model_ = (char *)v.distortion_model;
        m.d_._buffer = v.d;
        m.d_._length = m.d_._maximum = v.d_count;
        m.d_._release = false;
        memcpy(m.k_, v.k, sizeof m.k_);
        memcpy(m.r_, v.r, sizeof m.r_);
        memcpy(m.p_, v.p, sizeof m.p_);
        m.binning_x_ = v.binning_x;
        m.binning_y_ = v.binning_y;
        m.roi_.x_offset_ = v.roi_x_offset;
        m.roi_.y_offset_ = v.roi_y_offset;
        m.roi_.height_ = v.roi_height;
        m.roi_.width_ = v.roi_width;
        m.roi_.do_rectify_ = v.roi_do_rectify != 0;
        dds_write(wr, &m);
    } else if (k == COMPRESSED) {
        sensor_msgs_msg_dds__CompressedImage_ m;

        memset(&m, 0, sizeof m);
        m.header_.stamp_.sec_ = SV_SEC0 + (int32_t)seq;
        m.header_.stamp_.nanosec_ = seq;
        m.header_.frame_id_ = frame_id;
        m.format_ = (char *)SV_FORMAT;
        sv_compressed_fill(seq, buf);
        m.data_._buffer = buf;
        m.data_._length = m.data_._maximum = sv_compressed_size(seq);
        m.data_._release = false;
        dds_write(wr, &m);
    } else {
        sensor_msgs_msg_dds__Imu_ m;
        sv_imu v;

        sv_imu_of(seq, &v);
        memset(&m, 0, sizeof m);
        m.header_.stamp_.sec_ = v.sec;
        m.header_.stamp_.nanosec_ = v.nanosec;
        m.header_.frame_id_ = frame_id;
        m.orientation_.x_ = v.orientation[0];
        m.orientation_.y_ = v.orientation[1];
        m.orientation_.z_ = v.orientation[2];
        m.orientation_.w_ = v.orientation[3];
        memcpy(m.orientation_covariance_, v.orientation_covariance,
               sizeof v.orientation_covariance);
        m.angular_velocity_.x_ = v.angular_velocity[0];
        m.angular_velocity_.y_ = v.angular_velocity[1];
        m.angular_velocity_.z_ = v.angular_velocity[2];
        memcpy(m.angular_velocity_covariance_, v.angular_velocity_covariance,
               sizeof v.angular_velocity_covariance);
        m.linear_acceleration_.x_ = v.linear_acceleration[0];
        m.linear_acceleration_.y_ = v.linear_acceleration[1];
        m.linear_acceleration_.z_ = v.linear_acceleration[2];
        memcpy(m.linear_acceleration_covariance_, v.linear_acceleration_covariance,
               sizeof v.linear_acceleration_covariance);
        dds_write(wr, &m);
    }
}

/* Why sample p is not what seq (from its stamp) gives, or NULL; *seq receives the sequence. */
static const char *check_one(enum kind k, const void *p, const char *frame_id, uint32_t *seq)
{
    const std_msgs_msg_dds__Header_ *h = p; /* every type starts with its header */

    if (h->stamp_.sec_ < SV_SEC0)
        return "stamp.sec";
    *seq = (uint32_t)(h->stamp_.sec_ - SV_SEC0);
    if (h->frame_id_ == NULL || strcmp(h->frame_id_, frame_id) != 0)
        return "frame_id";
    if (k == CAMERA_INFO) {
        const sensor_msgs_msg_dds__CameraInfo_ *m = p;
        sv_camera_info v;

        sv_camera_info_of(*seq, &v);
        if (h->stamp_.nanosec_ != v.nanosec)
            return "stamp.nanosec";
        if (m->height_ != v.height || m->width_ != v.width)
            return "height/width";
        if (m->distortion_model_ == NULL || strcmp(m->distortion_model_, v.distortion_model) != 0)
            return "distortion_model";
        if (m->d_._length != v.d_count || !same(m->d_._buffer, v.d, v.d_count))
            return "d";
        if (!same(m->k_, v.k, 9))
            return "k";
        if (!same(m->r_, v.r, 9))
            return "r";
        if (!same(m->p_, v.p, 12))
            return "p";
        if (m->binning_x_ != v.binning_x || m->binning_y_ != v.binning_y)
            return "binning";
        if (m->roi_.x_offset_ != v.roi_x_offset || m->roi_.y_offset_ != v.roi_y_offset ||
            m->roi_.height_ != v.roi_height || m->roi_.width_ != v.roi_width ||
            m->roi_.do_rectify_ != (v.roi_do_rectify != 0))
            return "roi";
    } else if (k == COMPRESSED) {
        const sensor_msgs_msg_dds__CompressedImage_ *m = p;

        if (h->stamp_.nanosec_ != *seq)
            return "stamp.nanosec";
        if (m->format_ == NULL || strcmp(m->format_, SV_FORMAT) != 0)
            return "format";
        if (!sv_compressed_ok(*seq, m->data_._buffer, m->data_._length))
            return "data";
    } else {
        const sensor_msgs_msg_dds__Imu_ *m = p;
        sv_imu v;
        double o[4], a[3], l[3];

        sv_imu_of(*seq, &v);
        o[0] = m->orientation_.x_;
        o[1] = m->orientation_.y_;
        o[2] = m->orientation_.z_;
        o[3] = m->orientation_.w_;
        a[0] = m->angular_velocity_.x_;
        a[1] = m->angular_velocity_.y_;
        a[2] = m->angular_velocity_.z_;
        l[0] = m->linear_acceleration_.x_;
        l[1] = m->linear_acceleration_.y_;
        l[2] = m->linear_acceleration_.z_;
        if (h->stamp_.nanosec_ != v.nanosec)
            return "stamp.nanosec";
        if (!same(o, v.orientation, 4))
            return "orientation";
        if (!same(m->orientation_covariance_, v.orientation_covariance, 9))
            return "orientation_covariance";
        if (!same(a, v.angular_velocity, 3))
            return "angular_velocity";
        if (!same(m->angular_velocity_covariance_, v.angular_velocity_covariance, 9))
            return "angular_velocity_covariance";
        if (!same(l, v.linear_acceleration, 3))
            return "linear_acceleration";
        if (!same(m->linear_acceleration_covariance_, v.linear_acceleration_covariance, 9))
            return "linear_acceleration_covariance";
    }
    return NULL;
}

int main(int argc, char **argv)
{
    static const dds_topic_descriptor_t *const descs[] = {
        &sensor_msgs_msg_dds__CameraInfo__desc, &sensor_msgs_msg_dds__CompressedImage__desc,
        &sensor_msgs_msg_dds__Imu__desc};
    dds_data_representation_id_t rep = DDS_DATA_REPRESENTATION_XCDR1;
    bool pub;
    enum kind k;
    long count, good = 0, bad = 0;
    double arg;
    dds_entity_t pp, tp, ep;
    dds_qos_t *q;

    if (argc != 7) {
        fprintf(stderr,
                "usage: %s pub|sub camera_info|compressed|imu TOPIC FRAME_ID COUNT "
                "RATE_HZ|TIMEOUT_S\n",
                argv[0]);
        return 2;
    }
    pub = strcmp(argv[1], "pub") == 0;
    if (strcmp(argv[2], "camera_info") == 0)
        k = CAMERA_INFO;
    else if (strcmp(argv[2], "compressed") == 0)
        k = COMPRESSED;
    else if (strcmp(argv[2], "imu") == 0)
        k = IMU;
    else
        return 2;
    count = strtol(argv[5], NULL, 10);
    arg = atof(argv[6]);
    if (count <= 0 || arg <= 0)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);

    pp = dds_create_participant(DDS_DOMAIN_DEFAULT, NULL, NULL);
    tp = dds_create_topic(pp, descs[k], argv[3], NULL, NULL);
    q = dds_create_qos();
    dds_qset_reliability(q,
                         env_is("PLAIN_RELIABILITY", "best_effort") ? DDS_RELIABILITY_BEST_EFFORT
                                                                    : DDS_RELIABILITY_RELIABLE,
                         DDS_SECS(1));
    dds_qset_history(q, DDS_HISTORY_KEEP_LAST, 10);
    dds_qset_data_representation(q, 1, &rep);
    /* PLAIN_DURABILITY=transient_local: a late joiner that asks for the history, as image
     * pipelines ask for camera_info; or a latched publisher, which keeps its last 10 for late
     * joiners (rmw_cyclonedds sets the durability service history to the publisher's). */
    if (env_is("PLAIN_DURABILITY", "transient_local")) {
        dds_qset_durability(q, DDS_DURABILITY_TRANSIENT_LOCAL);
        if (pub)
            dds_qset_durability_service(q, 0, DDS_HISTORY_KEEP_LAST, 10, DDS_LENGTH_UNLIMITED,
                                        DDS_LENGTH_UNLIMITED, DDS_LENGTH_UNLIMITED);
    }
    ep = pub ? dds_create_writer(pp, tp, q, NULL) : dds_create_reader(pp, tp, q, NULL);
    dds_delete_qos(q);
    if (pp < 0 || tp < 0 || ep < 0) {
        fprintf(stderr, "plain_sensor: cannot create the DDS entities\n");
        return 1;
    }
    if (pub) {
        static uint8_t buf[4096];
        dds_publication_matched_status_t st;
        long seq0 = env_long("PLAIN_SEQ0", 0), linger = env_long("PLAIN_LINGER_S", 0);
        int waited;
        long i;

        for (waited = env_is("PLAIN_WAIT", "0") ? 100 : 0; waited < 100; waited++) {
            if (dds_get_publication_matched_status(ep, &st) == DDS_RETCODE_OK &&
                st.current_count > 0)
                break;
            dds_sleepfor(DDS_MSECS(100));
        }
        if (!env_is("PLAIN_WAIT", "0"))
            dds_sleepfor(DDS_MSECS(300));
        for (i = 1; i <= count; i++) {
            write_one(ep, k, (uint32_t)(seq0 + i), argv[4], buf);
            dds_sleepfor((dds_duration_t)(1e9 / arg));
        }
        dds_sleepfor(DDS_MSECS(500));
        printf("plain_sensor: %s %s: written %ld\n", argv[2], argv[3], count);
        if (linger > 0)
            dds_sleepfor(DDS_SECS(linger));
    } else {
        int64_t deadline = now_ns() + (int64_t)(arg * 1e9);
        dds_entity_t ws = dds_create_waitset(pp);

        dds_waitset_attach(ws, dds_create_readcondition(ep, DDS_ANY_STATE), 0);
        while (good < count && now_ns() < deadline) {
            void *bufs[4] = {NULL};
            dds_sample_info_t info[4];
            dds_return_t n, i;

            dds_waitset_wait(ws, NULL, 0, DDS_MSECS(100));
            n = dds_take(ep, bufs, info, 4, 4);
            for (i = 0; i < n; i++) {
                uint32_t seq = 0;
                const char *why;

                if (!info[i].valid_data)
                    continue;
                why = check_one(k, bufs[i], argv[4], &seq);
                if (why != NULL) {
                    bad++;
                    fprintf(stderr, "plain_sensor: bad sample %u: %s\n", seq, why);
                } else {
                    good++;
                    printf("seq=%u\n", seq);
                }
            }
            if (n > 0)
                dds_return_loan(ep, bufs, n);
        }
        printf("plain_sensor: %s %s: good %ld bad %ld\n", argv[2], argv[3], good, bad);
    }
    dds_delete(pp);
    return pub || (good >= count && bad == 0) ? 0 : 1;
}
