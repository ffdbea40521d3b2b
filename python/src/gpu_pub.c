/*
 * ferry.GpuPublisher and ferry.GpuLoan: device frames and device tensors (ferry/gpu.h,
 * ferry/tensor.h) published from Python. A loan is device memory of the publisher's, exported
 * writable with __dlpack__ so that PyTorch or CuPy fill it in place, then published without a
 * copy and without the CPU waiting for the GPU. Built with the GPU module (FERRY_PY_GPU), like
 * gpu.c; without it the package's GpuPublisher raises NotSupportedError.
 *
 * A GpuPublisher publishes through a Publisher (which then refuses loans and publishes of its
 * own: its samples carry device-frame descriptors) and uses that publisher's lock for every
 * ferry_gpu call. close() refuses while a loan is held (neither published nor released): the
 * memory is being written for a frame still to come. A loan released or garbage collected
 * unpublished is given back (ferry_gpu_loan_release) when the last DLPack tensor over it is
 * deleted, never under one. The GPU work on a loan given back may still run: an event recorded
 * after it is kept, and the stream of the next loan of that memory waits for it (on the GPU).
 * Closed while a tensor still reads a loan (published or not), the GpuPublisher is destroyed,
 * its device memory freed, when the last such tensor is deleted (gpupub_finish).
 *
 * Streams: a loan is made ready for the stream given to loan() (ferry_gpu_loan makes it wait for
 * the previous frame of that memory); __dlpack__(stream=s) makes the consumer's stream s wait for
 * it. publish(stream=p) makes p wait for the loan's stream and for every consumer stream, then
 * publishes on p: readers see the frame once all that work is done.
 */
#include "pyferry.h"

#ifdef FERRY_PY_GPU

#include <ferry/gpu.h>

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

/* Loans given back whose GPU work may still run, remembered until their memory is loaned again.
 * Beyond this many the oldest is waited for on the CPU. */
#define GPU_RETURNS_MAX 16

enum { GLOAN_HELD = 0, GLOAN_PUBLISHED = 1, GLOAN_RELEASED = 2 };

typedef struct pyf_gpuloan pyf_gpuloan;

/* A loan given back: the next loan of ptr waits for done. */
typedef struct gpu_return {
    void *ptr;
    cudaEvent_t done;
} gpu_return;

typedef struct pyf_gpupub {
    PyObject_HEAD
    pyf_child link;
    pyf_pub *pub; /* a strong reference */
    ferry_gpu_publisher *gpub; /* NULL once destroyed (link.closed: closed) */
    int device;
    ferry_gpu_ipc ipc;
    bool early_wake;
    pyf_gpuloan *loans; /* every GpuLoan alive */
    gpu_return returns[GPU_RETURNS_MAX];
    uint32_t nreturns;
} pyf_gpupub;
PYF_CHILD_OBJECT(pyf_gpupub);

struct pyf_gpuloan {
    PyObject_HEAD
    pyf_gpupub *gp; /* a strong reference */
    pyf_gpuloan *prev, *next;
    bool linked; /* in gp->loans */
    int state;
    bool out; /* the device memory is still loaned: held, or released under a tensor */
    Py_ssize_t exports;
    void *ptr;
    size_t size; /* bytes loaned */
    bool tensor;
    ferry_tensor_header h; /* dtype, shape, strides, data_size; stamp and frame_id: the user's */
    ferry_dtype dtype;     /* FERRY_DTYPE_UINT8 for a byte loan */
    uintptr_t loan_stream; /* the stream ferry_gpu_loan made ready */
    uintptr_t streams[PYF_GPU_STREAMS_MAX]; /* consumer streams it was exported to */
    uint32_t nstreams;
};

static const char *const ipc_names[] = {"auto", "vmm", "legacy"};

/* ---------------------------------------------------------------------------------------------
 * Giving loans back
 * ------------------------------------------------------------------------------------------- */

/* Waits (on the CPU) for every given-back loan's work and forgets them: the memory is freed
 * next. The lock is held. */
static void returns_drain(pyf_gpupub *gp)
{
    uint32_t i;
    int prev;

    if (gp->nreturns == 0) return;
    if (!pyf_gpu_device_enter(gp->device, &prev)) prev = -1;
    for (i = 0; i < gp->nreturns; i++) {
        if (cudaEventSynchronize(gp->returns[i].done) != cudaSuccess) (void)cudaGetLastError();
        cudaEventDestroy(gp->returns[i].done);
    }
    gp->nreturns = 0;
    pyf_gpu_device_leave(gp->device, prev);
}

/* Makes stream wait for the work of a loan of ptr given back earlier, if any. The lock is held.
 */
static ferry_err returns_wait(pyf_gpupub *gp, void *ptr, uintptr_t stream)
{
    cudaError_t e = cudaSuccess;
    uint32_t i;
    int prev;

    for (i = 0; i < gp->nreturns && gp->returns[i].ptr != ptr; i++) {
    }
    if (i == gp->nreturns) return FERRY_OK;
    if (!pyf_gpu_device_enter(gp->device, &prev)) return FERRY_ENODEV;
    e = cudaStreamWaitEvent((cudaStream_t)stream, gp->returns[i].done, 0);
    if (e != cudaSuccess) {
        /* Not ordered on the GPU: the CPU waits instead. */
        (void)cudaGetLastError();
        e = cudaEventSynchronize(gp->returns[i].done);
        if (e != cudaSuccess) (void)cudaGetLastError();
    }
    /* Destroying an event a wait is enqueued on is allowed: the wait still happens. */
    cudaEventDestroy(gp->returns[i].done);
    gp->returns[i] = gp->returns[--gp->nreturns];
    pyf_gpu_device_leave(gp->device, prev);
    return e == cudaSuccess ? FERRY_OK : FERRY_ESYS;
}

