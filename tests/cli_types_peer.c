/*
 * The publisher side of cli_ros_test.sh for the message types that `ferry pub` does not
 * publish: sensor_msgs/CompressedImage, sensor_msgs/Imu and geometry_msgs/PoseStamped with known
 * values (the test checks them in `ferry echo --json`), and an invalid sample of the first two.
 *
 *   cli_types_peer DIR DOMAIN KIND TOPIC COUNT
 *
 * KIND is compressed, imu, pose, bad-compressed or bad-imu. The peer waits up to 10 s for one
 * subscriber, publishes COUNT samples 20 ms apart, then stays until the subscriber has left
 * (at most 10 s more) so that none of its samples is lost to the publisher going away.
 * Exit status: 0 published, 1 failed, 2 usage.
 */
#include <ferry/ferry.h>
#include <ferry/msg.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_NS 10000000000LL
#define GAP_NS 20000000LL

/* What the test expects: compressed image bytes i are (7 * i) & 0xff, COMPRESSED_BYTES of a
 * loan of COMPRESSED_CAPACITY. */
#define COMPRESSED_CAPACITY 100u
#define COMPRESSED_BYTES 37u

static int fail(const char *what, ferry_err err)
{
    fprintf(stderr, "cli_types_peer: %s: %s\n", what, ferry_strerror(err));
    return 1;
}

static ferry_err publish_compressed(ferry_publisher *pub)
{
    ferry_compressed_image ci;
    ferry_err err;
    size_t i;

    err = ferry_compressed_image_loan(pub, "jpeg", COMPRESSED_CAPACITY, &ci);
    if (err != FERRY_OK)
        return err;
    for (i = 0; i < COMPRESSED_BYTES; i++)
        ((unsigned char *)ci.data)[i] = (unsigned char)(7 * i);
    ci.header->data_size = COMPRESSED_BYTES;
    ci.header->stamp.sec = 1700000000;
    ci.header->stamp.nanosec = 123456789;
    snprintf(ci.header->frame_id, sizeof ci.header->frame_id, "cam_optical");
    err = ferry_compressed_image_publish(pub, &ci);
    if (err != FERRY_OK)
        ferry_compressed_image_loan_release(pub, &ci);
    return err;
}

static ferry_err publish_imu(ferry_publisher *pub)
{
    ferry_imu_header *h;
    ferry_imu imu;
    ferry_err err;
    int i;

    err = ferry_imu_loan(pub, &imu);
    if (err != FERRY_OK)
        return err;
    h = imu.header;
    h->stamp.sec = 1700000001;
    h->stamp.nanosec = 5;
    snprintf(h->frame_id, sizeof h->frame_id, "imu_link");
    h->orientation.x = 0.5;
    h->orientation.y = -0.5;
    h->orientation.z = 0.5;
    h->orientation.w = 0.5;
    for (i = 0; i < 9; i++)
        h->orientation_covariance[i] = i * 0.1;
    h->angular_velocity.x = 1e-3;
    h->angular_velocity.y = -2.5;
    h->angular_velocity.z = 1e10;
    h->angular_velocity_covariance[0] = -1.0;
    h->linear_acceleration.z = 9.80665;
    h->linear_acceleration_covariance[0] = h->linear_acceleration_covariance[4] =
        h->linear_acceleration_covariance[8] = 0.01;
    /* JSON has no NaN: echo writes null. */
    h->linear_acceleration_covariance[1] = NAN;
    err = ferry_imu_publish(pub, &imu);
    if (err != FERRY_OK)
        ferry_imu_loan_release(pub, &imu);
    return err;
}

/* A sample of the topic's type that no view accepts: 128 bytes of 0xab. */
static ferry_err publish_bad(ferry_publisher *pub)
{
    void *p;
    ferry_err err = ferry_loan(pub, 128, &p);

    if (err != FERRY_OK)
        return err;
    memset(p, 0xab, 128);
    err = ferry_publish(pub, p, 0);
    if (err != FERRY_OK)
        ferry_loan_release(pub, p);
    return err;
}

