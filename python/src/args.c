/*
 * Arguments as the objects take them: timeouts, stamps, the domain and directory. Calls util.c
 * only.
 */
#include "args.h"

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

        if (ns == -1 && PyErr_Occurred()) return -1;
        sec = ns / 1000000000LL;
        nsec = ns % 1000000000LL;
        if (nsec < 0) {
            nsec += 1000000000LL;
            sec -= 1;
        }
    } else if (!PyArg_ParseTuple(value, "LL;stamp is (sec, nanosec) or an int of nanoseconds",
                                 &sec, &nsec)) {
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
    if (t == -1.0 && PyErr_Occurred()) return false;
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

        if (d == -1 && PyErr_Occurred()) return false;
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
        if (*dir == NULL) return false;
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