/* Remembers the GPU work on a loan about to be given back: an event recorded on its stream after
 * that stream was made to wait for its consumers'. Where that fails the CPU waits for the work
 * now. The lock is held. */
static void returns_add(pyf_gpupub *gp, pyf_gpuloan *l)
{
    cudaEvent_t ev;
    bool recorded = false;
    uint32_t i;
    int prev;

    if (!pyf_gpu_device_enter(gp->device, &prev)) return;
    for (i = 0; i < l->nstreams; i++)
        if (pyf_gpu_stream_order(gp->device, l->loan_stream, l->streams[i]) != FERRY_OK &&
            cudaStreamSynchronize((cudaStream_t)l->streams[i]) != cudaSuccess)
            (void)cudaGetLastError();
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess) {
        if (cudaEventRecord(ev, (cudaStream_t)l->loan_stream) == cudaSuccess) {
            recorded = true;
        } else {
            (void)cudaGetLastError();
            cudaEventDestroy(ev);
        }
    } else {
        (void)cudaGetLastError();
    }
    if (!recorded) {
        if (cudaStreamSynchronize((cudaStream_t)l->loan_stream) != cudaSuccess)
            (void)cudaGetLastError();
        pyf_gpu_device_leave(gp->device, prev);
        return;
    }
    if (gp->nreturns == GPU_RETURNS_MAX) {
        /* Memory loaned again rarely stays away this long (a chunk outgrown and replaced). */
        if (cudaEventSynchronize(gp->returns[0].done) != cudaSuccess) (void)cudaGetLastError();
        cudaEventDestroy(gp->returns[0].done);
        memmove(&gp->returns[0], &gp->returns[1], sizeof gp->returns[0] * (GPU_RETURNS_MAX - 1));
        gp->nreturns--;
    }
    gp->returns[gp->nreturns].ptr = l->ptr;
    gp->returns[gp->nreturns].done = ev;
    gp->nreturns++;
    pyf_gpu_device_leave(gp->device, prev);
}

/* Gives an unpublished loan's memory back, after its GPU work. */
static void loan_give_back(pyf_gpuloan *l)
{
    pyf_gpupub *gp = l->gp;

    if (!l->out) return;
    l->out = false;
    /* A forked child only forgets its parent's loan. */
    if (gp->gpub == NULL || !pyf_home(gp->link.gen)) return;
    pyf_lock(gp->pub->lock);
    if (gp->gpub != NULL) { /* not destroyed while this thread waited for the lock */
        returns_add(gp, l);
        ferry_gpu_loan_release(gp->gpub, l->ptr);
    }
    pyf_pub_unlock(gp->pub); /* destroys a closed GpuPublisher whose last loan this was */
}

/* The user lets the loan go unpublished: given back now, or when its last tensor goes. */
static void loan_let_go(pyf_gpuloan *l)
{
    if (l->state != GLOAN_HELD) return;
    l->state = GLOAN_RELEASED;
    if (l->exports == 0) loan_give_back(l);
}

static void loan_unlink(pyf_gpuloan *l)
{
    pyf_gpupub *gp = l->gp;

    if (!l->linked) return;
    if (l->prev != NULL)
        l->prev->next = l->next;
    else
        gp->loans = l->next;
    if (l->next != NULL) l->next->prev = l->prev;
    l->prev = l->next = NULL;
    l->linked = false;
}

/* ---------------------------------------------------------------------------------------------
 * GpuPublisher
 * ------------------------------------------------------------------------------------------- */

static int gpupub_close(PyObject *self);
static void gpupub_finish(PyObject *self);
static const pyf_child_ops gpupub_ops = {"GpuPublisher", PYF_CLOSE_GPUPUB, gpupub_close,
                                         gpupub_finish};

static PyObject *gpupub_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"publisher", "device", "ipc", "early_wake", NULL};
    ferry_gpu_publisher_options o;
    const char *ipc = "auto";
    PyObject *o_pub;
    int device = 0, early_wake = 1, i;
    pyf_gpupub *gp;
    pyf_pub *pub;
    ferry_err err;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$isp:GpuPublisher", kwlist, &o_pub,
                                     &device, &ipc, &early_wake))
        return NULL;
    if (!PyObject_TypeCheck(o_pub, pyf.pub_type)) {
        PyErr_SetString(PyExc_TypeError, "GpuPublisher: not a ferry.Publisher");
        return NULL;
    }
    pub = (pyf_pub *)o_pub;
    if (!pyf_child_home(&pub->link, "GpuPublisher")) return NULL;
    if (pub->link.closed || pub->pub == NULL || pub->link.node == NULL || pub->link.node->closed)
        return pyf_raise_closed("GpuPublisher");
    if (!pyf_pub_own(pub, "GpuPublisher")) return NULL;
    if (device < 0) return pyf_raise(FERRY_EINVAL, "GpuPublisher: device %d", device);
    for (i = 0; i < 3 && strcmp(ipc, ipc_names[i]) != 0; i++) {
    }
    if (i == 3)
        return pyf_raise(FERRY_EINVAL, "GpuPublisher: ipc='%s' is not \"auto\", \"vmm\" or "
                                       "\"legacy\"",
                         ipc);
    gp = (pyf_gpupub *)pyf_alloc(type);
    if (gp == NULL) return NULL;
    gp->device = device;
    gp->early_wake = early_wake != 0;
    gp->pub = (pyf_pub *)Py_NewRef(o_pub);
    pyf_child_link(&gp->link, pub->link.node, &gpupub_ops, (PyObject *)gp);
    ferry_gpu_publisher_options_init(&o);
    o.device = device;
    o.ipc = (ferry_gpu_ipc)i;
    o.early_wake = gp->early_wake;
    gp->ipc = o.ipc;
    pyf_lock(pub->lock);
    Py_BEGIN_ALLOW_THREADS
    err = ferry_gpu_publisher_create(&gp->gpub, pub->pub, &o);
    if (err == FERRY_OK && ferry_gpu_publisher_ipc(gp->gpub, &gp->ipc) != FERRY_OK)
        gp->ipc = o.ipc;
    Py_END_ALLOW_THREADS
    PyThread_release_lock(pub->lock);
    if (err != FERRY_OK) {
        gp->gpub = NULL;
        Py_DECREF(gp);
        return pyf_raise(err, "ferry_gpu_publisher_create('%s', device %d, ipc %s)", pub->topic,
                         device, ipc);
    }
    pub->owner = (PyObject *)gp;
    pub->owner_link = &gp->link;
    return (PyObject *)gp;
}

