/*
 * The CPython extension ferry._ferry, written against the stable ABI of Python 3.11
 * (Py_LIMITED_API 0x030B0000): one build loads in every CPython from 3.11 on.
 *
 * This header and util.c are its ground floor: what every object uses, calling no other file
 * of the extension. The module's state and errors; the fork generation; memory, list and type
 * helpers; a node's children (their links, the ops each kind registers, the open checks, and
 * close()/__enter__/__exit__); and the waits cut into slices so that Ctrl-C is seen.
 *
 * Objects and what they own: a Node owns the ferry_node; Publishers, Subscribers and WaitSets
 * hold a strong reference to their Node and are linked into its list of children (the list owns
 * no reference, so no cycle forms); a Loan holds its Publisher, a Sample its Subscriber. So the
 * garbage collector can only destroy a node after its children, and a child after its loans and
 * samples. Node.close() closes the children explicitly, waitsets first.
 *
 * Closing while arrays are bound: close() never refuses because an array, memoryview or DLPack
 * tensor still reads a sample, loan or frame (an export). It closes the object for its user at
 * once (pyf_child.closed, pyf_node.closed: every call but a few getters raises ClosedError) and
 * lets go of what is not exported; the ferry object itself (subscriber, publisher, sync, GPU
 * subscriber, and the node above them) is destroyed by its finish (pyf_child_ops) when the last
 * export over its memory is gone, as a NumPy array over an mmap keeps the mapping. A finish
 * runs where an export ends (releasebuffer, a DLPack deleter), possibly inside another call's
 * garbage collection, so it never waits for a lock: when another thread holds one, that thread
 * runs the finish when it lets the lock go; the object's dealloc is the last resort.
 *
 * Concurrency: every ferry call is made with the GIL held or, for calls that may block, with the
 * GIL released and the object's own lock held, so that two Python threads never use one ferry
 * publisher or subscriber at once (ferry.h requires it). A subscriber's lock may be held for as
 * long as a take() waits; a sample released meanwhile from another thread is queued on the
 * subscriber and released by the waiting thread when its wait slice ends.
 *
 * Processes: every object remembers the fork generation and the pid of the process that created
 * it (pyf_fork_gen, bumped in the child of every fork() by a pthread_atfork handler). In another
 * process every entry point raises ForkError (pyf_home), and destruction only forgets: no ferry
 * call is made (it would send goodbyes on the parent's sockets, release the parent's samples and
 * loans or remove its status files), and no lock is taken (another thread may have held it at
 * the fork). The child's copies of the descriptors and mappings go when it exits.
 */
#ifndef FERRY_PY_UTIL_H
#define FERRY_PY_UTIL_H

#include <Python.h>
#include <pythread.h>

#include <ferry/ferry.h>
#include <ferry/msg.h>
#include <ferry/tensor.h>

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* What a topic carries, from its type name. */
typedef enum pyf_kind {
    PYF_BYTES = 0,  /* any other type name: the payload as bytes */
    PYF_IMAGE = 1,  /* sensor_msgs/Image */
    PYF_CLOUD = 2,  /* sensor_msgs/PointCloud2 */
    PYF_TENSOR = 3, /* ferry/Tensor */
} pyf_kind;

/* The longest a blocking call sleeps before it looks at signals and at samples released by other
 * threads; a delivery ends the sleep at once, so this bounds only Ctrl-C's delay. */
#define PYF_WAIT_SLICE_NS 50000000LL

/* ---------------------------------------------------------------------------------------------
 * The module, errors, processes
 * ------------------------------------------------------------------------------------------- */

/* Objects of the module, created at import. */
typedef struct pyf_state {
    PyTypeObject *node_type, *pub_type, *sub_type, *loan_type, *sample_type, *waitset_type;
    PyTypeObject *sync_type, *syncset_type, *gpusub_type, *gpuframe_type, *gpupub_type,
        *gpuloan_type, *hostview_type;
    PyObject *error;                    /* ferry.Error */
    PyObject *fork_error;               /* ferry.ForkError, a ClosedError */
    PyObject *errors[FERRY_ERR_COUNT_]; /* one subclass per ferry_err; [0] unused */
} pyf_state;

