/*
 * ferry.GpuFrame: a device frame taken by a GpuSubscriber (gpu.c), exported to PyTorch, CuPy and
 * any other DLPack consumer without a copy; and the GpuSubscriber's end of a frame's life. A
 * frame is given back (ferry_gpu_frame_release) when it is released and the last DLPack tensor
 * over it is deleted, ordered after the work of every stream it was exported to: the frame's
 * host sample goes back only when that work is done. A frame done while another thread holds the
 * subscriber's lock is queued and given back by it (pyf_gpusub_drain); the last frame of a
 * closed GpuSubscriber lets it be destroyed (pyf_sub_unlock: its ops' finish). Calls util.c,
 * export.c, gpu_util.c and sample.c only.
 */
#include "gpu.h"

#ifdef FERRY_PY_GPU

#include "args.h"
#include "types.h"

#include <stdio.h>
#include <string.h>

typedef struct pyf_gpuframe {
    PyObject_HEAD pyf_gpusub *gs; /* a strong reference */
    struct pyf_gpuframe *prev, *next;
    pyf_hold hold;
    ferry_gpu_frame f;
    bool tensor;                            /* the metadata is a valid device tensor (tv) */
    ferry_tensor_view tv;                   /* validated copy, when tensor */
    uintptr_t take_stream;                  /* the stream ferry_gpu_take made ready */
    uintptr_t streams[PYF_GPU_STREAMS_MAX]; /* other streams it was exported to */
    uint32_t nstreams;
} pyf_gpuframe;

/* A frame done while another thread held the lock. */
struct pyf_gpu_pending {
    ferry_gpu_frame f;
    uintptr_t release_stream;
    uintptr_t streams[PYF_GPU_STREAMS_MAX];
    uint32_t nstreams;
    struct pyf_gpu_pending *next;
};

/* ---------------------------------------------------------------------------------------------
 * Giving frames back
 * ------------------------------------------------------------------------------------------- */

/* Gives a frame back after the work of its streams. The lock is held. */
static void frame_give_back(pyf_gpusub *gs, ferry_gpu_frame *f, uintptr_t release_stream,
                            const uintptr_t *streams, uint32_t nstreams)
{
    uint32_t i;

    /* A forked child has no CUDA context of its parent's: it only forgets. */
    if (gs->gsub == NULL || !pyf_home(gs->link.gen))
        return;
    /* The release is recorded on one stream: make it wait for the others first. If that fails
     * the frame is given back after a wait for those streams on the CPU. */
    for (i = 0; i < nstreams; i++)
        if (pyf_gpu_stream_order(gs->device, release_stream, streams[i]) != FERRY_OK) {
            if (cudaStreamSynchronize((cudaStream_t)streams[i]) != cudaSuccess)
                (void)cudaGetLastError();
        }
    ferry_gpu_frame_release(gs->gsub, f, (ferry_gpu_stream)release_stream);
}

void pyf_gpusub_drain(pyf_gpusub *gs)
{
    while (gs->pending != NULL) {
        struct pyf_gpu_pending *p = gs->pending;

        gs->pending = p->next;
        frame_give_back(gs, &p->f, p->release_stream, p->streams, p->nstreams);
        PyMem_Free(p);
    }
    pyf_sub_drain(gs->sub);
    if (gs->gsub != NULL && pyf_home(gs->link.gen))
        ferry_gpu_subscriber_poll(gs->gsub);
}

static void frame_do_release(pyf_gpuframe *fr)
{
    pyf_gpusub *gs = fr->gs;
    uintptr_t release_stream = fr->take_stream;

    if (fr->hold.state == PYF_RELEASED)
        return;
    fr->hold.state = PYF_RELEASED;
    PYF_LIST_REMOVE(fr->gs->frames, fr);
    /* A forked child only forgets its parent's frame. */
    if (gs->gsub == NULL || !pyf_home(gs->link.gen))
        return;
    if (PyThread_acquire_lock(gs->sub->lock, NOWAIT_LOCK)) {
        frame_give_back(gs, &fr->f, release_stream, fr->streams, fr->nstreams);
        pyf_gpusub_drain(gs);
        pyf_sub_unlock(gs->sub); /* destroys a closed GpuSubscriber whose last frame this was */
    } else {
        struct pyf_gpu_pending *p = PyMem_Calloc(1, sizeof *p);

        if (p == NULL)
            return; /* the frame stays taken until the GpuSubscriber is closed */
        p->f = fr->f;
        p->release_stream = release_stream;
        memcpy(p->streams, fr->streams, sizeof p->streams);
        p->nstreams = fr->nstreams;
        p->next = gs->pending;
        gs->pending = p;
    }
}

