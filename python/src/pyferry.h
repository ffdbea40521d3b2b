/*
 * The CPython extension ferry._ferry, written against the stable ABI of Python 3.11
 * (Py_LIMITED_API 0x030B0000): one build loads in every CPython from 3.11 on.
 *
 * Objects and what they own: a Node owns the ferry_node; Publishers, Subscribers and WaitSets
 * hold a strong reference to their Node and are linked into its list of children (the list owns
 * no reference, so no cycle forms); a Loan holds its Publisher, a Sample its Subscriber. So the
 * garbage collector can only destroy a node after its children, and a child after its loans and
 * samples. Node.close() destroys the children explicitly, waitsets first.
 *
 * Concurrency: every ferry call is made with the GIL held or, for calls that may block, with the
 * GIL released and the object's own lock held, so that two Python threads never use one ferry
 * publisher or subscriber at once (ferry.h requires it). A subscriber's lock may be held for as
 * long as a take() waits; a sample released meanwhile from another thread is queued on the
 * subscriber and released by the waiting thread when its wait slice ends.
 *
 * Processes: every object remembers the pid that created it; after a fork the child never
 * destroys what its parent created (that would remove the parent's sockets and status files),
 * it only forgets it.
 */
#ifndef FERRY_PY_PYFERRY_H
#define FERRY_PY_PYFERRY_H

#include <Python.h>
#include <pythread.h>

#include <ferry/ferry.h>
#include <ferry/msg.h>
#include <ferry/tensor.h>

#include <stdbool.h>
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

/* How an exported buffer looks: shape and strides in bytes, a struct-module format, and the
 * DLPack data type of its elements (dl_bits 0 when it has none). */
typedef struct pyf_geom {
    void *buf;
    Py_ssize_t len;
    Py_ssize_t itemsize;
    int ndim;
    Py_ssize_t shape[FERRY_TENSOR_DIMS_MAX];
    Py_ssize_t strides[FERRY_TENSOR_DIMS_MAX];
    char *format;         /* heap copy, freed with the geometry */
    const char *no_buffer; /* why the buffer protocol is refused (bfloat16), or NULL */
    uint8_t dl_code, dl_bits;
    bool big_endian;
} pyf_geom;

/* Links a child into its node's list. */
typedef struct pyf_child {
    struct pyf_node *node;
    struct pyf_child *prev, *next;
    int kind; /* PYF_CHILD_* */
    PyObject *self;
} pyf_child;

enum { PYF_CHILD_PUB = 1, PYF_CHILD_SUB = 2, PYF_CHILD_WAITSET = 3, PYF_CHILD_SYNC = 4,
       PYF_CHILD_GPUSUB = 5 };

typedef struct pyf_node {
    PyObject_HEAD
    ferry_node *node; /* NULL once closed */
    pid_t pid;
    uint32_t domain;
    char *dir; /* NULL: the default */
    char *name;
    pyf_child *children;
} pyf_node;

struct pyf_loan;
struct pyf_sample;

typedef struct pyf_pub {
    PyObject_HEAD
    pyf_child link;
    ferry_publisher *pub; /* NULL once closed */
    PyThread_type_lock lock;
    pyf_kind kind;
    char *topic;
    char *type_name;
    struct pyf_loan *loans; /* every Loan object alive */
} pyf_pub;

/* A sample released while another thread held the subscriber. */
typedef struct pyf_pending {
    ferry_sample s;
    struct pyf_pending *next;
} pyf_pending;

typedef struct pyf_sub {
    PyObject_HEAD
    pyf_child link;
    ferry_subscriber *sub; /* NULL once closed */
    PyThread_type_lock lock;
    pyf_kind kind;
    char *topic;
    char *type_name;
    struct pyf_sample *samples; /* every Sample object alive and not yet released */
    pyf_pending *pending;
    PyObject *waitset; /* borrowed: the WaitSet this subscriber is in, or NULL */
    PyObject *owner;   /* borrowed: the Sync or GpuSubscriber that takes from it, or NULL */
} pyf_sub;

/* A matched set of a Sync, handed out and not yet given back (sync.c): its samples' Sample
 * objects each count one in live; the last to go gives the set back (ferry_sync_release). */
struct pyf_syncset;

/* Objects of the module, created at import. */
typedef struct pyf_state {
    PyTypeObject *node_type, *pub_type, *sub_type, *loan_type, *sample_type, *waitset_type;
    PyTypeObject *sync_type, *syncset_type, *gpusub_type, *gpuframe_type;
    PyObject *error;                     /* ferry.Error */
    PyObject *errors[FERRY_ERR_COUNT_];  /* one subclass per ferry_err; [0] unused */
} pyf_state;

extern pyf_state pyf;

/* The stable ABI passes type slots as void *; ISO C has no conversion between function and
 * object pointers, so they are copied bit for bit (which POSIX guarantees to work). */
void *pyf_fn(void (*f)(void));
#define PYF_FN(f) pyf_fn((void (*)(void))(f))

