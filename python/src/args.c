/*
 * Arguments as the objects take them: timeouts, stamps, the domain and directory, type names,
 * options, point fields, tensor dtypes and shapes. Calls util.c only.
 */
#include "args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

PyObject *pyf_stamp_get(const ferry_stamp *s)
{
    return Py_BuildValue("(iI)", (int)s->sec, (unsigned)s->nanosec);
}

/* A stamp from (sec, nanosec) or from an int of nanoseconds. */
int pyf_stamp_set(ferry_stamp *s, PyObject *value)
{
    long long sec, nsec;

    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "stamp cannot be deleted");
        return -1;
    }
    if (PyLong_Check(value)) {
        long long ns = PyLong_AsLongLong(value);

        if (ns == -1 && PyErr_Occurred())
            return -1;
        sec = ns / 1000000000LL;
        nsec = ns % 1000000000LL;
        if (nsec < 0) {
            nsec += 1000000000LL;
            sec -= 1;
        }
    } else if (!PyArg_ParseTuple(value, "LL;stamp is (sec, nanosec) or an int of nanoseconds", &sec,
                                 &nsec)) {
        return -1;
    }
    if (sec < INT32_MIN || sec > INT32_MAX || nsec < 0 || nsec > 999999999LL) {
        PyErr_SetString(PyExc_ValueError, "stamp out of range (sec 32-bit, nanosec 0..999999999)");
        return -1;
    }
    s->sec = (int32_t)sec;
    s->nanosec = (uint32_t)nsec;
    return 0;
}

/* None: for ever; a number of seconds >= 0 otherwise. */
bool pyf_timeout_ns(PyObject *timeout, int64_t *out)
{
    double t;

    if (timeout == NULL || timeout == Py_None) {
        *out = FERRY_FOREVER;
        return true;
    }
    t = PyFloat_AsDouble(timeout);
    if (t == -1.0 && PyErr_Occurred())
        return false;
    if (!(t >= 0.0)) {
        PyErr_SetString(PyExc_ValueError, "timeout must be None or a number of seconds >= 0");
        return false;
    }
    *out = t >= 9.2e9 ? FERRY_FOREVER : (int64_t)(t * 1e9);
    return true;
}

bool pyf_where(PyObject *domain_arg, PyObject *dir_arg, uint32_t *domain, const char **dir)
{
    *domain = 0;
    *dir = NULL;
    if (domain_arg != NULL && domain_arg != Py_None) {
        long long d = PyLong_AsLongLong(domain_arg);

        if (d == -1 && PyErr_Occurred())
            return false;
        if (d < 0 || d > FERRY_DOMAIN_MAX) {
            pyf_raise(FERRY_EINVAL, "domain %lld is outside 0..%u", d, FERRY_DOMAIN_MAX);
            return false;
        }
        *domain = (uint32_t)d;
    } else {
        const char *env = getenv("FERRY_DOMAIN");

        if (env != NULL && env[0] != '\0') {
            char *end;
            unsigned long d = strtoul(env, &end, 10);

            if (*end != '\0' || env[0] == '-' || d > FERRY_DOMAIN_MAX) {
                pyf_raise(FERRY_EINVAL, "FERRY_DOMAIN='%s' is not a domain number 0..%u", env,
                          FERRY_DOMAIN_MAX);
                return false;
            }
            *domain = (uint32_t)d;
        }
    }
    if (dir_arg != NULL && dir_arg != Py_None) {
        *dir = PyUnicode_AsUTF8AndSize(dir_arg, NULL);
        if (*dir == NULL)
            return false;
        if ((*dir)[0] == '\0') {
            pyf_raise(FERRY_EINVAL, "dir is empty: give a directory, or None for the default");
            return false;
        }
    } else {
        const char *env = getenv("FERRY_DIR");

        if (env != NULL && env[0] == '\0') {
            pyf_raise(FERRY_EINVAL, "FERRY_DIR is set but empty: give a directory, or unset it "
                                    "for /dev/shm/ferry-<uid>");
            return false;
        }
        *dir = env;
    }
    return true;
}

