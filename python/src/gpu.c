/*
 * ferry.GpuSubscriber and ferry.GpuFrame: device frames and device tensors (ferry/gpu.h,
 * ferry/tensor.h) handed to PyTorch, CuPy and any other DLPack consumer without a copy. Built
 * with the GPU module (FERRY_PY_GPU); without it the module has HAVE_GPU False and no GPU type
 * (the package's GpuSubscriber then raises NotSupportedError). The publishing side,
 * ferry.GpuPublisher, is in gpu_pub.c; the stream helpers both use in gpu_util.c.
 * libferry_gpu reaches the CUDA driver lazily, so the extension still loads where there is no
 * driver: creating a GpuSubscriber then raises NoDeviceError.
 *
 * A GpuSubscriber reads through a Subscriber (which then refuses direct takes) and uses that
 * subscriber's lock for every ferry_gpu call. A GpuFrame is given back (ferry_gpu_frame_release)
 * when it is released and the last DLPack tensor over it is deleted, ordered after the work of
 * every stream it was exported to: the frame's host sample goes back only when that work is
 * done. A frame done while another thread holds the lock is queued and given back by it.
 * Closed while a tensor still reads a frame, it gives the other frames back at once and is
 * destroyed when the last such tensor is deleted (gpusub_finish).
 */
#include "pyferry.h"

#ifdef FERRY_PY_GPU

#include <ferry/gpu.h>

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Streams a frame may be exported to besides the one it was taken on. */
#define GPU_STREAMS_MAX PYF_GPU_STREAMS_MAX

enum { FRAME_HELD = 0, FRAME_PENDING = 1, FRAME_RELEASED = 2 };

typedef struct pyf_gpuframe pyf_gpuframe;

/* A frame done while another thread held the lock. */
typedef struct gpu_pending {
    ferry_gpu_frame f;
    uintptr_t release_stream;
    uintptr_t streams[GPU_STREAMS_MAX];
    uint32_t nstreams;
    struct gpu_pending *next;
} gpu_pending;

typedef struct pyf_gpusub {
    PyObject_HEAD
    pyf_child link;
    pyf_sub *sub; /* a strong reference */
    ferry_gpu_subscriber *gsub; /* NULL once destroyed (link.closed: closed) */
    int device;
    pyf_gpuframe *frames; /* every frame taken and not given back */
    gpu_pending *pending;
} pyf_gpusub;
PYF_CHILD_OBJECT(pyf_gpusub);

struct pyf_gpuframe {
    PyObject_HEAD
    pyf_gpusub *gs; /* a strong reference */
    pyf_gpuframe *prev, *next;
    int state;
    Py_ssize_t exports;
    ferry_gpu_frame f;
    bool tensor;           /* the metadata is a valid device tensor (tv) */
    ferry_tensor_view tv;  /* validated copy, when tensor */
    uintptr_t take_stream; /* the stream ferry_gpu_take made ready */
    uintptr_t streams[GPU_STREAMS_MAX]; /* other streams it was exported to */
    uint32_t nstreams;
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
    if (gs->gsub == NULL || !pyf_home(gs->link.gen)) return;
    /* The release is recorded on one stream: make it wait for the others first. If that fails
     * the frame is given back after a wait for those streams on the CPU. */
    for (i = 0; i < nstreams; i++)
        if (pyf_gpu_stream_order(gs->device, release_stream, streams[i]) != FERRY_OK) {
            if (cudaStreamSynchronize((cudaStream_t)streams[i]) != cudaSuccess)
                (void)cudaGetLastError();
        }
    ferry_gpu_frame_release(gs->gsub, f, (ferry_gpu_stream)release_stream);
}

static void gpusub_drain(pyf_gpusub *gs)
{
    while (gs->pending != NULL) {
        gpu_pending *p = gs->pending;

        gs->pending = p->next;
        frame_give_back(gs, &p->f, p->release_stream, p->streams, p->nstreams);
        PyMem_Free(p);
    }
    pyf_sub_drain(gs->sub);
    if (gs->gsub != NULL && pyf_home(gs->link.gen)) ferry_gpu_subscriber_poll(gs->gsub);
}

