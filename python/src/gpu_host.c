/*
 * ferry.HostGpuView: a taken host sample handed to the GPU without a pageable copy
 * (ferry/gpu.h, "Host frames to the GPU"). Sample.cuda(device) (ferry/__init__.py's, over
 * _sample_cuda below) registers the chunk's pages with CUDA the first time the subscriber sees
 * that chunk (read-only, mapped; later samples in it cost a lookup) and gives a view whose
 * device address reads the publisher's pages in place:
 * __dlpack__ (device kDLCUDA) for torch.from_dlpack and cupy.from_dlpack,
 * __cuda_array_interface__ (flagged read-only) for Numba and CuPy, and copy_to(dst, stream), an
 * asynchronous copy from the registered pages at pinned speed into device memory of the
 * caller's (a torch.empty from PyTorch's caching allocator, say).
 *
 * The view counts as one export of its sample while it is open or a DLPack tensor over it is
 * alive, so the sample (and its registration, undone when the publisher's connection closes or
 * the subscriber is destroyed) outlives every reader. Copies still running when it ends are
 * waited for (one CUDA event per stream copied on) before the sample may go back: the copy
 * reads the publisher's chunk until it completes.
 *
 * The data is ready when the view is made (the publisher wrote it before publishing), so no
 * stream waits for anything: __cuda_array_interface__'s stream is None and __dlpack__'s stream
 * argument is accepted and ignored. The pages are registered read-only: a kernel that writes
 * through the view faults, as the read-only flags say (PyTorch's legacy DLPack import has no
 * such flag and gives a writable-looking tensor: do not write to it).
 */
#include "gpu.h"

#include "export.h"
#include "sub.h"
#include "types.h"

#ifdef FERRY_PY_GPU

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pyf_hostview {
    PyObject_HEAD PyObject *sample; /* a strong reference, counted as one export of it until done */
    pyf_sub *sub;                   /* the sample's subscriber (the sample holds it) */
    const ferry_sample *s;
    const pyf_geom *geom;
    int device;
    const void *dptr;
    bool open;                               /* not released by its user */
    bool done;                               /* the sample's export was given back */
    Py_ssize_t exports;                      /* DLPack capsules alive */
    cudaEvent_t copies[PYF_GPU_STREAMS_MAX]; /* the last copy on each stream copied on */
    uintptr_t copy_streams[PYF_GPU_STREAMS_MAX];
    uint32_t ncopies;
} pyf_hostview;

/* Waits for the copies still reading the sample's pages. The GIL is held; released to wait. */
static void view_wait_copies(pyf_hostview *v)
{
    int prev = -1;
    bool entered;
    uint32_t i;

    if (v->ncopies == 0)
        return;
    entered = pyf_gpu_device_enter(v->device, &prev);
    Py_BEGIN_ALLOW_THREADS for (i = 0; i < v->ncopies; i++)
    {
        cudaEventSynchronize(v->copies[i]);
        cudaEventDestroy(v->copies[i]);
    }
    Py_END_ALLOW_THREADS(void) cudaGetLastError();
    v->ncopies = 0;
    if (entered)
        pyf_gpu_device_leave(v->device, prev);
}

/* Gives the sample's export back once the user let go and no tensor reads the view. */
static void view_finish(pyf_hostview *v)
{
    if (v->done || v->open || v->exports > 0)
        return;
    v->done = true;
    if (pyf_home(v->sub->link.gen))
        view_wait_copies(v);
    pyf_sample_export_end(v->sample);
}

static bool view_usable(pyf_hostview *v, const char *what)
{
    if (!pyf_sample_home(v->sample, what, "HostGpuView"))
        return false;
    if (v->open)
        return true;
    pyf_raise(FERRY_ESTATE, "HostGpuView.%s: the view was released", what);
    return false;
}