const char *pyf_type_name(const char *type)
{
    if (strcmp(type, "image") == 0)
        return FERRY_IMAGE_TYPE_NAME;
    if (strcmp(type, "pointcloud") == 0)
        return FERRY_POINTCLOUD_TYPE_NAME;
    if (strcmp(type, "tensor") == 0)
        return FERRY_TENSOR_TYPE_NAME;
    return type;
}

bool pyf_opt_u64(PyObject *v, const char *name, unsigned long long max, unsigned long long *out)
{
    unsigned long long x;

    if (v == NULL || v == Py_None)
        return true;
    if (PyBool_Check(v) || !PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int", name);
        return false;
    }
    x = PyLong_AsUnsignedLongLong(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        pyf_raise(FERRY_EINVAL, "%s must be an int from 0 to %llu", name, max);
        return false;
    }
    if (x > max) {
        pyf_raise(FERRY_EINVAL, "%s=%llu is above %llu", name, x, max);
        return false;
    }
    *out = x;
    return true;
}

bool pyf_opt_i64(PyObject *v, const char *name, int64_t *out)
{
    long long x;

    if (v == NULL || v == Py_None)
        return true;
    if (PyBool_Check(v) || !PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int", name);
        return false;
    }
    x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred())
        return false;
    *out = (int64_t)x;
    return true;
}

bool pyf_opt_bool(PyObject *v, bool *out)
{
    int t;

    if (v == NULL || v == Py_None)
        return true;
    t = PyObject_IsTrue(v);
    if (t < 0)
        return false;
    *out = t != 0;
    return true;
}

bool pyf_opt_choice(PyObject *v, const char *name, const char *const *names, int n, int *out)
{
    const char *s;
    int i;

    if (v == NULL || v == Py_None)
        return true;
    s = PyUnicode_AsUTF8AndSize(v, NULL);
    if (s == NULL)
        return false;
    for (i = 0; i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return true;
        }
    }
    pyf_raise(FERRY_EINVAL, "%s='%s' is not one of the choices", name, s);
    return false;
}

static bool point_datatype(PyObject *v, uint8_t *out)
{
    static const char *const names[] = {"",      "int8",   "uint8",   "int16",  "uint16",
                                        "int32", "uint32", "float32", "float64"};
    int i;

    if (PyLong_Check(v)) {
        long d = PyLong_AsLong(v);

        if (d < 1 || d > 8) {
            pyf_raise(FERRY_EINVAL, "point datatype %ld is not a PointField constant 1..8", d);
            return false;
        }
        *out = (uint8_t)d;
        return true;
    }
    if (!PyUnicode_Check(v)) {
        PyObject *name = PyObject_GetAttrString(v, "name"); /* a numpy dtype */
        bool ok;

        if (name == NULL)
            return false;
        ok = point_datatype(name, out);
        Py_DECREF(name);
        return ok;
    }
    for (i = 1; i <= 8; i++) {
        if (strcmp(PyUnicode_AsUTF8AndSize(v, NULL), names[i]) == 0) {
            *out = (uint8_t)i;
            return true;
        }
    }
    pyf_raise(FERRY_EINVAL, "point datatype '%s' is not int8..uint32, float32 or float64",
              PyUnicode_AsUTF8AndSize(v, NULL));
    return false;
}

/* fields: (name, datatype[, count]) packed one after the other, or (name, offset, datatype,
 * count) at explicit offsets. */
