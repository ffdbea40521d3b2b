/*
 * ferry.Subscriber: subscribing (the topic's type looked up when not given), taking and waiting,
 * with the GIL released. The samples it takes are ferry.Sample (sample.c). A subscriber closed
 * while arrays still read some of its samples is destroyed only when the last of them is gone
 * (sub_finish); until then it is closed to its user and keeps its connections.
 */
#include "sub.h"

#include "args.h"
#include "functions.h"
#include "types.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------------------------------------
 * Subscriber
 * ------------------------------------------------------------------------------------------- */

static int sub_close(PyObject *self);

bool pyf_sub_own(pyf_sub *s, const char *what)
{
    const char *owner;

    if (s->owner == NULL)
        return true;
    owner = s->owner_link->ops->name;
    if (s->owner_link->closed)
        pyf_raise(FERRY_EBUSY,
                  "%s('%s'): the %s the subscriber was read through is closed, but "
                  "an array or tensor still reads what it took: delete that first",
                  what, s->topic, owner);
    else
        pyf_raise(FERRY_EBUSY,
                  "%s('%s'): the subscriber is read through a %s: take from it, or "
                  "close it first",
                  what, s->topic, owner);
    return false;
}

/* Destroys a closed subscriber once no array is left over one of its samples and its Sync or
 * GpuSubscriber is destroyed. */
static void sub_finish(PyObject *self)
{
    pyf_sub *s = (pyf_sub *)self;
    bool home = pyf_home(s->link.gen);
    ferry_err err = FERRY_OK;

    if (!s->link.closed || s->sub == NULL || s->samples != NULL || s->owner != NULL)
        return;
    /* Whoever holds the lock finishes it when letting the lock go (pyf_sub_unlock). A forked
     * child only forgets it, without the lock. */
    if (home && !PyThread_acquire_lock(s->lock, NOWAIT_LOCK))
        return;
    pyf_sub_drain(s);
    if (home)
        err = ferry_subscriber_destroy(s->sub);
    if (err == FERRY_OK)
        s->sub = NULL; /* else (a sample still held) dealloc tries again */
    if (home)
        PyThread_release_lock(s->lock);
    if (err == FERRY_OK)
        pyf_child_unlink(&s->link);
}

typedef struct found_type {
    char name[FERRY_TYPE_NAME_MAX + 1];
    uint64_t hash;
    bool found, from_publisher;
} found_type;

/* The type of a topic as `ferry echo` finds it: a live publisher's, else a live subscriber's. */
static bool note_type(void *arg, const ferry_endpoint_info *info)
{
    found_type *t = arg;

    if (!info->alive || (t->found && t->from_publisher))
        return true;
    if (t->found && info->kind != FERRY_ENDPOINT_PUBLISHER)
        return true;
    snprintf(t->name, sizeof t->name, "%s", info->type_name);
    t->hash = info->type_hash;
    t->from_publisher = info->kind == FERRY_ENDPOINT_PUBLISHER;
    t->found = true;
    return !t->from_publisher;
}

/* How often subscribe() looks for a publisher to take the type from while none is there. */
#define TYPE_POLL_NS 20000000LL

/* The type of topic as `ferry echo` finds it: with none yet, it waits for an endpoint to take
 * it from, looking at the domain every TYPE_POLL_NS (the GIL released) until timeout_ns
 * (FERRY_FOREVER: for ever) passed; then TimeoutError. Ctrl-C interrupts it. */
typedef struct type_waiting {
    pyf_node *node;
    const char *topic;
    found_type *ft;
} type_waiting;

static ferry_err type_step(void *arg)
{
    type_waiting *w = arg;
    ferry_err err;

    if (!pyf_node_open(w->node, "Node.subscribe"))
        return PYF_ERAISED;
    memset(w->ft, 0, sizeof *w->ft);
    err = ferry_inspect(w->node->dir, w->node->domain, w->topic, note_type, w->ft);
    if (err != FERRY_OK) {
        pyf_raise(err, "ferry_inspect('%s')", w->topic);
        return PYF_ERAISED;
    }
    return w->ft->found ? FERRY_OK : FERRY_EAGAIN;
}

static ferry_err type_block(void *arg, int64_t slice_ns)
{
    struct timespec ts = {(time_t)(slice_ns / 1000000000LL), (long)(slice_ns % 1000000000LL)};

    (void)arg;
    nanosleep(&ts, NULL);
    return FERRY_ETIMEDOUT;
}

