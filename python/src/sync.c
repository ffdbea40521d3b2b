/*
 * ferry.Sync and ferry.SyncSet: the approximate-time synchroniser (ferry/sync.h) over 2..9
 * Subscribers, handing out matched sets as tuples of Samples.
 *
 * A set's samples go back to the publishers together (ferry_sync_release), as the C API wants:
 * each Sample of a set counts one in its pyf_syncset, and the last one to be done (released and
 * with no array or DLPack tensor left over it) gives the whole set back. SyncSet.release() and
 * Sync.release(set) release every member at once; dropping the tuple releases nothing, dropping
 * the members does. While a Sync lives its subscribers are its own: taking from them directly
 * raises BusyError (pyf_sub_own). Closed while an array still reads a sample of a set, it gives
 * back the other sets at once and is destroyed when the last such array is gone
 * (sync_finish); its subscribers stay its own until then.
 *
 * Locks: every ferry_sync call holds the locks of all the Sync's subscribers, taken in index
 * order (a subscriber belongs to one Sync at most, and other paths take one subscriber lock
 * only, so no two threads wait on each other). A set given back while another thread holds
 * them (a wait in progress) is queued on the Sync and given back by that thread.
 */
#include "sub.h"

#include "args.h"
#include "types.h"

#include <ferry/sync.h>

#include <string.h>
#include <time.h>

typedef struct pyf_sync pyf_sync;

struct pyf_syncset {
    pyf_sync *sync; /* a strong reference, until the set is given back or the Sync closed */
    struct pyf_syncset *prev, *next; /* the Sync's list of sets handed out */
    struct pyf_syncset *pending_next;
    bool pending;  /* done, waiting for the Sync's locks to be given back */
    uint32_t live; /* members not done yet */
    ferry_sample set[FERRY_SYNC_MAX_TOPICS];
    PyObject *members[FERRY_SYNC_MAX_TOPICS]; /* borrowed; NULL once done */
};

struct pyf_sync {
    PyObject_HEAD pyf_child link;
    ferry_sync *sync; /* NULL once destroyed (link.closed: closed) */
    uint32_t n;
    pyf_sub *subs[FERRY_SYNC_MAX_TOPICS]; /* strong references */
    struct pyf_syncset *sets;             /* handed out, not given back */
    struct pyf_syncset *pending;          /* done while the locks were held elsewhere */
};
PYF_CHILD_OBJECT(pyf_sync);

static int sync_close(PyObject *self);
static void sync_finish(PyObject *self);

/* ---------------------------------------------------------------------------------------------
 * Locks and giving sets back
 * ------------------------------------------------------------------------------------------- */

static void locks_release(pyf_sync *y, uint32_t upto)
{
    while (upto > 0)
        PyThread_release_lock(y->subs[--upto]->lock);
}

/* Takes every subscriber's lock, waiting (GIL released) when blocking. */
static bool locks_take(pyf_sync *y, bool blocking)
{
    uint32_t i;

    for (i = 0; i < y->n; i++) {
        if (PyThread_acquire_lock(y->subs[i]->lock, NOWAIT_LOCK))
            continue;
        if (!blocking) {
            locks_release(y, i);
            return false;
        }
        pyf_lock(y->subs[i]->lock);
    }
    return true;
}

/* Gives a done set back and frees it. The locks are held. */
static void set_give_back(pyf_sync *y, struct pyf_syncset *set)
{
    PYF_LIST_REMOVE(y->sets, set);
    /* A forked child only forgets its parent's set. */
    if (y->sync != NULL && pyf_home(y->link.gen))
        ferry_sync_release(y->sync, set->set);
    set->sync = NULL;
    PyMem_Free(set);
    Py_DECREF((PyObject *)y);
}

/* Gives back the sets done while another thread held the locks, and the plain samples of the
 * subscribers released meanwhile. The locks are held. */
