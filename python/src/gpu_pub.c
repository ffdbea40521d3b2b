/*
 * ferry.GpuPublisher: device frames and device tensors (ferry/gpu.h, ferry/tensor.h) published
 * from Python. A loan (ferry.GpuLoan, gpu_loan.c) is device memory of the publisher's, exported
 * writable with __dlpack__ so that PyTorch or CuPy fill it in place, then published without a
 * copy and without the CPU waiting for the GPU. Built with the GPU module (FERRY_PY_GPU), like
 * gpu.c; without it the package's GpuPublisher raises NotSupportedError.
 *
 * A GpuPublisher publishes through a Publisher (which then refuses loans and publishes of its
 * own: its samples carry device-frame descriptors) and uses that publisher's lock for every
 * ferry_gpu call. close() refuses while a loan is held (neither published nor released): the
 * memory is being written for a frame still to come. Closed while a tensor still reads a loan
 * (published or not), the GpuPublisher is destroyed, its device memory freed, when the last such
 * tensor is deleted (gpupub_finish).
 *
 * Streams: a loan is made ready for the stream given to loan() (ferry_gpu_loan makes it wait for
 * the previous frame of that memory); __dlpack__(stream=s) makes the consumer's stream s wait for
 * it. publish(stream=p) makes p wait for the loan's stream and for every consumer stream, then
 * publishes on p: readers see the frame once all that work is done.
 */
#include "gpu.h"

#ifdef FERRY_PY_GPU

#include "args.h"
#include "types.h"

#include <string.h>