static void frame_unlink(pyf_gpuframe *fr)
{
    pyf_gpusub *gs = fr->gs;

    if (fr->prev != NULL)
        fr->prev->next = fr->next;
    else if (gs->frames == fr)
        gs->frames = fr->next;
    if (fr->next != NULL) fr->next->prev = fr->prev;
    fr->prev = fr->next = NULL;
}

static void frame_do_release(pyf_gpuframe *fr)
{
    pyf_gpusub *gs = fr->gs;
    uintptr_t release_stream = fr->take_stream;

    if (fr->state == FRAME_RELEASED) return;
    fr->state = FRAME_RELEASED;
    frame_unlink(fr);
    /* A forked child only forgets its parent's frame. */
    if (gs->gsub == NULL || !pyf_home(gs->link.gen)) return;
    if (PyThread_acquire_lock(gs->sub->lock, NOWAIT_LOCK)) {
        frame_give_back(gs, &fr->f, release_stream, fr->streams, fr->nstreams);
        gpusub_drain(gs);
        pyf_sub_unlock(gs->sub); /* destroys a closed GpuSubscriber whose last frame this was */
    } else {
        gpu_pending *p = PyMem_Calloc(1, sizeof *p);

        if (p == NULL) return; /* the frame stays taken until the GpuSubscriber is closed */
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
    if (fr->state != FRAME_HELD) return;
    if (fr->exports > 0)
        fr->state = FRAME_PENDING;
    else
        frame_do_release(fr);
}

static void frame_unexport(pyf_gpuframe *fr)
{
    fr->exports--;
    if (fr->exports == 0 && fr->state == FRAME_PENDING) frame_do_release(fr);
}

/* ---------------------------------------------------------------------------------------------
 * GpuSubscriber
 * ------------------------------------------------------------------------------------------- */

static int gpusub_close(PyObject *self);
static void gpusub_finish(PyObject *self);
static const pyf_child_ops gpusub_ops = {"GpuSubscriber", PYF_CLOSE_GPUSUB, gpusub_close,
                                         gpusub_finish};

static PyObject *gpusub_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"subscriber", "device", NULL};
    ferry_gpu_subscriber_options o;
    PyObject *o_sub;
    int device = 0;
    pyf_gpusub *gs;
    pyf_sub *sub;
    ferry_err err;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$i:GpuSubscriber", kwlist, &o_sub,
                                     &device))
        return NULL;
    if (!PyObject_TypeCheck(o_sub, pyf.sub_type)) {
        PyErr_SetString(PyExc_TypeError, "GpuSubscriber: not a ferry.Subscriber");
        return NULL;
    }
    sub = (pyf_sub *)o_sub;
    if (!pyf_child_home(&sub->link, "GpuSubscriber")) return NULL;
    if (sub->link.closed || sub->link.node == NULL || sub->link.node->closed)
        return pyf_raise_closed("GpuSubscriber");
    if (!pyf_sub_own(sub, "GpuSubscriber")) return NULL;
    if (device < 0) return pyf_raise(FERRY_EINVAL, "GpuSubscriber: device %d", device);
    gs = (pyf_gpusub *)pyf_alloc(type);
    if (gs == NULL) return NULL;
    gs->device = device;
    gs->sub = (pyf_sub *)Py_NewRef(o_sub);
    pyf_child_link(&gs->link, sub->link.node, &gpusub_ops, (PyObject *)gs);
    ferry_gpu_subscriber_options_init(&o);
    o.device = device;
    pyf_lock(sub->lock);
    Py_BEGIN_ALLOW_THREADS
    err = ferry_gpu_subscriber_create(&gs->gsub, sub->sub, &o);
    Py_END_ALLOW_THREADS
    PyThread_release_lock(sub->lock);
    if (err != FERRY_OK) {
        gs->gsub = NULL;
        Py_DECREF(gs);
        return pyf_raise(err, "ferry_gpu_subscriber_create('%s', device %d)", sub->topic, device);
    }
    sub->owner = (PyObject *)gs;
    sub->owner_link = &gs->link;
    return (PyObject *)gs;
}