/* Destroys a closed GpuPublisher once no tensor reads one of its loans. Never waits for the
 * lock: its holder finishes it when letting the lock go (pyf_pub_unlock). */
static ferry_err gpupub_try_finish(pyf_gpupub *gp)
{
    bool home = pyf_home(gp->link.gen);
    ferry_err err = FERRY_OK;
    pyf_gpuloan *l;

    if (!gp->link.closed || gp->gpub == NULL) return FERRY_OK;
    for (l = gp->loans; l != NULL; l = l->next)
        if (l->exports > 0 || l->out) return FERRY_OK;
    /* A forked child only forgets it, without the lock. */
    if (home && !PyThread_acquire_lock(gp->pub->lock, NOWAIT_LOCK)) return FERRY_OK;
    Py_INCREF((PyObject *)gp);
    if (home) {
        returns_drain(gp);
        /* Waits for the work of frames published with no reader, frees the device memory. */
        Py_BEGIN_ALLOW_THREADS
        err = ferry_gpu_publisher_destroy(gp->gpub);
        Py_END_ALLOW_THREADS
    }
    if (err == FERRY_OK) gp->gpub = NULL; /* else dealloc tries again */
    if (home) PyThread_release_lock(gp->pub->lock);
    if (err == FERRY_OK) {
        if (gp->pub->owner == (PyObject *)gp) gp->pub->owner = NULL;
        pyf_child_unlink(&gp->link);
        pyf_child_finish(&gp->pub->link); /* closed meanwhile, it waited for this */
    }
    Py_DECREF((PyObject *)gp);
    return err;
}

static void gpupub_finish(PyObject *self)
{
    (void)gpupub_try_finish((pyf_gpupub *)self);
}

static int gpupub_close(PyObject *self)
{
    pyf_gpupub *gp = (pyf_gpupub *)self;
    unsigned held = 0;
    pyf_gpuloan *l;
    ferry_err err;

    if (!pyf_child_home(&gp->link, "GpuPublisher.close")) return -1;
    if (gp->link.closed) return 0;
    /* Under the lock: a loan() in another thread has its loan in the list or none. */
    pyf_lock(gp->pub->lock);
    for (l = gp->loans; l != NULL; l = l->next)
        if (l->state == GLOAN_HELD) held++;
    if (held == 0) gp->link.closed = true;
    PyThread_release_lock(gp->pub->lock);
    if (held > 0) {
        pyf_raise(FERRY_EBUSY, "GpuPublisher.close('%s'): %u loan%s held: publish or release "
                               "%s first",
                  gp->pub->topic, held, held == 1 ? " is" : "s are", held == 1 ? "it" : "them");
        return -1;
    }
    Py_INCREF(self);
    err = gpupub_try_finish(gp);
    Py_DECREF(self);
    if (err != FERRY_OK) {
        pyf_raise(err, "ferry_gpu_publisher_destroy('%s')", gp->pub->topic);
        return -1;
    }
    return 0;
}

static void gpupub_dealloc(PyObject *self)
{
    pyf_gpupub *gp = (pyf_gpupub *)self;

    /* Loans hold a reference: none is left. */
    if (gp->gpub != NULL) {
        if (pyf_home(gp->link.gen)) {
            returns_drain(gp);
            ferry_gpu_publisher_destroy(gp->gpub);
        }
        gp->gpub = NULL;
    }
    if (gp->pub != NULL) {
        if (gp->pub->owner == self) gp->pub->owner = NULL;
        pyf_child_finish(&gp->pub->link); /* one closed meanwhile waited for this */
        Py_DECREF((PyObject *)gp->pub);
    }
    pyf_child_unlink(&gp->link);
    pyf_free(self);
}

/* Loans size bytes on stream into a GpuLoan made beforehand, so that nothing between the loan
 * and its place in the list runs other code (a close from another thread then sees it). */
static PyObject *gpupub_loan_into(pyf_gpupub *gp, pyf_gpuloan *l, size_t size, uintptr_t stream,
                                  const char *what)
{
    ferry_err err;
    void *ptr = NULL;

    pyf_lock(gp->pub->lock);
    if (gp->link.closed || gp->gpub == NULL) {
        pyf_pub_unlock(gp->pub);
        Py_DECREF((PyObject *)l);
        return pyf_raise_closed(what);
    }
    Py_BEGIN_ALLOW_THREADS
    err = ferry_gpu_loan(gp->gpub, size, (ferry_gpu_stream)stream, &ptr);
    if (err == FERRY_OK && (err = returns_wait(gp, ptr, stream)) != FERRY_OK)
        ferry_gpu_loan_release(gp->gpub, ptr);
    Py_END_ALLOW_THREADS
    if (err == FERRY_OK) {
        l->ptr = ptr;
        l->size = size;
        l->loan_stream = stream;
        l->state = GLOAN_HELD;
        l->out = true;
        l->linked = true;
        l->next = gp->loans;
        if (gp->loans != NULL) gp->loans->prev = l;
        gp->loans = l;
    }
    pyf_pub_unlock(gp->pub);
    if (err != FERRY_OK) {
        Py_DECREF((PyObject *)l);
        return pyf_raise(err, "ferry_gpu_loan('%s', %zu bytes)", gp->pub->topic, size);
    }
    return (PyObject *)l;
}