static PyObject *sample_cuda(PyObject *sample, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"device", NULL};
    const ferry_sample *s;
    const pyf_geom *g;
    pyf_hostview *v;
    const void *dptr = NULL;
    int device = 0;
    pyf_sub *sub;
    ferry_err err;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$i:cuda", kw, &device))
        return NULL;
    if (device < 0) {
        PyErr_SetString(PyExc_ValueError, "Sample.cuda: device must be >= 0");
        return NULL;
    }
    if (!pyf_sample_export_begin(sample, "cuda", &sub, &s, &g))
        return NULL;
    pyf_lock(sub->lock);
    if (sub->sub == NULL) {
        err = FERRY_ECLOSED;
    } else {
        Py_BEGIN_ALLOW_THREADS err = ferry_gpu_sample_device_ptr(sub->sub, s, device, &dptr);
        Py_END_ALLOW_THREADS
    }
    pyf_sub_unlock(sub);
    if (err != FERRY_OK) {
        pyf_sample_export_end(sample);
        return pyf_raise(err, "ferry_gpu_sample_device_ptr('%s', device %d)", sub->topic, device);
    }
    /* The view is the sample's array (an image's pixels, a tensor's elements, the payload of
     * bytes), which starts after the message header in the payload. */
    if (g->buf != NULL)
        dptr = (const uint8_t *)dptr + ((const uint8_t *)g->buf - (const uint8_t *)s->data);
    v = (pyf_hostview *)pyf_alloc(pyf.hostview_type);
    if (v == NULL) {
        pyf_sample_export_end(sample);
        return NULL;
    }
    v->sample = Py_NewRef(sample);
    v->sub = sub;
    v->s = s;
    v->geom = g;
    v->device = device;
    v->dptr = dptr;
    v->open = true;
    return (PyObject *)v;
}

static void view_dealloc(PyObject *self)
{
    pyf_hostview *v = (pyf_hostview *)self;

    if (v->sample != NULL) {
        v->open = false;
        v->exports = 0; /* no capsule can be alive: each holds a reference to the view */
        view_finish(v);
        Py_CLEAR(v->sample);
    }
    pyf_free(self);
}

/* release(); also __exit__ (exit_args, its arguments), which lets go of a view released in the
 * block without a word. */
static PyObject *view_release(PyObject *self, PyObject *exit_args)
{
    pyf_hostview *v = (pyf_hostview *)self;

    if (exit_args != NULL ? !pyf_sample_home(v->sample, "__exit__", "HostGpuView")
                          : !view_usable(v, "release"))
        return NULL;
    v->open = false;
    view_finish(v);
    Py_RETURN_NONE;
}

static PyObject *view_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    return pyf_entered(self, view_usable((pyf_hostview *)self, "__enter__"));
}

static void view_dl_unexport(PyObject *owner)
{
    pyf_hostview *v = (pyf_hostview *)owner;

    v->exports--;
    view_finish(v);
}

/* The elements of a DLPack or CUDA array view: the sample's, or bytes for a point cloud. */
static void view_shape(const pyf_hostview *v, int *ndim, int64_t *shape, int64_t *strides,
                       uint8_t *code, uint8_t *bits)
{
    const pyf_geom *g = v->geom;
    int i;

    if (g->dl_bits == 0) {
        *ndim = 1;
        shape[0] = (int64_t)g->len;
        strides[0] = 1;
        *code = FERRY_DL_UINT;
        *bits = 8;
        return;
    }
    *ndim = g->ndim;
    for (i = 0; i < g->ndim; i++) {
        shape[i] = (int64_t)g->shape[i];
        strides[i] = (int64_t)g->strides[i]; /* bytes */
    }
    *code = g->dl_code;
    *bits = g->dl_bits;
}