static ferry_err publish_pose(ferry_publisher *pub)
{
    ferry_pose_stamped p;
    ferry_err err;

    err = ferry_pose_stamped_loan(pub, &p);
    if (err != FERRY_OK)
        return err;
    p.header->stamp.sec = 1700000002;
    p.header->stamp.nanosec = 7;
    snprintf(p.header->frame_id, sizeof p.header->frame_id, "map");
    p.header->pose.position = (ferry_vector3){1.5, -2.5, 0.25};
    p.header->pose.orientation = (ferry_quaternion){0, 0, 0.6, 0.8};
    err = ferry_pose_stamped_publish(pub, &p);
    if (err != FERRY_OK)
        ferry_pose_stamped_loan_release(pub, &p);
    return err;
}

static int run(ferry_node *node, const char *kind, const char *topic, unsigned long count)
{
    bool imu = strstr(kind, "imu") != NULL, bad = strncmp(kind, "bad-", 4) == 0;
    bool pose = strcmp(kind, "pose") == 0;
    ferry_publisher_stats st;
    ferry_publisher *pub;
    unsigned long n;
    ferry_err err;
    int64_t until;

    err = ferry_publisher_create(&pub, node, topic,
                                 pose  ? FERRY_POSE_STAMPED_TYPE_NAME
                                 : imu ? FERRY_IMU_TYPE_NAME
                                       : FERRY_COMPRESSED_IMAGE_TYPE_NAME,
                                 pose  ? FERRY_POSE_STAMPED_TYPE_HASH
                                 : imu ? FERRY_IMU_TYPE_HASH
                                       : FERRY_COMPRESSED_IMAGE_TYPE_HASH,
                                 NULL);
    if (err != FERRY_OK)
        return fail("ferry_publisher_create", err);
    err = ferry_publisher_wait_subscribers(pub, 1, WAIT_NS);
    if (err != FERRY_OK) {
        ferry_publisher_destroy(pub);
        return fail("ferry_publisher_wait_subscribers", err);
    }
    for (n = 0; n < count; n++) {
        if (n != 0)
            ferry_publisher_poll(pub, GAP_NS);
        err = bad    ? publish_bad(pub)
              : pose ? publish_pose(pub)
              : imu  ? publish_imu(pub)
                     : publish_compressed(pub);
        if (err != FERRY_OK) {
            ferry_publisher_destroy(pub);
            return fail("publishing", err);
        }
    }
    until = ferry_now().ns + WAIT_NS;
    while (ferry_publisher_stats_get(pub, &st) == FERRY_OK && st.subscribers > 0 &&
           ferry_now().ns < until)
        ferry_publisher_poll(pub, GAP_NS);
    err = ferry_publisher_destroy(pub);
    return err == FERRY_OK ? 0 : fail("ferry_publisher_destroy", err);
}

int main(int argc, char **argv)
{
    static const char *const kinds[] = {"compressed", "imu", "pose", "bad-compressed", "bad-imu"};
    const size_t nkinds = sizeof kinds / sizeof kinds[0];
    ferry_node_options o;
    ferry_node *node;
    unsigned long count;
    ferry_err err;
    char *end;
    size_t k;
    int status;

    if (argc != 6) {
        fprintf(stderr, "usage: cli_types_peer DIR DOMAIN KIND TOPIC COUNT\n");
        return 2;
    }
    for (k = 0; k < nkinds && strcmp(argv[3], kinds[k]) != 0; k++)
        ;
    count = strtoul(argv[5], &end, 10);
    if (k == nkinds || *end != '\0' || count == 0) {
        fprintf(stderr, "cli_types_peer: KIND is compressed, imu, pose, bad-compressed or bad-imu; "
                        "COUNT at least 1\n");
        return 2;
    }
    ferry_node_options_init(&o);
    o.dir = argv[1];
    o.domain = (uint32_t)strtoul(argv[2], NULL, 10);
    err = ferry_node_create(&node, &o);
    if (err != FERRY_OK)
        return fail("ferry_node_create", err);
    status = run(node, argv[3], argv[4], count);
    ferry_node_destroy(node);
    return status;
}
