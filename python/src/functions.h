/*
 * The module's functions and the dicts of counters (functions.c).
 */
#ifndef FERRY_PY_FUNCTIONS_H
#define FERRY_PY_FUNCTIONS_H

#include "util.h"

/* stats() of a publisher or subscriber, and the "stats" of inspect()'s endpoints. */
PyObject *pyf_publisher_stats(const ferry_publisher_stats *s);
PyObject *pyf_subscriber_stats(const ferry_subscriber_stats *s);

#endif
