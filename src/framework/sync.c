/*
 * Approximate-time synchronisation (include/ferry/sync.h, docs/sync.md). Two layers: the policy
 * core, pure and allocation-free after creation, and the synchroniser, which feeds it samples
 * taken from real subscribers and releases what the core discards. Tokens of the core are, for
 * the synchroniser, indices of sample slots of the token's topic.
 */
#include "framework/sync_core.h"
#include "core/module.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SYNC_QUEUE_MAX 4096u

struct ferry__sync_core {
    uint32_t n, cap;
    int64_t max_interval;
    int64_t *stamp; /* n rings of cap entries */
    uint64_t *token;
    uint32_t head[FERRY_SYNC_MAX_TOPICS];
    uint32_t len[FERRY_SYNC_MAX_TOPICS];
    int64_t last[FERRY_SYNC_MAX_TOPICS]; /* latest stamp accepted on the topic */
    bool seen[FERRY_SYNC_MAX_TOPICS];
    /* Output of the last add: each set consumes one entry of every queue, so one add emits at
     * most cap sets; it discards at most everything queued plus the new entry. */
    uint64_t *sets;
    uint32_t nsets;
    uint32_t *dtopic;
    uint64_t *dtoken;
    uint32_t ndiscarded;
};

static size_t core_at(const ferry__sync_core *c, uint32_t t, uint32_t k)
{
    return (size_t)t * c->cap + (c->head[t] + k) % c->cap;
}

static uint64_t core_pop(ferry__sync_core *c, uint32_t t)
{
    uint64_t tok = c->token[core_at(c, t, 0)];
    c->head[t] = (c->head[t] + 1) % c->cap;
    c->len[t]--;
    return tok;
}

static void core_discard(ferry__sync_core *c, uint32_t t, uint64_t tok)
{
    c->dtopic[c->ndiscarded] = t;
    c->dtoken[c->ndiscarded] = tok;
    c->ndiscarded++;
}

ferry_err ferry__sync_core_create(ferry__sync_core **out, uint32_t n, uint32_t cap,
                                  int64_t max_interval_ns)
{
    if (!out || n < FERRY_SYNC_MIN_TOPICS || n > FERRY_SYNC_MAX_TOPICS || cap == 0 ||
        cap > SYNC_QUEUE_MAX || max_interval_ns < 0)
        return FERRY_EINVAL;
    ferry__sync_core *c = calloc(1, sizeof *c);
    if (!c)
        return FERRY_ENOMEM;
    size_t slots = (size_t)n * cap;
    c->n = n;
    c->cap = cap;
    c->max_interval = max_interval_ns;
    c->stamp = calloc(slots, sizeof *c->stamp);
    c->token = calloc(slots, sizeof *c->token);
    c->sets = calloc(slots, sizeof *c->sets);
    c->dtopic = calloc(slots + 1, sizeof *c->dtopic);
    c->dtoken = calloc(slots + 1, sizeof *c->dtoken);
    if (!c->stamp || !c->token || !c->sets || !c->dtopic || !c->dtoken) {
        ferry__sync_core_destroy(c);
        return FERRY_ENOMEM;
    }
    *out = c;
    return FERRY_OK;
}

void ferry__sync_core_destroy(ferry__sync_core *c)
{
    if (!c)
        return;
    free(c->stamp);
    free(c->token);
    free(c->sets);
    free(c->dtopic);
    free(c->dtoken);
    free(c);
}

