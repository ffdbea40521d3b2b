/*
 * The module's functions (now, hash, strerror, inspect, clean) and the dicts of counters that
 * inspect() and the endpoints' stats() give. Calls util.c and args.c only.
 */
#include "functions.h"

#include "args.h"
#include "types.h"

#include <stddef.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Counters
 * ------------------------------------------------------------------------------------------- */

/* A counter of a stats struct: its key, where it is and its width (uint32_t or uint64_t). */
typedef struct counter {
    const char *name;
    size_t offset, size;
} counter;

/* A brace initialiser that clang-format 14 would split around the '#'. */
/* clang-format off */
#define COUNTER(type, f) {#f, offsetof(type, f), sizeof(((type *)0)->f)}
/* clang-format on */
#define PUB(f) COUNTER(ferry_publisher_stats, f)
#define SUB(f) COUNTER(ferry_subscriber_stats, f)

static const counter pub_counters[] = {
    PUB(id),
    PUB(published),
    PUB(deliveries),
    PUB(dropped),
    PUB(bytes_copied),
    PUB(pool_bytes),
    PUB(pool_bytes_cap),
    PUB(chunks_total),
    PUB(chunks_free),
    PUB(chunks_loaned),
    PUB(chunks_in_use),
    PUB(subscribers),
    PUB(size_classes),
    PUB(subscribers_lost),
    PUB(chunks_reclaimed),
    PUB(rejected),
    PUB(protocol_errors),
    PUB(limited),
    PUB(pending_dropped),
    PUB(huge_bytes),
};

static const counter sub_counters[] = {
    SUB(received),   SUB(dropped),         SUB(bytes_copied), SUB(held),
    SUB(publishers), SUB(publishers_lost), SUB(rejected),     SUB(protocol_errors),
};

/* d[key] = v, taking v; false (d left as it is) with an exception, or when v is NULL. */
static bool set_item(PyObject *d, const char *key, PyObject *v)
{
    bool ok = v != NULL && PyDict_SetItemString(d, key, v) == 0;

    Py_XDECREF(v);
    return ok;
}

/* A dict of the n counters of stats struct s, in their order; NULL with an exception. */
static PyObject *counters_dict(const void *s, const counter *c, size_t n)
{
    PyObject *d = PyDict_New();
    size_t i;

    for (i = 0; d != NULL && i < n; i++) {
        const char *at = (const char *)s + c[i].offset;
        uint32_t v32;
        uint64_t v64;

        if (c[i].size == sizeof v32) {
            memcpy(&v32, at, sizeof v32);
            v64 = v32;
        } else {
            memcpy(&v64, at, sizeof v64);
        }
        if (!set_item(d, c[i].name, PyLong_FromUnsignedLongLong((unsigned long long)v64)))
            Py_CLEAR(d);
    }
    return d;
}

/* d["spin"] = how the endpoint's waits spin (ferry_spin_stats); steals d (NULL: passed on). */
static PyObject *with_spin(PyObject *d, const ferry_spin_stats *sp)
{
    static const char *modes[] = {"spin", "yield", "off", "poll"};

    if (d != NULL && !set_item(d, "spin",
                               Py_BuildValue("{s:s,s:i,s:L,s:I,s:I,s:K,s:K,s:K,s:K}", "mode",
                                             sp->mode < 4 ? modes[sp->mode] : "?", "cpu",
                                             (int)sp->cpu, "budget_ns", (long long)sp->budget_ns,
                                             "peers_elsewhere", (unsigned)sp->peers_elsewhere,
                                             "peers_same_cpu", (unsigned)sp->peers_same_cpu,
                                             "spins", (unsigned long long)sp->spins, "spins_found",
                                             (unsigned long long)sp->spins_found, "paced_spins",
                                             (unsigned long long)sp->paced_spins, "paced_found",
                                             (unsigned long long)sp->paced_found)))
        Py_CLEAR(d);
    return d;
}

PyObject *pyf_publisher_stats(const ferry_publisher_stats *s)
{
    static const char *huge[] = {"off", "thp", "hugetlb", "auto"};
    PyObject *d = counters_dict(s, pub_counters, sizeof pub_counters / sizeof pub_counters[0]);

    if (d != NULL &&
        !set_item(d, "huge_pages",
                  PyUnicode_FromString((unsigned)s->huge_pages < 4 ? huge[s->huge_pages] : "?")))
        Py_CLEAR(d);
    return with_spin(d, &s->spin);
}

PyObject *pyf_subscriber_stats(const ferry_subscriber_stats *s)
{
    return with_spin(counters_dict(s, sub_counters, sizeof sub_counters / sizeof sub_counters[0]),
                     &s->spin);
}

/* ---------------------------------------------------------------------------------------------
 * Module functions
 * ------------------------------------------------------------------------------------------- */