static PyObject *view_dlpack(PyObject *self, PyObject *args, PyObject *kwargs)
{
    pyf_hostview *v = (pyf_hostview *)self;
    const ferry_dl_device cuda = {FERRY_DL_CUDA, v->device};
    int64_t shape[FERRY_TENSOR_DIMS_MAX], strides[FERRY_TENSOR_DIMS_MAX];
    PyObject *stream, *cap;
    ferry_dl_tensor t;
    bool versioned;
    uint8_t code, bits;
    int ndim, i;

    if (!pyf_dlpack_args(args, kwargs, cuda, &stream, &versioned))
        return NULL;
    if (!view_usable(v, "__dlpack__"))
        return NULL;
    if (v->geom->big_endian) {
        PyErr_SetString(PyExc_BufferError, "DLPack has no big-endian elements");
        return NULL;
    }
    view_shape(v, &ndim, shape, strides, &code, &bits);
    for (i = 0; i < ndim; i++) {
        if (strides[i] % (bits / 8) != 0) {
            PyErr_SetString(PyExc_BufferError, "a stride is not a multiple of the element size");
            return NULL;
        }
        strides[i] /= bits / 8;
    }
    memset(&t, 0, sizeof t);
    t.data = (void *)v->dptr;
    t.device = cuda;
    t.ndim = ndim;
    t.dtype.code = code;
    t.dtype.bits = bits;
    t.dtype.lanes = 1;
    t.shape = shape;
    t.strides = strides;
    cap = pyf_dlpack_capsule(self, view_dl_unexport, versioned, false, &t);
    if (cap != NULL)
        v->exports++;
    return cap;
}

static PyObject *view_dlpack_device(PyObject *self, PyObject *unused)
{
    pyf_hostview *v = (pyf_hostview *)self;

    (void)unused;
    if (!pyf_sample_home(v->sample, "__dlpack_device__", "HostGpuView"))
        return NULL;
    return Py_BuildValue("(ii)", FERRY_DL_CUDA, v->device);
}

/* __cuda_array_interface__, version 3: read-only, no stream to wait for. */
static PyObject *view_cai(PyObject *self, void *closure)
{
    pyf_hostview *v = (pyf_hostview *)self;
    int64_t shape[FERRY_TENSOR_DIMS_MAX], strides[FERRY_TENSOR_DIMS_MAX];
    PyObject *o_shape = NULL, *o_strides = NULL, *r = NULL;
    uint8_t code, bits;
    char typestr[8];
    int ndim;

    (void)closure;
    if (!view_usable(v, "__cuda_array_interface__"))
        return NULL;
    view_shape(v, &ndim, shape, strides, &code, &bits);
    if (code != FERRY_DL_INT && code != FERRY_DL_UINT && code != FERRY_DL_FLOAT &&
        code != FERRY_DL_BOOL) {
        PyErr_SetString(PyExc_AttributeError, "__cuda_array_interface__ has no bfloat16: use "
                                              "__dlpack__ (torch.from_dlpack)");
        return NULL;
    }
    snprintf(typestr, sizeof typestr, "%c%c%u",
             bits == 8             ? '|'
             : v->geom->big_endian ? '>'
                                   : '<',
             code == FERRY_DL_INT    ? 'i'
             : code == FERRY_DL_UINT ? 'u'
             : code == FERRY_DL_BOOL ? 'b'
                                     : 'f',
             (unsigned)(bits / 8));
    o_shape = pyf_i64_tuple(shape, (uint32_t)ndim);
    o_strides = pyf_i64_tuple(strides, (uint32_t)ndim);
    if (o_shape != NULL && o_strides != NULL)
        r = Py_BuildValue("{s:O,s:s,s:(KO),s:i,s:O,s:O}", "shape", o_shape, "typestr", typestr,
                          "data", (unsigned long long)(uintptr_t)v->dptr, Py_True, "version", 3,
                          "strides", o_strides, "stream", Py_None);
    Py_XDECREF(o_shape);
    Py_XDECREF(o_strides);
    return r;
}