/* Emits every set that is known to be optimal, dropping on the way what can be in no set. */
static void core_process(ferry__sync_core *c)
{
    for (;;) {
        for (uint32_t t = 0; t < c->n; t++)
            if (c->len[t] == 0)
                return;
        uint32_t pivot = 0;
        for (uint32_t t = 1; t < c->n; t++)
            if (c->stamp[core_at(c, t, 0)] > c->stamp[core_at(c, pivot, 0)])
                pivot = t;
        int64_t p = c->stamp[core_at(c, pivot, 0)];
        /* Every later message of the pivot's topic is >= p, so moving another head forward up to
         * p never widens a set; what is passed over can be in no better set. */
        for (uint32_t t = 0; t < c->n; t++)
            while (t != pivot && c->len[t] >= 2 && c->stamp[core_at(c, t, 1)] <= p)
                core_discard(c, t, core_pop(c, t));
        uint32_t oldest = 0;
        for (uint32_t t = 1; t < c->n; t++)
            if (c->stamp[core_at(c, t, 0)] < c->stamp[core_at(c, oldest, 0)])
                oldest = t;
        if (c->max_interval > 0 && p - c->stamp[core_at(c, oldest, 0)] > c->max_interval) {
            /* Any set holding the oldest head also holds a pivot-topic message >= p. */
            core_discard(c, oldest, core_pop(c, oldest));
            continue;
        }
        /* Optimal when no future message can come closer to p: each other topic's head is at p,
         * or the topic has a message later than p already (stamps of a topic do not decrease). */
        for (uint32_t t = 0; t < c->n; t++) {
            if (t == pivot)
                continue;
            int64_t h = c->stamp[core_at(c, t, 0)];
            int64_t tail = c->stamp[core_at(c, t, c->len[t] - 1)];
            if (h != p && tail <= p)
                return;
        }
        uint64_t *set = &c->sets[(size_t)c->nsets * c->n];
        for (uint32_t t = 0; t < c->n; t++)
            set[t] = core_pop(c, t);
        c->nsets++;
    }
}

ferry_err ferry__sync_core_add(ferry__sync_core *c, uint32_t topic, int64_t stamp, uint64_t token)
{
    if (!c || topic >= c->n)
        return FERRY_EINVAL;
    c->nsets = 0;
    c->ndiscarded = 0;
    if (c->seen[topic] && stamp < c->last[topic]) {
        core_discard(c, topic, token);
        return FERRY_OK;
    }
    c->seen[topic] = true;
    c->last[topic] = stamp;
    if (c->len[topic] == c->cap)
        core_discard(c, topic, core_pop(c, topic));
    size_t at = core_at(c, topic, c->len[topic]);
    c->stamp[at] = stamp;
    c->token[at] = token;
    c->len[topic]++;
    core_process(c);
    return FERRY_OK;
}

void ferry__sync_core_drain(ferry__sync_core *c)
{
    c->nsets = 0;
    c->ndiscarded = 0;
    for (uint32_t t = 0; t < c->n; t++)
        while (c->len[t])
            core_discard(c, t, core_pop(c, t));
}

uint32_t ferry__sync_core_nsets(const ferry__sync_core *c)
{
    return c->nsets;
}

const uint64_t *ferry__sync_core_set(const ferry__sync_core *c, uint32_t i)
{
    return &c->sets[(size_t)i * c->n];
}

uint32_t ferry__sync_core_ndiscarded(const ferry__sync_core *c)
{
    return c->ndiscarded;
}

void ferry__sync_core_discarded(const ferry__sync_core *c, uint32_t i, uint32_t *topic,
                                uint64_t *token)
{
    *topic = c->dtopic[i];
    *token = c->dtoken[i];
}

uint32_t ferry__sync_core_queued(const ferry__sync_core *c, uint32_t topic)
{
    return topic < c->n ? c->len[topic] : 0;
}

/* --- the synchroniser over subscribers -------------------------------------------------------- */

enum slot_state { SLOT_FREE = 0, SLOT_QUEUED, SLOT_READY, SLOT_HANDED };

struct ferry_sync {
    uint32_t n, qs, nslots; /* nslots = qs + 1 per topic: one more for a moment while dropping */
    ferry_sync_options opt;
    ferry_subscriber *subs[FERRY_SYNC_MAX_TOPICS];
    ferry__sync_core *core;
    ferry_waitset *ws;
    ferry_sample *slot;   /* n * nslots */
    unsigned char *state; /* n * nslots */
    uint32_t *ready;      /* ring of (qs + 1) sets of n slot indices */
    uint32_t ready_head, ready_len;
    ferry_sync_stats stats;
};

static int64_t stamp_publish_time(void *arg, uint32_t index, const ferry_sample *s)
{
    (void)arg;
    (void)index;
    return s->publish_time.ns;
}

void ferry_sync_options_init(ferry_sync_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->queue_size = 10;
}

static size_t slot_index(const ferry_sync *s, uint32_t t, uint32_t k)
{
    return (size_t)t * s->nslots + k;
}

