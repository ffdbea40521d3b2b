/*
 * ferry.GpuSubscriber: device frames and device tensors (ferry/gpu.h, ferry/tensor.h) taken as
 * GpuFrames (gpu_frame.c), which hand them to PyTorch, CuPy and any other DLPack consumer
 * without a copy. Built with the GPU module (FERRY_PY_GPU); without it the module has HAVE_GPU
 * False and no GPU type (the package's GpuSubscriber then raises NotSupportedError). The
 * publishing side, ferry.GpuPublisher, is in gpu_pub.c. libferry_gpu reaches the CUDA driver
 * lazily, so the extension still loads where there is no driver: creating a GpuSubscriber then
 * raises NoDeviceError.
 *
 * A GpuSubscriber reads through a Subscriber (which then refuses direct takes) and uses that
 * subscriber's lock for every ferry_gpu call. Closed while a tensor still reads a frame, it
 * gives the other frames back at once and is destroyed when the last such tensor is deleted
 * (gpusub_finish).
 */
#include "gpu.h"

#ifdef FERRY_PY_GPU

#include "args.h"
#include "types.h"

#include <string.h>

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

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$i:GpuSubscriber", kwlist, &o_sub, &device))
        return NULL;
    if (!PyObject_TypeCheck(o_sub, pyf.sub_type)) {
        PyErr_SetString(PyExc_TypeError, "GpuSubscriber: not a ferry.Subscriber");
        return NULL;
    }
    sub = (pyf_sub *)o_sub;
    if (!pyf_child_home(&sub->link, "GpuSubscriber"))
        return NULL;
    if (sub->link.closed || sub->link.node == NULL || sub->link.node->closed)
        return pyf_raise_closed("GpuSubscriber");
    if (!pyf_sub_own(sub, "GpuSubscriber"))
        return NULL;
    if (device < 0)
        return pyf_raise(FERRY_EINVAL, "GpuSubscriber: device %d", device);
    gs = (pyf_gpusub *)pyf_alloc(type);
    if (gs == NULL)
        return NULL;
    gs->device = device;
    gs->sub = (pyf_sub *)Py_NewRef(o_sub);
    pyf_child_link(&gs->link, sub->link.node, &gpusub_ops, (PyObject *)gs);
    ferry_gpu_subscriber_options_init(&o);
    o.device = device;
    pyf_lock(sub->lock);
    Py_BEGIN_ALLOW_THREADS err = ferry_gpu_subscriber_create(&gs->gsub, sub->sub, &o);
    Py_END_ALLOW_THREADS PyThread_release_lock(sub->lock);
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

    if (!gs->link.closed || gs->gsub == NULL || gs->frames != NULL)
        return FERRY_OK;
    /* A forked child only forgets it, without the lock. */
    if (home && !PyThread_acquire_lock(gs->sub->lock, NOWAIT_LOCK))
        return FERRY_OK;
    Py_INCREF((PyObject *)gs);
    pyf_gpusub_drain(gs);
    if (home) {
        /* Waits for the work on frames released and not completed. */
        Py_BEGIN_ALLOW_THREADS err = ferry_gpu_subscriber_destroy(gs->gsub);
        Py_END_ALLOW_THREADS
    }
    if (err == FERRY_OK)
        gs->gsub = NULL; /* else dealloc tries again */
    if (home)
        PyThread_release_lock(gs->sub->lock);
    if (err == FERRY_OK) {
        if (gs->sub->owner == (PyObject *)gs)
            gs->sub->owner = NULL;
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
    ferry_err err;

    if (!pyf_child_home(&gs->link, "GpuSubscriber.close"))
        return -1;
    if (gs->link.closed)
        return 0;
    Py_INCREF(self);
    /* Closed first: a take() or wait() blocked in another thread ends within a slice. */
    gs->link.closed = true;
    pyf_lock(gs->sub->lock);
    pyf_gpusub_drain(gs);
    pyf_gpusub_release_frames(gs);
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
        pyf_gpusub_drain(gs);
        if (pyf_home(gs->link.gen))
            ferry_gpu_subscriber_destroy(gs->gsub);
        gs->gsub = NULL;
    }
    if (gs->sub != NULL) {
        if (gs->sub->owner == self)
            gs->sub->owner = NULL;
        pyf_child_finish(&gs->sub->link); /* one closed meanwhile waited for this */
        Py_DECREF((PyObject *)gs->sub);
    }
    pyf_child_unlink(&gs->link);
    pyf_free(self);
}

