/*
 * How samples and loans are exported: the geometry of their arrays (shape, strides, format) for
 * the buffer protocol, and DLPack capsules. Calls util.c only.
 */
#include "export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Buffer geometry
 * ------------------------------------------------------------------------------------------- */

void pyf_geom_clear(pyf_geom *g)
{
    PyMem_Free(g->format);
    memset(g, 0, sizeof *g);
}

static bool geom_format(pyf_geom *g, const char *format)
{
    g->format = pyf_strdup(format);
    return g->format != NULL;
}

bool pyf_geom_bytes(pyf_geom *g, void *buf, size_t len)
{
    memset(g, 0, sizeof *g);
    g->buf = buf;
    g->len = (Py_ssize_t)len;
    g->itemsize = 1;
    g->ndim = 1;
    g->shape[0] = (Py_ssize_t)len;
    g->strides[0] = 1;
    g->dl_code = FERRY_DL_UINT;
    g->dl_bits = 8;
    return geom_format(g, "B");
}

/* Element type and channels of an image encoding; nv12 is handled apart. */
static bool image_elements(const char *enc, char *fmt, Py_ssize_t *size, int *channels,
                           uint8_t *code)
{
    static const struct {
        const char *name;
        char fmt;
        int size, channels;
        uint8_t code;
    } table[] = {
        {"rgb8", 'B', 1, 3, FERRY_DL_UINT},   {"bgr8", 'B', 1, 3, FERRY_DL_UINT},
        {"rgba8", 'B', 1, 4, FERRY_DL_UINT},  {"bgra8", 'B', 1, 4, FERRY_DL_UINT},
        {"mono8", 'B', 1, 1, FERRY_DL_UINT},  {"mono16", 'H', 2, 1, FERRY_DL_UINT},
        {"16UC1", 'H', 2, 1, FERRY_DL_UINT},  {"32FC1", 'f', 4, 1, FERRY_DL_FLOAT},
        {"yuv422", 'B', 1, 2, FERRY_DL_UINT}, {"yuv422_yuy2", 'B', 1, 2, FERRY_DL_UINT},
        {"yuyv", 'B', 1, 2, FERRY_DL_UINT},   {"uyvy", 'B', 1, 2, FERRY_DL_UINT},
    };
    size_t i;

    for (i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(enc, table[i].name) == 0) {
            *fmt = table[i].fmt;
            *size = table[i].size;
            *channels = table[i].channels;
            *code = table[i].code;
            return true;
        }
    }
    return false;
}

bool pyf_geom_image(pyf_geom *g, void *buf, const ferry_image_header *h,
                    const ferry_image_layout *l)
{
    char fmt[3] = {0, 0, 0};
    Py_ssize_t es;
    int channels;
    uint8_t code;

    memset(g, 0, sizeof *g);
    g->buf = buf;
    g->len = (Py_ssize_t)h->data_size;
    g->big_endian = h->is_bigendian != 0;
    if (strcmp(h->encoding, "nv12") == 0) {
        /* The luma rows, then the interleaved chroma rows, with one step. */
        g->itemsize = 1;
        g->ndim = 2;
        g->shape[0] = (Py_ssize_t)h->height * 3 / 2;
        g->shape[1] = (Py_ssize_t)h->width;
        g->strides[0] = (Py_ssize_t)h->step;
        g->strides[1] = 1;
        g->dl_code = FERRY_DL_UINT;
        g->dl_bits = 8;
        return geom_format(g, "B");
    }
    if (!image_elements(h->encoding, &fmt[1], &es, &channels, &code)) {
        PyErr_Format(PyExc_BufferError, "image encoding '%s' has no array layout", h->encoding);
        return false;
    }
    fmt[0] = es == 1 ? '=' : (g->big_endian ? '>' : '<');
    g->itemsize = es;
    g->shape[0] = (Py_ssize_t)h->height;
    g->shape[1] = (Py_ssize_t)h->width;
    g->strides[0] = (Py_ssize_t)h->step;
    g->strides[1] = (Py_ssize_t)l->bytes_per_pixel;
    g->ndim = 2;
    if (channels > 1) {
        g->ndim = 3;
        g->shape[2] = channels;
        g->strides[2] = es;
    }
    g->dl_code = code;
    g->dl_bits = (uint8_t)(es * 8);
    return geom_format(g, es == 1 ? "B" : fmt);
}

static char point_format_char(uint8_t datatype)
{
    switch (datatype) {
    case FERRY_POINT_INT8:
        return 'b';
    case FERRY_POINT_UINT8:
        return 'B';
    case FERRY_POINT_INT16:
        return 'h';
    case FERRY_POINT_UINT16:
        return 'H';
    case FERRY_POINT_INT32:
        return 'i';
    case FERRY_POINT_UINT32:
        return 'I';
    case FERRY_POINT_FLOAT32:
        return 'f';
    case FERRY_POINT_FLOAT64:
        return 'd';
    default:
        return 0;
    }
}

