/*
 * ferry.Sample: a taken sample, exported read-only through the buffer protocol (NumPy reads the
 * publisher's pages in place) and through DLPack; and the subscriber's end of a sample's life.
 *
 * A Sample is released when release() is called, its with-block ends or it is garbage
 * collected; the ferry_release itself waits until the last array, memoryview or DLPack tensor
 * over it is gone (the buffer protocol's releasebuffer and the DLPack deleter count them down),
 * so no array can outlive the memory it reads. A release while another thread holds the
 * subscriber's lock waits in its pending list (pyf_sub_drain); the last one of a closed
 * subscriber lets it be destroyed (pyf_sub_unlock: its ops' finish). A member of a Sync's
 * matched set tells its set instead (set_done). Calls util.c, args.c and export.c only.
 */
#include "sub.h"

#include "args.h"
#include "types.h"

#include <stdio.h>
#include <string.h>

typedef struct pyf_sample {
    PyObject_HEAD pyf_sub *sub;
    struct pyf_sample *prev, *next;
    pyf_hold hold;
    struct pyf_syncset *set; /* the matched set it belongs to, or NULL */
    pyf_set_done set_done;   /* what tells the set that this member is done */
    ferry_sample s;
    pyf_kind kind;
    union {
        ferry_image_view img;
        ferry_pointcloud_view pc;
        ferry_tensor_view t;
    } v;
    pyf_geom geom;
} pyf_sample;

/* ---------------------------------------------------------------------------------------------
 * Releasing
 * ------------------------------------------------------------------------------------------- */

/* Releases the samples other threads released while this one held the lock. Lock and GIL held
 * (in a forked child, only the GIL: it forgets them). */
void pyf_sub_drain(pyf_sub *s)
{
    while (s->pending != NULL) {
        pyf_pending *p = s->pending;

        s->pending = p->next;
        if (s->sub != NULL && pyf_home(s->link.gen))
            ferry_release(s->sub, &p->s);
        PyMem_Free(p);
    }
}

/* Gives the sample back to its publisher, now or (when another thread holds the subscriber)
 * through the pending list. */
static void sample_do_release(pyf_sample *sm)
{
    pyf_sub *s = sm->sub;

    if (sm->hold.state == PYF_RELEASED)
        return;
    sm->hold.state = PYF_RELEASED;
    if (sm->set != NULL) {
        struct pyf_syncset *set = sm->set;

        sm->set = NULL;
        sm->set_done(set);
        return;
    }
    PYF_LIST_REMOVE(sm->sub->samples, sm);
    /* A forked child only forgets its parent's sample: the parent still reads it. */
    if (s->sub == NULL || !pyf_home(s->link.gen))
        return;
    if (PyThread_acquire_lock(s->lock, NOWAIT_LOCK)) {
        ferry_release(s->sub, &sm->s);
        pyf_sub_drain(s);
        pyf_sub_unlock(s); /* destroys a closed subscriber whose last sample this was */
    } else {
        pyf_pending *p = PyMem_Malloc(sizeof *p);

        if (p == NULL)
            return; /* the sample stays held until the subscriber is destroyed */
        p->s = sm->s;
        p->next = s->pending;
        s->pending = p;
    }
}

/* The user is done with the sample: release it now, or when its last export goes. */
static void sample_let_go(pyf_sample *sm)
{
    if (pyf_hold_let_go(&sm->hold))
        sample_do_release(sm);
}

bool pyf_sample_let_go(PyObject *sample)
{
    pyf_sample *sm = (pyf_sample *)sample;

    if (sm->hold.state != PYF_HELD)
        return false;
    sample_let_go(sm);
    return true;
}

static void sample_unexport(pyf_sample *sm)
{
    if (pyf_hold_unexport(&sm->hold))
        sample_do_release(sm);
}

/* Closing s, its lock held: the samples no array reads go back now, the others when their last
 * export goes (and the subscriber is destroyed then). */
void pyf_sub_release_samples(pyf_sub *s)
{
    pyf_sample *sm, *next;

    for (sm = s->samples; sm != NULL; sm = next) {
        next = sm->next;
        /* One an array reads is released (and the subscriber destroyed) when the last goes. */
        if (!pyf_hold_close(&sm->hold))
            continue;
        PYF_LIST_REMOVE(s->samples, sm);
        if (s->sub != NULL)
            ferry_release(s->sub, &sm->s);
    }
}

