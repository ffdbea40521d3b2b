/*
 * The ferry end of the bridge tests for sensor_msgs/CameraInfo, CompressedImage and Imu: as a
 * publisher ("pub") it loans, fills (every field a function of the sequence number,
 * sensor_values.h) and publishes COUNT samples at RATE_HZ once a subscriber (the bridge) is
 * connected; as a subscriber ("sub") it views every sample it takes and checks every field,
 * prints "seq=N" per good one and exits 0 once COUNT good samples came and none was bad; 1
 * otherwise, 2 on usage.
 *
 * FERRY_SENSOR_LINGER_S=S keeps a publisher S seconds after its last sample (its topic, and so
 * the bridge's route, still there); FERRY_SENSOR_STOP_FILE=PATH stops it publishing, before
 * COUNT, once PATH exists (it says its last sequence: "last N"); FERRY_SENSOR_HISTORY=N has a
 * subscriber ask each publisher for its last N samples on joining.
 *
 * usage: bridge_ferry_sensor pub|sub camera_info|compressed|imu DIR TOPIC FRAME_ID COUNT
 * RATE_HZ|TIMEOUT_S
 */
#include "sensor_values.h"

#include <ferry/msg.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum kind { CAMERA_INFO, COMPRESSED, IMU };

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
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

static ferry_err publish_one(ferry_publisher *pub, enum kind k, uint32_t seq, const char *frame_id)
{
    ferry_err err;

    if (k == CAMERA_INFO) {
        ferry_camera_info ci;
        sv_camera_info v;
        ferry_camera_info_header *h;

        if ((err = ferry_camera_info_loan(pub, &ci)) != FERRY_OK)
            return err;
        sv_camera_info_of(seq, &v);
        h = ci.header;
        h->stamp.sec = v.sec;
        h->stamp.nanosec = v.nanosec;
        snprintf(h->frame_id, sizeof h->frame_id, "%s", frame_id);
        h->height = v.height;
        h->width = v.width;
        snprintf(h->distortion_model, sizeof h->distortion_model, "%s", v.distortion_model);
        h->d_count = v.d_count;
        memcpy(h->d, v.d, v.d_count * sizeof v.d[0]);
        memcpy(h->k, v.k, sizeof h->k);
        memcpy(h->r, v.r, sizeof h->r);
        memcpy(h->p, v.p, sizeof h->p);
        h->binning_x = v.binning_x;
        h->binning_y = v.binning_y;
        h->roi.x_offset = v.roi_x_offset;
        h->roi.y_offset = v.roi_y_offset;
        h->roi.height = v.roi_height;
        h->roi.width = v.roi_width;
        h->roi.do_rectify = v.roi_do_rectify;
        if ((err = ferry_camera_info_publish(pub, &ci)) != FERRY_OK)
            ferry_camera_info_loan_release(pub, &ci);
        return err;
    }
    if (k == COMPRESSED) {
        ferry_compressed_image ci;

        if ((err = ferry_compressed_image_loan(pub, SV_FORMAT, 4096, &ci)) != FERRY_OK)
            return err;
        ci.header->stamp.sec = SV_SEC0 + (int32_t)seq;
        ci.header->stamp.nanosec = seq;
        snprintf(ci.header->frame_id, sizeof ci.header->frame_id, "%s", frame_id);
        sv_compressed_fill(seq, ci.data);
        ci.header->data_size = sv_compressed_size(seq);
        if ((err = ferry_compressed_image_publish(pub, &ci)) != FERRY_OK)
            ferry_compressed_image_loan_release(pub, &ci);
        return err;
    }
    {
        ferry_imu imu;
        sv_imu v;
        ferry_imu_header *h;

        if ((err = ferry_imu_loan(pub, &imu)) != FERRY_OK)
            return err;
        sv_imu_of(seq, &v);
        h = imu.header;
        h->stamp.sec = v.sec;
        h->stamp.nanosec = v.nanosec;
        snprintf(h->frame_id, sizeof h->frame_id, "%s", frame_id);
        h->orientation = (ferry_quaternion){v.orientation[0], v.orientation[1], v.orientation[2],
                                            v.orientation[3]};
        memcpy(h->orientation_covariance, v.orientation_covariance,
               sizeof v.orientation_covariance);
        h->angular_velocity =
            (ferry_vector3){v.angular_velocity[0], v.angular_velocity[1], v.angular_velocity[2]};
        memcpy(h->angular_velocity_covariance, v.angular_velocity_covariance,
               sizeof v.angular_velocity_covariance);
        h->linear_acceleration = (ferry_vector3){v.linear_acceleration[0], v.linear_acceleration[1],
                                                 v.linear_acceleration[2]};
        memcpy(h->linear_acceleration_covariance, v.linear_acceleration_covariance,
               sizeof v.linear_acceleration_covariance);
        if ((err = ferry_imu_publish(pub, &imu)) != FERRY_OK)
            ferry_imu_loan_release(pub, &imu);
        return err;
    }
}