static pyf_gpuloan *loan_alloc(pyf_gpupub *gp)
{
    pyf_gpuloan *l = (pyf_gpuloan *)pyf_alloc(pyf.gpuloan_type);

    if (l == NULL) return NULL;
    l->gp = (pyf_gpupub *)Py_NewRef((PyObject *)gp);
    l->state = GLOAN_RELEASED; /* nothing loaned yet */
    return l;
}

static PyObject *gpupub_loan(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"nbytes", "stream", NULL};
    pyf_gpupub *gp = (pyf_gpupub *)self;
    PyObject *o_stream = Py_None;
    uintptr_t stream;
    pyf_gpuloan *l;
    Py_ssize_t n;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n|O:loan", kwlist, &n, &o_stream))
        return NULL;
    if (!pyf_child_open(&gp->link, gp->gpub, "GpuPublisher.loan") ||
        !pyf_gpu_stream_arg(o_stream, &stream))
        return NULL;
    if (n <= 0) return pyf_raise(FERRY_EINVAL, "loan(%zd): the size must be at least 1", n);
    l = loan_alloc(gp);
    if (l == NULL) return NULL;
    l->dtype = FERRY_DTYPE_UINT8;
    return gpupub_loan_into(gp, l, (size_t)n, stream, "GpuPublisher.loan");
}

static PyObject *gpupub_loan_tensor(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"shape", "dtype", "stream", "strides", NULL};
    int64_t shape[FERRY_TENSOR_DIMS_MAX], strides[FERRY_TENSOR_DIMS_MAX];
    pyf_gpupub *gp = (pyf_gpupub *)self;
    PyObject *o_shape, *o_dtype, *o_strides = Py_None, *o_stream = Py_None;
    uint32_t ndim, nstrides;
    ferry_tensor_header h;
    ferry_dtype dtype;
    uintptr_t stream;
    ferry_err err;
    pyf_gpuloan *l;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O$O:loan_tensor", kwlist, &o_shape,
                                     &o_dtype, &o_stream, &o_strides))
        return NULL;
    if (!pyf_child_open(&gp->link, gp->gpub, "GpuPublisher.loan_tensor") ||
        !pyf_gpu_stream_arg(o_stream, &stream))
        return NULL;
    if (!pyf_int64_list(o_shape, "shape", shape, &ndim) || !pyf_tensor_dtype(o_dtype, &dtype))
        return NULL;
    if (o_strides != Py_None) {
        if (!pyf_int64_list(o_strides, "strides", strides, &nstrides)) return NULL;
        if (nstrides != ndim)
            return pyf_raise(FERRY_EINVAL, "strides has %u entries, shape %u", nstrides, ndim);
    }
    /* The header ferry_tensor_gpu_publish will send: validates the arguments, sizes the loan. */
    err = ferry_tensor_header_init(&h, dtype, ndim, shape, o_strides != Py_None ? strides : NULL);
    if (err != FERRY_OK)
        return pyf_raise(err, "loan_tensor('%s', %u dimensions of %s)", gp->pub->topic, ndim,
                         ferry_dtype_name(dtype));
    if (h.data_size > (uint64_t)PY_SSIZE_T_MAX)
        return pyf_raise(FERRY_EINVAL, "loan_tensor('%s'): %llu bytes", gp->pub->topic,
                         (unsigned long long)h.data_size);
    l = loan_alloc(gp);
    if (l == NULL) return NULL;
    l->tensor = true;
    l->h = h;
    l->dtype = dtype;
    /* An empty tensor still takes a frame: a loan is at least one byte. */
    return gpupub_loan_into(gp, l, h.data_size > 0 ? (size_t)h.data_size : 1, stream,
                            "GpuPublisher.loan_tensor");
}

static bool gpuloan_check(PyObject *obj, pyf_gpupub *gp, pyf_gpuloan **out)
{
    pyf_gpuloan *l;

    if (!PyObject_TypeCheck(obj, pyf.gpuloan_type)) {
        PyErr_SetString(PyExc_TypeError, "GpuPublisher.publish() takes a GpuLoan");
        return false;
    }
    l = (pyf_gpuloan *)obj;
    if (l->gp != gp) {
        pyf_raise(FERRY_EFOREIGN, "publish on '%s': the loan is of another GpuPublisher",
                  gp->pub->topic);
        return false;
    }
    if (l->state != GLOAN_HELD) {
        pyf_raise(FERRY_ESTATE, "publish on '%s': the loan was %s already", gp->pub->topic,
                  l->state == GLOAN_PUBLISHED ? "published" : "released");
        return false;
    }
    *out = l;
    return true;
}