static const pyf_wait type_slices = {type_step, type_block, NULL, true, TYPE_POLL_NS};

static bool topic_type(pyf_node *node, const char *topic, int64_t timeout_ns, found_type *ft)
{
    type_waiting w = {node, topic, ft};
    ferry_err err = ferry_topic_validate(topic);

    if (err != FERRY_OK) {
        pyf_raise(err, "subscribe('%s')", topic);
        return false;
    }
    err = pyf_wait_sliced(&type_slices, &w, pyf_deadline(timeout_ns));
    if (err == FERRY_ETIMEDOUT)
        pyf_raise(FERRY_ETIMEDOUT,
                  "subscribe('%s', timeout %.3f s): no publisher of the topic "
                  "came to take the type from (type= subscribes at once)",
                  topic, (double)timeout_ns / 1e9);
    return err == FERRY_OK;
}

static bool opt_u32(PyObject *v, const char *name, uint32_t *out)
{
    unsigned long x;

    if (v == NULL || v == Py_None)
        return true;
    x = PyLong_AsUnsignedLong(v);
    if (x == (unsigned long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        pyf_raise(FERRY_EINVAL, "%s must be an int >= 0", name);
        return false;
    }
    if (x > 0xffffffffUL) {
        pyf_raise(FERRY_EINVAL, "%s=%lu is too large", name, x);
        return false;
    }
    *out = (uint32_t)x;
    return true;
}

static const pyf_child_ops sub_ops = {"Subscriber", PYF_CLOSE_SUB, sub_close, sub_finish};

PyObject *pyf_sub_new(pyf_node *node, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"topic",     "type",       "type_hash",      "depth",    "overflow",
                             "history",   "max_held",   "max_publishers", "prefault", "spin_ns",
                             "busy_poll", "background", "timeout",        NULL};
    PyObject *o_hash = Py_None, *o_depth = NULL, *o_hist = NULL, *o_held = NULL, *o_pubs = NULL,
             *o_spin = NULL, *o_timeout = Py_None;
    int64_t timeout_ns;
    const char *topic, *type = NULL, *overflow = "drop_oldest";
    int prefault = 0, busy = 0, background = 0;
    ferry_subscriber_options o;
    found_type ft;
    const char *type_name;
    uint64_t hash;
    ferry_err err;
    pyf_sub *s;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|z$OOsOOOpOppO:subscribe", kwlist, &topic,
                                     &type, &o_hash, &o_depth, &overflow, &o_hist, &o_held, &o_pubs,
                                     &prefault, &o_spin, &busy, &background, &o_timeout))
        return NULL;
    if (!pyf_timeout_ns(o_timeout, &timeout_ns))
        return NULL;
    if (!pyf_node_open(node, "Node.subscribe"))
        return NULL;
    memset(&ft, 0, sizeof ft);
    if (type == NULL) {
        if (!topic_type(node, topic, timeout_ns, &ft))
            return NULL;
        type_name = ft.name;
        hash = ft.hash;
    } else {
        type_name = pyf_type_name(type);
        hash = ferry_hash(type_name);
    }
    if (o_hash != Py_None) {
        hash = (uint64_t)PyLong_AsUnsignedLongLong(o_hash);
        if (PyErr_Occurred())
            return NULL;
    }
    ferry_subscriber_options_init(&o);
    if (!opt_u32(o_depth, "depth", &o.depth) || !opt_u32(o_hist, "history", &o.history) ||
        !opt_u32(o_held, "max_held", &o.max_held) ||
        !opt_u32(o_pubs, "max_publishers", &o.max_publishers))
        return NULL;
    if (strcmp(overflow, "drop_oldest") == 0)
        o.overflow = FERRY_OVERFLOW_DROP_OLDEST;
    else if (strcmp(overflow, "block") == 0)
        o.overflow = FERRY_OVERFLOW_BLOCK;
    else
        return pyf_raise(FERRY_EINVAL, "overflow='%s' is not \"drop_oldest\" or \"block\"",
                         overflow);
    if (o_spin != NULL && o_spin != Py_None) {
        long long v = PyLong_AsLongLong(o_spin);

        if (v == -1 && PyErr_Occurred())
            return NULL;
        o.spin_ns = (int64_t)v;
    }
    o.prefault = prefault != 0;
    o.busy_poll = busy != 0;
    o.background = background != 0;

    s = (pyf_sub *)pyf_alloc(pyf.sub_type);
    if (s == NULL)
        return NULL;
    s->kind = pyf_kind_of(type_name);
    s->lock = PyThread_allocate_lock();
    if (s->lock == NULL || (s->topic = pyf_strdup(topic)) == NULL ||
        (s->type_name = pyf_strdup(type_name)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        Py_DECREF(s);
        return NULL;
    }
    pyf_child_link(&s->link, node, &sub_ops, (PyObject *)s);
    err = ferry_subscriber_create(&s->sub, node->node, topic, type_name, hash, &o);
    if (err != FERRY_OK) {
        s->sub = NULL;
        Py_DECREF(s);
        return pyf_raise(err, "ferry_subscriber_create('%s', type %s)", topic, type_name);
    }
    return (PyObject *)s;
}