static void sync_drain(pyf_sync *y)
{
    uint32_t i;

    /* Each give-back drops a reference to y; the caller holds one of its own. */
    while (y->pending != NULL) {
        struct pyf_syncset *set = y->pending;

        y->pending = set->pending_next;
        set_give_back(y, set);
    }
    for (i = 0; i < y->n; i++)
        pyf_sub_drain(y->subs[i]);
}

/* A member of set is done: the last gives the set back. */
static void syncset_done(struct pyf_syncset *set)
{
    pyf_sync *y = set->sync;
    uint32_t i;

    if (set->live == 0)
        return;
    if (--set->live > 0) {
        /* Which member went is of no interest once it is done: clear the first still there
         * that is no longer held (the caller marked it released already). */
        for (i = 0; i < y->n; i++)
            if (set->members[i] != NULL && pyf_sample_set(set->members[i]) == NULL) {
                set->members[i] = NULL;
                break;
            }
        return;
    }
    memset(set->members, 0, sizeof set->members);
    if (!pyf_home(y->link.gen)) { /* a forked child: no lock, nothing given back */
        Py_INCREF((PyObject *)y);
        set_give_back(y, set);
        sync_finish((PyObject *)y);
        Py_DECREF((PyObject *)y);
    } else if (locks_take(y, false)) {
        Py_INCREF((PyObject *)y);
        set_give_back(y, set);
        sync_drain(y);
        locks_release(y, y->n);
        sync_finish((PyObject *)y); /* the last set out of a closed Sync */
        Py_DECREF((PyObject *)y);
    } else {
        /* Whoever holds the locks gives it back (sync_drain) and finishes a closed Sync. */
        set->pending = true;
        set->pending_next = y->pending;
        y->pending = set;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Stamps
 * ------------------------------------------------------------------------------------------- */

static int64_t stamp_ns(const ferry_stamp *st)
{
    return (int64_t)st->sec * 1000000000LL + (int64_t)st->nanosec;
}

/* Below every stamp a header can hold (sec is 32 bits), yet far enough from INT64_MIN that the
 * policy's differences of stamps (at most about 4.3e18) cannot overflow. */
#define STAMP_INVALID ((int64_t)INT32_MIN * 1000000000LL - 1)

/* The header's stamp, validated as a view validates it: a sample of another process that is
 * not a valid message gets a stamp before any valid one, so the policy discards it unless it is
 * the first of its topic (then taking its set raises ProtocolError). */
static int64_t stamp_header(void *arg, uint32_t index, const ferry_sample *s)
{
    pyf_sync *y = arg;

    switch (y->subs[index]->kind) {
    case PYF_IMAGE: {
        ferry_image_view v;

        if (ferry_image_view_get(s, &v) == FERRY_OK)
            return stamp_ns(&v.header.stamp);
        break;
    }
    case PYF_CLOUD: {
        ferry_pointcloud_view v;

        if (ferry_pointcloud_view_get(s, &v) == FERRY_OK)
            return stamp_ns(&v.header.stamp);
        break;
    }
    case PYF_TENSOR: {
        ferry_tensor_view v;

        if (ferry_tensor_view_get(s, &v) == FERRY_OK)
            return stamp_ns(&v.header.stamp);
        break;
    }
    default:
        break;
    }
    return STAMP_INVALID;
}

/* ---------------------------------------------------------------------------------------------
 * Sync
 * ------------------------------------------------------------------------------------------- */

static const pyf_child_ops sync_ops = {"Sync", PYF_CLOSE_SYNC, sync_close, sync_finish};

static PyObject *sync_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"subscribers", "queue", "slop", "stamp", NULL};
    PyObject *o_subs, *seq = NULL, *o_slop = Py_None;
    unsigned int queue = 10;
    const char *stamp = "publish_time";
    ferry_subscriber *subs[FERRY_SYNC_MAX_TOPICS];
    ferry_sync_options o;
    pyf_node *node = NULL;
    Py_ssize_t n, i;
    ferry_err err;
    pyf_sync *y;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$IOs:Sync", kwlist, &o_subs, &queue, &o_slop,
                                     &stamp))
        return NULL;
    ferry_sync_options_init(&o);
    o.queue_size = queue;
    if (o_slop != Py_None) {
        double t = PyFloat_AsDouble(o_slop);

        if (t == -1.0 && PyErr_Occurred())
            return NULL;
        if (!(t >= 0.0) || t > 9.2e9)
            return pyf_raise(FERRY_EINVAL, "Sync: slop must be None or seconds >= 0");
        o.max_interval_ns = (int64_t)(t * 1e9);
    }
    seq = PySequence_Tuple(o_subs);
    if (seq == NULL)
        return NULL;
    n = PyTuple_Size(seq);
    if (n < (Py_ssize_t)FERRY_SYNC_MIN_TOPICS || n > (Py_ssize_t)FERRY_SYNC_MAX_TOPICS) {
        Py_DECREF(seq);
        return pyf_raise(FERRY_EINVAL, "Sync: %zd subscribers, not %u to %u", n,
                         FERRY_SYNC_MIN_TOPICS, FERRY_SYNC_MAX_TOPICS);
    }
    for (i = 0; i < n; i++) {
        pyf_sub *s = (pyf_sub *)PyTuple_GetItem(seq, i);

        if (!PyObject_TypeCheck((PyObject *)s, pyf.sub_type)) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_TypeError, "Sync: item %zd is not a ferry.Subscriber", i);
            return NULL;
        }
        if (!pyf_child_home(&s->link, "Sync")) {
            Py_DECREF(seq);
            return NULL;
        }
        if (s->link.closed || s->sub == NULL || s->link.node == NULL || s->link.node->closed) {
            Py_DECREF(seq);
            return pyf_raise_closed("Sync");
        }
        if (!pyf_sub_own(s, "Sync")) {
            Py_DECREF(seq);
            return NULL;
        }
        if (node == NULL)
            node = s->link.node;
        if (s->link.node != node) {
            Py_DECREF(seq);
            return pyf_raise(FERRY_EINVAL, "Sync: the subscribers are on different nodes");
        }
        if (strcmp(stamp, "header") == 0 && s->kind == PYF_BYTES) {
            Py_DECREF(seq);
            return pyf_raise(FERRY_EINVAL, "Sync: stamp=\"header\" but '%s' (%s) has no header",
                             s->topic, s->type_name);
        }
        for (Py_ssize_t j = 0; j < i; j++)
            if (PyTuple_GetItem(seq, j) == (PyObject *)s) {
                Py_DECREF(seq);
                return pyf_raise(FERRY_EINVAL, "Sync: subscriber '%s' is given twice", s->topic);
            }
        subs[i] = s->sub;
    }
    if (strcmp(stamp, "header") != 0 && strcmp(stamp, "publish_time") != 0) {
        Py_DECREF(seq);
        return pyf_raise(FERRY_EINVAL, "Sync: stamp='%s' is not \"publish_time\" or \"header\"",
                         stamp);
    }
    y = (pyf_sync *)pyf_alloc(type);
    if (y == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    if (strcmp(stamp, "header") == 0) {
        o.stamp = stamp_header;
        o.stamp_arg = y;
    }
    o.node = node->node;
    for (i = 0; i < n; i++)
        y->subs[i] = (pyf_sub *)Py_NewRef(PyTuple_GetItem(seq, i));
    y->n = (uint32_t)n;
    Py_DECREF(seq);
    pyf_child_link(&y->link, node, &sync_ops, (PyObject *)y);
    locks_take(y, true);
    err = ferry_sync_create(&y->sync, subs, y->n, &o);
    locks_release(y, y->n);
    if (err != FERRY_OK) {
        y->sync = NULL;
        Py_DECREF(y);
        return pyf_raise(err, "ferry_sync_create(%u subscribers, queue %u)", (unsigned)n, queue);
    }
    for (i = 0; i < n; i++) {
        y->subs[i]->owner = (PyObject *)y;
        y->subs[i]->owner_link = &y->link;
    }
    return (PyObject *)y;
}