static PyObject *gpupub_publish(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"loan", "stream", "meta", NULL};
    pyf_gpupub *gp = (pyf_gpupub *)self;
    PyObject *obj, *o_stream = Py_None, *o_meta = Py_None;
    Py_buffer meta;
    uintptr_t stream;
    ferry_err err = FERRY_OK;
    pyf_gpuloan *l;
    uint32_t i;

    memset(&meta, 0, sizeof meta);
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OO:publish", kwlist, &obj, &o_stream,
                                     &o_meta))
        return NULL;
    if (!pyf_child_open(&gp->link, gp->gpub, "GpuPublisher.publish") ||
        !gpuloan_check(obj, gp, &l) || !pyf_gpu_stream_arg(o_stream, &stream))
        return NULL;
    if (o_meta != Py_None) {
        if (l->tensor)
            return pyf_raise(FERRY_EINVAL, "publish on '%s': a tensor loan's metadata is its "
                                           "header (set stamp and frame_id on the loan)",
                             gp->pub->topic);
        if (PyObject_GetBuffer(o_meta, &meta, PyBUF_SIMPLE) < 0) return NULL;
        if ((size_t)meta.len > FERRY_GPU_META_MAX) {
            PyBuffer_Release(&meta);
            return pyf_raise(FERRY_EINVAL, "publish on '%s': %zd bytes of meta, at most %u",
                             gp->pub->topic, meta.len, FERRY_GPU_META_MAX);
        }
    }
    /* The frame is ready on stream once the loan's own stream and every consumer's are. */
    if (stream != l->loan_stream) err = pyf_gpu_stream_order(gp->device, stream, l->loan_stream);
    for (i = 0; err == FERRY_OK && i < l->nstreams; i++)
        if (l->streams[i] != stream)
            err = pyf_gpu_stream_order(gp->device, stream, l->streams[i]);
    if (err != FERRY_OK) {
        if (meta.obj != NULL) PyBuffer_Release(&meta);
        return pyf_raise(err, "publish on '%s': the stream could not be made to wait for the "
                              "loan's work",
                         gp->pub->topic);
    }
    pyf_lock(gp->pub->lock);
    if (l->state != GLOAN_HELD) {
        err = FERRY_ESTATE; /* published or released by another thread meanwhile */
    } else {
        /* Published already for other threads: their release() or __dlpack__ meanwhile is
         * refused instead of racing with the publish. */
        l->state = GLOAN_PUBLISHED;
        Py_BEGIN_ALLOW_THREADS
        if (l->tensor)
            err = ferry_tensor_gpu_publish(gp->gpub, l->ptr, (void *)stream, l->dtype,
                                           l->h.ndim, l->h.shape, l->h.strides, &l->h.stamp,
                                           l->h.frame_id);
        else
            err = ferry_gpu_publish_meta(gp->gpub, l->ptr, (ferry_gpu_stream)stream,
                                         meta.obj != NULL ? meta.buf : NULL,
                                         meta.obj != NULL ? (size_t)meta.len : 0);
        Py_END_ALLOW_THREADS
        if (err == FERRY_OK)
            l->out = false;
        else
            l->state = GLOAN_HELD; /* still the caller's loan */
    }
    pyf_pub_unlock(gp->pub);
    if (meta.obj != NULL) PyBuffer_Release(&meta);
    if (err != FERRY_OK) return pyf_raise(err, "publish on '%s'", gp->pub->topic);
    Py_RETURN_NONE;
}

static PyObject *gpupub_stats(PyObject *self, PyObject *unused)
{
    pyf_gpupub *gp = (pyf_gpupub *)self;
    ferry_gpu_publisher_stats st;
    unsigned held = 0;
    pyf_gpuloan *l;
    ferry_err err;

    (void)unused;
    if (!pyf_child_open(&gp->link, gp->gpub, "GpuPublisher.stats")) return NULL;
    pyf_lock(gp->pub->lock);
    err = !gp->link.closed ? ferry_gpu_publisher_stats_get(gp->gpub, &st) : FERRY_ECLOSED;
    pyf_pub_unlock(gp->pub);
    if (err != FERRY_OK) return pyf_raise(err, "ferry_gpu_publisher_stats_get");
    for (l = gp->loans; l != NULL; l = l->next)
        if (l->out) held++;
    return Py_BuildValue("{s:K,s:K,s:I}", "exports", (unsigned long long)st.exports,
                         "reuse_waits", (unsigned long long)st.reuse_waits, "loans", held);
}

static PyObject *gpupub_get(PyObject *self, void *closure)
{
    pyf_gpupub *gp = (pyf_gpupub *)self;

    switch ((int)(intptr_t)closure) {
    case 0: return Py_NewRef((PyObject *)gp->pub);
    case 1: return PyLong_FromLong(gp->device);
    case 2:
        return PyUnicode_FromString((unsigned)gp->ipc < 3 ? ipc_names[gp->ipc] : "unknown");
    case 3: return PyBool_FromLong(gp->early_wake);
    default: return PyBool_FromLong(gp->link.closed);
    }
}

