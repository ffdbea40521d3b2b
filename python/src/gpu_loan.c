/*
 * ferry.GpuLoan: device memory loaned by a GpuPublisher (gpu_pub.c), exported writable with
 * __dlpack__ so that PyTorch or CuPy fill it in place; and the GpuPublisher's end of a loan's
 * life. A loan released or garbage collected unpublished is given back (ferry_gpu_loan_release)
 * when the last DLPack tensor over it is deleted, never under one. The GPU work on a loan given
 * back may still run: an event recorded after it is kept (the publisher's returns), and the
 * stream of the next loan of that memory waits for it (on the GPU). The last tensor over a loan
 * of a closed GpuPublisher lets it be destroyed (its ops' finish). Calls util.c, args.c,
 * export.c and gpu_util.c only.
 */
#include "gpu.h"

#ifdef FERRY_PY_GPU

#include "args.h"
#include "types.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Giving loans back
 * ------------------------------------------------------------------------------------------- */

void pyf_gpupub_returns_drain(pyf_gpupub *gp)
{
    uint32_t i;
    int prev;

    if (gp->nreturns == 0)
        return;
    if (!pyf_gpu_device_enter(gp->device, &prev))
        prev = -1;
    for (i = 0; i < gp->nreturns; i++) {
        if (cudaEventSynchronize(gp->returns[i].done) != cudaSuccess)
            (void)cudaGetLastError();
        cudaEventDestroy(gp->returns[i].done);
    }
    gp->nreturns = 0;
    pyf_gpu_device_leave(gp->device, prev);
}