static bool set_exported(pyf_sync *y, const struct pyf_syncset *set)
{
    uint32_t i;

    for (i = 0; i < y->n; i++)
        if (set->members[i] != NULL && pyf_sample_exported(set->members[i]))
            return true;
    return false;
}

static int sync_close(PyObject *self)
{
    pyf_sync *y = (pyf_sync *)self;
    struct pyf_syncset *set, *next;
    uint32_t i;

    if (!pyf_child_home(&y->link, "Sync.close"))
        return -1;
    if (y->link.closed)
        return 0;
    Py_INCREF(self);
    /* Closed first: a take() or wait() blocked in another thread ends within a slice. */
    y->link.closed = true;
    locks_take(y, true);
    sync_drain(y);
    /* The sets no array reads go back now; their Samples only forget. */
    for (set = y->sets; set != NULL; set = next) {
        next = set->next;
        if (set_exported(y, set))
            continue;
        for (i = 0; i < y->n; i++)
            if (set->members[i] != NULL)
                pyf_sample_forget(set->members[i]);
        set_give_back(y, set);
    }
    locks_release(y, y->n);
    /* The others are let go: each goes back when the last array over one of its samples does
     * (letting go cannot give a set back here, since one of its samples is still exported). */
    for (set = y->sets; set != NULL; set = set->next)
        for (i = 0; i < y->n; i++)
            if (set->members[i] != NULL)
                pyf_sample_let_go(set->members[i]);
    sync_finish(self); /* now, unless an array still reads a set */
    Py_DECREF(self);
    return 0;
}

