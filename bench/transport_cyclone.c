/*
 * Cyclone DDS through its C API, the DDS peer, two ways:
 *   cyclone-udp  the default network path over loopback: dds_write of a sequence<octet> sample
 *                (serialised, sent as UDP datagrams through the kernel), dds_take on a loan of
 *                the deserialised sample;
 *   cyclone-shm  Cyclone's shared-memory path through iceoryx (Debian's build has it): a
 *                fixed-size sample loaned with dds_loan_sample, written in place, taken on a
 *                loan. It needs the RouDi of bench/roudi.c and KEEP_LAST, so it has no
 *                lossless rows.
 * Both are reliable and volatile. Drop-oldest rows use KEEP_LAST of the row's depth on both
 * ends, lossless rows KEEP_ALL (the writer blocks while its history of unacknowledged samples
 * is full). Each side is a fresh process: Cyclone's threads and domains are per process.
 */
#include "bench.h"
#include "bench_frame.h"

#include <dds/dds.h>
#include <dds/ddsc/dds_loan_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CY_TOPIC "ferry_bench_transport"
#define CY_CONNECT_NS ((int64_t)10 * 1000000000)
#define CY_BLOCK_NS ((int64_t)10 * 1000000000) /* a reliable write waits at most this long */

/* Loopback only, unicast discovery (lo has no multicast), 64 kB datagrams so that a 6 MB
 * frame is ~100 fragments rather than ~4600, socket buffers that hold a few frames. */
static const char cy_config_udp[] =
    "<CycloneDDS><Domain Id=\"any\">"
    "<General><Interfaces><NetworkInterface name=\"lo\"/></Interfaces>"
    "<AllowMulticast>false</AllowMulticast>"
    "<MaxMessageSize>65500B</MaxMessageSize><MaxRexmitMessageSize>65500B</MaxRexmitMessageSize>"
    "<FragmentSize>62KiB</FragmentSize></General>"
    "<Discovery><ParticipantIndex>auto</ParticipantIndex>"
    "<Peers><Peer address=\"127.0.0.1\"/></Peers></Discovery>"
    "<Internal><SocketReceiveBufferSize min=\"default\" max=\"64MiB\"/>"
    "<SocketSendBufferSize min=\"default\" max=\"16MiB\"/>"
    "<Watermarks><WhcHigh>48MiB</WhcHigh></Watermarks></Internal>"
    "</Domain></CycloneDDS>";

static const char cy_config_shm[] =
    "<CycloneDDS><Domain Id=\"any\">"
    "<General><Interfaces><NetworkInterface name=\"lo\"/></Interfaces>"
    "<AllowMulticast>false</AllowMulticast></General>"
    "<Discovery><ParticipantIndex>auto</ParticipantIndex>"
    "<Peers><Peer address=\"127.0.0.1\"/></Peers></Discovery>"
    "<SharedMemory><Enable>true</Enable><LogLevel>warn</LogLevel></SharedMemory>"
    "</Domain></CycloneDDS>";

typedef struct cy_state {
    bench_params p;
    bool shm;
    dds_domainid_t domain;
    const dds_topic_descriptor_t *desc;
    dds_entity_t dom, participant, topic, writer, reader, ws, cond;
    ferry_bench_Bytes pub_sample; /* udp publisher: a sample over its own buffer */
    char *own;
    void *loan;     /* shm publisher: the loaned sample */
    void *taken[1]; /* subscriber: the sample between sub_recv and sub_done */
} cy_state;

static int cy_fail(const char *what, dds_return_t rc)
{
    fprintf(stderr, "ferry bench: cyclone: %s: %s\n", what, dds_strretcode(rc));
    return -1;
}

static const dds_topic_descriptor_t *fixed_desc(size_t payload)
{
    switch (payload) {
    case 64:
        return &ferry_bench_Fixed64_desc;
    case 1048576:
        return &ferry_bench_Fixed1048576_desc;
    case 2764800:
        return &ferry_bench_Fixed2764800_desc;
    case 6220800:
        return &ferry_bench_Fixed6220800_desc;
    default:
        return NULL;
    }
}