extern pyf_state pyf;

/* The fork generation of this process: 0 in the process that imported the module, one more in
 * the child of each fork() since. */
extern unsigned pyf_fork_gen;
/* Counts forks from now on (pyf_fork_gen); false with an exception when it cannot. */
bool pyf_fork_track(void);

/* Raises the exception of err (pyf.errors) with message "<fmt>: <ferry_strerror>" (and errno's
 * for FERRY_ESYS), .code and .errname set; returns NULL. */
PyObject *pyf_raise(ferry_err err, const char *fmt, ...);
PyObject *pyf_raise_closed(const char *what);
/* Raises ForkError (a ClosedError): what was called on a `type` made by process pid. */
PyObject *pyf_raise_forked(const char *what, const char *type, pid_t pid);
/* True in the process (fork generation) that created an object; the one comparison every entry
 * point makes. */
static inline bool pyf_home(unsigned gen)
{
    return gen == pyf_fork_gen;
}

/* ---------------------------------------------------------------------------------------------
 * Memory, lists, types
 * ------------------------------------------------------------------------------------------- */

/* Takes lock, releasing the GIL while it waits. */
bool pyf_lock(PyThread_type_lock lock);
/* A PyMem copy of s (NULL for NULL, or with MemoryError). */
char *pyf_strdup(const char *s);

/* The lists of the extension (a node's children, a publisher's loans, a subscriber's samples,
 * ...) are doubly linked through their items' prev and next; head is the list's first item. */
/* Puts x first in the list. */
#define PYF_LIST_PUSH(head, x)                                                                     \
    do {                                                                                           \
        (x)->prev = NULL;                                                                          \
        (x)->next = (head);                                                                        \
        if ((head) != NULL)                                                                        \
            (head)->prev = (x);                                                                    \
        (head) = (x);                                                                              \
    } while (0)
/* Takes x out of the list; nothing when it is in none (no prev, and not the head). */
#define PYF_LIST_REMOVE(head, x)                                                                   \
    do {                                                                                           \
        if ((x)->prev != NULL)                                                                     \
            (x)->prev->next = (x)->next;                                                           \
        else if ((head) == (x))                                                                    \
            (head) = (x)->next;                                                                    \
        if ((x)->next != NULL)                                                                     \
            (x)->next->prev = (x)->prev;                                                           \
        (x)->prev = (x)->next = NULL;                                                              \
    } while (0)

/* A type of the module: the slots it has, typed, so that the compiler checks each function
 * against its slot (PyType_Slot takes them as void *). NULL: the slot is not set. */
typedef struct pyf_type_def {
    const char *name;   /* "ferry.Loan" */
    int size;           /* of its objects; 0: its base's */
    unsigned int flags; /* besides Py_TPFLAGS_DEFAULT */
    PyTypeObject *base; /* NULL: object */
    const char *doc;
    PyObject *(*new_)(PyTypeObject *type, PyObject *args, PyObject *kwargs);
    void (*dealloc)(PyObject *self);
    PyMethodDef *methods;
    PyGetSetDef *getset;
    PyObject *(*repr)(PyObject *self);
    PyObject *(*iter)(PyObject *self);
    PyObject *(*iternext)(PyObject *self);
    int (*getbuffer)(PyObject *self, Py_buffer *view, int flags);
    void (*releasebuffer)(PyObject *self, Py_buffer *view);
} pyf_type_def;

/* Makes the type of def, keeps it in *type and adds it to the module. */
bool pyf_type_add(PyObject *module, PyTypeObject **type, const pyf_type_def *def);
/* The type's tp_alloc and tp_free (the latter also drops the heap type's reference). */
PyObject *pyf_alloc(PyTypeObject *type);
void pyf_free(PyObject *self);
pyf_kind pyf_kind_of(const char *type_name);
const char *pyf_kind_name(pyf_kind kind);
/* A tuple of ints (a tensor's shape or strides). */
PyObject *pyf_i64_tuple(const int64_t *v, uint32_t n);

/* ---------------------------------------------------------------------------------------------
 * Nodes and their children
 * ------------------------------------------------------------------------------------------- */