static PyObject *sample_make(pyf_sub *sub, const ferry_sample *s, struct pyf_syncset *set,
                             pyf_set_done set_done)
{
    pyf_sample *sm = (pyf_sample *)pyf_alloc(pyf.sample_type);
    ferry_err err = FERRY_OK;
    bool ok = false;

    if (sm == NULL) {
        if (set != NULL)
            set_done(set);
        return NULL;
    }
    sm->sub = (pyf_sub *)Py_NewRef((PyObject *)sub);
    sm->s = *s;
    sm->kind = sub->kind;
    sm->hold.state = PYF_HELD;
    sm->set = set;
    sm->set_done = set_done;
    if (set == NULL)
        PYF_LIST_PUSH(sub->samples, sm);
    switch (sm->kind) {
    case PYF_IMAGE:
        err = ferry_image_view_get(s, &sm->v.img);
        ok = err == FERRY_OK && pyf_geom_image(&sm->geom, (void *)sm->v.img.data, &sm->v.img.header,
                                               &sm->v.img.layout);
        break;
    case PYF_CLOUD:
        err = ferry_pointcloud_view_get(s, &sm->v.pc);
        ok = err == FERRY_OK && pyf_geom_cloud(&sm->geom, (void *)sm->v.pc.data, &sm->v.pc.header);
        break;
    case PYF_TENSOR:
        err = ferry_tensor_view_get(s, &sm->v.t);
        ok = err == FERRY_OK && pyf_geom_tensor(&sm->geom, (void *)sm->v.t.data, &sm->v.t.header);
        break;
    default:
        ok = pyf_geom_bytes(&sm->geom, (void *)s->data, s->size);
        break;
    }
    if (!ok) {
        if (err != FERRY_OK)
            pyf_raise(err, "take on '%s': sample %llu is not a valid %s", sub->topic,
                      (unsigned long long)s->sequence, sub->type_name);
        Py_DECREF(sm); /* releases it */
        return NULL;
    }
    return (PyObject *)sm;
}

PyObject *pyf_sample_wrap(pyf_sub *sub, const ferry_sample *s)
{
    return sample_make(sub, s, NULL, NULL);
}

PyObject *pyf_sample_wrap_member(pyf_sub *sub, const ferry_sample *s, struct pyf_syncset *set,
                                 pyf_set_done done)
{
    return sample_make(sub, s, set, done);
}

struct pyf_syncset *pyf_sample_set(PyObject *sample)
{
    if (!PyObject_TypeCheck(sample, pyf.sample_type))
        return NULL;
    return ((pyf_sample *)sample)->set;
}

bool pyf_sample_home(PyObject *sample, const char *what, const char *type)
{
    pyf_sample *sm = (pyf_sample *)sample;

    if (!PyObject_TypeCheck(sample, pyf.sample_type) || pyf_home(sm->sub->link.gen))
        return true;
    pyf_raise_forked(what, type, sm->sub->link.pid);
    return false;
}

bool pyf_sample_held(PyObject *sample)
{
    return PyObject_TypeCheck(sample, pyf.sample_type) &&
           ((pyf_sample *)sample)->hold.state == PYF_HELD;
}

bool pyf_sample_exported(PyObject *sample)
{
    return ((pyf_sample *)sample)->hold.exports > 0;
}

void pyf_sample_forget(PyObject *sample)
{
    pyf_sample *sm = (pyf_sample *)sample;

    sm->hold.state = PYF_RELEASED;
    sm->set = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Sample
 * ------------------------------------------------------------------------------------------- */

static void sample_dealloc(PyObject *self)
{
    pyf_sample *sm = (pyf_sample *)self;

    /* Exports hold a reference: none is left here. */
    if (sm->sub != NULL) {
        sample_do_release(sm);
        Py_DECREF((PyObject *)sm->sub);
    }
    pyf_geom_clear(&sm->geom);
    pyf_free(self);
}

/* ForkError unless in the process that took the sample. */
static bool sample_home(pyf_sample *sm, const char *what)
{
    if (pyf_home(sm->sub->link.gen))
        return true;
    pyf_raise_forked(what, "Sample", sm->sub->link.pid);
    return false;
}

static bool sample_usable(pyf_sample *sm, const char *what)
{
    if (!pyf_home(sm->sub->link.gen)) {
        char name[64];

        snprintf(name, sizeof name, "Sample.%s", what);
        return sample_home(sm, name);
    }
    if (sm->hold.state == PYF_HELD)
        return true;
    pyf_raise(FERRY_ESTATE, "Sample.%s: the sample was released", what);
    return false;
}

bool pyf_sample_export_begin(PyObject *sample, const char *what, pyf_sub **sub,
                             const ferry_sample **s, const pyf_geom **geom)
{
    pyf_sample *sm = (pyf_sample *)sample;

    if (!sample_usable(sm, what))
        return false;
    sm->hold.exports++;
    *sub = sm->sub;
    *s = &sm->s;
    *geom = &sm->geom;
    return true;
}

void pyf_sample_export_end(PyObject *sample)
{
    sample_unexport((pyf_sample *)sample);
}

static int sample_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    pyf_sample *sm = (pyf_sample *)self;

    if (!sample_home(sm, "Sample buffer"))
        return -1;
    if (sm->hold.state != PYF_HELD) {
        pyf_raise(FERRY_ESTATE, "Sample buffer: the sample was released");
        return -1;
    }
    if (pyf_geom_export(&sm->geom, self, view, flags, true) < 0)
        return -1;
    sm->hold.exports++;
    return 0;
}