static int cy_prepare_common(void **state, const bench_params *p, bool shm)
{
    if (p->variant && p->variant[0]) {
        fprintf(stderr, "ferry bench: cyclone: unknown variant '%s'\n", p->variant);
        return -1;
    }
    cy_state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->p = *p;
    s->shm = shm;
    s->desc = shm ? fixed_desc(p->payload) : &ferry_bench_Bytes_desc;
    if (!s->desc) {
        fprintf(stderr, "ferry bench: cyclone-shm: no fixed-size type of %zu bytes\n", p->payload);
        free(s);
        return -1;
    }
    /* A domain of this run only, so that no other DDS traffic of the host meets ours. */
    s->domain = (dds_domainid_t)(100 + getpid() % 100);
    *state = s;
    return 0;
}

static int cy_prepare_udp(void **state, const bench_params *p)
{
    return cy_prepare_common(state, p, false);
}

static int cy_prepare_shm(void **state, const bench_params *p)
{
    return cy_prepare_common(state, p, true);
}

static int cy_entities(cy_state *s)
{
    s->dom = dds_create_domain(s->domain, s->shm ? cy_config_shm : cy_config_udp);
    if (s->dom < 0)
        return cy_fail("dds_create_domain", s->dom);
    s->participant = dds_create_participant(s->domain, NULL, NULL);
    if (s->participant < 0)
        return cy_fail("dds_create_participant", s->participant);
    s->topic = dds_create_topic(s->participant, s->desc, CY_TOPIC, NULL, NULL);
    if (s->topic < 0)
        return cy_fail("dds_create_topic", s->topic);
    return 0;
}

static dds_qos_t *cy_qos(const cy_state *s)
{
    dds_qos_t *q = dds_create_qos();
    dds_qset_reliability(q, DDS_RELIABILITY_RELIABLE, CY_BLOCK_NS);
    dds_qset_durability(q, DDS_DURABILITY_VOLATILE);
    if (s->p.lossless)
        dds_qset_history(q, DDS_HISTORY_KEEP_ALL, 0);
    else
        dds_qset_history(q, DDS_HISTORY_KEEP_LAST, (int32_t)s->p.depth);
    return q;
}

static int cy_pub_open(void *state)
{
    cy_state *s = state;
    if (cy_entities(s) != 0)
        return -1;
    dds_qos_t *q = cy_qos(s);
    s->writer = dds_create_writer(s->participant, s->topic, q, NULL);
    dds_delete_qos(q);
    if (s->writer < 0)
        return cy_fail("dds_create_writer", s->writer);
    if (s->shm && !dds_is_loan_available(s->writer)) {
        fprintf(stderr, "ferry bench: cyclone-shm: Cyclone DDS gives no shared-memory loans "
                        "for this writer\n");
        return -1;
    }
    if (!s->shm) {
        s->own = malloc(s->p.payload);
        if (!s->own) {
            fprintf(stderr, "ferry bench: out of memory\n");
            return -1;
        }
        memset(s->own, 0, s->p.payload);
        s->pub_sample.data._buffer = (uint8_t *)s->own;
        s->pub_sample.data._length = (uint32_t)s->p.payload;
        s->pub_sample.data._maximum = (uint32_t)s->p.payload;
        s->pub_sample.data._release = false;
    }
    int64_t deadline = cli_now_ns() + CY_CONNECT_NS;
    for (;;) {
        dds_publication_matched_status_t st;
        dds_return_t rc = dds_get_publication_matched_status(s->writer, &st);
        if (rc < 0)
            return cy_fail("publication matched status", rc);
        if (st.current_count > 0)
            return 0;
        if (cli_now_ns() > deadline) {
            fprintf(stderr, "ferry bench: cyclone: no reader matched within 10 s\n");
            return -1;
        }
        usleep(1000);
    }
}

static int cy_pub_loan(void *state, void **buf, size_t *size)
{
    cy_state *s = state;
    if (s->shm) {
        dds_return_t rc = dds_loan_sample(s->writer, &s->loan);
        if (rc < 0)
            return cy_fail("dds_loan_sample", rc);
        *buf = s->loan;
    } else {
        *buf = s->own;
    }
    *size = s->p.payload;
    return 0;
}

static int cy_pub_send(void *state, void *buf)
{
    cy_state *s = state;
    dds_return_t rc = dds_write(s->writer, s->shm ? buf : (void *)&s->pub_sample);
    s->loan = NULL;
    return rc < 0 ? cy_fail("dds_write", rc) : 0;
}

static void cy_close(void *state)
{
    cy_state *s = state;
    if (s->dom > 0)
        dds_delete(s->dom);
    s->dom = s->participant = s->writer = s->reader = 0;
    free(s->own);
    s->own = NULL;
}