static void sync_finish(PyObject *self)
{
    pyf_sync *y = (pyf_sync *)self;
    bool home = pyf_home(y->link.gen);
    uint32_t i;

    if (!y->link.closed || y->sync == NULL)
        return;
    /* Nothing to do while a set is out, unless sets done meanwhile wait to be given back. */
    if (y->sets != NULL && y->pending == NULL)
        return;
    /* Whoever holds the locks finishes it when done (every Sync call ends with a finish, and
     * a Subscriber call on one of its subscribers too: pyf_sub_unlock). A forked child only
     * forgets, without the locks. */
    if (home && !locks_take(y, false))
        return;
    Py_INCREF(self);
    sync_drain(y);
    if (y->sets == NULL) {
        if (home)
            ferry_sync_destroy(y->sync);
        y->sync = NULL;
    }
    if (home)
        locks_release(y, y->n);
    if (y->sync == NULL) {
        for (i = 0; i < y->n; i++)
            if (y->subs[i]->owner == self)
                y->subs[i]->owner = NULL;
        pyf_child_unlink(&y->link);
        /* Subscribers closed meanwhile waited for this. */
        for (i = 0; i < y->n; i++)
            pyf_child_finish(&y->subs[i]->link);
    }
    Py_DECREF(self);
}

static void sync_dealloc(PyObject *self)
{
    pyf_sync *y = (pyf_sync *)self;
    uint32_t i;

    /* Sets hold a reference to their Sync: none is handed out here, none is pending. */
    if (y->sync != NULL) {
        if (pyf_home(y->link.gen))
            ferry_sync_destroy(y->sync);
        y->sync = NULL;
    }
    for (i = 0; i < y->n; i++) {
        if (y->subs[i]->owner == self)
            y->subs[i]->owner = NULL;
        pyf_child_finish(&y->subs[i]->link); /* one closed meanwhile waited for this */
        Py_DECREF((PyObject *)y->subs[i]);
    }
    pyf_child_unlink(&y->link);
    pyf_free(self);
}

/* Wraps a set from ferry_sync_take in a SyncSet of Samples. The locks are held, so that no
 * close can come between the take and the set's place in the list (allocations may run other
 * threads' code); what is done meanwhile waits in the pending list. */