bool pyf_point_fields(PyObject *seq, ferry_point_field *fields, uint32_t *n)
{
    PyObject *fast = PySequence_Fast(seq, "fields must be a sequence of tuples");
    Py_ssize_t count, i;
    uint32_t at = 0;

    if (fast == NULL)
        return false;
    count = PySequence_Size(fast);
    if (count < 1 || count > FERRY_POINTCLOUD_FIELDS_MAX) {
        Py_DECREF(fast);
        pyf_raise(FERRY_EINVAL, "a point cloud has 1..%u fields, not %zd",
                  FERRY_POINTCLOUD_FIELDS_MAX, count);
        return false;
    }
    memset(fields, 0, sizeof(ferry_point_field) * (size_t)count);
    for (i = 0; i < count; i++) {
        PyObject *t = PySequence_GetItem(fast, i);
        PyObject *name = NULL, *dt = NULL;
        unsigned int offset = at, cnt = 1;
        const char *s;
        bool ok;

        if (t == NULL)
            break;
        if (PyTuple_Check(t) && PyTuple_Size(t) == 4)
            ok = PyArg_ParseTuple(t, "UIOI", &name, &offset, &dt, &cnt);
        else
            ok = PyArg_ParseTuple(t,
                                  "UO|I;a field is (name, datatype[, count]) or (name, "
                                  "offset, datatype, count)",
                                  &name, &dt, &cnt);
        if (ok) {
            s = PyUnicode_AsUTF8AndSize(name, NULL);
            ok = s != NULL && point_datatype(dt, &fields[i].datatype);
            if (ok && strlen(s) > FERRY_FIELD_NAME_MAX) {
                pyf_raise(FERRY_EINVAL, "field name '%s' is longer than %u bytes", s,
                          FERRY_FIELD_NAME_MAX);
                ok = false;
            }
            if (ok) {
                snprintf(fields[i].name, sizeof fields[i].name, "%s", s);
                fields[i].offset = offset;
                fields[i].count = cnt;
                at = offset + ferry_point_datatype_size(fields[i].datatype) * cnt;
            }
        }
        Py_DECREF(t);
        if (!ok)
            break;
    }
    Py_DECREF(fast);
    if (i < count)
        return false;
    *n = (uint32_t)count;
    return true;
}

bool pyf_tensor_dtype(PyObject *v, ferry_dtype *out)
{
    PyObject *name = NULL;
    const char *s;
    int d;

    if (PyUnicode_Check(v)) {
        name = Py_NewRef(v);
    } else {
        /* a numpy dtype (its .name) or a scalar type such as numpy.float32 (its __name__) */
        name = PyObject_GetAttrString(v, "name");
        if (name == NULL || !PyUnicode_Check(name)) {
            PyErr_Clear();
            Py_XDECREF(name);
            name = PyObject_GetAttrString(v, "__name__");
        }
        /* a torch dtype has neither: its str() is "torch.float32" */
        if (name == NULL || !PyUnicode_Check(name)) {
            PyErr_Clear();
            Py_XDECREF(name);
            name = PyObject_Str(v);
            if (name == NULL)
                return false;
        }
    }
    s = PyUnicode_AsUTF8AndSize(name, NULL);
    if (s == NULL) {
        Py_DECREF(name);
        return false;
    }
    if (strncmp(s, "torch.", 6) == 0)
        s += 6;
    for (d = FERRY_DTYPE_INT8; d <= FERRY_DTYPE_BOOL; d++) {
        if (strcmp(s, ferry_dtype_name((ferry_dtype)d)) == 0 ||
            (d == FERRY_DTYPE_BOOL && strcmp(s, "bool_") == 0)) {
            *out = (ferry_dtype)d;
            Py_DECREF(name);
            return true;
        }
    }
    pyf_raise(FERRY_EINVAL, "dtype '%s' is not a ferry tensor dtype", s);
    Py_DECREF(name);
    return false;
}

bool pyf_int64_list(PyObject *seq, const char *what, int64_t *out, uint32_t *n)
{
    PyObject *fast = PySequence_Fast(seq, "shape and strides are sequences of ints");
    Py_ssize_t count, i;

    if (fast == NULL)
        return false;
    count = PySequence_Size(fast);
    if (count > FERRY_TENSOR_DIMS_MAX) {
        Py_DECREF(fast);
        pyf_raise(FERRY_EINVAL, "%s has %zd dimensions; at most %u", what, count,
                  FERRY_TENSOR_DIMS_MAX);
        return false;
    }
    for (i = 0; i < count; i++) {
        PyObject *item = PySequence_GetItem(fast, i);
        long long x;

        if (item == NULL)
            break;
        x = PyLong_AsLongLong(item);
        Py_DECREF(item);
        if (x == -1 && PyErr_Occurred())
            break;
        out[i] = (int64_t)x;
    }
    Py_DECREF(fast);
    if (i < count)
        return false;
    *n = (uint32_t)count;
    return true;
}