/* Destroys a closed GpuSubscriber once no frame is out. Never waits for the lock: its holder
 * finishes it when letting the lock go (pyf_sub_unlock). */
static ferry_err gpusub_try_finish(pyf_gpusub *gs)
{
    bool home = pyf_home(gs->link.gen);
    ferry_err err = FERRY_OK;

    if (!gs->link.closed || gs->gsub == NULL || gs->frames != NULL) return FERRY_OK;
    /* A forked child only forgets it, without the lock. */
    if (home && !PyThread_acquire_lock(gs->sub->lock, NOWAIT_LOCK)) return FERRY_OK;
    Py_INCREF((PyObject *)gs);
    gpusub_drain(gs);
    if (home) {
        /* Waits for the work on frames released and not completed. */
        Py_BEGIN_ALLOW_THREADS
        err = ferry_gpu_subscriber_destroy(gs->gsub);
        Py_END_ALLOW_THREADS
    }
    if (err == FERRY_OK) gs->gsub = NULL; /* else dealloc tries again */
    if (home) PyThread_release_lock(gs->sub->lock);
    if (err == FERRY_OK) {
        if (gs->sub->owner == (PyObject *)gs) gs->sub->owner = NULL;
        pyf_child_unlink(&gs->link);
        pyf_child_finish(&gs->sub->link); /* closed meanwhile, it waited for this */
    }
    Py_DECREF((PyObject *)gs);
    return err;
}

static void gpusub_finish(PyObject *self)
{
    (void)gpusub_try_finish((pyf_gpusub *)self);
}

static int gpusub_close(PyObject *self)
{
    pyf_gpusub *gs = (pyf_gpusub *)self;
    pyf_gpuframe *fr, *next;
    ferry_err err;

    if (!pyf_child_home(&gs->link, "GpuSubscriber.close")) return -1;
    if (gs->link.closed) return 0;
    Py_INCREF(self);
    /* Closed first: a take() or wait() blocked in another thread ends within a slice. */
    gs->link.closed = true;
    pyf_lock(gs->sub->lock);
    gpusub_drain(gs);
    for (fr = gs->frames; fr != NULL; fr = next) {
        next = fr->next;
        if (fr->exports > 0) {
            /* A tensor reads it: given back (and this destroyed) when the last is deleted. */
            fr->state = FRAME_PENDING;
            continue;
        }
        fr->state = FRAME_RELEASED;
        frame_unlink(fr);
        frame_give_back(gs, &fr->f, fr->take_stream, fr->streams, fr->nstreams);
    }
    PyThread_release_lock(gs->sub->lock);
    err = gpusub_try_finish(gs);
    if (err != FERRY_OK) {
        Py_DECREF(self);
        pyf_raise(err, "ferry_gpu_subscriber_destroy('%s')", gs->sub->topic);
        return -1;
    }
    Py_DECREF(self);
    return 0;
}

static void gpusub_dealloc(PyObject *self)
{
    pyf_gpusub *gs = (pyf_gpusub *)self;

    /* Frames hold a reference: none is left, but some may be pending. */
    if (gs->gsub != NULL) {
        gpusub_drain(gs);
        if (pyf_home(gs->link.gen)) ferry_gpu_subscriber_destroy(gs->gsub);
        gs->gsub = NULL;
    }
    if (gs->sub != NULL) {
        if (gs->sub->owner == self) gs->sub->owner = NULL;
        pyf_child_finish(&gs->sub->link); /* one closed meanwhile waited for this */
        Py_DECREF((PyObject *)gs->sub);
    }
    pyf_child_unlink(&gs->link);
    pyf_free(self);
}

/* A GpuFrame for a frame just taken. The lock is held, so that no close can come between the
 * take and the frame's place in the list (an allocation may run other threads' code). */
