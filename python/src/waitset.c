/*
 * ferry.WaitSet: one wait over many subscribers (ferry_waitset_*), with the GIL released.
 */
#include "waitset.h"

#include "args.h"
#include "sub.h"
#include "types.h"

#define WAITSET_MAX 256

typedef struct pyf_waitset {
    PyObject_HEAD pyf_child link;
    ferry_waitset *ws; /* NULL once closed */
    PyThread_type_lock lock;
    PyObject *members; /* list of Subscribers, each holding a reference */
} pyf_waitset;
PYF_CHILD_OBJECT(pyf_waitset);

static int ws_close(PyObject *self);
static const pyf_child_ops ws_ops = {"WaitSet", PYF_CLOSE_WAITSET, ws_close, NULL};

PyObject *pyf_waitset_new(pyf_node *node)
{
    pyf_waitset *w;
    ferry_err err;

    if (!pyf_node_open(node, "Node.waitset"))
        return NULL;
    w = (pyf_waitset *)pyf_alloc(pyf.waitset_type);
    if (w == NULL)
        return NULL;
    w->lock = PyThread_allocate_lock();
    w->members = PyList_New(0);
    if (w->lock == NULL || w->members == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        Py_DECREF(w);
        return NULL;
    }
    pyf_child_link(&w->link, node, &ws_ops, (PyObject *)w);
    err = ferry_waitset_create(&w->ws, node->node);
    if (err != FERRY_OK) {
        w->ws = NULL;
        Py_DECREF(w);
        return pyf_raise(err, "ferry_waitset_create");
    }
    return (PyObject *)w;
}

static Py_ssize_t member_index(pyf_waitset *w, pyf_sub *sub)
{
    Py_ssize_t i, n = PyList_Size(w->members);

    for (i = 0; i < n; i++)
        if (PyList_GetItem(w->members, i) == (PyObject *)sub)
            return i;
    return -1;
}

static int ws_forget(PyObject *self, pyf_sub *sub)
{
    pyf_waitset *w = (pyf_waitset *)self;
    Py_ssize_t i = member_index(w, sub);

    /* A forked child leaves its parent's waitset alone: the epoll set is the parent's too. */
    if (w->ws != NULL && sub->sub != NULL && pyf_home(w->link.gen)) {
        pyf_lock(w->lock);
        ferry_waitset_remove(w->ws, sub->sub);
        PyThread_release_lock(w->lock);
    }
    sub->waitset = NULL;
    if (i >= 0 && PySequence_DelItem(w->members, i) < 0)
        return -1;
    return 0;
}

static int ws_close(PyObject *self)
{
    pyf_waitset *w = (pyf_waitset *)self;

    if (!pyf_child_home(&w->link, "WaitSet.close"))
        return -1;
    if (w->ws == NULL)
        return 0;
    while (PyList_Size(w->members) > 0) {
        pyf_sub *sub = (pyf_sub *)PyList_GetItem(w->members, 0);

        if (ws_forget(self, sub) < 0)
            return -1;
    }
    pyf_lock(w->lock);
    ferry_waitset_destroy(w->ws);
    w->ws = NULL;
    PyThread_release_lock(w->lock);
    pyf_child_unlink(&w->link);
    return 0;
}

static void ws_dealloc(PyObject *self)
{
    pyf_waitset *w = (pyf_waitset *)self;

    if (w->members != NULL) {
        Py_ssize_t i, n = PyList_Size(w->members);

        for (i = 0; i < n; i++)
            ((pyf_sub *)PyList_GetItem(w->members, i))->waitset = NULL;
    }
    if (w->ws != NULL && pyf_home(w->link.gen)) {
        Py_ssize_t i, n = w->members != NULL ? PyList_Size(w->members) : 0;

        for (i = 0; i < n; i++) {
            pyf_sub *sub = (pyf_sub *)PyList_GetItem(w->members, i);

            if (sub->sub != NULL)
                ferry_waitset_remove(w->ws, sub->sub);
        }
        ferry_waitset_destroy(w->ws);
    }
    Py_XDECREF(w->members);
    pyf_child_unlink(&w->link);
    if (w->lock != NULL)
        PyThread_free_lock(w->lock);
    pyf_free(self);
}