static void frame_let_go(pyf_gpuframe *fr)
{
    if (pyf_hold_let_go(&fr->hold))
        frame_do_release(fr);
}

static void frame_unexport(pyf_gpuframe *fr)
{
    if (pyf_hold_unexport(&fr->hold))
        frame_do_release(fr);
}

void pyf_gpusub_release_frames(pyf_gpusub *gs)
{
    pyf_gpuframe *fr, *next;

    for (fr = gs->frames; fr != NULL; fr = next) {
        next = fr->next;
        /* One a tensor reads is given back (and gs destroyed) when the last is deleted. */
        if (!pyf_hold_close(&fr->hold))
            continue;
        PYF_LIST_REMOVE(gs->frames, fr);
        frame_give_back(gs, &fr->f, fr->take_stream, fr->streams, fr->nstreams);
    }
}

unsigned pyf_gpusub_frames_held(const pyf_gpusub *gs)
{
    const pyf_gpuframe *fr;
    unsigned held = 0;

    for (fr = gs->frames; fr != NULL; fr = fr->next)
        held++;
    return held;
}

PyObject *pyf_gpuframe_wrap(pyf_gpusub *gs, const ferry_gpu_frame *f, uintptr_t stream)
{
    pyf_gpuframe *fr = (pyf_gpuframe *)pyf_alloc(pyf.gpuframe_type);

    if (fr == NULL) {
        ferry_gpu_frame copy = *f;

        frame_give_back(gs, &copy, stream, NULL, 0);
        return NULL;
    }
    fr->gs = (pyf_gpusub *)Py_NewRef((PyObject *)gs);
    fr->f = *f;
    fr->take_stream = stream;
    fr->hold.state = PYF_HELD;
    PYF_LIST_PUSH(gs->frames, fr);
    /* Frames without a tensor header are bytes; a header that is there but invalid is too. */
    fr->tensor = f->meta_size > 0 && ferry_tensor_gpu_view_get(f, &fr->tv) == FERRY_OK;
    return (PyObject *)fr;
}

/* ---------------------------------------------------------------------------------------------
 * GpuFrame
 * ------------------------------------------------------------------------------------------- */

static void frame_dealloc(PyObject *self)
{
    pyf_gpuframe *fr = (pyf_gpuframe *)self;

    /* Exports hold a reference: none is left here. */
    if (fr->gs != NULL) {
        frame_do_release(fr);
        Py_DECREF((PyObject *)fr->gs);
    }
    pyf_free(self);
}

static bool frame_usable(pyf_gpuframe *fr, const char *what)
{
    if (!pyf_home(fr->gs->link.gen)) {
        char name[64];

        snprintf(name, sizeof name, "GpuFrame.%s", what);
        pyf_raise_forked(name, "GpuFrame", fr->gs->link.pid);
        return false;
    }
    if (fr->hold.state == PYF_HELD)
        return true;
    pyf_raise(FERRY_ESTATE, "GpuFrame.%s: the frame was released", what);
    return false;
}

static PyObject *frame_release(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"stream", NULL};
    pyf_gpuframe *fr = (pyf_gpuframe *)self;
    PyObject *o_stream = Py_None;
    uintptr_t stream;
    uint32_t i;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O:release", kwlist, &o_stream))
        return NULL;
    if (!frame_usable(fr, "release") || !pyf_gpu_stream_arg(o_stream, &stream))
        return NULL;
    if (o_stream != Py_None && stream != fr->take_stream) {
        for (i = 0; i < fr->nstreams && fr->streams[i] != stream; i++) {
        }
        if (i == fr->nstreams) {
            if (fr->nstreams == PYF_GPU_STREAMS_MAX)
                return pyf_raise(FERRY_ELIMIT, "GpuFrame.release: more than %d streams",
                                 PYF_GPU_STREAMS_MAX);
            fr->streams[fr->nstreams++] = stream;
        }
    }
    frame_let_go(fr);
    Py_RETURN_NONE;
}

static PyObject *frame_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    return pyf_entered(self, frame_usable((pyf_gpuframe *)self, "__enter__"));
}

static PyObject *frame_exit(PyObject *self, PyObject *args)
{
    (void)args;
    if (!pyf_home(((pyf_gpuframe *)self)->gs->link.gen) &&
        !frame_usable((pyf_gpuframe *)self, "__exit__"))
        return NULL;
    frame_let_go((pyf_gpuframe *)self);
    Py_RETURN_NONE;
}

static void frame_dl_unexport(PyObject *owner)
{
    frame_unexport((pyf_gpuframe *)owner);
}