static int cy_sub_open(void *state)
{
    cy_state *s = state;
    if (cy_entities(s) != 0)
        return -1;
    dds_qos_t *q = cy_qos(s);
    s->reader = dds_create_reader(s->participant, s->topic, q, NULL);
    dds_delete_qos(q);
    if (s->reader < 0)
        return cy_fail("dds_create_reader", s->reader);
    s->ws = dds_create_waitset(s->participant);
    s->cond = dds_create_readcondition(s->reader, DDS_ANY_STATE);
    if (s->ws < 0 || s->cond < 0)
        return cy_fail("waitset", s->ws < 0 ? s->ws : s->cond);
    dds_return_t rc = dds_waitset_attach(s->ws, s->cond, s->reader);
    if (rc < 0)
        return cy_fail("dds_waitset_attach", rc);
    int64_t deadline = cli_now_ns() + CY_CONNECT_NS;
    for (;;) {
        dds_subscription_matched_status_t st;
        rc = dds_get_subscription_matched_status(s->reader, &st);
        if (rc < 0)
            return cy_fail("subscription matched status", rc);
        if (st.current_count > 0)
            return 0;
        if (cli_now_ns() > deadline) {
            fprintf(stderr, "ferry bench: cyclone: no writer matched within 10 s\n");
            return -1;
        }
        usleep(1000);
    }
}

static int cy_sub_recv(void *state, const void **data, size_t *size, int64_t *recv_ns,
                       int64_t timeout_ns)
{
    cy_state *s = state;
    int64_t deadline = cli_now_ns() + timeout_ns;
    for (;;) {
        dds_sample_info_t info;
        s->taken[0] = NULL;
        dds_return_t n = dds_take(s->reader, s->taken, &info, 1, 1);
        if (n < 0)
            return cy_fail("dds_take", n);
        if (n > 0 && !info.valid_data) {
            dds_return_loan(s->reader, s->taken, 1);
            continue;
        }
        if (n > 0) {
            *recv_ns = cli_now_ns();
            if (s->shm) {
                *data = s->taken[0];
                *size = s->p.payload;
            } else {
                const ferry_bench_Bytes *b = s->taken[0];
                *data = b->data._buffer;
                *size = b->data._length;
            }
            return 0;
        }
        int64_t left = deadline - cli_now_ns();
        if (left <= 0)
            return 1;
        n = dds_waitset_wait(s->ws, NULL, 0, left);
        if (n < 0)
            return cy_fail("dds_waitset_wait", n);
    }
}

static int cy_sub_done(void *state)
{
    cy_state *s = state;
    dds_return_t rc = dds_return_loan(s->reader, s->taken, 1);
    return rc < 0 ? cy_fail("dds_return_loan", rc) : 0;
}

static void cy_release(void *state)
{
    cy_state *s = state;
    free(s->own);
    free(s);
}

static const char *cy_shm_available(void)
{
    return bench_roudi_available();
}

const bench_transport bench_transport_cyclone = {
    .name = "cyclone-udp",
    .summary = "Cyclone DDS: dds_write of sequence<octet>, loopback UDP, dds_take on a loan",
    .caps = BENCH_CAP_LOSSLESS | BENCH_CAP_PROCESS,
    .prepare = cy_prepare_udp,
    .pub_open = cy_pub_open,
    .pub_loan = cy_pub_loan,
    .pub_send = cy_pub_send,
    .pub_close = cy_close,
    .sub_open = cy_sub_open,
    .sub_recv = cy_sub_recv,
    .sub_done = cy_sub_done,
    .sub_close = cy_close,
    .release = cy_release,
};

const bench_transport bench_transport_cyclone_shm = {
    .name = "cyclone-shm",
    .summary = "Cyclone DDS over iceoryx: dds_loan_sample of a fixed-size sample, dds_write",
    .caps = BENCH_CAP_PROCESS | BENCH_CAP_ROUDI,
    .available = cy_shm_available,
    .prepare = cy_prepare_shm,
    .pub_open = cy_pub_open,
    .pub_loan = cy_pub_loan,
    .pub_send = cy_pub_send,
    .pub_close = cy_close,
    .sub_open = cy_sub_open,
    .sub_recv = cy_sub_recv,
    .sub_done = cy_sub_done,
    .sub_close = cy_close,
    .release = cy_release,
};