ferry_err ferry_sync_create(ferry_sync **out, ferry_subscriber *const subs[], uint32_t n,
                            const ferry_sync_options *options)
{
    ferry_sync_options o;
    ferry_sync_options_init(&o);
    if (options)
        o = *options;
    if (!o.queue_size)
        o.queue_size = 10;
    if (!o.stamp)
        o.stamp = stamp_publish_time;
    if (!out || !subs || n < FERRY_SYNC_MIN_TOPICS || n > FERRY_SYNC_MAX_TOPICS ||
        o.queue_size > SYNC_QUEUE_MAX || o.max_interval_ns < 0)
        return FERRY_EINVAL;
    for (uint32_t i = 0; i < n; i++) {
        /* The synchroniser holds up to queue_size samples of each topic, and one more while it
         * drops the oldest: the subscriber must allow that many. */
        if (!subs[i] || ferry__subscriber_max_held(subs[i]) < o.queue_size + 1)
            return FERRY_EINVAL;
        for (uint32_t j = 0; j < i; j++)
            if (subs[j] == subs[i])
                return FERRY_EINVAL;
    }
    ferry_sync *s = calloc(1, sizeof *s);
    if (!s)
        return FERRY_ENOMEM;
    s->n = n;
    s->qs = o.queue_size;
    s->nslots = o.queue_size + 1;
    s->opt = o;
    memcpy(s->subs, subs, n * sizeof subs[0]);
    s->stats.topics = n;
    ferry_err err = ferry__sync_core_create(&s->core, n, s->qs, o.max_interval_ns);
    if (err)
        goto fail;
    err = FERRY_ENOMEM;
    s->slot = calloc((size_t)n * s->nslots, sizeof *s->slot);
    s->state = calloc((size_t)n * s->nslots, sizeof *s->state);
    s->ready = calloc((size_t)n * s->nslots, sizeof *s->ready);
    if (!s->slot || !s->state || !s->ready)
        goto fail;
    if (o.node) {
        err = ferry_waitset_create(&s->ws, o.node);
        if (err)
            goto fail;
        for (uint32_t i = 0; i < n; i++) {
            err = ferry_waitset_add(s->ws, subs[i], s);
            if (err) {
                for (uint32_t j = 0; j < i; j++)
                    ferry_waitset_remove(s->ws, subs[j]);
                goto fail;
            }
        }
    }
    *out = s;
    return FERRY_OK;
fail:
    if (s->ws)
        ferry_waitset_destroy(s->ws);
    ferry__sync_core_destroy(s->core);
    free(s->slot);
    free(s->state);
    free(s->ready);
    free(s);
    return err;
}

static void slot_release(ferry_sync *s, uint32_t t, uint32_t k)
{
    size_t i = slot_index(s, t, k);
    (void)ferry_release(s->subs[t], &s->slot[i]);
    s->state[i] = SLOT_FREE;
    s->stats.held[t]--;
}

ferry_err ferry_sync_destroy(ferry_sync *s)
{
    if (!s)
        return FERRY_EINVAL;
    for (uint32_t t = 0; t < s->n; t++)
        for (uint32_t k = 0; k < s->nslots; k++)
            if (s->state[slot_index(s, t, k)] != SLOT_FREE)
                slot_release(s, t, k);
    if (s->ws) {
        for (uint32_t t = 0; t < s->n; t++)
            ferry_waitset_remove(s->ws, s->subs[t]);
        ferry_waitset_destroy(s->ws);
    }
    ferry__sync_core_destroy(s->core);
    free(s->slot);
    free(s->state);
    free(s->ready);
    free(s);
    return FERRY_OK;
}

/* Handles the core's output after an add: releases discards, queues sets. */
static void sync_collect(ferry_sync *s)
{
    uint32_t nd = ferry__sync_core_ndiscarded(s->core);
    for (uint32_t i = 0; i < nd; i++) {
        uint32_t t;
        uint64_t tok;
        ferry__sync_core_discarded(s->core, i, &t, &tok);
        slot_release(s, t, (uint32_t)tok);
        s->stats.discarded[t]++;
    }
    uint32_t ns = ferry__sync_core_nsets(s->core);
    for (uint32_t i = 0; i < ns; i++) {
        const uint64_t *set = ferry__sync_core_set(s->core, i);
        uint32_t *dst = &s->ready[(size_t)((s->ready_head + s->ready_len) % s->nslots) * s->n];
        for (uint32_t t = 0; t < s->n; t++) {
            dst[t] = (uint32_t)set[t];
            s->state[slot_index(s, t, dst[t])] = SLOT_READY;
        }
        s->ready_len++;
        s->stats.sets++;
    }
}