static PyMethodDef gpupub_methods[] = {
    {"loan", (PyCFunction)(void (*)(void))gpupub_loan, METH_VARARGS | METH_KEYWORDS,
     "loan(nbytes, stream=None) -> GpuLoan\n\n"
     "Loans nbytes of device memory (ferry_gpu_loan), ready for stream: when the memory's\n"
     "previous frame may still be read, stream waits for it on the GPU. stream is a\n"
     "cudaStream_t as an int (0 or None: the legacy default stream) or a stream object\n"
     "(__cuda_stream__, cuda_stream: torch.cuda.Stream, ptr: cupy.cuda.Stream).\n"
     "torch.from_dlpack(loan) is a writable uint8 (nbytes,) tensor over it."},
    {"loan_tensor", (PyCFunction)(void (*)(void))gpupub_loan_tensor,
     METH_VARARGS | METH_KEYWORDS,
     "loan_tensor(shape, dtype, stream=None, *, strides=None) -> GpuLoan\n\n"
     "Loans device memory for a tensor: dtype is a name (\"float32\", \"uint8\", \"float16\",\n"
     "\"bfloat16\", ...), a numpy dtype or a torch dtype; strides in elements, None for C\n"
     "order. torch.from_dlpack(loan) is a writable CUDA tensor of that shape and dtype over\n"
     "it; publish() sends the tensor header (ferry_tensor_gpu_publish) with the loan's stamp\n"
     "and frame_id."},
    {"publish", (PyCFunction)(void (*)(void))gpupub_publish, METH_VARARGS | METH_KEYWORDS,
     "publish(loan, stream=None, meta=None)\n\n"
     "Publishes a loan without a copy and without the CPU waiting (ferry_gpu_publish_meta,\n"
     "or ferry_tensor_gpu_publish for a tensor loan): readers see the frame once the work\n"
     "enqueued before this call on stream, on the loan's stream and on the streams it was\n"
     "exported to is done. meta: up to 1024 bytes (a bytes-like object) for a byte loan,\n"
     "found in GpuFrame.meta. The loan is dead afterwards: tensors made from it must not be\n"
     "used any more (the memory is the readers'); a second publish raises StateError.\n"
     "Releases the GIL."},
    {"stats", gpupub_stats, METH_NOARGS,
     "stats() -> dict\n\nexports and reuse_waits (ferry_gpu_publisher_stats), and loans: the\n"
     "device loans not yet published or given back."},
    PYF_CHILD_CLOSE_METHODS(
        "close()\n\nDestroys the GPU publisher (ferry_gpu_publisher_destroy): waits for the work\n"
        "of frames published with no reader and frees the device memory; the publisher can\n"
        "publish host samples again. BusyError while a loan is held (publish or release it\n"
        "first). While a DLPack tensor over a loan is left, the device memory stays: the GPU\n"
        "publisher is destroyed when the last of them is deleted. Closing twice does nothing.",
        "GPU publisher"),
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef gpupub_getset[] = {
    {"publisher", gpupub_get, NULL, "The Publisher it publishes through.", (void *)0},
    {"device", gpupub_get, NULL, "The CUDA device ordinal of its memory.", (void *)1},
    {"ipc", gpupub_get, NULL, "How device memory crosses processes: \"vmm\" or \"legacy\".",
     (void *)2},
    {"early_wake", gpupub_get, NULL, "Whether a loan wakes the subscribers early.", (void *)3},
    {"closed", gpupub_get, NULL, "True once closed.", (void *)4},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---------------------------------------------------------------------------------------------
 * GpuLoan
 * ------------------------------------------------------------------------------------------- */

static void gpuloan_dealloc(PyObject *self)
{
    pyf_gpuloan *l = (pyf_gpuloan *)self;
    pyf_gpupub *gp = l->gp;

    /* Exports hold a reference: none is left. */
    if (gp != NULL) {
        if (l->state == GLOAN_HELD) l->state = GLOAN_RELEASED;
        loan_give_back(l);
        loan_unlink(l);
        if (gp->link.closed) gpupub_try_finish(gp);
        Py_DECREF((PyObject *)gp);
    }
    pyf_free(self);
}

static bool loan_home(pyf_gpuloan *l, const char *what)
{
    char name[64];

    if (pyf_home(l->gp->link.gen)) return true;
    snprintf(name, sizeof name, "GpuLoan.%s", what);
    pyf_raise_forked(name, "GpuLoan", l->gp->link.pid);
    return false;
}

static bool loan_usable(pyf_gpuloan *l, const char *what)
{
    if (!loan_home(l, what)) return false;
    if (l->state == GLOAN_HELD) return true;
    pyf_raise(FERRY_ESTATE, "GpuLoan.%s: the loan was %s", what,
              l->state == GLOAN_PUBLISHED ? "published" : "released");
    return false;
}

static PyObject *gpuloan_release(PyObject *self, PyObject *unused)
{
    pyf_gpuloan *l = (pyf_gpuloan *)self;

    (void)unused;
    if (!loan_usable(l, "release")) return NULL;
    loan_let_go(l);
    Py_RETURN_NONE;
}

static PyObject *gpuloan_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (!loan_home((pyf_gpuloan *)self, "__enter__")) return NULL;
    return Py_NewRef(self);
}

static PyObject *gpuloan_exit(PyObject *self, PyObject *args)
{
    (void)args;
    if (!loan_home((pyf_gpuloan *)self, "__exit__")) return NULL;
    loan_let_go((pyf_gpuloan *)self);
    Py_RETURN_NONE;
}

static void loan_dl_unexport(PyObject *owner)
{
    pyf_gpuloan *l = (pyf_gpuloan *)owner;

    l->exports--;
    if (l->exports > 0) return;
    /* Released under its tensors: given back now. */
    if (l->state == GLOAN_RELEASED) loan_give_back(l);
    /* The last tensor over a loan of a closed GPU publisher: it can go now. */
    if (l->gp->link.closed) gpupub_try_finish(l->gp);
}

static PyObject *gpuloan_dlpack(PyObject *self, PyObject *args, PyObject *kwargs)
{
    pyf_gpuloan *l = (pyf_gpuloan *)self;
    const ferry_dl_device cuda = {FERRY_DL_CUDA, l->gp->device};
    int64_t shape[FERRY_TENSOR_DIMS_MAX], strides[FERRY_TENSOR_DIMS_MAX];
    bool versioned, sync;
    PyObject *o_stream, *cap;
    ferry_dl_tensor t;
    uintptr_t stream;
    uint32_t i;

    if (!pyf_dlpack_args(args, kwargs, cuda, &o_stream, &versioned)) return NULL;
    if (!loan_usable(l, "__dlpack__") || !pyf_gpu_dl_stream(o_stream, &stream, &sync))
        return NULL;
    if (sync && stream != l->loan_stream) {
        /* The consumer writes on another stream than the one the loan was made ready for: that
         * stream waits for it, and the publish waits for that stream's work. */
        for (i = 0; i < l->nstreams && l->streams[i] != stream; i++) {
        }
        if (i == l->nstreams && l->nstreams == PYF_GPU_STREAMS_MAX) {
            PyErr_Format(PyExc_BufferError, "a loan is exported to at most %d streams",
                         PYF_GPU_STREAMS_MAX + 1);
            return NULL;
        }
        if (pyf_gpu_stream_order(l->gp->device, stream, l->loan_stream) != FERRY_OK) {
            PyErr_SetString(PyExc_BufferError, "__dlpack__: the consumer stream could not be "
                                               "made to wait for the loan");
            return NULL;
        }
        if (i == l->nstreams) l->streams[l->nstreams++] = stream;
    }
    memset(&t, 0, sizeof t);
    t.data = l->ptr;
    t.device = cuda;
    if (l->tensor) {
        t.ndim = (int32_t)l->h.ndim;
        t.dtype = l->h.dtype;
        for (i = 0; i < l->h.ndim; i++) {
            shape[i] = l->h.shape[i];
            strides[i] = l->h.strides[i];
        }
    } else {
        t.ndim = 1;
        t.dtype.code = FERRY_DL_UINT;
        t.dtype.bits = 8;
        t.dtype.lanes = 1;
        shape[0] = (int64_t)l->size;
        strides[0] = 1;
    }
    t.shape = shape;
    t.strides = strides;
    cap = pyf_dlpack_capsule(self, loan_dl_unexport, versioned, true, &t);
    if (cap != NULL) l->exports++;
    return cap;
}

static PyObject *gpuloan_dlpack_device(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (!loan_home((pyf_gpuloan *)self, "__dlpack_device__")) return NULL;
    return Py_BuildValue("(ii)", FERRY_DL_CUDA, ((pyf_gpuloan *)self)->gp->device);
}

enum { GL_DEVICE_PTR, GL_SIZE, GL_NBYTES, GL_SHAPE, GL_STRIDES, GL_DTYPE, GL_KIND, GL_STATE,
       GL_DEVICE, GL_STAMP, GL_FRAME_ID };

static PyObject *gpuloan_get(PyObject *self, void *closure)
{
    static const char *const states[] = {"loaned", "published", "released"};
    pyf_gpuloan *l = (pyf_gpuloan *)self;
    int what = (int)(intptr_t)closure;
    int64_t n;

    switch (what) {
    case GL_STATE: return PyUnicode_FromString(states[l->state]);
    case GL_KIND: return PyUnicode_FromString(l->tensor ? "tensor" : "bytes");
    case GL_DEVICE: return PyLong_FromLong(l->gp->device);
    case GL_SIZE: return PyLong_FromSize_t(l->size);
    case GL_NBYTES: return PyLong_FromSize_t(l->tensor ? (size_t)l->h.data_size : l->size);
    case GL_DTYPE: return PyUnicode_FromString(ferry_dtype_name(l->dtype));
    case GL_SHAPE:
        if (l->tensor) return pyf_i64_tuple(l->h.shape, l->h.ndim);
        n = (int64_t)l->size;
        return pyf_i64_tuple(&n, 1);
    case GL_STRIDES:
        if (l->tensor) return pyf_i64_tuple(l->h.strides, l->h.ndim);
        n = 1;
        return pyf_i64_tuple(&n, 1);
    }
    if (!loan_usable(l, "attribute")) return NULL;
    switch (what) {
    case GL_DEVICE_PTR: return PyLong_FromVoidPtr(l->ptr);
    case GL_STAMP:
        if (l->tensor) return pyf_stamp_get(&l->h.stamp);
        break;
    case GL_FRAME_ID:
        if (l->tensor) return PyUnicode_FromString(l->h.frame_id);
        break;
    }
    PyErr_SetString(PyExc_AttributeError, "a byte loan has no stamp or frame_id (publish its "
                                          "metadata with meta=)");
    return NULL;
}

static int gpuloan_set(PyObject *self, PyObject *value, void *closure)
{
    pyf_gpuloan *l = (pyf_gpuloan *)self;
    Py_ssize_t n;
    const char *s;

    if (!loan_usable(l, "attribute")) return -1;
    if (!l->tensor) {
        PyErr_SetString(PyExc_AttributeError, "a byte loan has no stamp or frame_id (publish "
                                              "its metadata with meta=)");
        return -1;
    }
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "the attribute cannot be deleted");
        return -1;
    }
    if ((int)(intptr_t)closure == GL_STAMP) return pyf_stamp_set(&l->h.stamp, value);
    s = PyUnicode_AsUTF8AndSize(value, &n);
    if (s == NULL) return -1;
    if (n > FERRY_FRAME_ID_MAX || (Py_ssize_t)strlen(s) != n) {
        pyf_raise(FERRY_EINVAL, "frame_id: at most %u bytes and no NUL", FERRY_FRAME_ID_MAX);
        return -1;
    }
    memset(l->h.frame_id, 0, sizeof l->h.frame_id);
    memcpy(l->h.frame_id, s, (size_t)n);
    return 0;
}