/* What a kind of node's child is, for its node and for the children that read or publish
 * through it; each kind gives its own when it links a child (pyf_child_link). */
typedef struct pyf_child_ops {
    const char *name; /* the type's name ("Publisher"), for ForkError and BusyError */
    int rank;         /* PYF_CLOSE_*: when Node.close() closes it */
    /* close(): 0, or -1 with an exception. What an export still reads stays (closed) until
     * finish destroys it. */
    int (*close)(PyObject *self);
    /* Destroys a closed child once nothing needs it any more; never waits for a lock (see the
     * top of this file). NULL where close destroys at once. */
    void (*finish)(PyObject *self);
} pyf_child_ops;

/* The order Node.close() closes its children in: those that take from subscribers or publish
 * through publishers first, then waitsets (they refer to subscribers), then subscribers and
 * publishers. */
enum {
    PYF_CLOSE_SYNC,
    PYF_CLOSE_GPUSUB,
    PYF_CLOSE_GPUPUB,
    PYF_CLOSE_WAITSET,
    PYF_CLOSE_SUB,
    PYF_CLOSE_PUB,
    PYF_CLOSE_RANKS
};

/* A child's link into its node's list. */
typedef struct pyf_child {
    struct pyf_node *node; /* a strong reference; NULL once unlinked */
    struct pyf_child *prev, *next;
    const pyf_child_ops *ops; /* NULL until linked */
    unsigned gen;             /* pyf_fork_gen when created */
    pid_t pid;                /* the process that created it */
    bool closed; /* close() ran; the ferry object may live on until its last export is gone */
    PyObject *self;
} pyf_child;

/* The start of every child object: its link follows the object's head (PYF_CHILD_OBJECT
 * checks), so that the methods below find it. */