/* Takes one sample of topic t into the core. FERRY_EAGAIN when none may or can be taken now. */
static ferry_err sync_take_one(ferry_sync *s, uint32_t t)
{
    /* At the limit, take only when the core will drop its oldest for it. */
    if (s->stats.held[t] > s->qs ||
        (s->stats.held[t] == s->qs && ferry__sync_core_queued(s->core, t) < s->qs))
        return FERRY_EAGAIN;
    uint32_t k = 0;
    while (k < s->nslots && s->state[slot_index(s, t, k)] != SLOT_FREE)
        k++;
    if (k == s->nslots)
        return FERRY_EAGAIN;
    ferry_sample *smp = &s->slot[slot_index(s, t, k)];
    ferry_err err = ferry_take(s->subs[t], smp);
    if (err == FERRY_ELIMIT)
        return FERRY_EAGAIN;
    if (err)
        return err;
    s->state[slot_index(s, t, k)] = SLOT_QUEUED;
    s->stats.held[t]++;
    s->stats.received[t]++;
    int64_t stamp = s->opt.stamp(s->opt.stamp_arg, t, smp);
    (void)ferry__sync_core_add(s->core, t, stamp, k);
    sync_collect(s);
    return FERRY_OK;
}

ferry_err ferry_sync_take(ferry_sync *s, ferry_sample set[])
{
    if (!s || !set)
        return FERRY_EINVAL;
    /* Bounded, so that fast publishers cannot keep the caller here. */
    for (uint32_t round = 0; round <= 4 * s->nslots; round++) {
        if (s->ready_len) {
            const uint32_t *r = &s->ready[(size_t)s->ready_head * s->n];
            for (uint32_t t = 0; t < s->n; t++) {
                size_t i = slot_index(s, t, r[t]);
                s->state[i] = SLOT_HANDED;
                set[t] = s->slot[i];
            }
            s->ready_head = (s->ready_head + 1) % s->nslots;
            s->ready_len--;
            s->stats.taken++;
            return FERRY_OK;
        }
        bool progress = false;
        for (uint32_t t = 0; t < s->n && !s->ready_len; t++) {
            ferry_err err = sync_take_one(s, t);
            if (err == FERRY_OK)
                progress = true;
            else if (err != FERRY_EAGAIN)
                return err;
        }
        if (!progress && !s->ready_len)
            return FERRY_EAGAIN;
    }
    return FERRY_EAGAIN;
}

static bool same_sample(const ferry_sample *a, const ferry_sample *b)
{
    return a->data == b->data && a->sequence == b->sequence && a->publisher_id == b->publisher_id &&
           memcmp(a->private_, b->private_, sizeof a->private_) == 0;
}

ferry_err ferry_sync_release(ferry_sync *s, ferry_sample set[])
{
    if (!s || !set)
        return FERRY_EINVAL;
    uint32_t found[FERRY_SYNC_MAX_TOPICS];
    for (uint32_t t = 0; t < s->n; t++) {
        uint32_t k = 0;
        while (k < s->nslots && !(s->state[slot_index(s, t, k)] == SLOT_HANDED &&
                                  same_sample(&s->slot[slot_index(s, t, k)], &set[t])))
            k++;
        if (k == s->nslots)
            return FERRY_ESTATE;
        found[t] = k;
    }
    ferry_err first = FERRY_OK;
    for (uint32_t t = 0; t < s->n; t++) {
        size_t i = slot_index(s, t, found[t]);
        ferry_err err = ferry_release(s->subs[t], &s->slot[i]);
        if (err && !first)
            first = err;
        s->state[i] = SLOT_FREE;
        s->stats.held[t]--;
        memset(&set[t], 0, sizeof set[t]);
    }
    return first;
}

ferry_err ferry_sync_wait(ferry_sync *s, int64_t timeout_ns)
{
    if (!s)
        return FERRY_EINVAL;
    if (s->ready_len)
        return FERRY_OK;
    if (!s->ws)
        return FERRY_ENOTSUP;
    void *ready[FERRY_SYNC_MAX_TOPICS];
    size_t count = 0;
    return ferry_waitset_wait(s->ws, timeout_ns, ready, FERRY_SYNC_MAX_TOPICS, &count);
}

ferry_err ferry_sync_stats_get(const ferry_sync *s, ferry_sync_stats *out)
{
    if (!s || !out)
        return FERRY_EINVAL;
    *out = s->stats;
    return FERRY_OK;
}