static int sub_close(PyObject *self)
{
    pyf_sub *s = (pyf_sub *)self;

    if (!pyf_child_home(&s->link, "Subscriber.close"))
        return -1;
    if (s->link.closed)
        return 0;
    /* An open Sync or GpuSubscriber still takes from it: close that first. A closed one that
     * waits for its exports keeps this subscriber until it is destroyed. */
    if (s->owner != NULL && !s->owner_link->closed && !pyf_sub_own(s, "Subscriber.close"))
        return -1;
    if (s->waitset != NULL && s->waitset_forget(s->waitset, s) < 0)
        return -1;
    /* Closed first: a take() or wait() blocked in another thread ends within a slice. */
    s->link.closed = true;
    pyf_lock(s->lock);
    pyf_sub_release_samples(s);
    pyf_sub_drain(s);
    pyf_sub_unlock(s); /* destroys it now when nothing is exported */
    return 0;
}

static void sub_dealloc(PyObject *self)
{
    pyf_sub *s = (pyf_sub *)self;

    /* Samples hold a reference to their subscriber, and a waitset to its members: none is left,
     * but released samples may still be pending. */
    if (s->sub != NULL) {
        pyf_sub_drain(s);
        if (pyf_home(s->link.gen))
            ferry_subscriber_destroy(s->sub);
    }
    pyf_child_unlink(&s->link);
    if (s->lock != NULL)
        PyThread_free_lock(s->lock);
    PyMem_Free(s->topic);
    PyMem_Free(s->type_name);
    pyf_free(self);
}

/* A wait on a subscriber, for take(), wait() and wait_publishers(). */
typedef struct sub_waiting {
    pyf_sub *s;
    unsigned int count;  /* wait_publishers() */
    ferry_sample sample; /* what take() took */
    pyf_waited waited;
} sub_waiting;

/* take() and wait() hold the lock: a release meanwhile waits in the pending list. */
static ferry_err sub_open_step(void *arg)
{
    sub_waiting *w = arg;

    return pyf_wait_open(&w->waited, w->s->link.closed);
}

static ferry_err take_step(void *arg)
{
    sub_waiting *w = arg;
    ferry_err err = sub_open_step(arg);

    if (err != FERRY_EAGAIN)
        return err;
    return pyf_wait_call(&w->waited, ferry_take(w->s->sub, &w->sample), FERRY_EAGAIN, "ferry_take");
}

static ferry_err queued_block(void *arg, int64_t slice_ns)
{
    sub_waiting *w = arg;

    return pyf_wait_call(&w->waited, ferry_wait(w->s->sub, slice_ns), FERRY_ETIMEDOUT,
                         "ferry_wait");
}

static void sub_drain_after(void *arg)
{
    pyf_sub_drain(((sub_waiting *)arg)->s);
}

static const pyf_wait take_slices = {take_step, queued_block, sub_drain_after, true, 0};
static const pyf_wait queued_slices = {sub_open_step, queued_block, sub_drain_after, false, 0};

/* Takes one sample, waiting up to timeout_ns (FERRY_FOREVER: for ever) with the GIL released.
 * Returns a Sample, or None for nothing when none_on_empty, else raises TimeoutError. */