static PyObject *frame_dlpack(PyObject *self, PyObject *args, PyObject *kwargs)
{
    pyf_gpuframe *fr = (pyf_gpuframe *)self;
    const ferry_dl_device cuda = {FERRY_DL_CUDA, fr->f.device};
    int64_t shape[FERRY_TENSOR_DIMS_MAX], strides[FERRY_TENSOR_DIMS_MAX];
    bool versioned, sync;
    PyObject *o_stream, *cap;
    ferry_dl_tensor t;
    uintptr_t stream;

    if (!pyf_dlpack_args(args, kwargs, cuda, &o_stream, &versioned))
        return NULL;
    if (!frame_usable(fr, "__dlpack__") || !pyf_gpu_dl_stream(o_stream, &stream, &sync))
        return NULL;
    /* The frame's release waits for the consumer stream's work. */
    if (sync && !pyf_gpu_consumer(fr->f.device, fr->take_stream, fr->streams, &fr->nstreams, stream,
                                  "frame"))
        return NULL;
    pyf_dl_describe(&t, fr->tensor ? (void *)fr->tv.data : (void *)fr->f.device_ptr, cuda,
                    fr->tensor ? &fr->tv.header : NULL, fr->f.size, shape, strides);
    cap = pyf_dlpack_capsule(self, frame_dl_unexport, versioned, false, &t);
    if (cap != NULL)
        fr->hold.exports++;
    return cap;
}

static PyObject *frame_dlpack_device(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (!pyf_home(((pyf_gpuframe *)self)->gs->link.gen) &&
        !frame_usable((pyf_gpuframe *)self, "__dlpack_device__"))
        return NULL;
    return Py_BuildValue("(ii)", FERRY_DL_CUDA, ((pyf_gpuframe *)self)->f.device);
}

enum {
    GF_DEVICE_PTR,
    GF_DATA_PTR,
    GF_SIZE,
    GF_SEQUENCE,
    GF_PUBLISH_TIME,
    GF_PUBLISHER_ID,
    GF_DEVICE,
    GF_META,
    GF_KIND,
    GF_RELEASED,
    GF_SHAPE,
    GF_STRIDES,
    GF_DTYPE,
    GF_FRAME_ID,
    GF_STAMP,
    GF_NBYTES,
    GF_TOPIC
};

static PyObject *frame_get(PyObject *self, void *closure)
{
    pyf_gpuframe *fr = (pyf_gpuframe *)self;
    int what = (int)(intptr_t)closure;

    if (!pyf_home(fr->gs->link.gen) && !frame_usable(fr, "attribute"))
        return NULL;
    if (what == GF_RELEASED)
        return PyBool_FromLong(fr->hold.state != PYF_HELD);
    if (what == GF_KIND)
        return PyUnicode_FromString(fr->tensor ? "tensor" : "bytes");
    if (what == GF_DEVICE)
        return PyLong_FromLong(fr->f.device);
    if (!frame_usable(fr, "attribute"))
        return NULL;
    switch (what) {
    case GF_DEVICE_PTR:
        return PyLong_FromVoidPtr((void *)fr->f.device_ptr);
    case GF_DATA_PTR:
        return PyLong_FromVoidPtr((void *)(fr->tensor ? fr->tv.data : fr->f.device_ptr));
    case GF_SIZE:
        return PyLong_FromSize_t(fr->f.size);
    case GF_NBYTES:
        return PyLong_FromSize_t(fr->tensor ? fr->tv.data_size : fr->f.size);
    case GF_SEQUENCE:
        return PyLong_FromUnsignedLongLong(fr->f.sequence);
    case GF_PUBLISH_TIME:
        return PyLong_FromLongLong(fr->f.publish_time.ns);
    case GF_PUBLISHER_ID:
        return PyLong_FromUnsignedLongLong(fr->f.publisher_id);
    case GF_TOPIC:
        return PyUnicode_FromString(fr->gs->sub->topic);
    case GF_META:
        /* A copy: the publisher may still write the sample it lies in. */
        return PyBytes_FromStringAndSize(fr->f.meta != NULL ? fr->f.meta : "",
                                         (Py_ssize_t)fr->f.meta_size);
    }
    if (fr->tensor) {
        const ferry_tensor_header *h = &fr->tv.header;

        switch (what) {
        case GF_SHAPE:
            return pyf_i64_tuple(h->shape, h->ndim);
        case GF_STRIDES:
            return pyf_i64_tuple(h->strides, h->ndim);
        case GF_DTYPE:
            return PyUnicode_FromString(ferry_dtype_name(fr->tv.dtype));
        case GF_FRAME_ID:
            return PyUnicode_FromString(h->frame_id);
        case GF_STAMP:
            return pyf_stamp_get(&h->stamp);
        }
    }
    PyErr_SetString(PyExc_AttributeError, "a device frame without a tensor header has no such "
                                          "attribute");
    return NULL;
}