static PyObject *frame_wrap(pyf_gpusub *gs, const ferry_gpu_frame *f, uintptr_t stream)
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
    fr->state = FRAME_HELD;
    fr->next = gs->frames;
    if (gs->frames != NULL) gs->frames->prev = fr;
    gs->frames = fr;
    /* Frames without a tensor header are bytes; a header that is there but invalid is too. */
    fr->tensor = f->meta_size > 0 && ferry_tensor_gpu_view_get(f, &fr->tv) == FERRY_OK;
    return (PyObject *)fr;
}

/* A wait on a GpuSubscriber, its subscriber's lock held. */
typedef struct gpusub_waiting {
    pyf_gpusub *gs;
    uintptr_t stream;   /* take(): the stream to make the frame ready for */
    ferry_gpu_frame f;  /* what take() took */
    bool closed;        /* closed by another thread meanwhile */
    const char *failed; /* the ferry call that failed, or NULL */
} gpusub_waiting;

static ferry_err gpusub_open_step(void *arg)
{
    gpusub_waiting *w = arg;

    gpusub_drain(w->gs);
    w->closed = w->gs->link.closed;
    return w->closed ? FERRY_ECLOSED : FERRY_EAGAIN;
}

static ferry_err gpusub_take_step(void *arg)
{
    gpusub_waiting *w = arg;
    ferry_err err = gpusub_open_step(arg);

    if (err != FERRY_EAGAIN) return err;
    memset(&w->f, 0, sizeof w->f);
    Py_BEGIN_ALLOW_THREADS
    err = ferry_gpu_take(w->gs->gsub, (ferry_gpu_stream)w->stream, &w->f);
    Py_END_ALLOW_THREADS
    if (err != FERRY_OK && err != FERRY_EAGAIN) w->failed = "ferry_gpu_take";
    return err;
}

static ferry_err gpusub_queued_block(void *arg, int64_t slice_ns)
{
    gpusub_waiting *w = arg;
    ferry_err err = ferry_wait(w->gs->sub->sub, slice_ns);

    if (err != FERRY_OK && err != FERRY_ETIMEDOUT) w->failed = "ferry_wait";
    return err;
}

/* For take(): a frame queued is taken in the next step. */
static ferry_err gpusub_take_block(void *arg, int64_t slice_ns)
{
    ferry_err err = gpusub_queued_block(arg, slice_ns);

    return err == FERRY_OK ? FERRY_ETIMEDOUT : err;
}

static const pyf_wait gpusub_take_slices = {gpusub_take_step, gpusub_take_block, NULL, false, 0};
static const pyf_wait gpusub_queued_slices = {gpusub_open_step, gpusub_queued_block, NULL, true,
                                              0};

/* Takes one frame, made ready for stream, waiting up to timeout_ns with the GIL released. */
static PyObject *gpusub_take_wait(pyf_gpusub *gs, int64_t timeout_ns, uintptr_t stream,
                                  bool none_on_empty)
{
    int64_t deadline = pyf_deadline(timeout_ns);
    gpusub_waiting w = {.gs = gs, .stream = stream};
    ferry_err err;
    PyObject *r;

    if (!pyf_child_open(&gs->link, gs->gsub, "GpuSubscriber.take")) return NULL;
    pyf_lock(gs->sub->lock);
    err = pyf_wait_sliced(&gpusub_take_slices, &w, deadline);
    if (err == FERRY_OK) {
        r = frame_wrap(gs, &w.f, stream);
        pyf_sub_unlock(gs->sub);
        return r;
    }
    pyf_sub_unlock(gs->sub);
    if (err == PYF_ERAISED) return NULL;
    if (w.closed) return pyf_raise_closed("GpuSubscriber.take");
    if (w.failed != NULL) return pyf_raise(err, "%s('%s')", w.failed, gs->sub->topic);
    if (none_on_empty) Py_RETURN_NONE;
    return pyf_raise(FERRY_ETIMEDOUT, "GpuSubscriber.take('%s', timeout %.3f s)", gs->sub->topic,
                     (double)timeout_ns / 1e9);
}