/* Why sample s is not what its sequence gives, or NULL. */
static const char *check_one(enum kind k, const ferry_sample *s, const char *frame_id,
                             uint32_t *seq)
{
    if (k == CAMERA_INFO) {
        ferry_camera_info_view cv;
        const ferry_camera_info_header *h = &cv.header;
        sv_camera_info v;

        if (ferry_camera_info_view_get(s, &cv) != FERRY_OK)
            return "not a valid camera info";
        if (h->stamp.sec < SV_SEC0)
            return "stamp.sec";
        *seq = (uint32_t)(h->stamp.sec - SV_SEC0);
        sv_camera_info_of(*seq, &v);
        if (strcmp(h->frame_id, frame_id) != 0)
            return "frame_id";
        if (h->stamp.nanosec != v.nanosec)
            return "stamp.nanosec";
        if (h->height != v.height || h->width != v.width)
            return "height/width";
        if (strcmp(h->distortion_model, v.distortion_model) != 0)
            return "distortion_model";
        if (h->d_count != v.d_count || !same(h->d, v.d, v.d_count))
            return "d";
        if (!same(h->k, v.k, 9))
            return "k";
        if (!same(h->r, v.r, 9))
            return "r";
        if (!same(h->p, v.p, 12))
            return "p";
        if (h->binning_x != v.binning_x || h->binning_y != v.binning_y)
            return "binning";
        if (h->roi.x_offset != v.roi_x_offset || h->roi.y_offset != v.roi_y_offset ||
            h->roi.height != v.roi_height || h->roi.width != v.roi_width ||
            h->roi.do_rectify != v.roi_do_rectify)
            return "roi";
        return NULL;
    }
    if (k == COMPRESSED) {
        ferry_compressed_image_view cv;

        if (ferry_compressed_image_view_get(s, &cv) != FERRY_OK)
            return "not a valid compressed image";
        if (cv.header.stamp.sec < SV_SEC0)
            return "stamp.sec";
        *seq = (uint32_t)(cv.header.stamp.sec - SV_SEC0);
        if (strcmp(cv.header.frame_id, frame_id) != 0)
            return "frame_id";
        if (cv.header.stamp.nanosec != *seq)
            return "stamp.nanosec";
        if (strcmp(cv.header.format, SV_FORMAT) != 0)
            return "format";
        if (cv.data_size > UINT32_MAX || !sv_compressed_ok(*seq, cv.data, (uint32_t)cv.data_size))
            return "data";
        return NULL;
    }
    {
        ferry_imu_view iv;
        const ferry_imu_header *h = &iv.header;
        sv_imu v;
        double o[4], a[3], l[3];

        if (ferry_imu_view_get(s, &iv) != FERRY_OK)
            return "not a valid IMU sample";
        if (h->stamp.sec < SV_SEC0)
            return "stamp.sec";
        *seq = (uint32_t)(h->stamp.sec - SV_SEC0);
        sv_imu_of(*seq, &v);
        o[0] = h->orientation.x;
        o[1] = h->orientation.y;
        o[2] = h->orientation.z;
        o[3] = h->orientation.w;
        a[0] = h->angular_velocity.x;
        a[1] = h->angular_velocity.y;
        a[2] = h->angular_velocity.z;
        l[0] = h->linear_acceleration.x;
        l[1] = h->linear_acceleration.y;
        l[2] = h->linear_acceleration.z;
        if (strcmp(h->frame_id, frame_id) != 0)
            return "frame_id";
        if (h->stamp.nanosec != v.nanosec)
            return "stamp.nanosec";
        if (!same(o, v.orientation, 4))
            return "orientation";
        if (!same(h->orientation_covariance, v.orientation_covariance, 9))
            return "orientation_covariance";
        if (!same(a, v.angular_velocity, 3))
            return "angular_velocity";
        if (!same(h->angular_velocity_covariance, v.angular_velocity_covariance, 9))
            return "angular_velocity_covariance";
        if (!same(l, v.linear_acceleration, 3))
            return "linear_acceleration";
        if (!same(h->linear_acceleration_covariance, v.linear_acceleration_covariance, 9))
            return "linear_acceleration_covariance";
        return NULL;
    }
}