typedef struct pyf_child_object {
    PyObject_HEAD pyf_child link;
} pyf_child_object;
#define PYF_CHILD_OBJECT(type)                                                                     \
    _Static_assert(offsetof(type, link) == offsetof(pyf_child_object, link),                       \
                   #type "'s link must follow its head")

typedef struct pyf_node {
    PyObject_HEAD ferry_node *node; /* NULL once destroyed */
    bool closed;                    /* close() ran: destroyed when its last child is */
    unsigned gen;                   /* pyf_fork_gen when created */
    pid_t pid;
    uint32_t domain;
    char *dir; /* NULL: the default */
    char *name;
    pyf_child *children;
} pyf_node;

/* pyf_home for a node's child, else ForkError naming what was called. */
bool pyf_child_home_(const pyf_child *c, const char *what);
static inline bool pyf_child_home(const pyf_child *c, const char *what)
{
    return pyf_home(c->gen) || pyf_child_home_(c, what);
}
/* Links c, the link of child self, into node's list (a strong reference to node), as of this
 * process; ops say what it is. */
void pyf_child_link(pyf_child *c, pyf_node *node, const pyf_child_ops *ops, PyObject *self);
/* Takes c out of its node's list; a closed node whose last child it was is destroyed. */
void pyf_child_unlink(pyf_child *c);
/* Destroys c's child if it is closed and nothing needs it any more (its ops' finish). */
void pyf_child_finish(pyf_child *c);
/* False with ClosedError when closed, ForkError in another process. */
bool pyf_node_open(pyf_node *n, const char *what);
/* True while a child is open to its user, obj its ferry object: else ForkError in another
 * process, ClosedError once closed; both naming what was called. */
bool pyf_child_open(const pyf_child *c, const void *obj, const char *what);
/* Lets go of the lock of an endpoint (a Publisher or Subscriber, link its link), then finishes
 * what a close left to the lock's holder: the closed owner that reads or publishes through it
 * (a Sync, GpuSubscriber or GpuPublisher; NULL: none), then the endpoint itself. */
void pyf_endpoint_unlock(PyThread_type_lock lock, pyf_child *link, PyObject *owner,
                         const pyf_child *owner_link);

/* close() of a node's child, through its ops; also its __exit__ (whose arguments it ignores). */
PyObject *pyf_child_close_method(PyObject *self, PyObject *unused);
/* __enter__ of what a with-block closes: the object itself. */
PyObject *pyf_enter_method(PyObject *self, PyObject *unused);
/* __enter__ of what a with-block releases (a sample, loan, frame or view): the object itself,
 * once its check, ok, passed (else NULL, with the check's exception). */
static inline PyObject *pyf_entered(PyObject *self, bool ok)
{
    return ok ? Py_NewRef(self) : NULL;
}
/* close(), __enter__ and __exit__ of a node's child, for its method table; what names it. */
#define PYF_CHILD_CLOSE_METHODS(close_doc, what)                                                   \
    {"close", pyf_child_close_method, METH_NOARGS, close_doc},                                     \
        {"__enter__", pyf_enter_method, METH_NOARGS, "Returns the " what "."},                     \
    {                                                                                              \
        "__exit__", pyf_child_close_method, METH_VARARGS, "Closes the " what "."                   \
    }

/* ---------------------------------------------------------------------------------------------
 * Waits
 * ------------------------------------------------------------------------------------------- */

/* What a wait's step or block returns when a Python exception is set: a signal handler's, or
 * one the step raised. */
#define PYF_ERAISED FERRY_ERR_COUNT_

/* A blocking call cut into slices of at most PYF_WAIT_SLICE_NS with the GIL released, so that
 * Ctrl-C (any signal handler) is seen between them (pyf_wait_sliced). */
typedef struct pyf_wait {
    /* Before each slice, with the GIL held: FERRY_EAGAIN waits a slice, anything else ends the
     * wait with it (PYF_ERAISED with an exception set). NULL: every slice is waited. */
    ferry_err (*step)(void *arg);
    /* The slice, up to slice_ns, with the GIL released: FERRY_ETIMEDOUT waits on, anything
     * else ends the wait with it (but see take). */
    ferry_err (*block)(void *arg, int64_t slice_ns);
    /* After each slice, with the GIL held, whatever it returned (NULL: nothing to do). */
    void (*after)(void *arg);
    /* The step takes what is waited for (FERRY_OK: it did), a slice that ends with FERRY_OK
     * (something came) goes on to the next step, and the deadline is looked at before each
     * slice. Else the slice waits for it, runs at least once (a timeout of 0 still looks) and
     * the deadline is looked at after each. */
    bool take;
    int64_t slice_ns; /* the longest slice; 0: PYF_WAIT_SLICE_NS */
} pyf_wait;

/* How a sliced wait ended besides its result, for its caller's message: closed meanwhile (by
 * another thread), or the ferry call that failed. Steps and blocks note them. */
typedef struct pyf_waited {
    bool closed;
    const char *failed; /* NULL: none */
} pyf_waited;

/* A step's look at its object: FERRY_ECLOSED (noted) when closed meanwhile, else FERRY_EAGAIN. */
static inline ferry_err pyf_wait_open(pyf_waited *w, bool closed)
{
    w->closed = closed;
    return closed ? FERRY_ECLOSED : FERRY_EAGAIN;
}

/* The result err of ferry call `call` in a step or block, noted as failed unless it is FERRY_OK
 * or go_on (FERRY_EAGAIN for a step, FERRY_ETIMEDOUT for a block). */
static inline ferry_err pyf_wait_call(pyf_waited *w, ferry_err err, ferry_err go_on,
                                      const char *call)
{
    if (err != FERRY_OK && err != go_on)
        w->failed = call;
    return err;
}

/* Raises what ended a wait with err (neither FERRY_OK nor its timeout): nothing more for
 * PYF_ERAISED, ClosedError naming what when closed, else the failed call's error (on topic
 * unless NULL). Returns NULL. */
PyObject *pyf_wait_raise(const pyf_waited *w, ferry_err err, const char *what, const char *topic);

/* The deadline of a timeout in nanoseconds (FERRY_FOREVER: -1, never). */
static inline int64_t pyf_deadline(int64_t timeout_ns)
{
    return timeout_ns < 0 ? -1 : ferry_now().ns + timeout_ns;
}
/* Runs w until its step or block ends it, FERRY_ETIMEDOUT once deadline (-1: never) passed, or
 * PYF_ERAISED when a signal handler raised. */
ferry_err pyf_wait_sliced(const pyf_wait *w, void *arg, int64_t deadline);

#endif
