/*
 * The ground floor of the extension (util.h): what every object uses. Calls no other file of
 * the extension.
 */
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

pyf_state pyf;
unsigned pyf_fork_gen;

/* ---------------------------------------------------------------------------------------------
 * The module, errors, processes
 * ------------------------------------------------------------------------------------------- */

/* Raises an exception of class cls with message msg (and errno's when err is FERRY_ESYS),
 * .code err and .errname its name. */
static PyObject *raise_as(PyObject *cls, ferry_err err, int saved_errno, const char *msg)
{
    PyObject *exc, *v;

    if (err == FERRY_ESYS)
        exc = PyObject_CallFunction(cls, "is", saved_errno, msg);
    else
        exc = PyObject_CallFunction(cls, "s", msg);
    if (exc == NULL)
        return NULL;
    v = PyLong_FromLong((long)err);
    if (v == NULL || PyObject_SetAttrString(exc, "code", v) < 0) {
        Py_XDECREF(v);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(v);
    v = PyUnicode_FromString(ferry_errname(err));
    if (v == NULL || PyObject_SetAttrString(exc, "errname", v) < 0) {
        Py_XDECREF(v);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(v);
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *pyf_raise(ferry_err err, const char *fmt, ...)
{
    int saved = errno;
    PyObject *cls;
    char context[512];
    char msg[768];
    va_list ap;

    if (err <= FERRY_OK || err >= FERRY_ERR_COUNT_ || pyf.errors[err] == NULL) {
        cls = pyf.error;
    } else {
        cls = pyf.errors[err];
    }
    va_start(ap, fmt);
    vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
    if (err == FERRY_ESYS)
        snprintf(msg, sizeof msg, "%s: %s: %s", context, ferry_strerror(err), strerror(saved));
    else
        snprintf(msg, sizeof msg, "%s: %s", context, ferry_strerror(err));
    return raise_as(cls, err, saved, msg);
}

PyObject *pyf_raise_closed(const char *what)
{
    return pyf_raise(FERRY_ECLOSED, "%s", what);
}

PyObject *pyf_raise_forked(const char *what, const char *type, pid_t pid)
{
    char msg[512];

    snprintf(msg, sizeof msg,
             "%s: this %s belongs to process %ld, and this is process %ld; a process made by "
             "fork() must create its own Node",
             what, type, (long)pid, (long)getpid());
    return raise_as(pyf.fork_error, FERRY_ECLOSED, 0, msg);
}

bool pyf_child_home_(const pyf_child *c, const char *what)
{
    if (pyf_home(c->gen))
        return true;
    pyf_raise_forked(what, c->ops != NULL ? c->ops->name : "object", c->pid);
    return false;
}

static bool atfork_registered;

/* The child of a fork: objects made before it belong to its parent. */
static void fork_child(void)
{
    pyf_fork_gen++;
}

bool pyf_fork_track(void)
{
    /* Once per process image: a second import (another interpreter) must not count forks twice. */
    if (atfork_registered)
        return true;
    if (pthread_atfork(NULL, NULL, fork_child) != 0) {
        PyErr_NoMemory();
        return false;
    }
    atfork_registered = true;
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * Memory, lists, types
 * ------------------------------------------------------------------------------------------- */

bool pyf_lock(PyThread_type_lock lock)
{
    if (PyThread_acquire_lock(lock, NOWAIT_LOCK))
        return true;
    Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(lock, WAIT_LOCK);
    Py_END_ALLOW_THREADS return true;
}

char *pyf_strdup(const char *s)
{
    size_t n;
    char *d;

    if (s == NULL)
        return NULL;
    n = strlen(s) + 1;
    d = PyMem_Malloc(n);
    if (d == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(d, s, n);
    return d;
}

/* The stable ABI passes type slots as void *; ISO C has no conversion between function and
 * object pointers, so they are copied bit for bit (which POSIX guarantees to work). */
static void *fn_slot(void (*f)(void))
{
    void *p = NULL;

    if (f != NULL)
        memcpy(&p, &f, sizeof p);
    return p;
}
#define FN(f) fn_slot((void (*)(void))(f))

bool pyf_type_add(PyObject *module, PyTypeObject **type, const pyf_type_def *def)
{
    const PyType_Slot all[] = {
        {Py_tp_doc, (void *)def->doc},         {Py_tp_new, FN(def->new_)},
        {Py_tp_dealloc, FN(def->dealloc)},     {Py_tp_methods, def->methods},
        {Py_tp_getset, def->getset},           {Py_tp_repr, FN(def->repr)},
        {Py_tp_iter, FN(def->iter)},           {Py_tp_iternext, FN(def->iternext)},
        {Py_bf_getbuffer, FN(def->getbuffer)}, {Py_bf_releasebuffer, FN(def->releasebuffer)},
    };
    PyType_Slot slots[sizeof all / sizeof all[0] + 1];
    PyType_Spec spec = {def->name, def->size, 0, Py_TPFLAGS_DEFAULT | def->flags, slots};
    PyObject *bases = NULL;
    size_t i, n = 0;

    for (i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i].pfunc != NULL)
            slots[n++] = all[i];
    slots[n].slot = 0;
    slots[n].pfunc = NULL;
    if (def->base != NULL && (bases = PyTuple_Pack(1, (PyObject *)def->base)) == NULL)
        return false;
    *type = (PyTypeObject *)(bases != NULL ? PyType_FromSpecWithBases(&spec, bases)
                                           : PyType_FromSpec(&spec));
    Py_XDECREF(bases);
    return *type != NULL && PyModule_AddType(module, *type) == 0;
}

PyObject *pyf_alloc(PyTypeObject *type)
{
    void *slot = PyType_GetSlot(type, Py_tp_alloc);
    allocfunc alloc;

    memcpy(&alloc, &slot, sizeof alloc);
    return alloc(type, 0);
}

void pyf_free(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    void *slot = PyType_GetSlot(type, Py_tp_free);
    freefunc f;

    memcpy(&f, &slot, sizeof f);
    f(self);
    Py_DECREF(type);
}

pyf_kind pyf_kind_of(const char *type_name)
{
    if (strcmp(type_name, FERRY_IMAGE_TYPE_NAME) == 0)
        return PYF_IMAGE;
    if (strcmp(type_name, FERRY_POINTCLOUD_TYPE_NAME) == 0)
        return PYF_CLOUD;
    if (strcmp(type_name, FERRY_TENSOR_TYPE_NAME) == 0)
        return PYF_TENSOR;
    return PYF_BYTES;
}

const char *pyf_kind_name(pyf_kind kind)
{
    switch (kind) {
    case PYF_IMAGE:
        return "image";
    case PYF_CLOUD:
        return "pointcloud";
    case PYF_TENSOR:
        return "tensor";
    default:
        return "bytes";
    }
}

PyObject *pyf_i64_tuple(const int64_t *v, uint32_t n)
{
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    uint32_t i;

    if (t == NULL)
        return NULL;
    for (i = 0; i < n; i++)
        PyTuple_SetItem(t, (Py_ssize_t)i, PyLong_FromLongLong(v[i]));
    return t;
}

/* ---------------------------------------------------------------------------------------------
 * Nodes and their children
 * ------------------------------------------------------------------------------------------- */

void pyf_child_link(pyf_child *c, pyf_node *node, const pyf_child_ops *ops, PyObject *self)
{
    c->node = (pyf_node *)Py_NewRef((PyObject *)node);
    c->ops = ops;
    c->gen = pyf_fork_gen;
    c->pid = getpid();
    c->self = self;
    PYF_LIST_PUSH(node->children, c);
}

/* Destroys a closed node once its last child is gone. */
static void node_finish(pyf_node *n)
{
    if (!n->closed || n->node == NULL || n->children != NULL)
        return;
    if (pyf_home(n->gen) && ferry_node_destroy(n->node) != FERRY_OK)
        return; /* dealloc retries */
    n->node = NULL;
}

void pyf_child_unlink(pyf_child *c)
{
    pyf_node *node = c->node;

    if (node == NULL)
        return;
    PYF_LIST_REMOVE(node->children, c);
    c->node = NULL;
    node_finish(node);
    Py_DECREF((PyObject *)node);
}

bool pyf_node_open(pyf_node *n, const char *what)
{
    if (!pyf_home(n->gen)) {
        pyf_raise_forked(what, "Node", n->pid);
        return false;
    }
    if (!n->closed && n->node != NULL)
        return true;
    pyf_raise_closed(what);
    return false;
}

void pyf_child_finish(pyf_child *c)
{
    if (c->ops != NULL && c->ops->finish != NULL)
        c->ops->finish(c->self);
}

bool pyf_child_open(const pyf_child *c, const void *obj, const char *what)
{
    if (!pyf_child_home(c, what))
        return false;
    if (!c->closed && obj != NULL)
        return true;
    pyf_raise_closed(what);
    return false;
}

void pyf_endpoint_unlock(PyThread_type_lock lock, pyf_child *link, PyObject *owner,
                         const pyf_child *owner_link)
{
    PyThread_release_lock(lock);
    if (owner != NULL && owner_link->closed) {
        Py_INCREF(owner);
        owner_link->ops->finish(owner);
        Py_DECREF(owner);
    }
    if (link->closed)
        link->ops->finish(link->self);
}

PyObject *pyf_child_close_method(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (((pyf_child_object *)self)->link.ops->close(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyObject *pyf_enter_method(PyObject *self, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(self);
}

/* ---------------------------------------------------------------------------------------------
 * Waits
 * ------------------------------------------------------------------------------------------- */

ferry_err pyf_wait_sliced(const pyf_wait *w, void *arg, int64_t deadline)
{
    int64_t most = w->slice_ns > 0 ? w->slice_ns : PYF_WAIT_SLICE_NS;
    ferry_err err;

    for (;;) {
        int64_t slice = most;

        if (w->step != NULL && (err = w->step(arg)) != FERRY_EAGAIN)
            return err;
        if (deadline >= 0) {
            int64_t left = deadline - ferry_now().ns;

            if (left <= 0 && w->take)
                return FERRY_ETIMEDOUT;
            if (left < 0)
                left = 0;
            if (left < slice)
                slice = left;
        }
        Py_BEGIN_ALLOW_THREADS err = w->block(arg, slice);
        Py_END_ALLOW_THREADS if (w->after != NULL) w->after(arg);
        if (w->take && err == FERRY_OK)
            err = FERRY_ETIMEDOUT; /* the next step takes it */
        if (err != FERRY_ETIMEDOUT)
            return err;
        if (!w->take && deadline >= 0 && ferry_now().ns >= deadline)
            return err;
        if (PyErr_CheckSignals() < 0)
            return PYF_ERAISED;
    }
}

PyObject *pyf_wait_raise(const pyf_waited *w, ferry_err err, const char *what, const char *topic)
{
    const char *call = w->failed != NULL ? w->failed : what;

    if (err == PYF_ERAISED)
        return NULL;
    if (w->closed)
        return pyf_raise_closed(what);
    if (topic == NULL)
        return pyf_raise(err, "%s", call);
    return pyf_raise(err, "%s('%s')", call, topic);
}