static PyObject *gpusub_take(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"timeout", "stream", NULL};
    PyObject *o_timeout = Py_None, *o_stream = Py_None;
    uintptr_t stream;
    int64_t ns;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O$O:take", kwlist, &o_timeout, &o_stream))
        return NULL;
    if (!pyf_timeout_ns(o_timeout, &ns) || !pyf_gpu_stream_arg(o_stream, &stream)) return NULL;
    return gpusub_take_wait((pyf_gpusub *)self, ns, stream, false);
}

static PyObject *gpusub_try_take(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"stream", NULL};
    PyObject *o_stream = Py_None;
    uintptr_t stream;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O:try_take", kwlist, &o_stream))
        return NULL;
    if (!pyf_gpu_stream_arg(o_stream, &stream)) return NULL;
    return gpusub_take_wait((pyf_gpusub *)self, 0, stream, true);
}

static PyObject *gpusub_iternext(PyObject *self)
{
    return gpusub_take_wait((pyf_gpusub *)self, FERRY_FOREVER, 0, false);
}

static PyObject *gpusub_iter(PyObject *self)
{
    return Py_NewRef(self);
}

static PyObject *gpusub_wait(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"timeout", NULL};
    gpusub_waiting w = {.gs = (pyf_gpusub *)self};
    PyObject *o_timeout = Py_None;
    int64_t deadline, ns;
    ferry_err err;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:wait", kwlist, &o_timeout)) return NULL;
    if (!pyf_timeout_ns(o_timeout, &ns) ||
        !pyf_child_open(&w.gs->link, w.gs->gsub, "GpuSubscriber.wait"))
        return NULL;
    deadline = pyf_deadline(ns);
    pyf_lock(w.gs->sub->lock);
    err = pyf_wait_sliced(&gpusub_queued_slices, &w, deadline);
    pyf_sub_unlock(w.gs->sub);
    if (err == FERRY_OK || err == FERRY_ETIMEDOUT) return PyBool_FromLong(err == FERRY_OK);
    if (err == PYF_ERAISED) return NULL;
    if (w.closed) return pyf_raise_closed("GpuSubscriber.wait");
    return pyf_raise(err, "ferry_wait('%s')", w.gs->sub->topic);
}

static PyObject *gpusub_poll(PyObject *self, PyObject *unused)
{
    pyf_gpusub *gs = (pyf_gpusub *)self;

    (void)unused;
    if (!pyf_child_open(&gs->link, gs->gsub, "GpuSubscriber.poll")) return NULL;
    pyf_lock(gs->sub->lock);
    gpusub_drain(gs);
    pyf_sub_unlock(gs->sub);
    Py_RETURN_NONE;
}

static PyObject *gpusub_fileno(PyObject *self, PyObject *unused)
{
    pyf_gpusub *gs = (pyf_gpusub *)self;
    ferry_err err;
    int fd = -1;

    (void)unused;
    if (!pyf_child_open(&gs->link, gs->gsub, "GpuSubscriber.fileno")) return NULL;
    err = ferry_subscriber_fd(gs->sub->sub, &fd);
    if (err != FERRY_OK) return pyf_raise(err, "ferry_subscriber_fd('%s')", gs->sub->topic);
    return PyLong_FromLong(fd);
}

static PyObject *gpusub_stats(PyObject *self, PyObject *unused)
{
    pyf_gpusub *gs = (pyf_gpusub *)self;
    ferry_gpu_subscriber_stats st;
    pyf_gpuframe *fr;
    unsigned held = 0;
    ferry_err err;

    (void)unused;
    if (!pyf_child_open(&gs->link, gs->gsub, "GpuSubscriber.stats")) return NULL;
    pyf_lock(gs->sub->lock);
    gpusub_drain(gs);
    err = !gs->link.closed ? ferry_gpu_subscriber_stats_get(gs->gsub, &st) : FERRY_ECLOSED;
    pyf_sub_unlock(gs->sub);
    if (err != FERRY_OK) return pyf_raise(err, "ferry_gpu_subscriber_stats_get");
    for (fr = gs->frames; fr != NULL; fr = fr->next) held++;
    return Py_BuildValue("{s:K,s:K,s:K,s:I}", "imports", (unsigned long long)st.imports,
                         "unimports", (unsigned long long)st.unimports, "readonly_fallbacks",
                         (unsigned long long)st.readonly_fallbacks, "frames", held);
}

