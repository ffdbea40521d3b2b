/*
 * What the object files of ferry._ferry declare for each other, above the ground floor (util.h,
 * args.h).
 */
#ifndef FERRY_PY_PYFERRY_H
#define FERRY_PY_PYFERRY_H

#include "args.h"
#include "export.h"
#include "functions.h"
#include "util.h"

struct pyf_loan;
struct pyf_sample;

typedef struct pyf_pub {
    PyObject_HEAD
    pyf_child link;
    ferry_publisher *pub; /* NULL once destroyed (link.closed: closed) */
    PyThread_type_lock lock;
    pyf_kind kind;
    char *topic;
    char *type_name;
    struct pyf_loan *loans; /* every Loan object alive */
    PyObject *owner;        /* borrowed: the GpuPublisher that publishes through it, or NULL; set
                             * until that one's ferry object is destroyed */
    pyf_child *owner_link;  /* the owner's link (its closed flag) */
} pyf_pub;
PYF_CHILD_OBJECT(pyf_pub);

/* A sample released while another thread held the subscriber. */
typedef struct pyf_pending {
    ferry_sample s;
    struct pyf_pending *next;
} pyf_pending;

typedef struct pyf_sub {
    PyObject_HEAD
    pyf_child link;
    ferry_subscriber *sub; /* NULL once destroyed (link.closed: closed) */
    PyThread_type_lock lock;
    pyf_kind kind;
    char *topic;
    char *type_name;
    struct pyf_sample *samples; /* every Sample object alive and not yet released */
    pyf_pending *pending;
    PyObject *waitset; /* borrowed: the WaitSet this subscriber is in, or NULL */
    /* What that WaitSet does when the subscriber closes: lets go of it (0, or -1 with an
     * exception). */
    int (*waitset_forget)(PyObject *waitset, struct pyf_sub *sub);
    PyObject *owner;   /* borrowed: the Sync or GpuSubscriber that takes from it, or NULL; set
                        * until that one's ferry object is destroyed */
    pyf_child *owner_link; /* the owner's link (its closed flag) */
} pyf_sub;
PYF_CHILD_OBJECT(pyf_sub);

/* A matched set of a Sync, handed out and not yet given back (sync.c): its samples' Sample
 * objects each count one in live; the last to go gives the set back (ferry_sync_release). */
struct pyf_syncset;

/* node.c */
bool pyf_node_types(PyObject *module);

/* publisher.c */
bool pyf_pub_types(PyObject *module);
PyObject *pyf_pub_new(pyf_node *node, PyObject *args, PyObject *kwargs);
/* Lets the publisher's lock go, then finishes what its closing left to the lock's holder: the
 * publisher itself, or its closed GpuPublisher. */
static inline void pyf_pub_unlock(pyf_pub *p)
{
    pyf_endpoint_unlock(p->lock, &p->link, p->owner, p->owner_link);
}
/* Raises BusyError when the publisher publishes through a GpuPublisher. */
bool pyf_pub_own(pyf_pub *p, const char *what);

/* subscriber.c */
bool pyf_sub_types(PyObject *module);
PyObject *pyf_sub_new(pyf_node *node, PyObject *args, PyObject *kwargs);
/* Lets the subscriber's lock go, then finishes what its closing left to the lock's holder: the
 * subscriber itself, or its closed owner. */
static inline void pyf_sub_unlock(pyf_sub *s)
{
    pyf_endpoint_unlock(s->lock, &s->link, s->owner, s->owner_link);
}
PyObject *pyf_sample_wrap(pyf_sub *sub, const ferry_sample *s);
void pyf_sub_drain(pyf_sub *s);
/* What a member of a matched set calls when it is done (released and no export left). */
typedef void (*pyf_set_done)(struct pyf_syncset *set);
/* A Sample for sample s of a matched set: it is not in the subscriber's list, and when it is
 * done it calls done(set) instead of ferry_release. On an error (a sample that is not a valid
 * message of its type) it is done already. */
PyObject *pyf_sample_wrap_member(pyf_sub *sub, const ferry_sample *s, struct pyf_syncset *set,
                                 pyf_set_done done);
/* The set a Sample belongs to (NULL for a plain one, or once it is done). */
struct pyf_syncset *pyf_sample_set(PyObject *sample);
/* True when sample (else anything) was taken in this process, else ForkError naming what was
 * called on a `type`. */
bool pyf_sample_home(PyObject *sample, const char *what, const char *type);
/* True while the user holds the sample (not released, whatever its exports). */
bool pyf_sample_held(PyObject *sample);
/* True when an array, memoryview or DLPack tensor still reads the sample. */
bool pyf_sample_exported(PyObject *sample);
/* Lets the user's hold go, as release() does; false when it was let go already. */
bool pyf_sample_let_go(PyObject *sample);
/* Marks a member released without giving anything back (its set was given back as a whole). */
void pyf_sample_forget(PyObject *sample);
/* Counts one export of a held sample (an object that reads its memory besides the buffer
 * protocol and DLPack: a HostGpuView) and gives what it reads; false with StateError or
 * ForkError naming `what`. pyf_sample_export_end undoes it (the sample may go back then). */
bool pyf_sample_export_begin(PyObject *sample, const char *what, pyf_sub **sub,
                             const ferry_sample **s, const pyf_geom **geom);
void pyf_sample_export_end(PyObject *sample);
/* Raises BusyError when the subscriber is read through a Sync or a GpuSubscriber. */
bool pyf_sub_own(pyf_sub *s, const char *what);

/* sync.c */
bool pyf_sync_types(PyObject *module);

#ifdef FERRY_PY_GPU
/* gpu_util.c */
/* Streams a loan or frame may be exported to besides its own. */
#define PYF_GPU_STREAMS_MAX 8
/* A cudaStream_t argument: None, an int, or a stream object (__cuda_stream__, cuda_stream or
 * ptr); the legacy default stream is 0. */
bool pyf_gpu_stream_arg(PyObject *o, uintptr_t *out);
/* __dlpack__'s consumer stream as a cudaStream_t; *sync false for -1 (no synchronisation). */
bool pyf_gpu_dl_stream(PyObject *o, uintptr_t *out, bool *sync);
/* Makes device current for the CUDA calls that follow (false: it cannot be); *prev is what
 * pyf_gpu_device_leave restores. */
bool pyf_gpu_device_enter(int device, int *prev);
void pyf_gpu_device_leave(int device, int prev);
/* Makes stream waiter wait (on the GPU) for the work enqueued on done so far. */
ferry_err pyf_gpu_stream_order(int device, uintptr_t waiter, uintptr_t done);
/* gpu_device_count(). */
bool pyf_gpu_functions_add(PyObject *module);

/* gpu.c */
bool pyf_gpusub_types(PyObject *module);

/* gpu_pub.c */
bool pyf_gpupub_types(PyObject *module);

#endif
/* gpu_host.c: HostGpuView and _sample_cuda (Sample.cuda()); the latter alone, raising
 * NotSupportedError, without the GPU module. */
bool pyf_hostview_types(PyObject *module);

/* waitset.c */
bool pyf_waitset_types(PyObject *module);
PyObject *pyf_waitset_new(pyf_node *node);

#endif