/* A wait on a GpuSubscriber, its subscriber's lock held. */
typedef struct gpusub_waiting {
    pyf_gpusub *gs;
    uintptr_t stream;  /* take(): the stream to make the frame ready for */
    ferry_gpu_frame f; /* what take() took */
    pyf_waited waited;
} gpusub_waiting;

static ferry_err gpusub_open_step(void *arg)
{
    gpusub_waiting *w = arg;

    pyf_gpusub_drain(w->gs);
    return pyf_wait_open(&w->waited, w->gs->link.closed);
}

static ferry_err gpusub_take_step(void *arg)
{
    gpusub_waiting *w = arg;
    ferry_err err = gpusub_open_step(arg);

    if (err != FERRY_EAGAIN)
        return err;
    memset(&w->f, 0, sizeof w->f);
    Py_BEGIN_ALLOW_THREADS err = ferry_gpu_take(w->gs->gsub, (ferry_gpu_stream)w->stream, &w->f);
    Py_END_ALLOW_THREADS return pyf_wait_call(&w->waited, err, FERRY_EAGAIN, "ferry_gpu_take");
}

static ferry_err gpusub_queued_block(void *arg, int64_t slice_ns)
{
    gpusub_waiting *w = arg;

    return pyf_wait_call(&w->waited, ferry_wait(w->gs->sub->sub, slice_ns), FERRY_ETIMEDOUT,
                         "ferry_wait");
}

static const pyf_wait gpusub_take_slices = {gpusub_take_step, gpusub_queued_block, NULL, true, 0};
static const pyf_wait gpusub_queued_slices = {gpusub_open_step, gpusub_queued_block, NULL, false,
                                              0};

/* Takes one frame, made ready for stream, waiting up to timeout_ns with the GIL released. */
static PyObject *gpusub_take_wait(pyf_gpusub *gs, int64_t timeout_ns, uintptr_t stream,
                                  bool none_on_empty)
{
    int64_t deadline = pyf_deadline(timeout_ns);
    gpusub_waiting w = {.gs = gs, .stream = stream};
    ferry_err err;
    PyObject *r;

    if (!pyf_child_open(&gs->link, gs->gsub, "GpuSubscriber.take"))
        return NULL;
    pyf_lock(gs->sub->lock);
    err = pyf_wait_sliced(&gpusub_take_slices, &w, deadline);
    if (err == FERRY_OK) {
        r = pyf_gpuframe_wrap(gs, &w.f, stream);
        pyf_sub_unlock(gs->sub);
        return r;
    }
    pyf_sub_unlock(gs->sub);
    if (err != FERRY_ETIMEDOUT || w.waited.failed != NULL)
        return pyf_wait_raise(&w.waited, err, "GpuSubscriber.take", gs->sub->topic);
    if (none_on_empty)
        Py_RETURN_NONE;
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
    if (!pyf_timeout_ns(o_timeout, &ns) || !pyf_gpu_stream_arg(o_stream, &stream))
        return NULL;
    return gpusub_take_wait((pyf_gpusub *)self, ns, stream, false);
}

