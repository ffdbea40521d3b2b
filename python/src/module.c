/*
 * ferry._ferry: the module, its exceptions (one per ferry_err) and the helpers the object files
 * share (buffer geometry, DLPack exports, stats dicts).
 */
#include "pyferry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

typedef struct pyf_error_spec {
    ferry_err code;
    const char *name; /* "ferry.X" */
    PyObject **base;  /* a built-in exception it also derives from, or NULL */
    const char *doc;
} pyf_error_spec;

static const pyf_error_spec error_specs[] = {
    {FERRY_EINVAL, "ferry.InvalidArgumentError", &PyExc_ValueError,
     "FERRY_EINVAL: an argument is invalid (also a ValueError)."},
    {FERRY_ENOMEM, "ferry.NoMemoryError", &PyExc_MemoryError,
     "FERRY_ENOMEM: out of memory: heap, memfd pages or mappings (also a MemoryError)."},
    {FERRY_EAGAIN, "ferry.AgainError", &PyExc_BlockingIOError,
     "FERRY_EAGAIN: nothing available now (also a BlockingIOError)."},
    {FERRY_ETIMEDOUT, "ferry.TimeoutError", &PyExc_TimeoutError,
     "FERRY_ETIMEDOUT: a blocking call's timeout expired (also the built-in TimeoutError)."},
    {FERRY_ETYPE, "ferry.TypeMismatchError", NULL,
     "FERRY_ETYPE: the topic is in use with another type name or type hash."},
    {FERRY_ETOOBIG, "ferry.TooBigError", NULL,
     "FERRY_ETOOBIG: a size exceeds the configured maximum (max_sample_size)."},
    {FERRY_EPOOL, "ferry.PoolExhaustedError", NULL,
     "FERRY_EPOOL: the publisher's pool is exhausted (byte cap or chunk cap reached)."},
    {FERRY_ESTATE, "ferry.StateError", NULL,
     "FERRY_ESTATE: the object is not in a state that allows the call (a released sample, a "
     "published loan)."},
    {FERRY_ECLOSED, "ferry.ClosedError", NULL, "FERRY_ECLOSED: the object was closed."},
    {FERRY_EBUSY, "ferry.BusyError", NULL,
     "FERRY_EBUSY: the object still has live children, loans or held samples."},
    {FERRY_ELIMIT, "ferry.LimitError", NULL,
     "FERRY_ELIMIT: a configured limit is reached (max_held samples, subscribers)."},
    {FERRY_ENAME, "ferry.InvalidNameError", &PyExc_ValueError,
     "FERRY_ENAME: a topic, type or node name is not valid (also a ValueError)."},
    {FERRY_ESYS, "ferry.SysError", &PyExc_OSError,
     "FERRY_ESYS: a system call failed; errno and strerror say why (also an OSError)."},
    {FERRY_EPROTO, "ferry.ProtocolError", NULL,
     "FERRY_EPROTO: a peer broke the protocol, or a sample is not a valid message of its type."},
    {FERRY_EPERM, "ferry.PermissionError", &PyExc_PermissionError,
     "FERRY_EPERM: permission denied (also the built-in PermissionError)."},
    {FERRY_ENODEV, "ferry.NoDeviceError", NULL, "FERRY_ENODEV: no GPU or no CUDA driver."},
    {FERRY_ENOTSUP, "ferry.NotSupportedError", NULL,
     "FERRY_ENOTSUP: not supported by this build or this platform."},
    {FERRY_EFOREIGN, "ferry.ForeignError", NULL,
     "FERRY_EFOREIGN: the sample or loan belongs to another publisher or subscriber."},
};

