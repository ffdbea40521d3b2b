/*
 * What the GPU types share (gpu.c, gpu_pub.c, gpu_host.c): stream arguments, the current device,
 * one stream waiting for another, and the module's gpu_device_count(). Built with the GPU module
 * (FERRY_PY_GPU). Calls util.c only.
 *
 * Streams are cudaStream_t values as integers: 0 (or None) the legacy default stream, 2 the
 * per-thread default stream, anything else a stream of the caller's. DLPack's consumer streams
 * follow the Python specification: None and 1 the legacy default stream, 2 the per-thread
 * default stream, -1 no synchronisation, 0 refused.
 */
#include "gpu.h"

#ifdef FERRY_PY_GPU

#include "types.h"

/* A cudaStream_t given by the caller: None, an int, or an object with __cuda_stream__ (the CUDA
 * stream protocol: a (version, handle) tuple), cuda_stream (PyTorch) or ptr (CuPy).
 * cudaStreamLegacy (1) is the legacy default stream, which is also 0. */
bool pyf_gpu_stream_arg(PyObject *o, uintptr_t *out)
{
    PyObject *attr = NULL;
    unsigned long long v;

    *out = 0;
    if (o == NULL || o == Py_None)
        return true;
    if (!PyIndex_Check(o)) {
        if (PyObject_HasAttrString(o, "__cuda_stream__")) {
            PyObject *t = PyObject_CallMethod(o, "__cuda_stream__", NULL);

            if (t == NULL)
                return false;
            if (PyTuple_Check(t) && PyTuple_Size(t) == 2)
                attr = Py_NewRef(PyTuple_GetItem(t, 1));
            else
                PyErr_SetString(PyExc_TypeError, "__cuda_stream__() must return (version, "
                                                 "handle)");
            Py_DECREF(t);
        } else if (PyObject_HasAttrString(o, "cuda_stream")) {
            attr = PyObject_GetAttrString(o, "cuda_stream");
        } else if (PyObject_HasAttrString(o, "ptr")) {
            attr = PyObject_GetAttrString(o, "ptr");
        }
        if (attr == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError,
                                "stream must be None, a cudaStream_t as an int, or a stream object "
                                "with __cuda_stream__, cuda_stream or ptr");
            return false;
        }
        o = attr;
    }
    o = PyNumber_Index(o);
    Py_XDECREF(attr);
    if (o == NULL)
        return false;
    v = PyLong_AsUnsignedLongLong(o);
    Py_DECREF(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "stream must be a cudaStream_t value >= 0");
        return false;
    }
    *out = v == 1 ? 0 : (uintptr_t)v;
    return true;
}

bool pyf_gpu_device_enter(int device, int *prev)
{
    if (cudaGetDevice(prev) != cudaSuccess)
        *prev = -1;
    if (*prev == device || cudaSetDevice(device) == cudaSuccess)
        return true;
    (void)cudaGetLastError();
    return false;
}

void pyf_gpu_device_leave(int device, int prev)
{
    if (prev >= 0 && prev != device)
        cudaSetDevice(prev);
}

/* Makes stream `waiter` wait (on the GPU) for the work enqueued on `done` so far. */
ferry_err pyf_gpu_stream_order(int device, uintptr_t waiter, uintptr_t done)
{
    cudaEvent_t ev;
    cudaError_t e;
    int prev = -1;

    if (waiter == done)
        return FERRY_OK;
    if (!pyf_gpu_device_enter(device, &prev))
        return FERRY_ENODEV;
    e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) {
        e = cudaEventRecord(ev, (cudaStream_t)done);
        if (e == cudaSuccess)
            e = cudaStreamWaitEvent((cudaStream_t)waiter, ev, 0);
        /* Destroying an event a wait is enqueued on is allowed: the wait still happens. */
        cudaEventDestroy(ev);
    }
    if (e != cudaSuccess)
        (void)cudaGetLastError();
    pyf_gpu_device_leave(device, prev);
    return e == cudaSuccess ? FERRY_OK : FERRY_ESYS;
}

/* The consumer stream of __dlpack__ as a cudaStream_t; *sync false for -1 (no synchronisation).
 */
bool pyf_gpu_dl_stream(PyObject *o, uintptr_t *out, bool *sync)
{
    long long v;

    *out = 0;
    *sync = true;
    if (o == Py_None)
        return true;
    v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "__dlpack__: stream must be None or an int");
        return false;
    }
    if (v == -1) {
        *sync = false;
        return true;
    }
    if (v == 0 || v < -1) {
        PyErr_SetString(PyExc_ValueError, "__dlpack__: stream 0 is ambiguous for CUDA: 1 is the "
                                          "legacy default stream, 2 the per-thread one");
        return false;
    }
    *out = v == 1 ? 0 : (uintptr_t)v;
    return true;
}

static PyObject *mod_gpu_device_count(PyObject *self, PyObject *unused)
{
    int count = 0;

    (void)self;
    (void)unused;
    if (ferry_gpu_device_count(&count) != FERRY_OK)
        count = 0;
    return PyLong_FromLong(count);
}

PyMethodDef pyf_gpu_functions[] = {
    {"gpu_device_count", mod_gpu_device_count, METH_NOARGS,
     "gpu_device_count() -> int\n\nUsable CUDA devices (ferry_gpu_device_count); 0 without a\n"
     "driver or a device."},
    {NULL, NULL, 0, NULL},
};

bool pyf_gpu_consumer(int device, uintptr_t own, uintptr_t *others, uint32_t *n, uintptr_t stream,
                      const char *what)
{
    uint32_t i;

    if (stream == own)
        return true;
    for (i = 0; i < *n && others[i] != stream; i++) {
    }
    if (i == *n && *n == PYF_GPU_STREAMS_MAX) {
        PyErr_Format(PyExc_BufferError, "a %s is exported to at most %d streams", what,
                     PYF_GPU_STREAMS_MAX + 1);
        return false;
    }
    if (pyf_gpu_stream_order(device, stream, own) != FERRY_OK) {
        PyErr_Format(PyExc_BufferError,
                     "__dlpack__: the consumer stream could not be made to wait for the %s", what);
        return false;
    }
    if (i == *n)
        others[(*n)++] = stream;
    return true;
}

#endif
