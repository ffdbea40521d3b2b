/* Control messages and segment geometry: everything a peer sends is checked here. */
#include "core/core.h"

#include <string.h>

static bool terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

ferry_err ferry__hello_decode(const void *buf, size_t len, ferry__hello *out)
{
    if (len != sizeof *out)
        return FERRY_EPROTO;
    memcpy(out, buf, sizeof *out);
    if (out->magic != FERRY__MSG_MAGIC || out->version != FERRY_PROTOCOL_VERSION ||
        out->kind != FERRY__MSG_HELLO)
        return FERRY_EPROTO;
    if (!terminated(out->topic, sizeof out->topic) ||
        !terminated(out->type_name, sizeof out->type_name) ||
        !terminated(out->node_name, sizeof out->node_name))
        return FERRY_EPROTO;
    if (out->depth == 0 || out->depth > 4096 || out->history > 4096 ||
        out->overflow > FERRY_OVERFLOW_BLOCK || (out->require & ~FERRY__QOS_ALL) != 0)
        return FERRY_EPROTO;
    return FERRY_OK;
}

ferry_err ferry__welcome_decode(const void *buf, size_t len, ferry__welcome *out)
{
    if (len != sizeof *out)
        return FERRY_EPROTO;
    memcpy(out, buf, sizeof *out);
    if (out->magic != FERRY__MSG_MAGIC || out->version != FERRY_PROTOCOL_VERSION ||
        out->kind != FERRY__MSG_WELCOME)
        return FERRY_EPROTO;
    if (!terminated(out->type_name, sizeof out->type_name) ||
        !terminated(out->reason, sizeof out->reason))
        return FERRY_EPROTO;
    if (out->status < 0 || out->status >= FERRY_ERR_COUNT_)
        return FERRY_EPROTO;
    return FERRY_OK;
}

const char *ferry__qos_names(uint32_t bits)
{
    bits &= FERRY__QOS_ALL;
    return bits == FERRY__QOS_ALL       ? "reliability and durability"
           : bits == FERRY_QOS_RELIABLE ? "reliability"
           : bits == FERRY_QOS_DURABLE  ? "durability"
                                        : "nothing";
}

static bool is_pow2(uint32_t v)
{
    return v && (v & (v - 1)) == 0;
}

ferry_err ferry__welcome_check(const ferry__welcome *w, uint64_t data_fd_size,
                               uint64_t conn_fd_size)
{
    if (w->max_chunks == 0 || w->max_chunks > 65536)
        return FERRY_EPROTO;
    if (!is_pow2(w->deliver_capacity) || w->depth == 0 || w->depth > w->deliver_capacity ||
        w->deliver_capacity > 8192)
        return FERRY_EPROTO;
    if (!is_pow2(w->return_capacity) || w->return_capacity < w->max_chunks ||
        w->return_capacity > 65536)
        return FERRY_EPROTO;
    if (w->data_size != data_fd_size || w->data_size < FERRY__PAGE)
        return FERRY_EPROTO;
    /* Table and arena inside the segment, without overflow. */
    uint64_t table_bytes = (uint64_t)w->max_chunks * sizeof(ferry__chunk_entry);
    if (w->table_offset < sizeof(ferry__data_header) || w->table_offset % 8 ||
        w->table_offset > w->data_size || table_bytes > w->data_size - w->table_offset)
        return FERRY_EPROTO;
    if (w->arena_offset % FERRY__PAGE || w->arena_offset > w->data_size ||
        w->arena_offset < w->table_offset + table_bytes)
        return FERRY_EPROTO;
    if (w->payload_offset < sizeof(ferry__chunk_header) || w->payload_offset > FERRY__PAGE ||
        w->payload_offset % 64)
        return FERRY_EPROTO;
    uint64_t d, r;
    uint64_t size = ferry__conn_layout(w->deliver_capacity, w->return_capacity, &d, &r);
    if (w->conn_size != size || conn_fd_size != size)
        return FERRY_EPROTO;
    return FERRY_OK;
}

ferry_err ferry__conn_check(const ferry__conn_header *h, const ferry__welcome *w)
{
    uint64_t d, r;
    ferry__conn_layout(w->deliver_capacity, w->return_capacity, &d, &r);
    if (h->magic != FERRY__CONN_MAGIC || h->version != FERRY_PROTOCOL_VERSION ||
        h->size != w->conn_size || h->deliver_offset != d || h->return_offset != r ||
        h->deliver_capacity != w->deliver_capacity || h->return_capacity != w->return_capacity ||
        h->depth != w->depth)
        return FERRY_EPROTO;
    return FERRY_OK;
}

void ferry__msg_init(void *msg, size_t size, uint32_t kind)
{
    ferry__bye head = {.magic = FERRY__MSG_MAGIC, .version = FERRY_PROTOCOL_VERSION, .kind = kind};
    memset(msg, 0, size);
    memcpy(msg, &head, sizeof head);
}

void ferry__bye_init(ferry__bye *out)
{
    ferry__msg_init(out, sizeof *out, FERRY__MSG_BYE);
}

void ferry__wake_init(ferry__bye *out)
{
    ferry__msg_init(out, sizeof *out, FERRY__MSG_WAKE);
}

uint32_t ferry__ctl_decode(const void *buf, size_t len)
{
    ferry__bye b;
    if (len != sizeof b)
        return 0;
    memcpy(&b, buf, sizeof b);
    if (b.magic != FERRY__MSG_MAGIC || b.version != FERRY_PROTOCOL_VERSION ||
        (b.kind != FERRY__MSG_BYE && b.kind != FERRY__MSG_WAKE))
        return 0;
    return b.kind;
}

ferry_err ferry__bye_decode(const void *buf, size_t len)
{
    return ferry__ctl_decode(buf, len) == FERRY__MSG_BYE ? FERRY_OK : FERRY_EPROTO;
}

ferry_err ferry__attach_decode(const void *buf, size_t len, int nfds, ferry__attach_msg *out)
{
    if (len != sizeof *out)
        return FERRY_EPROTO;
    memcpy(out, buf, sizeof *out);
    if (out->magic != FERRY__MSG_MAGIC || out->version != FERRY_PROTOCOL_VERSION ||
        out->kind != FERRY__MSG_ATTACH || out->nfds > FERRY__ATTACH_FDS ||
        out->nfds != (uint32_t)nfds)
        return FERRY_EPROTO;
    return FERRY_OK;
}