static PyObject *set_wrap(pyf_sync *y, const ferry_sample *samples)
{
    struct pyf_syncset *set = PyMem_Calloc(1, sizeof *set);
    PyObject *items, *tuple;
    uint32_t i;

    if (set == NULL) {
        /* Nothing can hold the set: give it back at once. */
        ferry_sample copy[FERRY_SYNC_MAX_TOPICS];

        memcpy(copy, samples, sizeof copy);
        ferry_sync_release(y->sync, copy);
        return PyErr_NoMemory();
    }
    memcpy(set->set, samples, sizeof set->set);
    set->sync = (pyf_sync *)Py_NewRef((PyObject *)y);
    set->live = y->n;
    PYF_LIST_PUSH(y->sets, set);
    items = PyTuple_New((Py_ssize_t)y->n);
    for (i = 0; i < y->n; i++) {
        PyObject *m = items != NULL
                          ? pyf_sample_wrap_member(y->subs[i], &set->set[i], set, syncset_done)
                          : NULL;

        if (m == NULL) {
            /* The members made so far go with the tuple; the ones never made are done now. A
             * failed member counted itself done already. */
            uint32_t left = y->n - i - (items != NULL ? 1u : 0u);

            if (items == NULL)
                PyErr_NoMemory();
            Py_XDECREF(items);
            while (left-- > 0)
                syncset_done(set);
            return NULL;
        }
        set->members[i] = m;
        PyTuple_SetItem(items, (Py_ssize_t)i, m);
    }
    tuple = PyObject_CallFunctionObjArgs((PyObject *)pyf.syncset_type, items, NULL);
    Py_DECREF(items);
    return tuple;
}

/* A wait on a Sync, its subscribers' locks held (locks_take). */
typedef struct sync_waiting {
    pyf_sync *y;
    ferry_sample samples[FERRY_SYNC_MAX_TOPICS]; /* what take() took */
    bool woke;                                   /* the last slice ended with a sample */
} sync_waiting;

static ferry_err sync_open_step(void *arg)
{
    pyf_sync *y = ((sync_waiting *)arg)->y;

    sync_drain(y);
    return y->link.closed || y->sync == NULL ? FERRY_ECLOSED : FERRY_EAGAIN;
}

static ferry_err sync_take_step(void *arg)
{
    sync_waiting *w = arg;
    ferry_err err = sync_open_step(arg);

    return err != FERRY_EAGAIN ? err : ferry_sync_take(w->y->sync, w->samples);
}

static ferry_err sync_queued_block(void *arg, int64_t slice_ns)
{
    return ferry_sync_wait(((sync_waiting *)arg)->y->sync, slice_ns);
}

/* For take(): a set is looked for in the next step. A wait that returned at once and found no
 * set again means that every queued sample belongs to a topic at its queue limit (the caller
 * holds sets), so ferry_sync_wait would return at once for ever: sleep a millisecond between
 * tries until a set is given back. */
static ferry_err sync_take_block(void *arg, int64_t slice_ns)
{
    sync_waiting *w = arg;
    ferry_err err;

    if (w->woke) {
        struct timespec ts = {0, 1000000};

        nanosleep(&ts, NULL);
    }
    err = sync_queued_block(arg, slice_ns);
    w->woke = err == FERRY_OK;
    return err;
}

static const pyf_wait sync_take_slices = {sync_take_step, sync_take_block, NULL, true, 0};
static const pyf_wait sync_queued_slices = {sync_open_step, sync_queued_block, NULL, false, 0};

/* Takes one set, waiting up to timeout_ns (FERRY_FOREVER: for ever) with the GIL released.
 * Returns a SyncSet, or None when none_on_empty and nothing is ready, else TimeoutError. */
static PyObject *sync_take_wait(pyf_sync *y, int64_t timeout_ns, bool none_on_empty)
{
    int64_t deadline = pyf_deadline(timeout_ns);
    sync_waiting w = {.y = y};
    ferry_err err;

    if (!pyf_child_open(&y->link, y->sync, "Sync.take"))
        return NULL;
    Py_INCREF((PyObject *)y);
    locks_take(y, true);
    err = pyf_wait_sliced(&sync_take_slices, &w, deadline);
    if (err == FERRY_OK) {
        PyObject *r = set_wrap(y, w.samples);

        sync_drain(y); /* a set that failed to wrap is given back now */
        locks_release(y, y->n);
        sync_finish((PyObject *)y);
        Py_DECREF((PyObject *)y);
        return r;
    }
    locks_release(y, y->n);
    sync_finish((PyObject *)y); /* closed meanwhile by another thread */
    Py_DECREF((PyObject *)y);
    if (err == PYF_ERAISED)
        return NULL;
    if (err == FERRY_ETIMEDOUT && none_on_empty)
        Py_RETURN_NONE;
    if (err == FERRY_ETIMEDOUT)
        return pyf_raise(err, "Sync.take(timeout %.3f s)", (double)timeout_ns / 1e9);
    if (err == FERRY_ECLOSED)
        return pyf_raise_closed("Sync.take");
    return pyf_raise(err, "ferry_sync_take");
}