static PyObject *ws_add(PyObject *self, PyObject *arg)
{
    pyf_waitset *w = (pyf_waitset *)self;
    pyf_sub *sub;
    ferry_err err;

    if (!pyf_child_open(&w->link, w->ws, "WaitSet.add"))
        return NULL;
    if (!PyObject_TypeCheck(arg, pyf.sub_type)) {
        PyErr_SetString(PyExc_TypeError, "WaitSet.add takes a Subscriber");
        return NULL;
    }
    sub = (pyf_sub *)arg;
    if (sub->link.closed)
        return pyf_raise_closed("WaitSet.add: the subscriber");
    if (sub->link.node != w->link.node)
        return pyf_raise(FERRY_EFOREIGN, "WaitSet.add('%s'): the subscriber is of another node",
                         sub->topic);
    pyf_lock(w->lock);
    err = ferry_waitset_add(w->ws, sub->sub, sub);
    PyThread_release_lock(w->lock);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_waitset_add('%s')", sub->topic);
    if (PyList_Append(w->members, arg) < 0) {
        ferry_waitset_remove(w->ws, sub->sub);
        return NULL;
    }
    sub->waitset = self;
    sub->waitset_forget = ws_forget;
    Py_RETURN_NONE;
}

static PyObject *ws_remove(PyObject *self, PyObject *arg)
{
    pyf_waitset *w = (pyf_waitset *)self;

    if (!pyf_child_open(&w->link, w->ws, "WaitSet.remove"))
        return NULL;
    if (!PyObject_TypeCheck(arg, pyf.sub_type) || member_index(w, (pyf_sub *)arg) < 0)
        return pyf_raise(FERRY_ESTATE, "WaitSet.remove: not a member");
    if (ws_forget(self, (pyf_sub *)arg) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* WaitSet.wait(), the waitset's lock held. */
typedef struct ws_waiting {
    pyf_waitset *w;
    void *ready[WAITSET_MAX];
    size_t count;
    pyf_waited waited;
} ws_waiting;

static ferry_err ws_step(void *arg)
{
    ws_waiting *st = arg;

    return pyf_wait_open(&st->waited, st->w->ws == NULL);
}

static ferry_err ws_block(void *arg, int64_t slice_ns)
{
    ws_waiting *st = arg;
    ferry_err err = ferry_waitset_wait(st->w->ws, slice_ns, st->ready, WAITSET_MAX, &st->count);

    if (err == FERRY_ETIMEDOUT)
        st->count = 0;
    return pyf_wait_call(&st->waited, err, FERRY_ETIMEDOUT, "ferry_waitset_wait");
}

static const pyf_wait ws_slices = {ws_step, ws_block, NULL, false, 0};

static PyObject *ws_wait(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"timeout", NULL};
    ws_waiting st = {.w = (pyf_waitset *)self};
    PyObject *o_timeout = Py_None, *out;
    int64_t deadline, ns;
    ferry_err err;
    size_t i;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:wait", kwlist, &o_timeout))
        return NULL;
    if (!pyf_timeout_ns(o_timeout, &ns) || !pyf_child_open(&st.w->link, st.w->ws, "WaitSet.wait"))
        return NULL;
    deadline = pyf_deadline(ns);
    pyf_lock(st.w->lock);
    err = pyf_wait_sliced(&ws_slices, &st, deadline);
    PyThread_release_lock(st.w->lock);
    if (err != FERRY_OK && err != FERRY_ETIMEDOUT)
        return pyf_wait_raise(&st.waited, err, "WaitSet.wait", NULL);
    out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (i = 0; i < st.count; i++) {
        /* Contexts are members, kept alive by the members list. */
        if (member_index(st.w, st.ready[i]) >= 0 && PyList_Append(out, st.ready[i]) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyObject *ws_members(PyObject *self, void *closure)
{
    (void)closure;
    return PyList_GetSlice(((pyf_waitset *)self)->members, 0, PY_SSIZE_T_MAX);
}

static PyMethodDef ws_methods[] = {
    {"add", ws_add, METH_O,
     "add(subscriber)\n\nAdds a subscriber of the same node (at most 256; a subscriber is in one\n"
     "waitset at a time: BusyError otherwise)."},
    {"remove", ws_remove, METH_O, "remove(subscriber)\n\nRemoves a member."},
    {"wait", (PyCFunction)(void (*)(void))ws_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None) -> list[Subscriber]\n\nWaits, with the GIL released, until a member has\n"
     "a queued sample; returns the members that have one, or [] after timeout seconds."},
    PYF_CHILD_CLOSE_METHODS("close()\n\nRemoves every member and destroys the waitset.", "waitset"),
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ws_getset[] = {
    {"members", ws_members, NULL, "The member subscribers.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

const pyf_type_def pyf_waitset_def = {
    .name = "ferry.WaitSet",
    .size = sizeof(pyf_waitset),
    .dealloc = ws_dealloc,
    .methods = ws_methods,
    .getset = ws_getset,
    .doc = "Waits on many subscribers at once (Node.waitset()).",
};
