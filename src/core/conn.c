/* The connection segment: its layout, its creation by the publisher, its mapping by the
 * subscriber (conn.h). */
#include "core/conn.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

uint64_t ferry__conn_layout(uint32_t deliver_capacity, uint32_t return_capacity,
                            uint64_t *deliver_offset, uint64_t *return_offset)
{
    uint64_t off = (sizeof(ferry__conn_header) + 63) & ~(uint64_t)63;
    *deliver_offset = off;
    off += (uint64_t)deliver_capacity * sizeof(uint64_t);
    off = (off + 63) & ~(uint64_t)63;
    *return_offset = off;
    off += (uint64_t)return_capacity * sizeof(uint64_t);
    return (off + FERRY__PAGE - 1) & ~(uint64_t)(FERRY__PAGE - 1);
}

static void conn_point(ferry__conn *c, ferry__conn_header *h, uint64_t size,
                       uint32_t deliver_capacity, uint32_t return_capacity)
{
    uint64_t doff, roff;
    ferry__conn_layout(deliver_capacity, return_capacity, &doff, &roff);
    c->hdr = h;
    c->size = size;
    c->dslots = (_Atomic uint64_t *)((uint8_t *)h + doff);
    c->rslots = (_Atomic uint64_t *)((uint8_t *)h + roff);
    c->dmask = deliver_capacity - 1;
    c->rmask = return_capacity - 1;
}

int ferry__conn_create(ferry__conn *c, uint32_t depth, uint32_t max_chunks)
{
    uint32_t dcap = ferry__pow2_at_least(depth), rcap = ferry__pow2_at_least(max_chunks);
    uint64_t doff, roff;
    uint64_t size = ferry__conn_layout(dcap, rcap, &doff, &roff);
    int fd = ferry__memfd_create("ferry-conn");
    ferry__conn_header *h = NULL;
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0 || ferry__fd_reserve(fd, 0, size) != 0 ||
        ferry__memfd_seal(fd, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
        !(h = ferry__map(fd, size, true))) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        errno = e;
        return -1;
    }
    /* Its pages are touched now, not by the first deliveries. */
    ferry__prefault_write(h, size);
    h->magic = FERRY__CONN_MAGIC;
    h->version = FERRY_PROTOCOL_VERSION;
    h->header_size = sizeof *h;
    h->size = size;
    h->deliver_offset = doff;
    h->return_offset = roff;
    h->deliver_capacity = dcap;
    h->depth = depth;
    h->return_capacity = rcap;
    conn_point(c, h, size, dcap, rcap);
    return fd;
}

int ferry__conn_map(ferry__conn *c, int fd, uint64_t size, uint32_t deliver_capacity,
                    uint32_t return_capacity)
{
    ferry__conn_header *h = ferry__map(fd, size, true);
    if (!h)
        return -1;
    conn_point(c, h, size, deliver_capacity, return_capacity);
    /* The rings' pages are mapped now, not by the first samples (a read populates: shared
     * memory needs no write fault, and the publisher may be writing already). */
    ferry__prefault_read(h, size);
    return 0;
}

void ferry__conn_unmap(ferry__conn *c)
{
    ferry__unmap(c->hdr, c->size);
    memset(c, 0, sizeof *c);
}