/* A struct format "T{<f:x:<f:y:4x}" when the fields can be written in one (in offset order and
 * not overlapping); otherwise the points are exported as rows of point_step bytes, and
 * Sample.numpy() builds the structured view from Sample.fields. */
bool pyf_geom_cloud(pyf_geom *g, void *buf, const ferry_pointcloud_header *h)
{
    size_t cap = 16 + (size_t)h->nfields * (FERRY_FIELD_NAME_MAX + 48);
    uint32_t order[FERRY_POINTCLOUD_FIELDS_MAX];
    uint32_t i, j, at = 0;
    bool structured = true;
    char *fmt;
    size_t n;

    memset(g, 0, sizeof *g);
    g->buf = buf;
    g->len = (Py_ssize_t)h->data_size;
    g->big_endian = h->is_bigendian != 0;
    for (i = 0; i < h->nfields; i++)
        order[i] = i;
    for (i = 1; i < h->nfields; i++) /* insertion sort by offset: at most 16 fields */
        for (j = i; j > 0 && h->fields[order[j - 1]].offset > h->fields[order[j]].offset; j--) {
            uint32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    fmt = PyMem_Malloc(cap);
    if (fmt == NULL) {
        PyErr_NoMemory();
        return false;
    }
    n = (size_t)snprintf(fmt, cap, "T{");
    for (i = 0; i < h->nfields && structured; i++) {
        const ferry_point_field *f = &h->fields[order[i]];
        uint32_t size = ferry_point_datatype_size(f->datatype) * f->count;

        if (f->offset < at || strchr(f->name, ':') != NULL) {
            structured = false;
            break;
        }
        if (f->offset > at)
            n += (size_t)snprintf(fmt + n, cap - n, "%ux", f->offset - at);
        if (f->count > 1)
            n += (size_t)snprintf(fmt + n, cap - n, "(%u)", f->count);
        n += (size_t)snprintf(fmt + n, cap - n, "%c%c:%s:", g->big_endian ? '>' : '<',
                              point_format_char(f->datatype), f->name);
        at = f->offset + size;
    }
    if (structured && at < h->point_step)
        n += (size_t)snprintf(fmt + n, cap - n, "%ux", h->point_step - at);
    if (structured)
        snprintf(fmt + n, cap - n, "}");
    g->format = fmt;
    if (structured) {
        g->itemsize = (Py_ssize_t)h->point_step;
        g->ndim = h->height == 1 ? 1 : 2;
        if (g->ndim == 1) {
            g->shape[0] = (Py_ssize_t)h->width;
            g->strides[0] = (Py_ssize_t)h->point_step;
        } else {
            g->shape[0] = (Py_ssize_t)h->height;
            g->shape[1] = (Py_ssize_t)h->width;
            g->strides[0] = (Py_ssize_t)h->row_step;
            g->strides[1] = (Py_ssize_t)h->point_step;
        }
        return true;
    }
    snprintf(fmt, cap, "B");
    g->itemsize = 1;
    g->ndim = 2;
    g->shape[0] = (Py_ssize_t)h->height * (Py_ssize_t)h->width;
    g->shape[1] = (Py_ssize_t)h->point_step;
    g->strides[0] = (Py_ssize_t)h->point_step;
    g->strides[1] = 1;
    return true;
}

bool pyf_geom_tensor(pyf_geom *g, void *buf, const ferry_tensor_header *h)
{
    char fmt[3] = {'<', 0, 0};
    ferry_dtype dt;
    uint32_t i;

    memset(g, 0, sizeof *g);
    if (ferry_dtype_from_dl(h->dtype, &dt) != FERRY_OK) {
        PyErr_SetString(PyExc_BufferError, "tensor of an unknown dtype");
        return false;
    }
    g->buf = buf;
    g->len = (Py_ssize_t)h->data_size;
    g->itemsize = (Py_ssize_t)ferry_dtype_size(dt);
    g->ndim = (int)h->ndim;
    for (i = 0; i < h->ndim; i++) {
        g->shape[i] = (Py_ssize_t)h->shape[i];
        g->strides[i] = (Py_ssize_t)h->strides[i] * g->itemsize;
    }
    g->dl_code = h->dtype.code;
    g->dl_bits = h->dtype.bits;
    switch (dt) {
    case FERRY_DTYPE_INT8:
        fmt[1] = 'b';
        break;
    case FERRY_DTYPE_UINT8:
        fmt[1] = 'B';
        break;
    case FERRY_DTYPE_INT16:
        fmt[1] = 'h';
        break;
    case FERRY_DTYPE_UINT16:
        fmt[1] = 'H';
        break;
    case FERRY_DTYPE_INT32:
        fmt[1] = 'i';
        break;
    case FERRY_DTYPE_UINT32:
        fmt[1] = 'I';
        break;
    case FERRY_DTYPE_INT64:
        fmt[1] = 'q';
        break;
    case FERRY_DTYPE_UINT64:
        fmt[1] = 'Q';
        break;
    case FERRY_DTYPE_FLOAT16:
        fmt[1] = 'e';
        break;
    case FERRY_DTYPE_FLOAT32:
        fmt[1] = 'f';
        break;
    case FERRY_DTYPE_FLOAT64:
        fmt[1] = 'd';
        break;
    case FERRY_DTYPE_BOOL:
        fmt[1] = '?';
        break;
    case FERRY_DTYPE_BFLOAT16:
        g->no_buffer = "bfloat16 has no buffer-protocol format: use torch.from_dlpack()";
        fmt[1] = 'H';
        break;
    }
    return geom_format(g, fmt);
}

static bool geom_c_contiguous(const pyf_geom *g)
{
    Py_ssize_t want = g->itemsize;
    int i;

    for (i = g->ndim - 1; i >= 0; i--) {
        if (g->shape[i] == 0)
            return true;
        if (g->shape[i] != 1 && g->strides[i] != want)
            return false;
        want *= g->shape[i];
    }
    return true;
}

int pyf_geom_export(const pyf_geom *g, PyObject *owner, Py_buffer *view, int flags, bool readonly)
{
    bool contiguous = geom_c_contiguous(g);

    if (g->no_buffer != NULL) {
        PyErr_SetString(PyExc_BufferError, g->no_buffer);
        return -1;
    }
    if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE && readonly) {
        PyErr_SetString(PyExc_BufferError,
                        "a sample is read-only: it is the publisher's memory, mapped read-only");
        return -1;
    }
    if (!contiguous && (flags & PyBUF_STRIDES) != PyBUF_STRIDES) {
        PyErr_SetString(PyExc_BufferError,
                        "the data is not contiguous (rows padded): ask for a strided buffer");
        return -1;
    }
    if (!contiguous && ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS ||
                        (flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS ||
                        (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS)) {
        PyErr_SetString(PyExc_BufferError, "the data is not contiguous (rows padded)");
        return -1;
    }
    view->buf = g->buf;
    view->obj = Py_NewRef(owner);
    /* len is what the elements would take if copied contiguously (PEP 3118), which differs
     * from the memory spanned when rows are padded. */
    view->len = g->itemsize;
    for (int i = 0; i < g->ndim; i++)
        view->len *= g->shape[i];
    view->readonly = readonly ? 1 : 0;
    view->itemsize = g->itemsize;
    view->format = (flags & PyBUF_FORMAT) == PyBUF_FORMAT ? g->format : NULL;
    view->ndim = g->ndim;
    view->shape = (flags & PyBUF_ND) == PyBUF_ND ? (Py_ssize_t *)g->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? (Py_ssize_t *)g->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    if (view->shape == NULL) {
        /* A plain byte buffer: what bytes(), hashlib and file writes ask for. */
        view->ndim = 1;
        view->itemsize = 1;
        view->format = (flags & PyBUF_FORMAT) == PyBUF_FORMAT ? "B" : NULL;
    }
    return 0;
}

PyObject *pyf_fields_get(const ferry_point_field *fields, uint32_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    uint32_t i;

    if (list == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *t = Py_BuildValue("(sIII)", fields[i].name, (unsigned)fields[i].offset,
                                    (unsigned)fields[i].datatype, (unsigned)fields[i].count);
        if (t == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SetItem(list, (Py_ssize_t)i, t);
    }
    return list;
}

/* ---------------------------------------------------------------------------------------------
 * DLPack exports
 * ------------------------------------------------------------------------------------------- */

/* An export record of the package's own: its deleter counts the owner's exports down with the
 * GIL held (the owner releases through its subscriber's lock), from whichever thread the
 * consumer frees on. ferry_tensor_to_dlpack's deleter would call ferry_release outside that
 * lock. */
typedef struct dl_export {
    union {
        ferry_dlpack_tensor v0;
        ferry_dlpack_tensor_versioned v1;
    } m;
    int64_t shape[FERRY_TENSOR_DIMS_MAX];
    int64_t strides[FERRY_TENSOR_DIMS_MAX];
    PyObject *owner;
    void (*unexport)(PyObject *owner);
} dl_export;

static void dl_finish(dl_export *e)
{
    PyGILState_STATE g = PyGILState_Ensure();

    e->unexport(e->owner);
    Py_DECREF(e->owner);
    free(e);
    PyGILState_Release(g);
}

static void dl_delete_v0(ferry_dlpack_tensor *self)
{
    dl_finish((dl_export *)(void *)self);
}

static void dl_delete_v1(ferry_dlpack_tensor_versioned *self)
{
    dl_finish((dl_export *)(void *)self);
}

/* A capsule nobody consumed (still named "dltensor" or "dltensor_versioned": a consumer renames
 * it) ends its export, as the tensor's deleter would. */
static void dl_capsule_free(PyObject *cap)
{
    PyObject *type, *value, *tb;
    const char *name;

    PyErr_Fetch(&type, &value, &tb);
    name = PyCapsule_GetName(cap);
    if (name != NULL && (strcmp(name, "dltensor") == 0 || strcmp(name, "dltensor_versioned") == 0))
        dl_finish(PyCapsule_GetPointer(cap, name)); /* m, at the start of the record */
    PyErr_Restore(type, value, tb);
}

void pyf_dl_describe(ferry_dl_tensor *t, void *data, ferry_dl_device device,
                     const ferry_tensor_header *h, size_t n, int64_t *shape, int64_t *strides)
{
    uint32_t i;

    memset(t, 0, sizeof *t);
    t->data = data;
    t->device = device;
    if (h != NULL) {
        t->ndim = (int32_t)h->ndim;
        t->dtype = h->dtype;
        for (i = 0; i < h->ndim; i++) {
            shape[i] = h->shape[i];
            strides[i] = h->strides[i];
        }
    } else {
        t->ndim = 1;
        t->dtype.code = FERRY_DL_UINT;
        t->dtype.bits = 8;
        t->dtype.lanes = 1;
        shape[0] = (int64_t)n;
        strides[0] = 1;
    }
    t->shape = shape;
    t->strides = strides;
}

bool pyf_dlpack_args(PyObject *args, PyObject *kwargs, ferry_dl_device device, PyObject **stream,
                     bool *versioned)
{
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;

    *stream = Py_None;
    *versioned = false;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOO:__dlpack__", kwlist, stream,
                                     &max_version, &dl_device, &copy))
        return false;
    if (copy == Py_True) {
        PyErr_SetString(PyExc_BufferError, "ferry exports without copying (copy=True)");
        return false;
    }
    if (dl_device != Py_None) {
        int dt = -1, id = -1;

        if (!PyArg_ParseTuple(dl_device, "ii", &dt, &id))
            return false;
        if (dt != device.device_type || id != device.device_id) {
            PyErr_Format(PyExc_BufferError, "the data exports to its own device only, (%d, %d)",
                         (int)device.device_type, (int)device.device_id);
            return false;
        }
    }
    if (max_version != Py_None) {
        int major = 0, minor = 0;

        if (!PyArg_ParseTuple(max_version, "ii", &major, &minor))
            return false;
        *versioned = major >= 1;
    }
    return true;
}