/* The device address and size of a writable, contiguous device array (its
 * __cuda_array_interface__: a PyTorch tensor, a CuPy array, a Numba device array). */
static bool device_array(PyObject *dst, uintptr_t *ptr, size_t *nbytes)
{
    PyObject *cai = PyObject_GetAttrString(dst, "__cuda_array_interface__");
    PyObject *data, *shape, *strides, *typestr;
    unsigned long long p;
    Py_ssize_t i, n;
    size_t total, item;
    const char *ts;
    bool ok = false;

    if (cai == NULL) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "copy_to: dst must be a device array with "
                                         "__cuda_array_interface__ (a CUDA torch tensor, a CuPy "
                                         "array)");
        return false;
    }
    data = PyDict_Check(cai) ? PyDict_GetItemString(cai, "data") : NULL;
    shape = PyDict_Check(cai) ? PyDict_GetItemString(cai, "shape") : NULL;
    strides = PyDict_Check(cai) ? PyDict_GetItemString(cai, "strides") : NULL;
    typestr = PyDict_Check(cai) ? PyDict_GetItemString(cai, "typestr") : NULL;
    if (data == NULL || !PyTuple_Check(data) || PyTuple_Size(data) != 2 || shape == NULL ||
        !PyTuple_Check(shape) || typestr == NULL || !PyUnicode_Check(typestr)) {
        PyErr_SetString(PyExc_TypeError, "copy_to: dst's __cuda_array_interface__ is malformed");
        goto out;
    }
    if (PyObject_IsTrue(PyTuple_GetItem(data, 1))) {
        PyErr_SetString(PyExc_ValueError, "copy_to: dst is read-only");
        goto out;
    }
    if (strides != NULL && strides != Py_None) {
        PyErr_SetString(PyExc_ValueError, "copy_to: dst must be C-contiguous");
        goto out;
    }
    p = PyLong_AsUnsignedLongLong(PyTuple_GetItem(data, 0));
    ts = PyUnicode_AsUTF8AndSize(typestr, NULL);
    if (PyErr_Occurred() || ts == NULL || strlen(ts) < 3) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "copy_to: dst's __cuda_array_interface__ is malformed");
        goto out;
    }
    item = (size_t)strtoul(ts + 2, NULL, 10);
    total = item;
    n = PyTuple_Size(shape);
    for (i = 0; i < n; i++) {
        long long d = PyLong_AsLongLong(PyTuple_GetItem(shape, i));

        if (d < 0 || (d > 0 && total > SIZE_MAX / (size_t)d)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "copy_to: dst's shape is malformed");
            goto out;
        }
        total *= (size_t)d;
    }
    *ptr = (uintptr_t)p;
    *nbytes = total;
    ok = p != 0 || total == 0;
    if (!ok)
        PyErr_SetString(PyExc_ValueError, "copy_to: dst has no device address");
out:
    Py_DECREF(cai);
    return ok;
}