static bool errors_create(PyObject *module)
{
    size_t i;

    pyf.error = PyErr_NewExceptionWithDoc(
        "ferry.Error",
        "Base of every ferry error. .code is the ferry_err number, .errname its enum name "
        "(\"FERRY_ETIMEDOUT\"); the message is the context and ferry_strerror().",
        NULL, NULL);
    if (pyf.error == NULL || PyModule_AddObjectRef(module, "Error", pyf.error) < 0) return false;
    for (i = 0; i < sizeof error_specs / sizeof error_specs[0]; i++) {
        const pyf_error_spec *e = &error_specs[i];
        PyObject *bases = e->base != NULL ? PyTuple_Pack(2, pyf.error, *e->base)
                                          : PyTuple_Pack(1, pyf.error);
        PyObject *cls;

        if (bases == NULL) return false;
        cls = PyErr_NewExceptionWithDoc(e->name, e->doc, bases, NULL);
        Py_DECREF(bases);
        if (cls == NULL) return false;
        pyf.errors[e->code] = cls;
        if (PyModule_AddObjectRef(module, strchr(e->name, '.') + 1, cls) < 0) return false;
    }
    pyf.fork_error = PyErr_NewExceptionWithDoc(
        "ferry.ForkError",
        "A ClosedError: the object was created by another process, which fork() copied into this "
        "one. A forked child cannot use its parent's nodes, endpoints, samples or loans (they "
        "share its sockets and shared memory); it creates its own Node.",
        pyf.errors[FERRY_ECLOSED], NULL);
    return pyf.fork_error != NULL &&
           PyModule_AddObjectRef(module, "ForkError", pyf.fork_error) == 0;
}

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
    case FERRY_POINT_INT8: return 'b';
    case FERRY_POINT_UINT8: return 'B';
    case FERRY_POINT_INT16: return 'h';
    case FERRY_POINT_UINT16: return 'H';
    case FERRY_POINT_INT32: return 'i';
    case FERRY_POINT_UINT32: return 'I';
    case FERRY_POINT_FLOAT32: return 'f';
    case FERRY_POINT_FLOAT64: return 'd';
    default: return 0;
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
    for (i = 0; i < h->nfields; i++) order[i] = i;
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
        if (f->offset > at) n += (size_t)snprintf(fmt + n, cap - n, "%ux", f->offset - at);
        if (f->count > 1) n += (size_t)snprintf(fmt + n, cap - n, "(%u)", f->count);
        n += (size_t)snprintf(fmt + n, cap - n, "%c%c:%s:", g->big_endian ? '>' : '<',
                              point_format_char(f->datatype), f->name);
        at = f->offset + size;
    }
    if (structured && at < h->point_step)
        n += (size_t)snprintf(fmt + n, cap - n, "%ux", h->point_step - at);
    if (structured) snprintf(fmt + n, cap - n, "}");
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
    case FERRY_DTYPE_INT8: fmt[1] = 'b'; break;
    case FERRY_DTYPE_UINT8: fmt[1] = 'B'; break;
    case FERRY_DTYPE_INT16: fmt[1] = 'h'; break;
    case FERRY_DTYPE_UINT16: fmt[1] = 'H'; break;
    case FERRY_DTYPE_INT32: fmt[1] = 'i'; break;
    case FERRY_DTYPE_UINT32: fmt[1] = 'I'; break;
    case FERRY_DTYPE_INT64: fmt[1] = 'q'; break;
    case FERRY_DTYPE_UINT64: fmt[1] = 'Q'; break;
    case FERRY_DTYPE_FLOAT16: fmt[1] = 'e'; break;
    case FERRY_DTYPE_FLOAT32: fmt[1] = 'f'; break;
    case FERRY_DTYPE_FLOAT64: fmt[1] = 'd'; break;
    case FERRY_DTYPE_BOOL: fmt[1] = '?'; break;
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
        if (g->shape[i] == 0) return true;
        if (g->shape[i] != 1 && g->strides[i] != want) return false;
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
    for (int i = 0; i < g->ndim; i++) view->len *= g->shape[i];
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

    if (list == NULL) return NULL;
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
 * Module functions
 * ------------------------------------------------------------------------------------------- */

static PyObject *mod_now(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromLongLong((long long)ferry_now().ns);
}