ferry_err pyf_gpupub_returns_wait(pyf_gpupub *gp, void *ptr, uintptr_t stream)
{
    cudaError_t e = cudaSuccess;
    uint32_t i;
    int prev;

    for (i = 0; i < gp->nreturns && gp->returns[i].ptr != ptr; i++) {
    }
    if (i == gp->nreturns)
        return FERRY_OK;
    if (!pyf_gpu_device_enter(gp->device, &prev))
        return FERRY_ENODEV;
    e = cudaStreamWaitEvent((cudaStream_t)stream, gp->returns[i].done, 0);
    if (e != cudaSuccess) {
        /* Not ordered on the GPU: the CPU waits instead. */
        (void)cudaGetLastError();
        e = cudaEventSynchronize(gp->returns[i].done);
        if (e != cudaSuccess)
            (void)cudaGetLastError();
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

    if (!pyf_gpu_device_enter(gp->device, &prev))
        return;
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
    if (gp->nreturns == PYF_GPU_RETURNS_MAX) {
        /* Memory loaned again rarely stays away this long (a chunk outgrown and replaced). */
        if (cudaEventSynchronize(gp->returns[0].done) != cudaSuccess)
            (void)cudaGetLastError();
        cudaEventDestroy(gp->returns[0].done);
        memmove(&gp->returns[0], &gp->returns[1],
                sizeof gp->returns[0] * (PYF_GPU_RETURNS_MAX - 1));
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

    if (!l->out)
        return;
    l->out = false;
    /* A forked child only forgets its parent's loan. */
    if (gp->gpub == NULL || !pyf_home(gp->link.gen))
        return;
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
    if (l->state != PYF_GLOAN_HELD)
        return;
    l->state = PYF_GLOAN_RELEASED;
    if (l->exports == 0)
        loan_give_back(l);
}

static void loan_unlink(pyf_gpuloan *l)
{
    pyf_gpupub *gp = l->gp;

    if (!l->linked)
        return;
    PYF_LIST_REMOVE(gp->loans, l);
    l->linked = false;
}

pyf_gpuloan *pyf_gpuloan_new(pyf_gpupub *gp)
{
    pyf_gpuloan *l = (pyf_gpuloan *)pyf_alloc(pyf.gpuloan_type);

    if (l == NULL)
        return NULL;
    l->gp = (pyf_gpupub *)Py_NewRef((PyObject *)gp);
    l->state = PYF_GLOAN_RELEASED; /* nothing loaned yet */
    return l;
}

/* ---------------------------------------------------------------------------------------------
 * GpuLoan
 * ------------------------------------------------------------------------------------------- */

static void gpuloan_dealloc(PyObject *self)
{
    pyf_gpuloan *l = (pyf_gpuloan *)self;
    pyf_gpupub *gp = l->gp;

    /* Exports hold a reference: none is left. */
    if (gp != NULL) {
        if (l->state == PYF_GLOAN_HELD)
            l->state = PYF_GLOAN_RELEASED;
        loan_give_back(l);
        loan_unlink(l);
        if (gp->link.closed)
            pyf_child_finish(&gp->link);
        Py_DECREF((PyObject *)gp);
    }
    pyf_free(self);
}

static bool loan_home(pyf_gpuloan *l, const char *what)
{
    char name[64];

    if (pyf_home(l->gp->link.gen))
        return true;
    snprintf(name, sizeof name, "GpuLoan.%s", what);
    pyf_raise_forked(name, "GpuLoan", l->gp->link.pid);
    return false;
}

static bool loan_usable(pyf_gpuloan *l, const char *what)
{
    if (!loan_home(l, what))
        return false;
    if (l->state == PYF_GLOAN_HELD)
        return true;
    pyf_raise(FERRY_ESTATE, "GpuLoan.%s: the loan was %s", what,
              l->state == PYF_GLOAN_PUBLISHED ? "published" : "released");
    return false;
}

/* release(); also __exit__ (exit_args, its arguments), which lets go of a loan not published in
 * the block and says nothing otherwise. */
static PyObject *gpuloan_release(PyObject *self, PyObject *exit_args)
{
    pyf_gpuloan *l = (pyf_gpuloan *)self;

    if (exit_args != NULL ? !loan_home(l, "__exit__") : !loan_usable(l, "release"))
        return NULL;
    loan_let_go(l);
    Py_RETURN_NONE;
}

static PyObject *gpuloan_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    return pyf_entered(self, loan_home((pyf_gpuloan *)self, "__enter__"));
}

static void loan_dl_unexport(PyObject *owner)
{
    pyf_gpuloan *l = (pyf_gpuloan *)owner;

    l->exports--;
    if (l->exports > 0)
        return;
    /* Released under its tensors: given back now. */
    if (l->state == PYF_GLOAN_RELEASED)
        loan_give_back(l);
    /* The last tensor over a loan of a closed GPU publisher: it can go now. */
    if (l->gp->link.closed)
        pyf_child_finish(&l->gp->link);
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

    if (!pyf_dlpack_args(args, kwargs, cuda, &o_stream, &versioned))
        return NULL;
    if (!loan_usable(l, "__dlpack__") || !pyf_gpu_dl_stream(o_stream, &stream, &sync))
        return NULL;
    /* The consumer may write on another stream: the publish waits for that stream's work. */
    if (sync &&
        !pyf_gpu_consumer(l->gp->device, l->loan_stream, l->streams, &l->nstreams, stream, "loan"))
        return NULL;
    pyf_dl_describe(&t, l->ptr, cuda, l->tensor ? &l->h : NULL, l->size, shape, strides);
    cap = pyf_dlpack_capsule(self, loan_dl_unexport, versioned, true, &t);
    if (cap != NULL)
        l->exports++;
    return cap;
}

static PyObject *gpuloan_dlpack_device(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (!loan_home((pyf_gpuloan *)self, "__dlpack_device__"))
        return NULL;
    return Py_BuildValue("(ii)", FERRY_DL_CUDA, ((pyf_gpuloan *)self)->gp->device);
}

enum {
    GL_DEVICE_PTR,
    GL_SIZE,
    GL_NBYTES,
    GL_SHAPE,
    GL_STRIDES,
    GL_DTYPE,
    GL_KIND,
    GL_STATE,
    GL_DEVICE,
    GL_STAMP,
    GL_FRAME_ID
};

static PyObject *gpuloan_get(PyObject *self, void *closure)
{
    static const char *const states[] = {"loaned", "published", "released"};
    pyf_gpuloan *l = (pyf_gpuloan *)self;
    int what = (int)(intptr_t)closure;
    int64_t n;

    switch (what) {
    case GL_STATE:
        return PyUnicode_FromString(states[l->state]);
    case GL_KIND:
        return PyUnicode_FromString(l->tensor ? "tensor" : "bytes");
    case GL_DEVICE:
        return PyLong_FromLong(l->gp->device);
    case GL_SIZE:
        return PyLong_FromSize_t(l->size);
    case GL_NBYTES:
        return PyLong_FromSize_t(l->tensor ? (size_t)l->h.data_size : l->size);
    case GL_DTYPE:
        return PyUnicode_FromString(ferry_dtype_name(l->dtype));
    case GL_SHAPE:
        if (l->tensor)
            return pyf_i64_tuple(l->h.shape, l->h.ndim);
        n = (int64_t)l->size;
        return pyf_i64_tuple(&n, 1);
    case GL_STRIDES:
        if (l->tensor)
            return pyf_i64_tuple(l->h.strides, l->h.ndim);
        n = 1;
        return pyf_i64_tuple(&n, 1);
    }
    if (!loan_usable(l, "attribute"))
        return NULL;
    switch (what) {
    case GL_DEVICE_PTR:
        return PyLong_FromVoidPtr(l->ptr);
    case GL_STAMP:
        if (l->tensor)
            return pyf_stamp_get(&l->h.stamp);
        break;
    case GL_FRAME_ID:
        if (l->tensor)
            return PyUnicode_FromString(l->h.frame_id);
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

    if (!loan_usable(l, "attribute"))
        return -1;
    if (!l->tensor) {
        PyErr_SetString(PyExc_AttributeError, "a byte loan has no stamp or frame_id (publish "
                                              "its metadata with meta=)");
        return -1;
    }
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "the attribute cannot be deleted");
        return -1;
    }
    if ((int)(intptr_t)closure == GL_STAMP)
        return pyf_stamp_set(&l->h.stamp, value);
    s = PyUnicode_AsUTF8AndSize(value, &n);
    if (s == NULL)
        return -1;
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
    if (l->state != PYF_GLOAN_HELD)
        return PyUnicode_FromFormat("<ferry.GpuLoan %s>",
                                    l->state == PYF_GLOAN_PUBLISHED ? "published" : "released");
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
    {"__exit__", gpuloan_release, METH_VARARGS,
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

const pyf_type_def pyf_gpuloan_def = {
    .name = "ferry.GpuLoan",
    .size = sizeof(pyf_gpuloan),
    .dealloc = gpuloan_dealloc,
    .methods = gpuloan_methods,
    .getset = gpuloan_getset,
    .repr = gpuloan_repr,
    .doc = "A loan of device memory (GpuPublisher.loan, loan_tensor), exported writable\n"
           "with __dlpack__. Publish it with GpuPublisher.publish(loan); one released or\n"
           "dropped unpublished is given back once no DLPack tensor reads it.",
};

#endif
