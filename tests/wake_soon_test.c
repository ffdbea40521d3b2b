/*
 * A subscriber asleep in ferry_wait woken ahead of a publication (ferry__publisher_wake_soon, as
 * a device frame's loan does): the publisher, in another process, sees the doorbell taken and the
 * hint left; the subscriber polls for the publication, takes it when it comes within the poll
 * and sleeps again when it does not; a hostile publisher's garbage hints and wake-ups without a
 * publication never end a wait early.
 */
#include "testutil.h"

#include "core/conn.h"
#include "core/module.h"
#include "core/publisher.h"

#define TYPE "test/soon"
#define SIZE 4096
#define TOPIC "/soon"

enum { MSG_QUIT = 100 };

static ferry_subscriber *make_sub(ferry_node *node)
{
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 8;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), &so));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    return sub;
}

enum { SOON_ONLY = 1, SOON_PUBLISH, SOON_LATE, SOON_HOSTILE };

typedef struct soonctl {
    tu_pipe to_pub, from_pub;
} soonctl;

/* The connection's header as the publisher maps it (one subscriber). */
static ferry__conn_header *pub_conn(ferry_publisher *pub)
{
    TU_EQ_U64(pub->nactive, 1);
    return pub->conns[pub->active[0]].ring.hdr;
}

/* Until the subscriber sleeps on its futex doorbell. */
static void until_asleep(ferry_publisher *pub)
{
    ferry_time t0 = ferry_now();
    while (atomic_load(&pub_conn(pub)->sub_waiting) != FERRY__DOORBELL_FUTEX) {
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "the subscriber never slept");
        tu_sleep_ns(100 * 1000);
    }
}

/* A hostile publisher: for 200 ms it wakes the sleeping subscriber as often as it can with a
 * garbage hint and never publishes. */
static void hostile_wakes(ferry_publisher *pub)
{
    ferry__conn_header *h = pub_conn(pub);
    unsigned wakes = 0;
    ferry_time t0 = ferry_now();
    while (tu_since(t0) < 200 * TU_MS) {
        atomic_store(&h->pub_soon, 0xffffffffu);
        if (ferry__conn_doorbell_take(&h->sub_waiting, FERRY__DOORBELL_FUTEX)) {
            ferry__futex_wake((void *)&h->sub_waiting);
            wakes++;
        }
        tu_sleep_ns(200 * 1000);
    }
    TU_CMP_U64(wakes, >=, 1);
    until_asleep(pub);
}

static int soon_publisher_main(void *arg)
{
    soonctl *l = arg;
    ferry_node *node = tu_node("soonpub");
    ferry_publisher *pub;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, ferry_hash(TYPE), NULL));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    uint64_t seq = 0;
    for (;;) {
        uint64_t cmd = tu_serve_until(&pub, 1, &l->to_pub, 30000);
        if (cmd == MSG_QUIT)
            break;
        if (cmd == SOON_HOSTILE) {
            hostile_wakes(pub);
            tu_send(&l->from_pub, cmd);
            continue;
        }
        until_asleep(pub);
        ferry__publisher_wake_soon(pub);
        ferry__conn_header *h = pub_conn(pub);
        if (cmd == SOON_LATE)
            tu_sleep_ns(5 * TU_MS); /* beyond the subscriber's poll: it sleeps again */
        if (cmd != SOON_ONLY)
            tu_publish_pattern(pub, SIZE, ++seq);
        /* The subscriber woke, saw the hint and cleared it. */
        ferry_time t0 = ferry_now();
        while (atomic_load(&h->pub_soon) != 0) {
            TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "the subscriber never saw the hint");
            tu_sleep_ns(100 * 1000);
        }
        /* No publication: after its poll it sleeps again. */
        if (cmd == SOON_ONLY)
            until_asleep(pub);
        tu_send(&l->from_pub, cmd);
    }
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

/* A subscriber asleep in ferry_wait that a publisher wakes ahead of a publication polls for it,
 * takes it when it comes within the poll and sleeps again when it does not: the early wake-up
 * never ends the wait without a sample. */
static void test_wake_soon(void)
{
    soonctl l = {tu_pipe_make(), tu_pipe_make()};
    pid_t child = tu_fork(soon_publisher_main, &l, 60);
    ferry_node *node = tu_node("soon");
    ferry_subscriber *sub = make_sub(node);
    ferry_sample s;

    /* No publication, and then a hostile publisher's wake-ups with a garbage hint: every wait
     * times out after its full timeout and not much later, however late the publisher comes,
     * until it saw the subscriber asleep again. */
    static const uint64_t quiet[] = {SOON_ONLY, SOON_HOSTILE};
    for (size_t q = 0; q < sizeof quiet / sizeof quiet[0]; q++) {
        uint64_t cmd = quiet[q];
        tu_send(&l.to_pub, cmd);
        ferry_time t0 = ferry_now();
        while (!tu_readable(&l.from_pub)) {
            TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "the publisher never answered");
            ferry_time w0 = ferry_now();
            TU_ERR(ferry_wait(sub, 100 * TU_MS), FERRY_ETIMEDOUT);
            TU_CMP_I64(tu_since(w0), >=, 100 * TU_MS);
            TU_CMP_I64(tu_since(w0), <, 1100 * TU_MS);
        }
        TU_EQ_U64(tu_recv(&l.from_pub, TU_WAIT_MS), cmd);
        TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
    }

    uint64_t seq = 0;
    for (uint64_t cmd = SOON_PUBLISH; cmd <= SOON_LATE; cmd++) {
        tu_send(&l.to_pub, cmd);
        TU_OK(ferry_wait(sub, TU_WAIT_NS));
        TU_OK(ferry_take(sub, &s));
        TU_EQ_U64(s.sequence, ++seq);
        TU_SAMPLE_INTACT(&s, SIZE);
        TU_OK(ferry_release(sub, &s));
        TU_EQ_U64(tu_recv(&l.from_pub, TU_WAIT_MS), cmd);
    }
    tu_send(&l.to_pub, MSG_QUIT);
    TU_CHILD_OK(child);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

int main(void)
{
    TU_RUN(test_wake_soon);
    return 0;
}