static PyObject *sub_take_wait(pyf_sub *s, int64_t timeout_ns, bool none_on_empty)
{
    int64_t deadline = pyf_deadline(timeout_ns);
    sub_waiting w = {.s = s};
    ferry_err err;

    if (!pyf_child_open(&s->link, s->sub, "Subscriber.take") || !pyf_sub_own(s, "Subscriber.take"))
        return NULL;
    pyf_lock(s->lock);
    pyf_sub_drain(s);
    err = pyf_wait_sliced(&take_slices, &w, deadline);
    pyf_sub_unlock(s);
    if (err == FERRY_OK)
        return pyf_sample_wrap(s, &w.sample);
    if (err != FERRY_ETIMEDOUT || w.waited.failed != NULL)
        return pyf_wait_raise(&w.waited, err, "Subscriber.take", s->topic);
    if (none_on_empty)
        Py_RETURN_NONE;
    return pyf_raise(FERRY_ETIMEDOUT, "take('%s', timeout %.3f s)", s->topic,
                     (double)timeout_ns / 1e9);
}

static PyObject *sub_take(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *o_timeout = Py_None;
    int64_t ns;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:take", kwlist, &o_timeout))
        return NULL;
    if (!pyf_timeout_ns(o_timeout, &ns))
        return NULL;
    return sub_take_wait((pyf_sub *)self, ns, false);
}

static PyObject *sub_try_take(PyObject *self, PyObject *unused)
{
    (void)unused;
    return sub_take_wait((pyf_sub *)self, 0, true);
}

static PyObject *sub_iternext(PyObject *self)
{
    return sub_take_wait((pyf_sub *)self, FERRY_FOREVER, false);
}

static PyObject *sub_iter(PyObject *self)
{
    return Py_NewRef(self);
}

static PyObject *sub_wait(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"timeout", NULL};
    sub_waiting w = {.s = (pyf_sub *)self};
    PyObject *o_timeout = Py_None;
    int64_t deadline, ns;
    ferry_err err;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:wait", kwlist, &o_timeout))
        return NULL;
    if (!pyf_timeout_ns(o_timeout, &ns) ||
        !pyf_child_open(&w.s->link, w.s->sub, "Subscriber.wait") ||
        !pyf_sub_own(w.s, "Subscriber.wait"))
        return NULL;
    deadline = pyf_deadline(ns);
    pyf_lock(w.s->lock);
    err = pyf_wait_sliced(&queued_slices, &w, deadline);
    pyf_sub_unlock(w.s);
    if (err == FERRY_OK || err == FERRY_ETIMEDOUT)
        return PyBool_FromLong(err == FERRY_OK);
    return pyf_wait_raise(&w.waited, err, "Subscriber.wait", w.s->topic);
}

/* wait_publishers(): each slice takes the lock anew, so that other threads take between. */
static ferry_err pubs_step(void *arg)
{
    sub_waiting *w = arg;

    pyf_lock(w->s->lock);
    if (sub_open_step(arg) == FERRY_EAGAIN)
        return FERRY_EAGAIN;
    pyf_sub_unlock(w->s);
    return FERRY_ECLOSED;
}

static ferry_err pubs_block(void *arg, int64_t slice_ns)
{
    sub_waiting *w = arg;

    return ferry_subscriber_wait_publishers(w->s->sub, w->count, slice_ns);
}

static void pubs_after(void *arg)
{
    sub_waiting *w = arg;

    pyf_sub_drain(w->s);
    pyf_sub_unlock(w->s);
}

static const pyf_wait pubs_slices = {pubs_step, pubs_block, pubs_after, false, 0};

static PyObject *sub_wait_publishers(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"count", "timeout", NULL};
    sub_waiting w = {.s = (pyf_sub *)self, .count = 1};
    PyObject *o_timeout = Py_None;
    ferry_err err;
    int64_t ns;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|IO:wait_publishers", kwlist, &w.count,
                                     &o_timeout))
        return NULL;
    if (!pyf_timeout_ns(o_timeout, &ns) ||
        !pyf_child_open(&w.s->link, w.s->sub, "Subscriber.wait_publishers"))
        return NULL;
    err = pyf_wait_sliced(&pubs_slices, &w, pyf_deadline(ns));
    if (err == FERRY_OK)
        Py_RETURN_NONE;
    if (err == PYF_ERAISED || w.waited.closed)
        return pyf_wait_raise(&w.waited, err, "Subscriber.wait_publishers", NULL);
    return pyf_raise(err, "wait_publishers('%s', %u)", w.s->topic, w.count);
}