static const char *const ipc_names[] = {"auto", "vmm", "legacy"};

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

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$isp:GpuPublisher", kwlist, &o_pub, &device,
                                     &ipc, &early_wake))
        return NULL;
    if (!PyObject_TypeCheck(o_pub, pyf.pub_type)) {
        PyErr_SetString(PyExc_TypeError, "GpuPublisher: not a ferry.Publisher");
        return NULL;
    }
    pub = (pyf_pub *)o_pub;
    if (!pyf_child_home(&pub->link, "GpuPublisher"))
        return NULL;
    if (pub->link.closed || pub->pub == NULL || pub->link.node == NULL || pub->link.node->closed)
        return pyf_raise_closed("GpuPublisher");
    if (!pyf_pub_own(pub, "GpuPublisher"))
        return NULL;
    if (device < 0)
        return pyf_raise(FERRY_EINVAL, "GpuPublisher: device %d", device);
    for (i = 0; i < 3 && strcmp(ipc, ipc_names[i]) != 0; i++) {
    }
    if (i == 3)
        return pyf_raise(FERRY_EINVAL,
                         "GpuPublisher: ipc='%s' is not \"auto\", \"vmm\" or "
                         "\"legacy\"",
                         ipc);
    gp = (pyf_gpupub *)pyf_alloc(type);
    if (gp == NULL)
        return NULL;
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
    Py_BEGIN_ALLOW_THREADS err = ferry_gpu_publisher_create(&gp->gpub, pub->pub, &o);
    if (err == FERRY_OK && ferry_gpu_publisher_ipc(gp->gpub, &gp->ipc) != FERRY_OK)
        gp->ipc = o.ipc;
    Py_END_ALLOW_THREADS PyThread_release_lock(pub->lock);
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

    if (!gp->link.closed || gp->gpub == NULL)
        return FERRY_OK;
    for (l = gp->loans; l != NULL; l = l->next)
        if (l->exports > 0 || l->out)
            return FERRY_OK;
    /* A forked child only forgets it, without the lock. */
    if (home && !PyThread_acquire_lock(gp->pub->lock, NOWAIT_LOCK))
        return FERRY_OK;
    Py_INCREF((PyObject *)gp);
    if (home) {
        pyf_gpupub_returns_drain(gp);
        /* Waits for the work of frames published with no reader, frees the device memory. */
        Py_BEGIN_ALLOW_THREADS err = ferry_gpu_publisher_destroy(gp->gpub);
        Py_END_ALLOW_THREADS
    }
    if (err == FERRY_OK)
        gp->gpub = NULL; /* else dealloc tries again */
    if (home)
        PyThread_release_lock(gp->pub->lock);
    if (err == FERRY_OK) {
        if (gp->pub->owner == (PyObject *)gp)
            gp->pub->owner = NULL;
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

    if (!pyf_child_home(&gp->link, "GpuPublisher.close"))
        return -1;
    if (gp->link.closed)
        return 0;
    /* Under the lock: a loan() in another thread has its loan in the list or none. */
    pyf_lock(gp->pub->lock);
    for (l = gp->loans; l != NULL; l = l->next)
        if (l->state == PYF_GLOAN_HELD)
            held++;
    if (held == 0)
        gp->link.closed = true;
    PyThread_release_lock(gp->pub->lock);
    if (held > 0) {
        pyf_raise(FERRY_EBUSY,
                  "GpuPublisher.close('%s'): %u loan%s held: publish or release "
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
            pyf_gpupub_returns_drain(gp);
            ferry_gpu_publisher_destroy(gp->gpub);
        }
        gp->gpub = NULL;
    }
    if (gp->pub != NULL) {
        if (gp->pub->owner == self)
            gp->pub->owner = NULL;
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
    Py_BEGIN_ALLOW_THREADS err = ferry_gpu_loan(gp->gpub, size, (ferry_gpu_stream)stream, &ptr);
    if (err == FERRY_OK && (err = pyf_gpupub_returns_wait(gp, ptr, stream)) != FERRY_OK)
        ferry_gpu_loan_release(gp->gpub, ptr);
    Py_END_ALLOW_THREADS if (err == FERRY_OK)
    {
        l->ptr = ptr;
        l->size = size;
        l->loan_stream = stream;
        l->state = PYF_GLOAN_HELD;
        l->out = true;
        l->linked = true;
        PYF_LIST_PUSH(gp->loans, l);
    }
    pyf_pub_unlock(gp->pub);
    if (err != FERRY_OK) {
        Py_DECREF((PyObject *)l);
        return pyf_raise(err, "ferry_gpu_loan('%s', %zu bytes)", gp->pub->topic, size);
    }
    return (PyObject *)l;
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
    if (n <= 0)
        return pyf_raise(FERRY_EINVAL, "loan(%zd): the size must be at least 1", n);
    l = pyf_gpuloan_new(gp);
    if (l == NULL)
        return NULL;
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

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O$O:loan_tensor", kwlist, &o_shape, &o_dtype,
                                     &o_stream, &o_strides))
        return NULL;
    if (!pyf_child_open(&gp->link, gp->gpub, "GpuPublisher.loan_tensor") ||
        !pyf_gpu_stream_arg(o_stream, &stream))
        return NULL;
    if (!pyf_int64_list(o_shape, "shape", shape, &ndim) || !pyf_tensor_dtype(o_dtype, &dtype))
        return NULL;
    if (o_strides != Py_None) {
        if (!pyf_int64_list(o_strides, "strides", strides, &nstrides))
            return NULL;
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
    l = pyf_gpuloan_new(gp);
    if (l == NULL)
        return NULL;
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
    if (l->state != PYF_GLOAN_HELD) {
        pyf_raise(FERRY_ESTATE, "publish on '%s': the loan was %s already", gp->pub->topic,
                  l->state == PYF_GLOAN_PUBLISHED ? "published" : "released");
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
            return pyf_raise(FERRY_EINVAL,
                             "publish on '%s': a tensor loan's metadata is its "
                             "header (set stamp and frame_id on the loan)",
                             gp->pub->topic);
        if (PyObject_GetBuffer(o_meta, &meta, PyBUF_SIMPLE) < 0)
            return NULL;
        if ((size_t)meta.len > FERRY_GPU_META_MAX) {
            PyBuffer_Release(&meta);
            return pyf_raise(FERRY_EINVAL, "publish on '%s': %zd bytes of meta, at most %u",
                             gp->pub->topic, meta.len, FERRY_GPU_META_MAX);
        }
    }
    /* The frame is ready on stream once the loan's own stream and every consumer's are. */
    if (stream != l->loan_stream)
        err = pyf_gpu_stream_order(gp->device, stream, l->loan_stream);
    for (i = 0; err == FERRY_OK && i < l->nstreams; i++)
        if (l->streams[i] != stream)
            err = pyf_gpu_stream_order(gp->device, stream, l->streams[i]);
    if (err != FERRY_OK) {
        if (meta.obj != NULL)
            PyBuffer_Release(&meta);
        return pyf_raise(err,
                         "publish on '%s': the stream could not be made to wait for the "
                         "loan's work",
                         gp->pub->topic);
    }
    pyf_lock(gp->pub->lock);
    if (l->state != PYF_GLOAN_HELD) {
        err = FERRY_ESTATE; /* published or released by another thread meanwhile */
    } else {
        /* Published already for other threads: their release() or __dlpack__ meanwhile is
         * refused instead of racing with the publish. */
        l->state = PYF_GLOAN_PUBLISHED;
        Py_BEGIN_ALLOW_THREADS if (l->tensor) err =
            ferry_tensor_gpu_publish(gp->gpub, l->ptr, (void *)stream, l->dtype, l->h.ndim,
                                     l->h.shape, l->h.strides, &l->h.stamp, l->h.frame_id);
        else err = ferry_gpu_publish_meta(gp->gpub, l->ptr, (ferry_gpu_stream)stream,
                                          meta.obj != NULL ? meta.buf : NULL,
                                          meta.obj != NULL ? (size_t)meta.len : 0);
        Py_END_ALLOW_THREADS if (err == FERRY_OK) l->out = false;
        else l->state = PYF_GLOAN_HELD; /* still the caller's loan */
    }
    pyf_pub_unlock(gp->pub);
    if (meta.obj != NULL)
        PyBuffer_Release(&meta);
    if (err != FERRY_OK)
        return pyf_raise(err, "publish on '%s'", gp->pub->topic);
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
    if (!pyf_child_open(&gp->link, gp->gpub, "GpuPublisher.stats"))
        return NULL;
    pyf_lock(gp->pub->lock);
    err = !gp->link.closed ? ferry_gpu_publisher_stats_get(gp->gpub, &st) : FERRY_ECLOSED;
    pyf_pub_unlock(gp->pub);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_gpu_publisher_stats_get");
    for (l = gp->loans; l != NULL; l = l->next)
        if (l->out)
            held++;
    return Py_BuildValue("{s:K,s:K,s:I}", "exports", (unsigned long long)st.exports, "reuse_waits",
                         (unsigned long long)st.reuse_waits, "loans", held);
}

