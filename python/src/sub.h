/*
 * Subscribers and their samples, for the files that use them: subscriber.c (ferry.Subscriber),
 * sample.c (ferry.Sample and the subscriber's end of a sample's life), and what reads through a
 * subscriber: waitset.c, sync.c, gpu.c, gpu_frame.c and gpu_host.c.
 */
#ifndef FERRY_PY_SUB_H
#define FERRY_PY_SUB_H

#include "export.h"
#include "util.h"

/* A sample released while another thread held the subscriber. */
typedef struct pyf_pending {
    ferry_sample s;
    struct pyf_pending *next;
} pyf_pending;

typedef struct pyf_sub {
    PyObject_HEAD pyf_child link;
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
    PyObject *owner;       /* borrowed: the Sync or GpuSubscriber that takes from it, or NULL; set
                            * until that one's ferry object is destroyed */
    pyf_child *owner_link; /* the owner's link (its closed flag) */
} pyf_sub;
PYF_CHILD_OBJECT(pyf_sub);

/* A matched set of a Sync, handed out and not yet given back (sync.c): its samples' Sample
 * objects each count one in live; the last to go gives the set back (ferry_sync_release). */
struct pyf_syncset;

/* Lets the subscriber's lock go, then finishes what its closing left to the lock's holder: the
 * subscriber itself, or its closed owner. */
static inline void pyf_sub_unlock(pyf_sub *s)
{
    pyf_endpoint_unlock(s->lock, &s->link, s->owner, s->owner_link);
}

/* subscriber.c */
PyObject *pyf_sub_new(pyf_node *node, PyObject *args, PyObject *kwargs);
/* Raises BusyError when the subscriber is read through a Sync or a GpuSubscriber. */
bool pyf_sub_own(pyf_sub *s, const char *what);

/* sample.c */
/* A Sample for sample s just taken, in the subscriber's list; on an error (a sample that is not
 * a valid message of its type) released already. */
PyObject *pyf_sample_wrap(pyf_sub *sub, const ferry_sample *s);
/* Releases the samples other threads released while this one held the lock (the lock and the
 * GIL held; in a forked child only the GIL: it forgets them). */
void pyf_sub_drain(pyf_sub *s);
/* Closing s, its lock held: the samples no array reads go back now, the others when their last
 * export goes. */
void pyf_sub_release_samples(pyf_sub *s);
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

#endif
