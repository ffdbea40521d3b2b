/*
 * The bridge's diagnostics: log lines through the caller's log function (or to stderr), and the
 * per-second limits that keep a broken or hostile peer from flooding the log.
 */
#include "bridge_internal.h"

#include <stdarg.h>
#include <stdio.h>

/* ---------------------------------------------------------------------------------------------
 * Diagnostics
 * ------------------------------------------------------------------------------------------- */

void ferry__bridge_log(ferry_bridge *b, ferry_log_level level, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    if (level > b->o.log_level)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (b->o.log != NULL)
        b->o.log(b->o.log_arg, level, msg);
    else
        fprintf(stderr, "ferry bridge: %s\n", msg);
}

/* True when a message of this kind may go out now: at most per_second in any one-second window,
 * so that a flood (a broken or hostile peer) cannot flood the log. */
bool ferry__bridge_rate_ok_n(rate_log *r, unsigned per_second)
{
    int64_t now = ferry_now().ns;

    if (r->last_ns == 0 || now - r->last_ns >= NS_PER_S) {
        r->last_ns = now;
        r->lines = 0;
    }
    if (r->lines >= per_second) {
        r->suppressed++;
        return false;
    }
    r->lines++;
    return true;
}

bool ferry__bridge_rate_ok(rate_log *r)
{
    return ferry__bridge_rate_ok_n(r, 1);
}
