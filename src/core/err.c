/* Error codes: names and messages. */
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>

static const struct {
    const char *name;
    const char *message;
} errors[FERRY_ERR_COUNT_] = {
    [FERRY_OK] = {"FERRY_OK", "success"},
    [FERRY_EINVAL] = {"FERRY_EINVAL", "invalid argument"},
    [FERRY_ENOMEM] = {"FERRY_ENOMEM", "out of memory"},
    [FERRY_EAGAIN] = {"FERRY_EAGAIN", "nothing available yet, try again"},
    [FERRY_ETIMEDOUT] = {"FERRY_ETIMEDOUT", "timed out"},
    [FERRY_ETYPE] = {"FERRY_ETYPE", "topic is in use with another type"},
    [FERRY_ETOOBIG] = {"FERRY_ETOOBIG", "size exceeds the configured maximum"},
    [FERRY_EPOOL] = {"FERRY_EPOOL", "publisher pool exhausted"},
    [FERRY_ESTATE] = {"FERRY_ESTATE",
                      "not allowed in the current state (already released or published?)"},
    [FERRY_ECLOSED] = {"FERRY_ECLOSED", "handle was destroyed"},
    [FERRY_EBUSY] = {"FERRY_EBUSY", "still in use (live children, loans or held samples)"},
    [FERRY_ELIMIT] = {"FERRY_ELIMIT", "configured limit reached"},
    [FERRY_ENAME] = {"FERRY_ENAME", "invalid topic, type or node name"},
    [FERRY_ESYS] = {"FERRY_ESYS", "system call failed (see errno)"},
    [FERRY_EPROTO] = {"FERRY_EPROTO", "peer broke the protocol or corrupted shared memory"},
    [FERRY_EPERM] = {"FERRY_EPERM", "permission denied"},
    [FERRY_ENODEV] = {"FERRY_ENODEV", "no such device"},
    [FERRY_ENOTSUP] = {"FERRY_ENOTSUP", "not supported"},
    [FERRY_EFOREIGN] = {"FERRY_EFOREIGN",
                        "sample or loan belongs to another publisher or subscriber"},
    [FERRY_EQOS] = {"FERRY_EQOS", "publisher does not offer a policy the subscriber requires"},
};

const char *ferry_strerror(ferry_err err)
{
    if ((unsigned)err >= FERRY_ERR_COUNT_)
        return "unknown ferry error";
    return errors[err].message;
}

const char *ferry_errname(ferry_err err)
{
    if ((unsigned)err >= FERRY_ERR_COUNT_)
        return "FERRY_E?";
    return errors[err].name;
}

ferry_time ferry_now(void)
{
    return (ferry_time){ferry__clock_ns()};
}

uint64_t ferry_hash(const char *text)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    if (!text)
        return h;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    return h;
}

void ferry__check_failed(const char *file, int line, const char *what, uint64_t left,
                         uint64_t right)
{
    fprintf(stderr, "ferry: %s:%d: invariant broken: %s (left %llu, right %llu)\n", file, line,
            what, (unsigned long long)left, (unsigned long long)right);
    abort();
}