static PyObject *gpusub_get(PyObject *self, void *closure)
{
    pyf_gpusub *gs = (pyf_gpusub *)self;

    switch ((int)(intptr_t)closure) {
    case 0: return Py_NewRef((PyObject *)gs->sub);
    case 1: return PyLong_FromLong(gs->device);
    default: return PyBool_FromLong(gs->link.closed);
    }
}

static PyMethodDef gpusub_methods[] = {
    {"take", (PyCFunction)(void (*)(void))gpusub_take, METH_VARARGS | METH_KEYWORDS,
     "take(timeout=None, *, stream=None) -> GpuFrame\n\n"
     "Takes the next device frame and makes stream wait (on the GPU) until the publisher's\n"
     "work on it completed (ferry_gpu_take), waiting up to timeout seconds with the GIL\n"
     "released; TimeoutError when none came. stream is a cudaStream_t as an int (0 or None:\n"
     "the legacy default stream) or an object with cuda_stream (torch.cuda.Stream) or ptr\n"
     "(cupy.cuda.Stream)."},
    {"try_take", (PyCFunction)(void (*)(void))gpusub_try_take, METH_VARARGS | METH_KEYWORDS,
     "try_take(*, stream=None) -> GpuFrame | None\n\nA queued frame, or None at once."},
    {"wait", (PyCFunction)(void (*)(void))gpusub_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None) -> bool\n\nWaits until a frame is queued, with the GIL released; False\n"
     "when timeout seconds passed first."},
    {"poll", gpusub_poll, METH_NOARGS,
     "poll()\n\nGives back the host samples of released frames whose GPU work completed\n"
     "(ferry_gpu_subscriber_poll); take(), wait() and stats() do it too."},
    {"fileno", gpusub_fileno, METH_NOARGS,
     "fileno() -> int\n\nThe descriptor of the subscriber (Subscriber.fileno())."},
    {"stats", gpusub_stats, METH_NOARGS,
     "stats() -> dict\n\nimports, unimports and readonly_fallbacks (ferry_gpu_subscriber_stats),\n"
     "and frames: the frames taken and not given back."},
    PYF_CHILD_CLOSE_METHODS(
        "close()\n\nGives back every frame (their GpuFrames then raise StateError) and destroys\n"
        "the GPU subscriber, waiting for the GPU work on released frames; the subscriber can be\n"
        "taken from again. A frame a DLPack tensor still reads stays mapped: it goes back, and\n"
        "the GPU subscriber is destroyed, when the last such tensor is deleted (the subscriber\n"
        "stays its own until then). Closing twice does nothing.",
        "GPU subscriber"),
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef gpusub_getset[] = {
    {"subscriber", gpusub_get, NULL, "The Subscriber it reads through.", (void *)0},
    {"device", gpusub_get, NULL, "The CUDA device ordinal frames are imported to.", (void *)1},
    {"closed", gpusub_get, NULL, "True once closed.", (void *)2},
    {NULL, NULL, NULL, NULL, NULL},
};

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
    if (fr->state == FRAME_HELD) return true;
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
    if (!frame_usable(fr, "release") || !pyf_gpu_stream_arg(o_stream, &stream)) return NULL;
    if (o_stream != Py_None && stream != fr->take_stream) {
        for (i = 0; i < fr->nstreams && fr->streams[i] != stream; i++) {
        }
        if (i == fr->nstreams) {
            if (fr->nstreams == GPU_STREAMS_MAX)
                return pyf_raise(FERRY_ELIMIT, "GpuFrame.release: more than %d streams",
                                 GPU_STREAMS_MAX);
            fr->streams[fr->nstreams++] = stream;
        }
    }
    frame_let_go(fr);
    Py_RETURN_NONE;
}

