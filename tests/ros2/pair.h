/*
 * A publisher and a subscriber of the ferry type of one ROS 2 kind, connected in this process:
 * what the tests of the CDR writer and of the bridge's sample layouts republish through.
 */
#ifndef FERRY_TESTS_ROS2_PAIR_H
#define FERRY_TESTS_ROS2_PAIR_H

#include "testutil.h"

#include "ros2.h"

typedef struct pair {
    ferry_publisher *pub;
    ferry_subscriber *sub;
} pair;

static inline pair open_pair(ferry_node *node, const char *topic, ferry_ros2_kind kind)
{
    pair p;

    TU_OK(ferry_publisher_create(&p.pub, node, topic, ferry_ros2_ferry_type(kind),
                                 ferry_ros2_ferry_hash(kind), NULL));
    TU_OK(ferry_subscriber_create(&p.sub, node, topic, ferry_ros2_ferry_type(kind),
                                  ferry_ros2_ferry_hash(kind), NULL));
    tu_connect_local(p.pub, 1, p.sub, 1);
    return p;
}

static inline void close_pair(pair *p)
{
    TU_OK(ferry_subscriber_destroy(p->sub));
    TU_OK(ferry_publisher_destroy(p->pub));
}

#endif