static PyObject *sub_fileno(PyObject *self, PyObject *unused)
{
    pyf_sub *s = (pyf_sub *)self;
    ferry_err err;
    int fd = -1;

    (void)unused;
    if (!pyf_child_open(&s->link, s->sub, "Subscriber.fileno"))
        return NULL;
    err = ferry_subscriber_fd(s->sub, &fd);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_subscriber_fd('%s')", s->topic);
    return PyLong_FromLong(fd);
}

static PyObject *sub_stats(PyObject *self, PyObject *unused)
{
    pyf_sub *s = (pyf_sub *)self;
    ferry_subscriber_stats st;
    ferry_err err;

    (void)unused;
    if (!pyf_child_open(&s->link, s->sub, "Subscriber.stats"))
        return NULL;
    pyf_lock(s->lock);
    pyf_sub_drain(s);
    err = !s->link.closed ? ferry_subscriber_stats_get(s->sub, &st) : FERRY_ECLOSED;
    pyf_sub_unlock(s);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_subscriber_stats_get('%s')", s->topic);
    return pyf_subscriber_stats(&st);
}

static PyObject *sub_get(PyObject *self, void *closure)
{
    pyf_sub *s = (pyf_sub *)self;

    switch ((int)(intptr_t)closure) {
    case 0:
        return PyUnicode_FromString(s->topic);
    case 1:
        return PyUnicode_FromString(s->type_name);
    case 2:
        return PyUnicode_FromString(pyf_kind_name(s->kind));
    default:
        return PyBool_FromLong(s->link.closed);
    }
}

static PyMethodDef sub_methods[] = {
    {"take", (PyCFunction)(void (*)(void))sub_take, METH_VARARGS | METH_KEYWORDS,
     "take(timeout=None) -> Sample\n\n"
     "Takes the oldest queued sample, waiting up to timeout seconds (None: for ever, 0: not\n"
     "at all) with the GIL released; TimeoutError when none came. Ctrl-C interrupts the wait."},
    {"try_take", sub_try_take, METH_NOARGS,
     "try_take() -> Sample | None\n\nTakes a queued sample, or returns None at once. After None\n"
     "the descriptor of fileno() becomes readable when a sample may be queued."},
    {"wait", (PyCFunction)(void (*)(void))sub_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None) -> bool\n\nWaits until a sample is queued (ferry_wait), with the GIL\n"
     "released; False when timeout seconds passed first."},
    {"wait_publishers", (PyCFunction)(void (*)(void))sub_wait_publishers,
     METH_VARARGS | METH_KEYWORDS,
     "wait_publishers(count=1, timeout=None)\n\nWaits until count publishers are connected;\n"
     "TimeoutError after timeout seconds."},
    {"fileno", sub_fileno, METH_NOARGS,
     "fileno() -> int\n\nThe descriptor of ferry_subscriber_fd, for selectors and asyncio: it\n"
     "becomes readable when a sample may be queued, once try_take() returned None. Owned by\n"
     "the subscriber."},
    {"stats", sub_stats, METH_NOARGS,
     "stats() -> dict\n\nThe subscriber's counters (ferry_subscriber_stats): received, dropped,\n"
     "bytes_copied, held, publishers, ..."},
    PYF_CHILD_CLOSE_METHODS(
        "close()\n\n"
        "Releases the samples still held and destroys the subscriber. A sample an array,\n"
        "memoryview or DLPack tensor still reads stays mapped: it is released, and the subscriber\n"
        "destroyed, when the last of them is gone. Closing twice does nothing.",
        "subscriber"),
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef sub_getset[] = {
    {"topic", sub_get, NULL, "The topic name as given.", (void *)0},
    {"type_name", sub_get, NULL, "The type name subscribed with.", (void *)1},
    {"kind", sub_get, NULL, "\"image\", \"pointcloud\", \"tensor\" or \"bytes\".", (void *)2},
    {"closed", sub_get, NULL, "True once closed.", (void *)3},
    {NULL, NULL, NULL, NULL, NULL},
};

const pyf_type_def pyf_sub_def = {
    .name = "ferry.Subscriber",
    .size = sizeof(pyf_sub),
    .flags = Py_TPFLAGS_BASETYPE,
    .dealloc = sub_dealloc,
    .methods = sub_methods,
    .getset = sub_getset,
    .iter = sub_iter,
    .iternext = sub_iternext,
    .doc = "A subscriber of one topic (Node.subscribe). Iterating it takes samples for\n"
           "ever: `for sample in sub:` blocks in take() between them.",
};
