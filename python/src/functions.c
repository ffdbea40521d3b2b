/*
 * The module's functions (now, hash, strerror, inspect, clean) and the dicts of counters that
 * inspect() and the endpoints' stats() give. Calls util.c and args.c only.
 */
#include "functions.h"

#include "args.h"
#include "types.h"

/* ---------------------------------------------------------------------------------------------
 * Counters
 * ------------------------------------------------------------------------------------------- */

#define STAT_U(d, s, f)                                                                         \
    do {                                                                                       \
        PyObject *v_ = PyLong_FromUnsignedLongLong((unsigned long long)(s)->f);                \
        if (v_ == NULL || PyDict_SetItemString(d, #f, v_) < 0) {                               \
            Py_XDECREF(v_);                                                                    \
            Py_DECREF(d);                                                                      \
            return NULL;                                                                       \
        }                                                                                      \
        Py_DECREF(v_);                                                                         \
    } while (0)

/* d["spin"] = how the endpoint's waits spin (ferry_spin_stats); steals d on failure. */
static PyObject *with_spin(PyObject *d, const ferry_spin_stats *sp)
{
    static const char *modes[] = {"spin", "yield", "off", "poll"};
    PyObject *v = Py_BuildValue("{s:s,s:i,s:L,s:I,s:I,s:K,s:K,s:K,s:K}", "mode",
                                sp->mode < 4 ? modes[sp->mode] : "?", "cpu", (int)sp->cpu,
                                "budget_ns", (long long)sp->budget_ns, "peers_elsewhere",
                                (unsigned)sp->peers_elsewhere, "peers_same_cpu",
                                (unsigned)sp->peers_same_cpu, "spins",
                                (unsigned long long)sp->spins, "spins_found",
                                (unsigned long long)sp->spins_found, "paced_spins",
                                (unsigned long long)sp->paced_spins, "paced_found",
                                (unsigned long long)sp->paced_found);
    if (v == NULL || PyDict_SetItemString(d, "spin", v) < 0) {
        Py_XDECREF(v);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(v);
    return d;
}

PyObject *pyf_publisher_stats(const ferry_publisher_stats *s)
{
    PyObject *d = PyDict_New();
    static const char *huge[] = {"off", "thp", "hugetlb", "auto"};
    PyObject *h;

    if (d == NULL) return NULL;
    STAT_U(d, s, id);
    STAT_U(d, s, published);
    STAT_U(d, s, deliveries);
    STAT_U(d, s, dropped);
    STAT_U(d, s, bytes_copied);
    STAT_U(d, s, pool_bytes);
    STAT_U(d, s, pool_bytes_cap);
    STAT_U(d, s, chunks_total);
    STAT_U(d, s, chunks_free);
    STAT_U(d, s, chunks_loaned);
    STAT_U(d, s, chunks_in_use);
    STAT_U(d, s, subscribers);
    STAT_U(d, s, size_classes);
    STAT_U(d, s, subscribers_lost);
    STAT_U(d, s, chunks_reclaimed);
    STAT_U(d, s, rejected);
    STAT_U(d, s, protocol_errors);
    STAT_U(d, s, limited);
    STAT_U(d, s, pending_dropped);
    STAT_U(d, s, huge_bytes);
    h = PyUnicode_FromString((unsigned)s->huge_pages < 4 ? huge[s->huge_pages] : "?");
    if (h == NULL || PyDict_SetItemString(d, "huge_pages", h) < 0) {
        Py_XDECREF(h);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(h);
    return with_spin(d, &s->spin);
}

PyObject *pyf_subscriber_stats(const ferry_subscriber_stats *s)
{
    PyObject *d = PyDict_New();

    if (d == NULL) return NULL;
    STAT_U(d, s, received);
    STAT_U(d, s, dropped);
    STAT_U(d, s, bytes_copied);
    STAT_U(d, s, held);
    STAT_U(d, s, publishers);
    STAT_U(d, s, publishers_lost);
    STAT_U(d, s, rejected);
    STAT_U(d, s, protocol_errors);
    return with_spin(d, &s->spin);
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
    if (text == NULL) return NULL;
    return PyLong_FromUnsignedLongLong((unsigned long long)ferry_hash(text));
}

static PyObject *mod_strerror(PyObject *self, PyObject *arg)
{
    long code = PyLong_AsLong(arg);

    (void)self;
    if (code == -1 && PyErr_Occurred()) return NULL;
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
                      info->kind == FERRY_ENDPOINT_PUBLISHER ? "publisher" : "subscriber",
                      "alive", info->alive ? Py_True : Py_False, "pid", (int)info->pid, "id",
                      (unsigned long long)info->id, "topic", info->topic, "type_name",
                      info->type_name, "type_hash", (unsigned long long)info->type_hash,
                      "node_name", info->node_name, "stats", stats, "depth",
                      (unsigned)info->depth);
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
    if (!pyf_where(domain_arg, dir_arg, &domain, &dir)) return NULL;
    acc.list = PyList_New(0);
    if (acc.list == NULL) return NULL;
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
    if (!pyf_where(domain_arg, dir_arg, &domain, &dir)) return NULL;
    err = ferry_clean(dir, domain, &removed);
    if (err != FERRY_OK) return pyf_raise(err, "ferry_clean(domain %u)", (unsigned)domain);
    return PyLong_FromUnsignedLong(removed);
}

static PyMethodDef functions[] = {
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

bool pyf_functions_add(PyObject *module)
{
    return PyModule_AddFunctions(module, functions) == 0;
}