static PyObject *mod_hash(PyObject *self, PyObject *arg)
{
    const char *text;

    (void)self;
    text = PyUnicode_AsUTF8AndSize(arg, NULL);
    if (text == NULL) return NULL;
    return PyLong_FromUnsignedLongLong((unsigned long long)ferry_hash(text));
}

static PyObject *mod_strerror(PyObject *self, PyObject *arg)
{
    long code = PyLong_AsLong(arg);

    (void)self;
    if (code == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(ferry_strerror((ferry_err)code));
}

typedef struct inspect_acc {
    PyObject *list;
    bool failed;
} inspect_acc;

static PyObject *publisher_stats_dict(const ferry_publisher_stats *s);
static PyObject *subscriber_stats_dict(const ferry_subscriber_stats *s);

static bool inspect_one(void *arg, const ferry_endpoint_info *info)
{
    inspect_acc *acc = arg;
    PyObject *stats = info->kind == FERRY_ENDPOINT_PUBLISHER ? publisher_stats_dict(&info->pub)
                                                             : subscriber_stats_dict(&info->sub);
    PyObject *d;

    if (stats == NULL) {
        acc->failed = true;
        return false;
    }
    d = Py_BuildValue("{s:s,s:O,s:i,s:K,s:s,s:s,s:K,s:s,s:N,s:I}", "kind",
                      info->kind == FERRY_ENDPOINT_PUBLISHER ? "publisher" : "subscriber",
                      "alive", info->alive ? Py_True : Py_False, "pid", (int)info->pid, "id",
                      (unsigned long long)info->id, "topic", info->topic, "type_name",
                      info->type_name, "type_hash", (unsigned long long)info->type_hash,
                      "node_name", info->node_name, "stats", stats, "depth",
                      (unsigned)info->depth);
    if (d == NULL || PyList_Append(acc->list, d) < 0) {
        Py_XDECREF(d);
        acc->failed = true;
        return false;
    }
    Py_DECREF(d);
    return true;
}


static PyObject *mod_inspect(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"topic", "domain", "dir", NULL};
    PyObject *domain_arg = Py_None, *dir_arg = Py_None;
    const char *topic = NULL, *dir = NULL;
    inspect_acc acc = {NULL, false};
    uint32_t domain = 0;
    ferry_err err;

    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|zOO:inspect", kwlist, &topic, &domain_arg,
                                     &dir_arg))
        return NULL;
    if (!pyf_where(domain_arg, dir_arg, &domain, &dir)) return NULL;
    acc.list = PyList_New(0);
    if (acc.list == NULL) return NULL;
    err = ferry_inspect(dir, domain, topic, inspect_one, &acc);
    if (acc.failed) {
        Py_DECREF(acc.list);
        return NULL;
    }
    if (err != FERRY_OK) {
        Py_DECREF(acc.list);
        return pyf_raise(err, "ferry_inspect(%s)", topic != NULL ? topic : "every topic");
    }
    return acc.list;
}

static PyObject *mod_clean(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"domain", "dir", NULL};
    PyObject *domain_arg = Py_None, *dir_arg = Py_None;
    const char *dir = NULL;
    uint32_t domain = 0, removed = 0;
    ferry_err err;

    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:clean", kwlist, &domain_arg, &dir_arg))
        return NULL;
    if (!pyf_where(domain_arg, dir_arg, &domain, &dir)) return NULL;
    err = ferry_clean(dir, domain, &removed);
    if (err != FERRY_OK) return pyf_raise(err, "ferry_clean(domain %u)", (unsigned)domain);
    return PyLong_FromUnsignedLong(removed);
}