static PyObject *frame_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (!frame_usable((pyf_gpuframe *)self, "__enter__")) return NULL;
    return Py_NewRef(self);
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
    uint32_t i;

    if (!pyf_dlpack_args(args, kwargs, cuda, &o_stream, &versioned)) return NULL;
    if (!frame_usable(fr, "__dlpack__") || !pyf_gpu_dl_stream(o_stream, &stream, &sync))
        return NULL;
    if (sync && stream != fr->take_stream) {
        /* The consumer works on another stream than the one the frame was made ready for: that
         * stream waits for it, and the frame's release waits for that stream's work. */
        for (i = 0; i < fr->nstreams && fr->streams[i] != stream; i++) {
        }
        if (i == fr->nstreams && fr->nstreams == GPU_STREAMS_MAX) {
            PyErr_Format(PyExc_BufferError, "a frame is exported to at most %d streams",
                         GPU_STREAMS_MAX + 1);
            return NULL;
        }
        if (pyf_gpu_stream_order(fr->f.device, stream, fr->take_stream) != FERRY_OK) {
            PyErr_SetString(PyExc_BufferError, "__dlpack__: the consumer stream could not be "
                                               "made to wait for the frame");
            return NULL;
        }
        if (i == fr->nstreams) fr->streams[fr->nstreams++] = stream;
    }
    memset(&t, 0, sizeof t);
    if (fr->tensor) {
        t.data = (void *)fr->tv.data;
        t.ndim = (int32_t)fr->tv.header.ndim;
        t.dtype = fr->tv.header.dtype;
        for (i = 0; i < fr->tv.header.ndim; i++) {
            shape[i] = fr->tv.header.shape[i];
            strides[i] = fr->tv.header.strides[i];
        }
    } else {
        t.data = (void *)fr->f.device_ptr;
        t.ndim = 1;
        t.dtype.code = FERRY_DL_UINT;
        t.dtype.bits = 8;
        t.dtype.lanes = 1;
        shape[0] = (int64_t)fr->f.size;
        strides[0] = 1;
    }
    t.device = cuda;
    t.shape = shape;
    t.strides = strides;
    cap = pyf_dlpack_capsule(self, frame_dl_unexport, versioned, false, &t);
    if (cap != NULL) fr->exports++;
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

enum { GF_DEVICE_PTR, GF_DATA_PTR, GF_SIZE, GF_SEQUENCE, GF_PUBLISH_TIME, GF_PUBLISHER_ID,
       GF_DEVICE, GF_META, GF_KIND, GF_RELEASED, GF_SHAPE, GF_STRIDES, GF_DTYPE, GF_FRAME_ID,
       GF_STAMP, GF_NBYTES, GF_TOPIC };