PyObject *pyf_dlpack_capsule(PyObject *owner, void (*unexport)(PyObject *owner), bool versioned,
                             bool writable, const ferry_dl_tensor *desc)
{
    dl_export *e;
    ferry_dl_tensor *t;
    PyObject *cap;
    int32_t i;

    if (desc->ndim < 0 || desc->ndim > (int32_t)FERRY_TENSOR_DIMS_MAX) {
        PyErr_SetString(PyExc_BufferError, "too many dimensions for DLPack");
        return NULL;
    }
    e = calloc(1, sizeof *e);
    if (e == NULL)
        return PyErr_NoMemory();
    t = versioned ? &e->m.v1.dl_tensor : &e->m.v0.dl_tensor;
    *t = *desc;
    for (i = 0; i < desc->ndim; i++) {
        e->shape[i] = desc->shape[i];
        e->strides[i] = desc->strides[i];
    }
    t->shape = e->shape;
    t->strides = e->strides;
    e->owner = Py_NewRef(owner);
    e->unexport = unexport;
    if (versioned) {
        e->m.v1.version.major = FERRY_DLPACK_MAJOR;
        e->m.v1.version.minor = FERRY_DLPACK_MINOR;
        e->m.v1.manager_ctx = e;
        e->m.v1.deleter = dl_delete_v1;
        e->m.v1.flags = writable ? 0 : FERRY_DLPACK_FLAG_READ_ONLY;
        cap = PyCapsule_New(&e->m.v1, "dltensor_versioned", dl_capsule_free);
    } else {
        e->m.v0.manager_ctx = e;
        e->m.v0.deleter = dl_delete_v0;
        cap = PyCapsule_New(&e->m.v0, "dltensor", dl_capsule_free);
    }
    if (cap == NULL) {
        Py_DECREF(owner);
        free(e);
    }
    return cap;
}