static PyObject *gpusub_try_take(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"stream", NULL};
    PyObject *o_stream = Py_None;
    uintptr_t stream;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O:try_take", kwlist, &o_stream))
        return NULL;
    if (!pyf_gpu_stream_arg(o_stream, &stream))
        return NULL;
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

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:wait", kwlist, &o_timeout))
        return NULL;
    if (!pyf_timeout_ns(o_timeout, &ns) ||
        !pyf_child_open(&w.gs->link, w.gs->gsub, "GpuSubscriber.wait"))
        return NULL;
    deadline = pyf_deadline(ns);
    pyf_lock(w.gs->sub->lock);
    err = pyf_wait_sliced(&gpusub_queued_slices, &w, deadline);
    pyf_sub_unlock(w.gs->sub);
    if (err == FERRY_OK || err == FERRY_ETIMEDOUT)
        return PyBool_FromLong(err == FERRY_OK);
    return pyf_wait_raise(&w.waited, err, "GpuSubscriber.wait", w.gs->sub->topic);
}

static PyObject *gpusub_poll(PyObject *self, PyObject *unused)
{
    pyf_gpusub *gs = (pyf_gpusub *)self;

    (void)unused;
    if (!pyf_child_open(&gs->link, gs->gsub, "GpuSubscriber.poll"))
        return NULL;
    pyf_lock(gs->sub->lock);
    pyf_gpusub_drain(gs);
    pyf_sub_unlock(gs->sub);
    Py_RETURN_NONE;
}

static PyObject *gpusub_fileno(PyObject *self, PyObject *unused)
{
    pyf_gpusub *gs = (pyf_gpusub *)self;
    ferry_err err;
    int fd = -1;

    (void)unused;
    if (!pyf_child_open(&gs->link, gs->gsub, "GpuSubscriber.fileno"))
        return NULL;
    err = ferry_subscriber_fd(gs->sub->sub, &fd);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_subscriber_fd('%s')", gs->sub->topic);
    return PyLong_FromLong(fd);
}

static PyObject *gpusub_stats(PyObject *self, PyObject *unused)
{
    pyf_gpusub *gs = (pyf_gpusub *)self;
    ferry_gpu_subscriber_stats st;
    ferry_err err;

    (void)unused;
    if (!pyf_child_open(&gs->link, gs->gsub, "GpuSubscriber.stats"))
        return NULL;
    pyf_lock(gs->sub->lock);
    pyf_gpusub_drain(gs);
    err = !gs->link.closed ? ferry_gpu_subscriber_stats_get(gs->gsub, &st) : FERRY_ECLOSED;
    pyf_sub_unlock(gs->sub);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_gpu_subscriber_stats_get");
    return Py_BuildValue("{s:K,s:K,s:K,s:I}", "imports", (unsigned long long)st.imports,
                         "unimports", (unsigned long long)st.unimports, "readonly_fallbacks",
                         (unsigned long long)st.readonly_fallbacks, "frames",
                         pyf_gpusub_frames_held(gs));
}

static PyObject *gpusub_get(PyObject *self, void *closure)
{
    pyf_gpusub *gs = (pyf_gpusub *)self;

    switch ((int)(intptr_t)closure) {
    case 0:
        return Py_NewRef((PyObject *)gs->sub);
    case 1:
        return PyLong_FromLong(gs->device);
    default:
        return PyBool_FromLong(gs->link.closed);
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

const pyf_type_def pyf_gpusub_def = {
    .name = "ferry.GpuSubscriber",
    .size = sizeof(pyf_gpusub),
    .new_ = gpusub_new,
    .dealloc = gpusub_dealloc,
    .methods = gpusub_methods,
    .getset = gpusub_getset,
    .iter = gpusub_iter,
    .iternext = gpusub_iternext,
    .doc = "GpuSubscriber(subscriber, *, device=0)\n\n"
           "Device frames from a Subscriber (ferry_gpu_subscriber_create): take() gives\n"
           "GpuFrames, whose __dlpack__ hands the publisher's device memory to\n"
           "torch.from_dlpack or cupy.from_dlpack without a copy. While it lives, take\n"
           "from the subscriber only through it. NoDeviceError without a CUDA device.\n"
           "Iterating takes frames for ever (on the legacy default stream).",
};

#endif
