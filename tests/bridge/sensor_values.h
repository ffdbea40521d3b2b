/*
 * The values the bridge tests send as camera infos, compressed images and IMU samples: every
 * field a function of the sample's sequence number, which travels as stamp.sec - SV_SEC0, so
 * that the receiving end (a plain DDS program or a ferry program) checks every field of every
 * sample it gets. Plain C, no ferry or DDS types; header-only, for tests.
 */
#ifndef BRIDGE_TEST_SENSOR_VALUES_H
#define BRIDGE_TEST_SENSOR_VALUES_H

#include <stdint.h>
#include <string.h>

#define SV_SEC0 1700000000
#define SV_D_COUNT 8u

typedef struct sv_camera_info {
    int32_t sec;
    uint32_t nanosec;
    uint32_t height, width;
    const char *distortion_model;
    uint32_t d_count;
    double d[SV_D_COUNT], k[9], r[9], p[12];
    uint32_t binning_x, binning_y;
    uint32_t roi_x_offset, roi_y_offset, roi_height, roi_width;
    uint8_t roi_do_rectify;
} sv_camera_info;

typedef struct sv_imu {
    int32_t sec;
    uint32_t nanosec;
    double orientation[4]; /* x y z w */
    double orientation_covariance[9];
    double angular_velocity[3];
    double angular_velocity_covariance[9];
    double linear_acceleration[3];
    double linear_acceleration_covariance[9];
} sv_imu;

static inline void sv_camera_info_of(uint32_t seq, sv_camera_info *v)
{
    int i;

    memset(v, 0, sizeof *v);
    v->sec = SV_SEC0 + (int32_t)seq;
    v->nanosec = seq * 1000u + 7u;
    v->height = 1080;
    v->width = 1920;
    v->distortion_model = "rational_polynomial";
    v->d_count = SV_D_COUNT;
    for (i = 0; i < (int)SV_D_COUNT; i++)
        v->d[i] = seq * 0.5 - i * 0.125;
    for (i = 0; i < 9; i++)
        v->k[i] = seq * 10.0 + i;
    for (i = 0; i < 9; i++)
        v->r[i] = -1.0 * i - seq;
    for (i = 0; i < 12; i++)
        v->p[i] = seq * 100.0 + i * 0.25;
    v->binning_x = 1;
    v->binning_y = 2;
    v->roi_x_offset = seq;
    v->roi_y_offset = seq + 1;
    v->roi_height = 100;
    v->roi_width = 200;
    v->roi_do_rectify = (uint8_t)(seq % 2);
}

static inline void sv_imu_of(uint32_t seq, sv_imu *v)
{
    int i;

    memset(v, 0, sizeof *v);
    v->sec = SV_SEC0 + (int32_t)seq;
    v->nanosec = 999999999u - seq;
    v->orientation[0] = seq * 0.001;
    v->orientation[1] = -0.5;
    v->orientation[2] = 0.25;
    v->orientation[3] = 1.0 - seq * 0.001;
    for (i = 0; i < 9; i++) {
        v->orientation_covariance[i] = i == 0 ? -1.0 : 0.0;
        v->angular_velocity_covariance[i] = seq * 1e-6 + i;
        v->linear_acceleration_covariance[i] = seq * 1e-3 - i;
    }
    v->angular_velocity[0] = 0.01 * seq;
    v->angular_velocity[1] = -0.02 * seq;
    v->angular_velocity[2] = 3.0;
    v->linear_acceleration[0] = 0.1;
    v->linear_acceleration[1] = seq * 0.2;
    v->linear_acceleration[2] = 9.80665;
}

/* Compressed images: FORMAT, and 1000 + 37 * (seq % 50) bytes of (seq * 31 + j) & 0xff. */
#define SV_FORMAT "rgb8; jpeg compressed bgr8"

static inline uint32_t sv_compressed_size(uint32_t seq)
{
    return 1000u + 37u * (seq % 50u);
}

static inline void sv_compressed_fill(uint32_t seq, uint8_t *p)
{
    uint32_t j, n = sv_compressed_size(seq);

    for (j = 0; j < n; j++)
        p[j] = (uint8_t)(seq * 31u + j);
}

/* 1 when the n bytes at p are those of seq. */
static inline int sv_compressed_ok(uint32_t seq, const uint8_t *p, uint32_t n)
{
    uint32_t j;

    if (p == NULL || n != sv_compressed_size(seq))
        return 0;
    for (j = 0; j < n; j++)
        if (p[j] != (uint8_t)(seq * 31u + j))
            return 0;
    return 1;
}

/* The frame id the tests send: longer than 63 bytes, to check the raised limit end to end. */
#define SV_FRAME_ID                                                                                \
    "sensor_rig/front_left/camera_optical_frame/with/a/long/namespace/as/real/drivers/send"

#endif