static PyObject *view_copy_to(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"dst", "stream", NULL};
    pyf_hostview *v = (pyf_hostview *)self;
    PyObject *dst, *o_stream = Py_None;
    uintptr_t ptr = 0, stream;
    size_t nbytes = 0;
    cudaEvent_t ev = NULL;
    int prev = -1;
    ferry_err err;
    uint32_t i;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$O:copy_to", kw, &dst, &o_stream))
        return NULL;
    if (!view_usable(v, "copy_to") || !pyf_gpu_stream_arg(o_stream, &stream) ||
        !device_array(dst, &ptr, &nbytes))
        return NULL;
    if (nbytes < (size_t)v->geom->len)
        return pyf_raise(FERRY_EINVAL, "HostGpuView.copy_to: dst holds %zu bytes, the view %zu",
                         nbytes, (size_t)v->geom->len);
    for (i = 0; i < v->ncopies && v->copy_streams[i] != stream; i++) {
    }
    if (!pyf_gpu_device_enter(v->device, &prev))
        return pyf_raise(FERRY_ENODEV, "HostGpuView.copy_to: device %d", v->device);
    if (i == v->ncopies) {
        if (v->ncopies == PYF_GPU_STREAMS_MAX) {
            /* The oldest stream's copy is waited for; its slot serves this stream. */
            Py_BEGIN_ALLOW_THREADS cudaEventSynchronize(v->copies[0]);
            Py_END_ALLOW_THREADS i = 0;
        } else if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();
            pyf_gpu_device_leave(v->device, prev);
            return pyf_raise(FERRY_ENOMEM, "HostGpuView.copy_to: cudaEventCreate");
        } else {
            v->copies[i] = ev;
            v->copy_streams[i] = stream;
            v->ncopies++;
        }
    }
    /* The view's part of the payload, from its host address: its pages were registered when
     * the view was made (and stay so while the sample is held), so the runtime finds them
     * pinned and the copy engine reads them directly, as ferry_gpu_sample_copy does for the
     * whole payload. */
    Py_BEGIN_ALLOW_THREADS err =
        cudaMemcpyAsync((void *)ptr, v->geom->buf, (size_t)v->geom->len, cudaMemcpyHostToDevice,
                        (cudaStream_t)stream) == cudaSuccess
            ? FERRY_OK
            : FERRY_ESYS;
    Py_END_ALLOW_THREADS if (err != FERRY_OK)(void) cudaGetLastError();
    v->copy_streams[i] = stream;
    if (err == FERRY_OK && cudaEventRecord(v->copies[i], (cudaStream_t)stream) != cudaSuccess) {
        /* No event to wait for: the copy is waited for now. */
        (void)cudaGetLastError();
        Py_BEGIN_ALLOW_THREADS cudaStreamSynchronize((cudaStream_t)stream);
        Py_END_ALLOW_THREADS(void) cudaGetLastError();
    }
    pyf_gpu_device_leave(v->device, prev);
    if (err != FERRY_OK)
        return pyf_raise(err, "HostGpuView.copy_to('%s', device %d): cudaMemcpyAsync",
                         v->sub->topic, v->device);
    Py_RETURN_NONE;
}

enum { HV_DEVICE, HV_DATA_PTR, HV_NBYTES, HV_SAMPLE, HV_RELEASED };

static PyObject *view_get(PyObject *self, void *closure)
{
    pyf_hostview *v = (pyf_hostview *)self;
    int what = (int)(intptr_t)closure;

    if (what == HV_RELEASED)
        return PyBool_FromLong(!v->open);
    if (what == HV_SAMPLE)
        return Py_NewRef(v->sample);
    if (!view_usable(v, "attribute"))
        return NULL;
    switch (what) {
    case HV_DEVICE:
        return PyLong_FromLong(v->device);
    case HV_DATA_PTR:
        return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)v->dptr);
    default:
        return PyLong_FromSize_t((size_t)v->geom->len);
    }
}

static PyObject *view_repr(PyObject *self)
{
    pyf_hostview *v = (pyf_hostview *)self;

    if (!v->open)
        return PyUnicode_FromString("<ferry.HostGpuView released>");
    return PyUnicode_FromFormat("<ferry.HostGpuView '%s' device %d, %zu bytes>", v->sub->topic,
                                v->device, (size_t)v->geom->len);
}