int main(int argc, char **argv)
{
    static const char *const types[] = {FERRY_CAMERA_INFO_TYPE_NAME,
                                        FERRY_COMPRESSED_IMAGE_TYPE_NAME, FERRY_IMU_TYPE_NAME};
    static const uint64_t hashes[] = {FERRY_CAMERA_INFO_TYPE_HASH, FERRY_COMPRESSED_IMAGE_TYPE_HASH,
                                      FERRY_IMU_TYPE_HASH};
    ferry_node_options no;
    ferry_node *node;
    enum kind k;
    bool pub;
    long count, good = 0, bad = 0, i;
    double arg;
    ferry_err err;

    if (argc != 8) {
        fprintf(stderr,
                "usage: %s pub|sub camera_info|compressed|imu DIR TOPIC FRAME_ID COUNT "
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
    count = strtol(argv[6], NULL, 10);
    arg = atof(argv[7]);
    if (count <= 0 || arg <= 0)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    ferry_node_options_init(&no);
    no.dir = argv[3];
    no.name = pub ? "sensor_pub" : "sensor_sub";
    if ((err = ferry_node_create(&node, &no)) != FERRY_OK) {
        fprintf(stderr, "ferry_sensor: ferry_node_create: %s\n", ferry_strerror(err));
        return 1;
    }
    if (pub) {
        ferry_publisher *p;

        err = ferry_publisher_create(&p, node, argv[4], types[k], hashes[k], NULL);
        if (err != FERRY_OK) {
            fprintf(stderr, "ferry_sensor: ferry_publisher_create: %s\n", ferry_strerror(err));
            return 1;
        }
        /* The bridge subscribes at its next scan. */
        if (ferry_publisher_wait_subscribers(p, 1, 10 * 1000000000LL) != FERRY_OK)
            fprintf(stderr, "ferry_sensor: no subscriber after 10 s; publishing anyway\n");
        const char *stop = getenv("FERRY_SENSOR_STOP_FILE");
        long last = 0;

        for (i = 1; i <= count && (stop == NULL || access(stop, F_OK) != 0); i++) {
            int64_t next = now_ns() + (int64_t)(1e9 / arg);

            last = i;
            if ((err = publish_one(p, k, (uint32_t)i, argv[5])) != FERRY_OK) {
                fprintf(stderr, "ferry_sensor: publish %ld: %s\n", i, ferry_strerror(err));
                bad++;
            }
            while (now_ns() < next)
                ferry_publisher_poll(p, next - now_ns());
        }
        printf("ferry_sensor: %s %s: published %ld, failed %ld, last %ld\n", argv[2], argv[4],
               last - bad, bad, last);
        {
            int64_t until = now_ns() + env_long("FERRY_SENSOR_LINGER_S", 0) * 1000000000LL;

            while (now_ns() < until)
                ferry_publisher_poll(p, until - now_ns());
        }
        ferry_publisher_destroy(p);
        ferry_node_destroy(node);
        return bad == 0 ? 0 : 1;
    }
    {
        ferry_subscriber *sub;
        ferry_subscriber_options so;
        int64_t deadline = now_ns() + (int64_t)(arg * 1e9);

        ferry_subscriber_options_init(&so);
        so.history = (uint32_t)env_long("FERRY_SENSOR_HISTORY", 0);
        if (so.depth < so.history)
            so.depth = so.history;
        err = ferry_subscriber_create(&sub, node, argv[4], types[k], hashes[k], &so);
        if (err != FERRY_OK) {
            fprintf(stderr, "ferry_sensor: ferry_subscriber_create: %s\n", ferry_strerror(err));
            return 1;
        }
        while (good < count && now_ns() < deadline) {
            ferry_sample s;
            uint32_t seq = 0;
            const char *why;

            ferry_wait(sub, 100 * 1000000LL);
            while (ferry_take(sub, &s) == FERRY_OK) {
                why = check_one(k, &s, argv[5], &seq);
                if (why != NULL) {
                    bad++;
                    fprintf(stderr, "ferry_sensor: bad sample %u: %s\n", seq, why);
                } else {
                    good++;
                    printf("seq=%u\n", seq);
                }
                ferry_release(sub, &s);
            }
        }
        printf("ferry_sensor: %s %s: good %ld bad %ld\n", argv[2], argv[4], good, bad);
        ferry_subscriber_destroy(sub);
        ferry_node_destroy(node);
        return good >= count && bad == 0 ? 0 : 1;
    }
}