static PyObject *gpuloan_repr(PyObject *self)
{
    pyf_gpuloan *l = (pyf_gpuloan *)self;

    if (!pyf_home(l->gp->link.gen))
        return PyUnicode_FromFormat("<ferry.GpuLoan of process %ld>", (long)l->gp->link.pid);
    if (l->state != GLOAN_HELD)
        return PyUnicode_FromFormat("<ferry.GpuLoan %s>",
                                    l->state == GLOAN_PUBLISHED ? "published" : "released");
    return PyUnicode_FromFormat("<ferry.GpuLoan %s %zu bytes on cuda:%d>",
                                l->tensor ? "tensor" : "bytes", l->size, l->gp->device);
}

static PyMethodDef gpuloan_methods[] = {
    {"release", gpuloan_release, METH_NOARGS,
     "release()\n\nGives the loan back unpublished (ferry_gpu_loan_release), once the last\n"
     "DLPack tensor over it is deleted; the GPU work enqueued on it so far is waited for (on\n"
     "the GPU) before its memory is loaned again. A second release, or one after publish,\n"
     "raises StateError."},
    {"__enter__", gpuloan_enter, METH_NOARGS, "Returns the loan."},
    {"__exit__", gpuloan_exit, METH_VARARGS,
     "Gives the loan back if it was not published in the block."},
    {"__dlpack__", (PyCFunction)(void (*)(void))gpuloan_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None) -> capsule\n\n"
     "A writable DLPack capsule over the device memory, without a copy: the tensor's shape,\n"
     "dtype and strides, or uint8 (nbytes,) for a byte loan. stream is the consumer's (None\n"
     "or 1: legacy default, 2: per-thread default, -1: no synchronisation): it is made to\n"
     "wait for the loan, and publish() waits for its work. Versioned (not read-only) when\n"
     "max_version >= (1, 0). After publish() the tensor must not be used any more."},
    {"__dlpack_device__", gpuloan_dlpack_device, METH_NOARGS,
     "__dlpack_device__() -> (2, device)\n\nkDLCUDA and the publisher's device ordinal."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef gpuloan_getset[] = {
    {"device_ptr", gpuloan_get, NULL, "The loan's device address (int).", (void *)GL_DEVICE_PTR},
    {"size", gpuloan_get, NULL, "Bytes loaned.", (void *)GL_SIZE},
    {"nbytes", gpuloan_get, NULL, "Bytes of the exported data (a tensor's extent).",
     (void *)GL_NBYTES},
    {"shape", gpuloan_get, NULL, "Shape of the exported tensor ((size,) for a byte loan).",
     (void *)GL_SHAPE},
    {"strides", gpuloan_get, NULL, "Strides of the exported tensor, in elements.",
     (void *)GL_STRIDES},
    {"dtype", gpuloan_get, NULL, "Dtype name (\"float32\", ...; \"uint8\" for a byte loan).",
     (void *)GL_DTYPE},
    {"kind", gpuloan_get, NULL, "\"tensor\" or \"bytes\".", (void *)GL_KIND},
    {"state", gpuloan_get, NULL, "\"loaned\", \"published\" or \"released\".", (void *)GL_STATE},
    {"device", gpuloan_get, NULL, "The CUDA device ordinal.", (void *)GL_DEVICE},
    {"stamp", gpuloan_get, gpuloan_set,
     "A tensor loan's acquisition time (sec, nanosec); set it from a tuple or an int of\n"
     "nanoseconds.",
     (void *)GL_STAMP},
    {"frame_id", gpuloan_get, gpuloan_set, "A tensor loan's frame_id (at most 63 bytes).",
     (void *)GL_FRAME_ID},
    {NULL, NULL, NULL, NULL, NULL},
};

bool pyf_gpupub_types(PyObject *module)
{
    PyType_Slot gp_slots[] = {
        {Py_tp_new, PYF_FN(gpupub_new)},
        {Py_tp_dealloc, PYF_FN(gpupub_dealloc)},
        {Py_tp_methods, gpupub_methods},
        {Py_tp_getset, gpupub_getset},
        {Py_tp_doc,
         (void *)"GpuPublisher(publisher, *, device=0, ipc=\"auto\", early_wake=True)\n\n"
                 "Device frames through a Publisher (ferry_gpu_publisher_create): loan() and\n"
                 "loan_tensor() give GpuLoans of device memory that torch.from_dlpack or\n"
                 "cupy.from_dlpack fill in place, publish() sends them without a copy to\n"
                 "GpuSubscribers of other processes. While it lives, the publisher publishes\n"
                 "only through it. ipc is \"auto\", \"vmm\" or \"legacy\"; early_wake wakes\n"
                 "sleeping subscribers at the loan. NoDeviceError without a CUDA device."},
        {0, NULL},
    };
    PyType_Spec gp_spec = {"ferry.GpuPublisher", sizeof(pyf_gpupub), 0, Py_TPFLAGS_DEFAULT,
                           gp_slots};
    PyType_Slot gl_slots[] = {
        {Py_tp_dealloc, PYF_FN(gpuloan_dealloc)},
        {Py_tp_methods, gpuloan_methods},
        {Py_tp_getset, gpuloan_getset},
        {Py_tp_repr, PYF_FN(gpuloan_repr)},
        {Py_tp_doc,
         (void *)"A loan of device memory (GpuPublisher.loan, loan_tensor), exported writable\n"
                 "with __dlpack__. Publish it with GpuPublisher.publish(loan); one released or\n"
                 "dropped unpublished is given back once no DLPack tensor reads it."},
        {0, NULL},
    };
    PyType_Spec gl_spec = {"ferry.GpuLoan", sizeof(pyf_gpuloan), 0, Py_TPFLAGS_DEFAULT,
                           gl_slots};

    pyf.gpupub_type = (PyTypeObject *)PyType_FromSpec(&gp_spec);
    if (pyf.gpupub_type == NULL || PyModule_AddType(module, pyf.gpupub_type) < 0) return false;
    pyf.gpuloan_type = (PyTypeObject *)PyType_FromSpec(&gl_spec);
    return pyf.gpuloan_type != NULL && PyModule_AddType(module, pyf.gpuloan_type) == 0;
}

#endif