static PyMethodDef view_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))view_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None) -> capsule\n\n"
     "The sample's pages as a tensor on the CUDA device (read in place over the bus, or in\n"
     "memory on an integrated GPU), read-only. The data is ready: stream is not waited on."},
    {"__dlpack_device__", view_dlpack_device, METH_NOARGS, "__dlpack_device__() -> (2, device)"},
    {"copy_to", (PyCFunction)(void (*)(void))view_copy_to, METH_VARARGS | METH_KEYWORDS,
     "copy_to(dst, *, stream=None) -> None\n\n"
     "Copies the view's array (an image's pixels, nbytes) into device array dst (contiguous,\n"
     "at least nbytes; any object with __cuda_array_interface__) on stream, asynchronously,\n"
     "from the registered pages at pinned speed. The sample stays held until the copy is\n"
     "done, however early the view is released."},
    {"release", view_release, METH_NOARGS,
     "release() -> None\n\nLets go of the view; the sample can go back once no tensor reads it\n"
     "and its copies are done. A second release raises StateError."},
    {"__enter__", view_enter, METH_NOARGS, NULL},
    {"__exit__", view_release, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef view_getset[] = {
    {"__cuda_array_interface__", view_cai, NULL,
     "Version 3, read-only (data's flag True), stream None: the data is ready.", NULL},
    {"device", view_get, NULL, "The CUDA device.", (void *)(intptr_t)HV_DEVICE},
    {"data_ptr", view_get, NULL, "The device address of the payload.",
     (void *)(intptr_t)HV_DATA_PTR},
    {"nbytes", view_get, NULL, "The size of the view's array (an image's pixels).",
     (void *)(intptr_t)HV_NBYTES},
    {"sample", view_get, NULL, "The Sample it reads.", (void *)(intptr_t)HV_SAMPLE},
    {"released", view_get, NULL, "Whether release() ran.", (void *)(intptr_t)HV_RELEASED},
    {NULL, NULL, NULL, NULL, NULL},
};

/* _sample_cuda(sample, *, device=0): Sample.cuda(), which ferry/__init__.py defines over it. */
static PyObject *mod_sample_cuda(PyObject *module, PyObject *args, PyObject *kwargs)
{
    PyObject *rest, *r;

    (void)module;
    if (PyTuple_Size(args) < 1 || !PyObject_TypeCheck(PyTuple_GetItem(args, 0), pyf.sample_type)) {
        PyErr_SetString(PyExc_TypeError, "_sample_cuda: not a ferry.Sample");
        return NULL;
    }
    rest = PyTuple_GetSlice(args, 1, PY_SSIZE_T_MAX);
    if (rest == NULL)
        return NULL;
    r = sample_cuda(PyTuple_GetItem(args, 0), rest, kwargs);
    Py_DECREF(rest);
    return r;
}

PyMethodDef pyf_hostview_functions[] = {
    {"_sample_cuda", (PyCFunction)(void (*)(void))mod_sample_cuda, METH_VARARGS | METH_KEYWORDS,
     "_sample_cuda(sample, *, device=0) -> HostGpuView\n\nSample.cuda(): use that."},
    {NULL, NULL, 0, NULL},
};

const pyf_type_def pyf_hostview_def = {
    .name = "ferry.HostGpuView",
    .size = sizeof(pyf_hostview),
    .dealloc = view_dealloc,
    .methods = view_methods,
    .getset = view_getset,
    .repr = view_repr,
    .doc = "A host sample on the GPU (Sample.cuda): the sample's registered pages read in\n"
           "place through __dlpack__ or __cuda_array_interface__, or copied with\n"
           "copy_to(). It keeps the sample held until it is released and no tensor over\n"
           "it is left.",
};

#else /* !FERRY_PY_GPU */

/* Sample.cuda() without the GPU module. */
static PyObject *mod_sample_cuda(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    (void)args;
    (void)kwargs;
    return pyf_raise(FERRY_ENOTSUP, "Sample.cuda: ferry was built without the GPU module "
                                    "(FERRY_GPU=ON needs a CUDA toolkit)");
}

PyMethodDef pyf_hostview_functions[] = {
    {"_sample_cuda", (PyCFunction)(void (*)(void))mod_sample_cuda, METH_VARARGS | METH_KEYWORDS,
     "_sample_cuda(sample, *, device=0)\n\nSample.cuda(): NotSupportedError in this build."},
    {NULL, NULL, 0, NULL},
};

#endif
