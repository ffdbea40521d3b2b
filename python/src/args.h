/*
 * Arguments as the objects take them (args.c): timeouts, stamps, the domain and directory.
 */
#ifndef FERRY_PY_ARGS_H
#define FERRY_PY_ARGS_H

#include "util.h"

/* A header's stamp as (sec, nanosec). */
PyObject *pyf_stamp_get(const ferry_stamp *s);
/* A stamp from (sec, nanosec) or from an int of nanoseconds; 0, or -1 with an exception. */
int pyf_stamp_set(ferry_stamp *s, PyObject *value);
/* A timeout argument in nanoseconds: None (or absent) is FERRY_FOREVER, else seconds >= 0. */
bool pyf_timeout_ns(PyObject *timeout, int64_t *out);
/* FERRY_DOMAIN and FERRY_DIR, as the ferry command reads them, for arguments left None; *dir
 * points into the argument or the environment. */
bool pyf_where(PyObject *domain_arg, PyObject *dir_arg, uint32_t *domain, const char **dir);

#endif