static void sample_releasebuffer(PyObject *self, Py_buffer *view)
{
    (void)view;
    sample_unexport((pyf_sample *)self);
}

/* release(); also __exit__ (exit_args, its arguments), which lets go of a sample released in
 * the block without a word. */
static PyObject *sample_release(PyObject *self, PyObject *exit_args)
{
    pyf_sample *sm = (pyf_sample *)self;

    if (exit_args != NULL ? !sample_home(sm, "Sample.__exit__") : !sample_usable(sm, "release"))
        return NULL;
    sample_let_go(sm);
    Py_RETURN_NONE;
}

static PyObject *sample_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    return pyf_entered(self, sample_usable((pyf_sample *)self, "__enter__"));
}

static void sample_dl_unexport(PyObject *owner)
{
    sample_unexport((pyf_sample *)owner);
}

static PyObject *sample_dlpack(PyObject *self, PyObject *args, PyObject *kwargs)
{
    pyf_sample *sm = (pyf_sample *)self;
    const ferry_dl_device cpu = {FERRY_DL_CPU, 0};
    const pyf_geom *g = &sm->geom;
    int64_t shape[FERRY_TENSOR_DIMS_MAX], strides[FERRY_TENSOR_DIMS_MAX];
    ferry_dl_tensor t;
    PyObject *stream, *cap;
    bool versioned;
    int i;

    if (!pyf_dlpack_args(args, kwargs, cpu, &stream, &versioned))
        return NULL;
    if (!sample_usable(sm, "__dlpack__"))
        return NULL;
    if (g->dl_bits == 0) {
        PyErr_SetString(PyExc_BufferError, "a point cloud has no DLPack form (its elements are "
                                           "records): use np.asarray(sample)");
        return NULL;
    }
    if (g->big_endian) {
        PyErr_SetString(PyExc_BufferError, "DLPack has no big-endian elements");
        return NULL;
    }
    for (i = 0; i < g->ndim; i++) {
        if (g->strides[i] % g->itemsize != 0) {
            PyErr_SetString(PyExc_BufferError, "a stride is not a multiple of the element size");
            return NULL;
        }
        shape[i] = (int64_t)g->shape[i];
        strides[i] = (int64_t)(g->strides[i] / g->itemsize);
    }
    memset(&t, 0, sizeof t);
    t.data = g->buf;
    t.device = cpu;
    t.ndim = g->ndim;
    t.dtype.code = g->dl_code;
    t.dtype.bits = g->dl_bits;
    t.dtype.lanes = 1;
    t.shape = shape;
    t.strides = strides;
    cap = pyf_dlpack_capsule(self, sample_dl_unexport, versioned, false, &t);
    if (cap != NULL)
        sm->hold.exports++;
    return cap;
}

static PyObject *sample_dlpack_device(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (!sample_home((pyf_sample *)self, "Sample.__dlpack_device__"))
        return NULL;
    return Py_BuildValue("(ii)", FERRY_DL_CPU, 0);
}

enum {
    SG_SEQUENCE,
    SG_PUBLISH_TIME,
    SG_PUBLISHER_ID,
    SG_SIZE,
    SG_KIND,
    SG_RELEASED,
    SG_WIDTH,
    SG_HEIGHT,
    SG_STEP,
    SG_ENCODING,
    SG_IS_BIGENDIAN,
    SG_FRAME_ID,
    SG_STAMP,
    SG_POINT_STEP,
    SG_ROW_STEP,
    SG_IS_DENSE,
    SG_FIELDS,
    SG_SHAPE,
    SG_STRIDES,
    SG_DTYPE,
    SG_DEVICE,
    SG_TOPIC,
    SG_NBYTES
};