static PyObject *sync_take(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *o_timeout = Py_None;
    int64_t ns;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:take", kwlist, &o_timeout))
        return NULL;
    if (!pyf_timeout_ns(o_timeout, &ns))
        return NULL;
    return sync_take_wait((pyf_sync *)self, ns, false);
}

static PyObject *sync_try_take(PyObject *self, PyObject *unused)
{
    (void)unused;
    return sync_take_wait((pyf_sync *)self, 0, true);
}

static PyObject *sync_iternext(PyObject *self)
{
    return sync_take_wait((pyf_sync *)self, FERRY_FOREVER, false);
}

static PyObject *sync_iter(PyObject *self)
{
    return Py_NewRef(self);
}

static PyObject *sync_wait(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"timeout", NULL};
    sync_waiting w = {.y = (pyf_sync *)self};
    PyObject *o_timeout = Py_None;
    int64_t deadline, ns;
    ferry_err err;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:wait", kwlist, &o_timeout))
        return NULL;
    if (!pyf_timeout_ns(o_timeout, &ns) || !pyf_child_open(&w.y->link, w.y->sync, "Sync.wait"))
        return NULL;
    deadline = pyf_deadline(ns);
    Py_INCREF(self);
    locks_take(w.y, true);
    err = pyf_wait_sliced(&sync_queued_slices, &w, deadline);
    sync_drain(w.y);
    locks_release(w.y, w.y->n);
    sync_finish(self);
    Py_DECREF(self);
    if (err == PYF_ERAISED)
        return NULL;
    if (err == FERRY_OK)
        Py_RETURN_TRUE;
    if (err == FERRY_ETIMEDOUT)
        Py_RETURN_FALSE;
    if (err == FERRY_ECLOSED)
        return pyf_raise_closed("Sync.wait");
    return pyf_raise(err, "ferry_sync_wait");
}

/* Lets go every member of set (a SyncSet) of Sync y (NULL: whichever it came from). */
static PyObject *set_release(PyObject *set, pyf_sync *y)
{
    Py_ssize_t i, n;
    bool any = false;

    if (!PyObject_TypeCheck(set, pyf.syncset_type)) {
        PyErr_SetString(PyExc_TypeError, "release: not a ferry.SyncSet (from Sync.take)");
        return NULL;
    }
    n = PyTuple_Size(set);
    for (i = 0; i < n; i++) {
        struct pyf_syncset *core = pyf_sample_set(PyTuple_GetItem(set, i));

        if (y != NULL && core != NULL && core->sync != y)
            return pyf_raise(FERRY_EFOREIGN, "Sync.release: the set comes from another Sync");
    }
    /* Hold the members: letting go of the last one may free the set's bookkeeping. */
    Py_INCREF(set);
    for (i = 0; i < n; i++)
        if (pyf_sample_set(PyTuple_GetItem(set, i)) != NULL &&
            pyf_sample_let_go(PyTuple_GetItem(set, i)))
            any = true;
    Py_DECREF(set);
    if (!any)
        return pyf_raise(FERRY_ESTATE, "SyncSet.release: the set was released already");
    Py_RETURN_NONE;
}

static PyObject *sync_release(PyObject *self, PyObject *set)
{
    if (!pyf_child_home(&((pyf_sync *)self)->link, "Sync.release"))
        return NULL;
    return set_release(set, (pyf_sync *)self);
}