static PyObject *frame_repr(PyObject *self)
{
    pyf_gpuframe *fr = (pyf_gpuframe *)self;

    if (!pyf_home(fr->gs->link.gen))
        return PyUnicode_FromFormat("<ferry.GpuFrame of process %ld>", (long)fr->gs->link.pid);
    if (fr->hold.state != PYF_HELD)
        return PyUnicode_FromString("<ferry.GpuFrame released>");
    return PyUnicode_FromFormat("<ferry.GpuFrame %s %zu bytes on cuda:%d seq=%llu>",
                                fr->tensor ? "tensor" : "bytes", fr->f.size, fr->f.device,
                                (unsigned long long)fr->f.sequence);
}

static PyMethodDef frame_methods[] = {
    {"release", (PyCFunction)(void (*)(void))frame_release, METH_VARARGS | METH_KEYWORDS,
     "release(*, stream=None)\n\nGives the frame back once the GPU work enqueued so far on the\n"
     "stream it was taken on, on the streams it was exported to and on stream completed\n"
     "(ferry_gpu_frame_release records an event; the CPU does not wait). With DLPack tensors\n"
     "still alive, that happens when the last is deleted. A second release raises StateError."},
    {"__enter__", frame_enter, METH_NOARGS, "Returns the frame."},
    {"__exit__", frame_exit, METH_VARARGS, "Releases the frame (release()), if not yet."},
    {"__dlpack__", (PyCFunction)(void (*)(void))frame_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None) -> capsule\n\n"
     "A DLPack capsule over the device memory, without a copy: the tensor's shape, dtype and\n"
     "strides, or uint8 bytes for a frame without a tensor header. stream is the consumer's\n"
     "(None or 1: legacy default, 2: per-thread default, -1: no synchronisation): it is made\n"
     "to wait for the frame, and the frame goes back only after its work. Versioned (flagged\n"
     "read-only) when max_version >= (1, 0). The frame stays taken until the tensor is\n"
     "deleted."},
    {"__dlpack_device__", frame_dlpack_device, METH_NOARGS,
     "__dlpack_device__() -> (2, device)\n\nkDLCUDA and the subscriber's device ordinal."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef frame_getset[] = {
    {"device_ptr", frame_get, NULL, "The frame's device address (int).", (void *)GF_DEVICE_PTR},
    {"data_ptr", frame_get, NULL, "The device address of the elements (a tensor's data).",
     (void *)GF_DATA_PTR},
    {"size", frame_get, NULL, "The frame's bytes, as loaned.", (void *)GF_SIZE},
    {"nbytes", frame_get, NULL, "Bytes of the exported data.", (void *)GF_NBYTES},
    {"sequence", frame_get, NULL, "The host sample's sequence.", (void *)GF_SEQUENCE},
    {"publish_time", frame_get, NULL, "CLOCK_MONOTONIC nanoseconds of the publish.",
     (void *)GF_PUBLISH_TIME},
    {"publisher_id", frame_get, NULL, "The publisher's id.", (void *)GF_PUBLISHER_ID},
    {"device", frame_get, NULL, "The CUDA device ordinal the frame is mapped on.",
     (void *)GF_DEVICE},
    {"topic", frame_get, NULL, "The subscriber's topic.", (void *)GF_TOPIC},
    {"meta", frame_get, NULL, "A copy of the publisher's metadata (bytes).", (void *)GF_META},
    {"kind", frame_get, NULL, "\"tensor\" (a valid device tensor header) or \"bytes\".",
     (void *)GF_KIND},
    {"released", frame_get, NULL, "True once released.", (void *)GF_RELEASED},
    {"shape", frame_get, NULL, "Tensor shape.", (void *)GF_SHAPE},
    {"strides", frame_get, NULL, "Tensor strides, in elements.", (void *)GF_STRIDES},
    {"dtype", frame_get, NULL, "Tensor dtype name (\"float32\", ...).", (void *)GF_DTYPE},
    {"frame_id", frame_get, NULL, "The tensor header's frame_id.", (void *)GF_FRAME_ID},
    {"stamp", frame_get, NULL, "The tensor header's stamp, (sec, nanosec).", (void *)GF_STAMP},
    {NULL, NULL, NULL, NULL, NULL},
};

const pyf_type_def pyf_gpuframe_def = {
    .name = "ferry.GpuFrame",
    .size = sizeof(pyf_gpuframe),
    .dealloc = frame_dealloc,
    .methods = frame_methods,
    .getset = frame_getset,
    .repr = frame_repr,
    .doc = "A taken device frame (GpuSubscriber.take): read-only device memory of another\n"
           "process, exported with __dlpack__. Release it with release(), a with-block or\n"
           "by dropping it and every tensor made from it.",
};

#endif