static PyObject *sample_get(PyObject *self, void *closure)
{
    pyf_sample *sm = (pyf_sample *)self;
    int what = (int)(intptr_t)closure;
    const ferry_image_header *ih = &sm->v.img.header;
    const ferry_pointcloud_header *ph = &sm->v.pc.header;
    const ferry_tensor_header *th = &sm->v.t.header;

    if (!sample_home(sm, "Sample attribute"))
        return NULL;
    if (what == SG_RELEASED)
        return PyBool_FromLong(sm->hold.state != PYF_HELD);
    if (what == SG_KIND)
        return PyUnicode_FromString(pyf_kind_name(sm->kind));
    if (!sample_usable(sm, "attribute"))
        return NULL;
    switch (what) {
    case SG_SEQUENCE:
        return PyLong_FromUnsignedLongLong(sm->s.sequence);
    case SG_PUBLISH_TIME:
        return PyLong_FromLongLong(sm->s.publish_time.ns);
    case SG_PUBLISHER_ID:
        return PyLong_FromUnsignedLongLong(sm->s.publisher_id);
    case SG_SIZE:
        return PyLong_FromSize_t(sm->s.size);
    case SG_NBYTES:
        return PyLong_FromSsize_t(sm->geom.len);
    case SG_TOPIC:
        return PyUnicode_FromString(sm->sub->topic);
    }
    if (sm->kind == PYF_IMAGE) {
        switch (what) {
        case SG_WIDTH:
            return PyLong_FromUnsignedLong(ih->width);
        case SG_HEIGHT:
            return PyLong_FromUnsignedLong(ih->height);
        case SG_STEP:
            return PyLong_FromUnsignedLong(ih->step);
        case SG_ENCODING:
            return PyUnicode_FromString(ih->encoding);
        case SG_IS_BIGENDIAN:
            return PyBool_FromLong(ih->is_bigendian);
        case SG_FRAME_ID:
            return PyUnicode_FromString(ih->frame_id);
        case SG_STAMP:
            return pyf_stamp_get(&ih->stamp);
        }
    } else if (sm->kind == PYF_CLOUD) {
        switch (what) {
        case SG_WIDTH:
            return PyLong_FromUnsignedLong(ph->width);
        case SG_HEIGHT:
            return PyLong_FromUnsignedLong(ph->height);
        case SG_POINT_STEP:
            return PyLong_FromUnsignedLong(ph->point_step);
        case SG_ROW_STEP:
            return PyLong_FromUnsignedLong(ph->row_step);
        case SG_IS_DENSE:
            return PyBool_FromLong(ph->is_dense);
        case SG_IS_BIGENDIAN:
            return PyBool_FromLong(ph->is_bigendian);
        case SG_FRAME_ID:
            return PyUnicode_FromString(ph->frame_id);
        case SG_STAMP:
            return pyf_stamp_get(&ph->stamp);
        case SG_FIELDS:
            return pyf_fields_get(ph->fields, ph->nfields);
        }
    } else if (sm->kind == PYF_TENSOR) {
        switch (what) {
        case SG_SHAPE:
            return pyf_i64_tuple(th->shape, th->ndim);
        case SG_STRIDES:
            return pyf_i64_tuple(th->strides, th->ndim);
        case SG_DTYPE:
            return PyUnicode_FromString(ferry_dtype_name(sm->v.t.dtype));
        case SG_DEVICE:
            return Py_BuildValue("(ii)", (int)sm->v.t.device.device_type,
                                 (int)sm->v.t.device.device_id);
        case SG_FRAME_ID:
            return PyUnicode_FromString(th->frame_id);
        case SG_STAMP:
            return pyf_stamp_get(&th->stamp);
        }
    }
    PyErr_Format(PyExc_AttributeError, "a %s sample has no such attribute",
                 pyf_kind_name(sm->kind));
    return NULL;
}

static PyObject *sample_repr(PyObject *self)
{
    pyf_sample *sm = (pyf_sample *)self;

    if (!pyf_home(sm->sub->link.gen))
        return PyUnicode_FromFormat("<ferry.Sample of process %ld>", (long)sm->sub->link.pid);
    if (sm->hold.state != PYF_HELD)
        return PyUnicode_FromString("<ferry.Sample released>");
    if (sm->kind == PYF_IMAGE)
        return PyUnicode_FromFormat("<ferry.Sample image %ux%u %s seq=%llu>",
                                    (unsigned)sm->v.img.header.width,
                                    (unsigned)sm->v.img.header.height, sm->v.img.header.encoding,
                                    (unsigned long long)sm->s.sequence);
    return PyUnicode_FromFormat("<ferry.Sample %s %zu bytes seq=%llu>", pyf_kind_name(sm->kind),
                                sm->s.size, (unsigned long long)sm->s.sequence);
}