/* module.c */
PyObject *pyf_raise(ferry_err err, const char *fmt, ...);
PyObject *pyf_raise_closed(const char *what);
bool pyf_lock(PyThread_type_lock lock);
char *pyf_strdup(const char *s);
PyObject *pyf_alloc(PyTypeObject *type);
void pyf_free(PyObject *self);
pyf_kind pyf_kind_of(const char *type_name);
const char *pyf_kind_name(pyf_kind kind);
PyObject *pyf_stamp_get(const ferry_stamp *s);
int pyf_stamp_set(ferry_stamp *s, PyObject *value);
bool pyf_timeout_ns(PyObject *timeout, int64_t *out);
void pyf_geom_clear(pyf_geom *g);
bool pyf_geom_bytes(pyf_geom *g, void *buf, size_t len);
bool pyf_geom_image(pyf_geom *g, void *buf, const ferry_image_header *h,
                    const ferry_image_layout *l);
bool pyf_geom_cloud(pyf_geom *g, void *buf, const ferry_pointcloud_header *h);
bool pyf_geom_tensor(pyf_geom *g, void *buf, const ferry_tensor_header *h);
int pyf_geom_export(const pyf_geom *g, PyObject *owner, Py_buffer *view, int flags, bool readonly);
PyObject *pyf_publisher_stats(const ferry_publisher_stats *s);
PyObject *pyf_subscriber_stats(const ferry_subscriber_stats *s);
/* FERRY_DOMAIN and FERRY_DIR, as the ferry command reads them, for arguments left None; *dir
 * points into the argument or the environment. */
bool pyf_where(PyObject *domain_arg, PyObject *dir_arg, uint32_t *domain, const char **dir);
PyObject *pyf_fields_get(const ferry_point_field *fields, uint32_t n);
/* Parses __dlpack__'s keywords: refuses copy=True and any device but device; *stream is the
 * stream argument (borrowed, Py_None when absent), *versioned whether max_version >= (1, 0). */
bool pyf_dlpack_args(PyObject *args, PyObject *kwargs, ferry_dl_device device, PyObject **stream,
                     bool *versioned);
/* A DLPack capsule over desc (shape and strides copied): "dltensor_versioned", flagged
 * read-only, when versioned, else "dltensor". It holds a reference to owner; its deleter calls
 * unexport(owner) with the GIL held, once. The caller counts the export on success. */
PyObject *pyf_dlpack_capsule(PyObject *owner, void (*unexport)(PyObject *owner), bool versioned,
                             const ferry_dl_tensor *desc);

/* node.c */
bool pyf_node_types(PyObject *module);
bool pyf_node_open(pyf_node *n, const char *what);
void pyf_child_link(pyf_child *c, pyf_node *node, int kind, PyObject *self);
void pyf_child_unlink(pyf_child *c);

/* publisher.c */
bool pyf_pub_types(PyObject *module);
PyObject *pyf_pub_new(pyf_node *node, PyObject *args, PyObject *kwargs);
int pyf_pub_close(pyf_pub *p);

/* subscriber.c */
bool pyf_sub_types(PyObject *module);
PyObject *pyf_sub_new(pyf_node *node, PyObject *args, PyObject *kwargs);
int pyf_sub_close(pyf_sub *s);
PyObject *pyf_sample_wrap(pyf_sub *sub, const ferry_sample *s);
void pyf_sub_drain(pyf_sub *s);
/* A Sample for sample s of a matched set: it is not in the subscriber's list, and when it is
 * done (released and no export left) it calls pyf_syncset_done(set) instead of ferry_release.
 * On an error (a sample that is not a valid message of its type) it is done already. */
PyObject *pyf_sample_wrap_member(pyf_sub *sub, const ferry_sample *s, struct pyf_syncset *set);
/* The set a Sample belongs to (NULL for a plain one, or once it is done). */
struct pyf_syncset *pyf_sample_set(PyObject *sample);
/* True while the user holds the sample (not released, whatever its exports). */
bool pyf_sample_held(PyObject *sample);
/* True when an array, memoryview or DLPack tensor still reads the sample. */
bool pyf_sample_exported(PyObject *sample);
/* Lets the user's hold go, as release() does; false when it was let go already. */
bool pyf_sample_let_go(PyObject *sample);
/* Marks a member released without giving anything back (its set was given back as a whole). */
void pyf_sample_forget(PyObject *sample);
/* Raises BusyError when the subscriber is read through a Sync or a GpuSubscriber. */
bool pyf_sub_own(pyf_sub *s, const char *what);

/* sync.c */
bool pyf_sync_types(PyObject *module);
int pyf_sync_close(PyObject *sync);
void pyf_syncset_done(struct pyf_syncset *set);

/* gpu.c: the GPU types exist in every build; without the GPU module they raise
 * NotSupportedError when created. */
bool pyf_gpu_types(PyObject *module);
int pyf_gpusub_close(PyObject *gsub);

/* waitset.c */
bool pyf_waitset_types(PyObject *module);
PyObject *pyf_waitset_new(pyf_node *node);
int pyf_waitset_close(PyObject *ws);
int pyf_waitset_forget(PyObject *ws, pyf_sub *sub);

#endif