static PyObject *list_u64(const uint64_t *v, uint32_t n)
{
    PyObject *l = PyList_New((Py_ssize_t)n);
    uint32_t i;

    if (l == NULL)
        return NULL;
    for (i = 0; i < n; i++)
        PyList_SetItem(l, (Py_ssize_t)i, PyLong_FromUnsignedLongLong(v[i]));
    return l;
}

static PyObject *sync_stats(PyObject *self, PyObject *unused)
{
    pyf_sync *y = (pyf_sync *)self;
    uint64_t held[FERRY_SYNC_MAX_TOPICS];
    ferry_sync_stats st;
    ferry_err err;
    uint32_t i;

    (void)unused;
    if (!pyf_child_open(&y->link, y->sync, "Sync.stats"))
        return NULL;
    Py_INCREF(self);
    locks_take(y, true);
    sync_drain(y);
    err = !y->link.closed ? ferry_sync_stats_get(y->sync, &st) : FERRY_ECLOSED;
    locks_release(y, y->n);
    sync_finish(self);
    Py_DECREF(self);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_sync_stats_get");
    for (i = 0; i < st.topics && i < FERRY_SYNC_MAX_TOPICS; i++)
        held[i] = st.held[i];
    return Py_BuildValue("{s:I,s:K,s:K,s:N,s:N,s:N}", "topics", (unsigned)st.topics, "sets",
                         (unsigned long long)st.sets, "taken", (unsigned long long)st.taken,
                         "received", list_u64(st.received, st.topics), "discarded",
                         list_u64(st.discarded, st.topics), "held", list_u64(held, st.topics));
}

static PyObject *sync_get(PyObject *self, void *closure)
{
    pyf_sync *y = (pyf_sync *)self;
    PyObject *t;
    uint32_t i;

    if ((intptr_t)closure == 1)
        return PyBool_FromLong(y->link.closed);
    t = PyTuple_New((Py_ssize_t)y->n);
    if (t == NULL)
        return NULL;
    for (i = 0; i < y->n; i++)
        PyTuple_SetItem(t, (Py_ssize_t)i, Py_NewRef((PyObject *)y->subs[i]));
    return t;
}

static PyMethodDef sync_methods[] = {
    {"take", (PyCFunction)(void (*)(void))sync_take, METH_VARARGS | METH_KEYWORDS,
     "take(timeout=None) -> SyncSet\n\n"
     "The oldest matched set, one Sample per subscriber in the order given, waiting up to\n"
     "timeout seconds (None: for ever, 0: not at all) with the GIL released; TimeoutError when\n"
     "none was complete. Ctrl-C interrupts the wait."},
    {"try_take", sync_try_take, METH_NOARGS,
     "try_take() -> SyncSet | None\n\nA matched set, or None at once when none is complete."},
    {"wait", (PyCFunction)(void (*)(void))sync_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None) -> bool\n\n"
     "Waits, with the GIL released, until a set is ready or a sample arrived on one of the\n"
     "topics (ferry_sync_wait); take() may still find no complete set. False when timeout\n"
     "seconds passed first. While the caller holds sets up to queue, it returns at once."},
    {"release", sync_release, METH_O,
     "release(set)\n\nGives a set back: releases its samples together (SyncSet.release()).\n"
     "StateError when it was released already, ForeignError when it comes from another Sync."},
    {"stats", sync_stats, METH_NOARGS,
     "stats() -> dict\n\nThe synchroniser's counters (ferry_sync_stats): topics, sets (emitted),\n"
     "taken (handed out), and per topic lists received, discarded and held."},
    PYF_CHILD_CLOSE_METHODS(
        "close()\n\nDestroys the synchroniser, giving back every sample it holds, sets handed out\n"
        "included (their Samples then raise StateError); the subscribers can be taken from\n"
        "again. A set an array, memoryview or DLPack tensor still reads stays mapped: it goes\n"
        "back, and the synchroniser is destroyed, when the last of them is gone (its subscribers\n"
        "stay its own until then). Closing twice does nothing.",
        "synchroniser"),
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef sync_getset[] = {
    {"subscribers", sync_get, NULL, "The subscribers, in the order of the sets.", (void *)0},
    {"closed", sync_get, NULL, "True once closed.", (void *)1},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---------------------------------------------------------------------------------------------
 * SyncSet: a tuple of the set's Samples
 * ------------------------------------------------------------------------------------------- */

/* ForkError unless the set was taken in this process. */
static bool syncset_home(PyObject *self, const char *what)
{
    return PyTuple_Size(self) < 1 || pyf_sample_home(PyTuple_GetItem(self, 0), what, "SyncSet");
}

static PyObject *syncset_release(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (!syncset_home(self, "SyncSet.release"))
        return NULL;
    return set_release(self, NULL);
}

static PyObject *syncset_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    return pyf_entered(self, syncset_home(self, "SyncSet.__enter__"));
}