static PyObject *frame_get(PyObject *self, void *closure)
{
    pyf_gpuframe *fr = (pyf_gpuframe *)self;
    int what = (int)(intptr_t)closure;

    if (!pyf_home(fr->gs->link.gen) && !frame_usable(fr, "attribute")) return NULL;
    if (what == GF_RELEASED) return PyBool_FromLong(fr->state != FRAME_HELD);
    if (what == GF_KIND) return PyUnicode_FromString(fr->tensor ? "tensor" : "bytes");
    if (what == GF_DEVICE) return PyLong_FromLong(fr->f.device);
    if (!frame_usable(fr, "attribute")) return NULL;
    switch (what) {
    case GF_DEVICE_PTR: return PyLong_FromVoidPtr((void *)fr->f.device_ptr);
    case GF_DATA_PTR:
        return PyLong_FromVoidPtr((void *)(fr->tensor ? fr->tv.data : fr->f.device_ptr));
    case GF_SIZE: return PyLong_FromSize_t(fr->f.size);
    case GF_NBYTES: return PyLong_FromSize_t(fr->tensor ? fr->tv.data_size : fr->f.size);
    case GF_SEQUENCE: return PyLong_FromUnsignedLongLong(fr->f.sequence);
    case GF_PUBLISH_TIME: return PyLong_FromLongLong(fr->f.publish_time.ns);
    case GF_PUBLISHER_ID: return PyLong_FromUnsignedLongLong(fr->f.publisher_id);
    case GF_TOPIC: return PyUnicode_FromString(fr->gs->sub->topic);
    case GF_META:
        /* A copy: the publisher may still write the sample it lies in. */
        return PyBytes_FromStringAndSize(fr->f.meta != NULL ? fr->f.meta : "",
                                         (Py_ssize_t)fr->f.meta_size);
    }
    if (fr->tensor) {
        const ferry_tensor_header *h = &fr->tv.header;

        switch (what) {
        case GF_SHAPE: return pyf_i64_tuple(h->shape, h->ndim);
        case GF_STRIDES: return pyf_i64_tuple(h->strides, h->ndim);
        case GF_DTYPE: return PyUnicode_FromString(ferry_dtype_name(fr->tv.dtype));
        case GF_FRAME_ID: return PyUnicode_FromString(h->frame_id);
        case GF_STAMP: return pyf_stamp_get(&h->stamp);
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
    if (fr->state != FRAME_HELD) return PyUnicode_FromString("<ferry.GpuFrame released>");
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

bool pyf_gpusub_types(PyObject *module)
{
    PyType_Slot gs_slots[] = {
        {Py_tp_new, PYF_FN(gpusub_new)},
        {Py_tp_dealloc, PYF_FN(gpusub_dealloc)},
        {Py_tp_methods, gpusub_methods},
        {Py_tp_getset, gpusub_getset},
        {Py_tp_iter, PYF_FN(gpusub_iter)},
        {Py_tp_iternext, PYF_FN(gpusub_iternext)},
        {Py_tp_doc,
         (void *)"GpuSubscriber(subscriber, *, device=0)\n\n"
                 "Device frames from a Subscriber (ferry_gpu_subscriber_create): take() gives\n"
                 "GpuFrames, whose __dlpack__ hands the publisher's device memory to\n"
                 "torch.from_dlpack or cupy.from_dlpack without a copy. While it lives, take\n"
                 "from the subscriber only through it. NoDeviceError without a CUDA device.\n"
                 "Iterating takes frames for ever (on the legacy default stream)."},
        {0, NULL},
    };
    PyType_Spec gs_spec = {"ferry.GpuSubscriber", sizeof(pyf_gpusub), 0, Py_TPFLAGS_DEFAULT,
                           gs_slots};
    PyType_Slot fr_slots[] = {
        {Py_tp_dealloc, PYF_FN(frame_dealloc)},
        {Py_tp_methods, frame_methods},
        {Py_tp_getset, frame_getset},
        {Py_tp_repr, PYF_FN(frame_repr)},
        {Py_tp_doc,
         (void *)"A taken device frame (GpuSubscriber.take): read-only device memory of another\n"
                 "process, exported with __dlpack__. Release it with release(), a with-block or\n"
                 "by dropping it and every tensor made from it."},
        {0, NULL},
    };
    PyType_Spec fr_spec = {"ferry.GpuFrame", sizeof(pyf_gpuframe), 0, Py_TPFLAGS_DEFAULT,
                           fr_slots};

    pyf.gpusub_type = (PyTypeObject *)PyType_FromSpec(&gs_spec);
    if (pyf.gpusub_type == NULL || PyModule_AddType(module, pyf.gpusub_type) < 0) return false;
    pyf.gpuframe_type = (PyTypeObject *)PyType_FromSpec(&fr_spec);
    return pyf.gpuframe_type != NULL && PyModule_AddType(module, pyf.gpuframe_type) == 0;
}

#endif