static PyObject *mod_now(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromLongLong((long long)ferry_now().ns);
}

static PyObject *mod_hash(PyObject *self, PyObject *arg)
{
    const char *text;

    (void)self;
    text = PyUnicode_AsUTF8AndSize(arg, NULL);
    if (text == NULL)
        return NULL;
    return PyLong_FromUnsignedLongLong((unsigned long long)ferry_hash(text));
}

static PyObject *mod_strerror(PyObject *self, PyObject *arg)
{
    long code = PyLong_AsLong(arg);

    (void)self;
    if (code == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(ferry_strerror((ferry_err)code));
}

typedef struct inspect_acc {
    PyObject *list;
    bool failed;
} inspect_acc;

static bool inspect_one(void *arg, const ferry_endpoint_info *info)
{
    inspect_acc *acc = arg;
    PyObject *stats = info->kind == FERRY_ENDPOINT_PUBLISHER ? pyf_publisher_stats(&info->pub)
                                                             : pyf_subscriber_stats(&info->sub);
    PyObject *d;

    if (stats == NULL) {
        acc->failed = true;
        return false;
    }
    d = Py_BuildValue("{s:s,s:O,s:i,s:K,s:s,s:s,s:K,s:s,s:N,s:I}", "kind",
                      info->kind == FERRY_ENDPOINT_PUBLISHER ? "publisher" : "subscriber", "alive",
                      info->alive ? Py_True : Py_False, "pid", (int)info->pid, "id",
                      (unsigned long long)info->id, "topic", info->topic, "type_name",
                      info->type_name, "type_hash", (unsigned long long)info->type_hash,
                      "node_name", info->node_name, "stats", stats, "depth", (unsigned)info->depth);
    if (d == NULL || PyList_Append(acc->list, d) < 0) {
        Py_XDECREF(d);
        acc->failed = true;
        return false;
    }
    Py_DECREF(d);
    return true;
}

static PyObject *mod_inspect(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"topic", "domain", "dir", NULL};
    PyObject *domain_arg = Py_None, *dir_arg = Py_None;
    const char *topic = NULL, *dir = NULL;
    inspect_acc acc = {NULL, false};
    uint32_t domain = 0;
    ferry_err err;

    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|zOO:inspect", kwlist, &topic, &domain_arg,
                                     &dir_arg))
        return NULL;
    if (!pyf_where(domain_arg, dir_arg, &domain, &dir))
        return NULL;
    acc.list = PyList_New(0);
    if (acc.list == NULL)
        return NULL;
    err = ferry_inspect(dir, domain, topic, inspect_one, &acc);
    if (acc.failed) {
        Py_DECREF(acc.list);
        return NULL;
    }
    if (err != FERRY_OK) {
        Py_DECREF(acc.list);
        return pyf_raise(err, "ferry_inspect(%s)", topic != NULL ? topic : "every topic");
    }
    return acc.list;
}

static PyObject *mod_clean(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"domain", "dir", NULL};
    PyObject *domain_arg = Py_None, *dir_arg = Py_None;
    const char *dir = NULL;
    uint32_t domain = 0, removed = 0;
    ferry_err err;

    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:clean", kwlist, &domain_arg, &dir_arg))
        return NULL;
    if (!pyf_where(domain_arg, dir_arg, &domain, &dir))
        return NULL;
    err = ferry_clean(dir, domain, &removed);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_clean(domain %u)", (unsigned)domain);
    return PyLong_FromUnsignedLong(removed);
}

PyMethodDef pyf_functions[] = {
    {"now", mod_now, METH_NOARGS,
     "now() -> int\n\nThe CLOCK_MONOTONIC time in nanoseconds, the clock of publish_time."},
    {"hash", mod_hash, METH_O,
     "hash(text) -> int\n\nferry_hash(): the 64-bit FNV-1a hash ferry uses as a type hash."},
    {"strerror", mod_strerror, METH_O,
     "strerror(code) -> str\n\nferry_strerror(): the message of a ferry_err number."},
    {"inspect", (PyCFunction)(void (*)(void))mod_inspect, METH_VARARGS | METH_KEYWORDS,
     "inspect(topic=None, domain=None, dir=None) -> list[dict]\n\n"
     "The endpoints of a domain (ferry_inspect), live and dead: one dict each with kind,\n"
     "alive, pid, id, topic, type_name, type_hash, node_name, depth and stats. domain and dir\n"
     "default to FERRY_DOMAIN and FERRY_DIR, as for the ferry command."},
    {"clean", (PyCFunction)(void (*)(void))mod_clean, METH_VARARGS | METH_KEYWORDS,
     "clean(domain=None, dir=None) -> int\n\n"
     "Removes what dead processes left in the domain directory (ferry_clean); returns the\n"
     "number of files removed."},
    {NULL, NULL, 0, NULL},
};