#define STAT_U(d, s, f)                                                                         \
    do {                                                                                       \
        PyObject *v_ = PyLong_FromUnsignedLongLong((unsigned long long)(s)->f);                \
        if (v_ == NULL || PyDict_SetItemString(d, #f, v_) < 0) {                               \
            Py_XDECREF(v_);                                                                    \
            Py_DECREF(d);                                                                      \
            return NULL;                                                                       \
        }                                                                                      \
        Py_DECREF(v_);                                                                         \
    } while (0)

/* d["spin"] = how the endpoint's waits spin (ferry_spin_stats); steals d on failure. */
static PyObject *with_spin(PyObject *d, const ferry_spin_stats *sp)
{
    static const char *modes[] = {"spin", "yield", "off", "poll"};
    PyObject *v = Py_BuildValue("{s:s,s:i,s:L,s:I,s:I,s:K,s:K,s:K,s:K}", "mode",
                                sp->mode < 4 ? modes[sp->mode] : "?", "cpu", (int)sp->cpu,
                                "budget_ns", (long long)sp->budget_ns, "peers_elsewhere",
                                (unsigned)sp->peers_elsewhere, "peers_same_cpu",
                                (unsigned)sp->peers_same_cpu, "spins",
                                (unsigned long long)sp->spins, "spins_found",
                                (unsigned long long)sp->spins_found, "paced_spins",
                                (unsigned long long)sp->paced_spins, "paced_found",
                                (unsigned long long)sp->paced_found);
    if (v == NULL || PyDict_SetItemString(d, "spin", v) < 0) {
        Py_XDECREF(v);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(v);
    return d;
}

static PyObject *publisher_stats_dict(const ferry_publisher_stats *s)
{
    PyObject *d = PyDict_New();
    static const char *huge[] = {"off", "thp", "hugetlb", "auto"};
    PyObject *h;

    if (d == NULL) return NULL;
    STAT_U(d, s, id);
    STAT_U(d, s, published);
    STAT_U(d, s, deliveries);
    STAT_U(d, s, dropped);
    STAT_U(d, s, bytes_copied);
    STAT_U(d, s, pool_bytes);
    STAT_U(d, s, pool_bytes_cap);
    STAT_U(d, s, chunks_total);
    STAT_U(d, s, chunks_free);
    STAT_U(d, s, chunks_loaned);
    STAT_U(d, s, chunks_in_use);
    STAT_U(d, s, subscribers);
    STAT_U(d, s, size_classes);
    STAT_U(d, s, subscribers_lost);
    STAT_U(d, s, chunks_reclaimed);
    STAT_U(d, s, rejected);
    STAT_U(d, s, protocol_errors);
    STAT_U(d, s, limited);
    STAT_U(d, s, pending_dropped);
    STAT_U(d, s, huge_bytes);
    h = PyUnicode_FromString((unsigned)s->huge_pages < 4 ? huge[s->huge_pages] : "?");
    if (h == NULL || PyDict_SetItemString(d, "huge_pages", h) < 0) {
        Py_XDECREF(h);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(h);
    return with_spin(d, &s->spin);
}

static PyObject *subscriber_stats_dict(const ferry_subscriber_stats *s)
{
    PyObject *d = PyDict_New();

    if (d == NULL) return NULL;
    STAT_U(d, s, received);
    STAT_U(d, s, dropped);
    STAT_U(d, s, bytes_copied);
    STAT_U(d, s, held);
    STAT_U(d, s, publishers);
    STAT_U(d, s, publishers_lost);
    STAT_U(d, s, rejected);
    STAT_U(d, s, protocol_errors);
    return with_spin(d, &s->spin);
}

PyObject *pyf_publisher_stats(const ferry_publisher_stats *s)
{
    return publisher_stats_dict(s);
}

PyObject *pyf_subscriber_stats(const ferry_subscriber_stats *s)
{
    return subscriber_stats_dict(s);
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

/* A capsule nobody consumed (still named "dltensor") deletes its tensor. */
static void dl_capsule_v0(PyObject *cap)
{
    PyObject *type, *value, *tb;

    PyErr_Fetch(&type, &value, &tb);
    if (PyCapsule_IsValid(cap, "dltensor")) {
        ferry_dlpack_tensor *t = PyCapsule_GetPointer(cap, "dltensor");

        t->deleter(t);
    }
    PyErr_Restore(type, value, tb);
}

static void dl_capsule_v1(PyObject *cap)
{
    PyObject *type, *value, *tb;

    PyErr_Fetch(&type, &value, &tb);
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        ferry_dlpack_tensor_versioned *t = PyCapsule_GetPointer(cap, "dltensor_versioned");

        t->deleter(t);
    }
    PyErr_Restore(type, value, tb);
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

        if (!PyArg_ParseTuple(dl_device, "ii", &dt, &id)) return false;
        if (dt != device.device_type || id != device.device_id) {
            PyErr_Format(PyExc_BufferError, "the data exports to its own device only, (%d, %d)",
                         (int)device.device_type, (int)device.device_id);
            return false;
        }
    }
    if (max_version != Py_None) {
        int major = 0, minor = 0;

        if (!PyArg_ParseTuple(max_version, "ii", &major, &minor)) return false;
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
    if (e == NULL) return PyErr_NoMemory();
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
        cap = PyCapsule_New(&e->m.v1, "dltensor_versioned", dl_capsule_v1);
    } else {
        e->m.v0.manager_ctx = e;
        e->m.v0.deleter = dl_delete_v0;
        cap = PyCapsule_New(&e->m.v0, "dltensor", dl_capsule_v0);
    }
    if (cap == NULL) {
        Py_DECREF(owner);
        free(e);
    }
    return cap;
}

static PyMethodDef module_methods[] = {
    {"now", mod_now, METH_NOARGS,
     "now() -> int\n\nThe CLOCK_MONOTONIC time in nanoseconds, the clock of publish_time."},
    {"hash", mod_hash, METH_O,
     "hash(text) -> int\n\nferry_hash(): the 64-bit FNV-1a hash ferry uses as a type hash."},
    {"strerror", mod_strerror, METH_O,
     "strerror(code) -> str\n\nferry_strerror(): the message of a ferry_err number."},
    {"inspect", (PyCFunction)(void (*)(void))mod_inspect, METH_VARARGS | METH_KEYWORDS,
     "inspect(topic=None, domain=None, dir=None) -> list[dict]\n\n"
     "The endpoints of a domain (ferry_inspect), live and dead: one dict each with kind,\n"
     "alive, pid, id, topic, type_name, type_hash, node_name, depth and stats. domain and dir\n"
     "default to FERRY_DOMAIN and FERRY_DIR, as for the ferry command."},
    {"clean", (PyCFunction)(void (*)(void))mod_clean, METH_VARARGS | METH_KEYWORDS,
     "clean(domain=None, dir=None) -> int\n\n"
     "Removes what dead processes left in the domain directory (ferry_clean); returns the\n"
     "number of files removed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "ferry._ferry",
    "The C extension behind the ferry package: zero-copy transport of large frames between\n"
    "processes on one host. Import ferry, not this module.",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__ferry(void);

PyMODINIT_FUNC PyInit__ferry(void)
{
    PyObject *m = PyModule_Create(&module_def);

    if (m == NULL) return NULL;
    if (!pyf_fork_track()) {
        Py_DECREF(m);
        return NULL;
    }
    if (!errors_create(m) || !pyf_node_types(m) || !pyf_pub_types(m) || !pyf_sub_types(m) ||
        !pyf_waitset_types(m) || !pyf_sync_types(m) || !pyf_gpu_types(m) ||
        PyModule_AddIntConstant(m, "SPIN_OFF", FERRY_SPIN_OFF) < 0 ||
        PyModule_AddIntConstant(m, "PROTOCOL_VERSION", FERRY_PROTOCOL_VERSION) < 0 ||
        PyModule_AddStringConstant(m, "IMAGE_TYPE_NAME", FERRY_IMAGE_TYPE_NAME) < 0 ||
        PyModule_AddStringConstant(m, "POINTCLOUD_TYPE_NAME", FERRY_POINTCLOUD_TYPE_NAME) < 0 ||
        PyModule_AddStringConstant(m, "TENSOR_TYPE_NAME", FERRY_TENSOR_TYPE_NAME) < 0 ||
        PyModule_AddObject(m, "__version__",
                           PyUnicode_FromFormat("%d.%d", FERRY_VERSION_MAJOR,
                                                FERRY_VERSION_MINOR)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