static PyMethodDef sample_methods[] = {
    {"release", sample_release, METH_NOARGS,
     "release()\n\nGives the sample back to its publisher. The memory goes back once the last\n"
     "array, memoryview or DLPack tensor over it is gone too; from now on the sample's\n"
     "attributes and buffer raise StateError. A second release raises StateError."},
    {"__enter__", sample_enter, METH_NOARGS, "Returns the sample."},
    {"__exit__", sample_release, METH_VARARGS, "Releases the sample (release()), if not yet."},
    {"__dlpack__", (PyCFunction)(void (*)(void))sample_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None) -> capsule\n\n"
     "A DLPack capsule over the sample's data (tensors, images, bytes), without a copy; a\n"
     "versioned one (flagged read-only) when max_version >= (1, 0). The sample stays held\n"
     "until the consumer's tensor is deleted."},
    {"__dlpack_device__", sample_dlpack_device, METH_NOARGS,
     "__dlpack_device__() -> (1, 0)\n\nThe CPU: host samples live in shared memory."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef sample_getset[] = {
    {"sequence", sample_get, NULL, "The publisher's count: 1 for its first sample.",
     (void *)SG_SEQUENCE},
    {"publish_time", sample_get, NULL, "CLOCK_MONOTONIC nanoseconds of the publish (ferry.now()).",
     (void *)SG_PUBLISH_TIME},
    {"publisher_id", sample_get, NULL, "The publisher's id.", (void *)SG_PUBLISHER_ID},
    {"size", sample_get, NULL, "Payload bytes, header included.", (void *)SG_SIZE},
    {"nbytes", sample_get, NULL, "Bytes of the exported data (pixels, points, elements).",
     (void *)SG_NBYTES},
    {"topic", sample_get, NULL, "The subscriber's topic.", (void *)SG_TOPIC},
    {"kind", sample_get, NULL, "\"image\", \"pointcloud\", \"tensor\" or \"bytes\".",
     (void *)SG_KIND},
    {"released", sample_get, NULL, "True once released.", (void *)SG_RELEASED},
    {"width", sample_get, NULL, "Image or point cloud width.", (void *)SG_WIDTH},
    {"height", sample_get, NULL, "Image or point cloud height.", (void *)SG_HEIGHT},
    {"step", sample_get, NULL, "Image bytes per row.", (void *)SG_STEP},
    {"encoding", sample_get, NULL, "Image encoding (\"rgb8\", ...).", (void *)SG_ENCODING},
    {"is_bigendian", sample_get, NULL, "Byte order of multi-byte elements.",
     (void *)SG_IS_BIGENDIAN},
    {"frame_id", sample_get, NULL, "The header's frame_id.", (void *)SG_FRAME_ID},
    {"stamp", sample_get, NULL, "The header's acquisition time, (sec, nanosec).", (void *)SG_STAMP},
    {"point_step", sample_get, NULL, "Point cloud bytes per point.", (void *)SG_POINT_STEP},
    {"row_step", sample_get, NULL, "Point cloud bytes per row.", (void *)SG_ROW_STEP},
    {"is_dense", sample_get, NULL, "Point cloud without invalid points.", (void *)SG_IS_DENSE},
    {"fields", sample_get, NULL, "Point cloud fields: [(name, offset, datatype, count)].",
     (void *)SG_FIELDS},
    {"shape", sample_get, NULL, "Tensor shape.", (void *)SG_SHAPE},
    {"strides", sample_get, NULL, "Tensor strides, in elements.", (void *)SG_STRIDES},
    {"dtype", sample_get, NULL, "Tensor dtype name (\"float32\", ...).", (void *)SG_DTYPE},
    {"device", sample_get, NULL, "Tensor device as DLPack's (type, id).", (void *)SG_DEVICE},
    {NULL, NULL, NULL, NULL, NULL},
};

const pyf_type_def pyf_sample_def = {
    .name = "ferry.Sample",
    .size = sizeof(pyf_sample),
    .flags = Py_TPFLAGS_BASETYPE,
    .dealloc = sample_dealloc,
    .methods = sample_methods,
    .getset = sample_getset,
    .repr = sample_repr,
    .getbuffer = sample_getbuffer,
    .releasebuffer = sample_releasebuffer,
    .doc = "A taken sample (Subscriber.take): a read-only buffer over the publisher's\n"
           "pages. np.asarray(sample) is (H, W, C) for images, a structured array for\n"
           "point clouds, the tensor for tensors and uint8 bytes otherwise. Release it\n"
           "with release(), a with-block or by dropping it.",
};
