/*
 * Arguments as the objects take them (args.c): timeouts, stamps, the domain and directory, type
 * names, options, point fields, tensor dtypes and shapes.
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
/* The type argument of publisher() and subscribe(): "image", "pointcloud" and "tensor" stand for
 * their type names; anything else is a type name. */
const char *pyf_type_name(const char *type);
/* Keyword options, which None (or absent) leaves at their default *out: an int (not a bool) up
 * to max, any int64, anything true or false, or one of n names (its index). */
bool pyf_opt_u64(PyObject *v, const char *name, unsigned long long max, unsigned long long *out);
bool pyf_opt_i64(PyObject *v, const char *name, int64_t *out);
bool pyf_opt_bool(PyObject *v, bool *out);
bool pyf_opt_choice(PyObject *v, const char *name, const char *const *names, int n, int *out);
/* A point cloud's fields: (name, datatype[, count]) packed one after the other, or (name,
 * offset, datatype, count) at explicit offsets; a datatype is a PointField constant, a name
 * ("float32") or a NumPy dtype. */
bool pyf_point_fields(PyObject *seq, ferry_point_field *fields, uint32_t *n);
/* A tensor dtype argument: a name ("float32"), a NumPy dtype or scalar type, or a torch dtype. */
bool pyf_tensor_dtype(PyObject *v, ferry_dtype *out);
/* A shape or strides argument: at most FERRY_TENSOR_DIMS_MAX ints. */
bool pyf_int64_list(PyObject *seq, const char *what, int64_t *out, uint32_t *n);

#endif