static PyObject *gpupub_get(PyObject *self, void *closure)
{
    pyf_gpupub *gp = (pyf_gpupub *)self;

    switch ((int)(intptr_t)closure) {
    case 0:
        return Py_NewRef((PyObject *)gp->pub);
    case 1:
        return PyLong_FromLong(gp->device);
    case 2:
        return PyUnicode_FromString((unsigned)gp->ipc < 3 ? ipc_names[gp->ipc] : "unknown");
    case 3:
        return PyBool_FromLong(gp->early_wake);
    default:
        return PyBool_FromLong(gp->link.closed);
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
    {"loan_tensor", (PyCFunction)(void (*)(void))gpupub_loan_tensor, METH_VARARGS | METH_KEYWORDS,
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

const pyf_type_def pyf_gpupub_def = {
    .name = "ferry.GpuPublisher",
    .size = sizeof(pyf_gpupub),
    .new_ = gpupub_new,
    .dealloc = gpupub_dealloc,
    .methods = gpupub_methods,
    .getset = gpupub_getset,
    .doc = "GpuPublisher(publisher, *, device=0, ipc=\"auto\", early_wake=True)\n\n"
           "Device frames through a Publisher (ferry_gpu_publisher_create): loan() and\n"
           "loan_tensor() give GpuLoans of device memory that torch.from_dlpack or\n"
           "cupy.from_dlpack fill in place, publish() sends them without a copy to\n"
           "GpuSubscribers of other processes. While it lives, the publisher publishes\n"
           "only through it. ipc is \"auto\", \"vmm\" or \"legacy\"; early_wake wakes\n"
           "sleeping subscribers at the loan. NoDeviceError without a CUDA device.",
};

#endif