static PyObject *syncset_exit(PyObject *self, PyObject *args)
{
    Py_ssize_t i, n = PyTuple_Size(self);

    (void)args;
    if (!syncset_home(self, "SyncSet.__exit__"))
        return NULL;
    Py_INCREF(self);
    for (i = 0; i < n; i++)
        if (pyf_sample_set(PyTuple_GetItem(self, i)) != NULL)
            pyf_sample_let_go(PyTuple_GetItem(self, i));
    Py_DECREF(self);
    Py_RETURN_NONE;
}

static PyObject *syncset_get_released(PyObject *self, void *closure)
{
    Py_ssize_t i, n = PyTuple_Size(self);

    (void)closure;
    if (!syncset_home(self, "SyncSet.released"))
        return NULL;
    for (i = 0; i < n; i++)
        if (pyf_sample_set(PyTuple_GetItem(self, i)) != NULL &&
            pyf_sample_held(PyTuple_GetItem(self, i)))
            Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

static PyMethodDef syncset_methods[] = {
    {"release", syncset_release, METH_NOARGS,
     "release()\n\nGives the set back: releases every sample of it not released yet. The\n"
     "memory goes back once the last array or DLPack tensor over any of them is gone too.\n"
     "StateError when every sample was released already."},
    {"__enter__", syncset_enter, METH_NOARGS, "Returns the set."},
    {"__exit__", syncset_exit, METH_VARARGS, "Releases the set (release()), if not yet."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef syncset_getset[] = {
    {"released", syncset_get_released, NULL, "True once every sample of the set was released.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

const pyf_type_def pyf_sync_def = {
    .name = "ferry.Sync",
    .size = sizeof(pyf_sync),
    .new_ = sync_new,
    .dealloc = sync_dealloc,
    .methods = sync_methods,
    .getset = sync_getset,
    .iter = sync_iter,
    .iternext = sync_iternext,
    .doc = "Sync(subscribers, *, queue=10, slop=None, stamp=\"publish_time\")\n\n"
           "An approximate-time synchroniser (ferry/sync.h) over 2 to 9 subscribers of one\n"
           "node: take() hands out matched sets, one Sample per subscriber in the order\n"
           "given, whose stamps lie close together. queue is queue_size (samples held per\n"
           "topic, sets handed out included; each subscriber's max_held must exceed it),\n"
           "slop the largest span of a set in seconds (None or 0: no limit), stamp\n"
           "\"publish_time\" or \"header\" (the image, point cloud or tensor header's\n"
           "stamp). While it lives, take from its subscribers only through it. Iterating\n"
           "takes sets for ever: `for cam, depth in sync:`. A context manager: leaving the\n"
           "block closes it.",
};

const pyf_type_def pyf_syncset_def = {
    .name = "ferry.SyncSet",
    .base = &PyTuple_Type,
    .methods = syncset_methods,
    .getset = syncset_getset,
    .doc = "A matched set from Sync.take(): a tuple of Samples, one per subscriber, that go\n"
           "back to their publishers together, when every one of them is released (its\n"
           "release(), with-block or garbage collection) or at SyncSet.release() /\n"
           "Sync.release(set). A context manager: leaving the block releases the set.",
};
