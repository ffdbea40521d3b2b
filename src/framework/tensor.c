/*
 * Tensors (include/ferry/tensor.h): header layout, extent arithmetic, validation and DLPack
 * export of host tensors. Every header read from a sample is copied first and validated on the
 * copy, because the publisher still maps the memory writable.
 */
#include <ferry/tensor.h>

#include "core/module.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(ferry_dl_device) == 8, "DLDevice layout");
_Static_assert(sizeof(ferry_dl_data_type) == 4, "DLDataType layout");
_Static_assert(offsetof(ferry_dl_tensor, device) == 8, "DLTensor layout");
_Static_assert(offsetof(ferry_dl_tensor, ndim) == 16, "DLTensor layout");
_Static_assert(offsetof(ferry_dl_tensor, dtype) == 20, "DLTensor layout");
_Static_assert(offsetof(ferry_dl_tensor, shape) == 24, "DLTensor layout");
_Static_assert(offsetof(ferry_dl_tensor, strides) == 32, "DLTensor layout");
_Static_assert(offsetof(ferry_dl_tensor, byte_offset) == 40, "DLTensor layout");
_Static_assert(sizeof(ferry_dl_tensor) == 48, "DLTensor layout");
_Static_assert(offsetof(ferry_dlpack_tensor, manager_ctx) == 48, "DLManagedTensor layout");
_Static_assert(sizeof(ferry_dlpack_tensor) == 64, "DLManagedTensor layout");
_Static_assert(offsetof(ferry_dlpack_tensor_versioned, manager_ctx) == 8, "versioned layout");
_Static_assert(offsetof(ferry_dlpack_tensor_versioned, flags) == 24, "versioned layout");
_Static_assert(offsetof(ferry_dlpack_tensor_versioned, dl_tensor) == 32, "versioned layout");
_Static_assert(sizeof(ferry_tensor_header) == 248, "ferry_tensor_header layout");
_Static_assert(offsetof(ferry_tensor_header, shape) == 32, "ferry_tensor_header layout");
_Static_assert(offsetof(ferry_tensor_header, data_offset) == 224, "ferry_tensor_header layout");
_Static_assert(FERRY_TENSOR_DATA_OFFSET >= sizeof(ferry_tensor_header) &&
                   FERRY_TENSOR_DATA_OFFSET % FERRY_TENSOR_DATA_ALIGN == 0,
               "data offset");

typedef struct tensor_dtype_info {
    const char *name;
    uint8_t code;
    uint8_t bits;
} tensor_dtype_info;

/* Indexed by ferry_dtype. */
static const tensor_dtype_info tensor_dtypes[] = {
    [FERRY_DTYPE_INT8] = {"int8", FERRY_DL_INT, 8},
    [FERRY_DTYPE_UINT8] = {"uint8", FERRY_DL_UINT, 8},
    [FERRY_DTYPE_INT16] = {"int16", FERRY_DL_INT, 16},
    [FERRY_DTYPE_UINT16] = {"uint16", FERRY_DL_UINT, 16},
    [FERRY_DTYPE_INT32] = {"int32", FERRY_DL_INT, 32},
    [FERRY_DTYPE_UINT32] = {"uint32", FERRY_DL_UINT, 32},
    [FERRY_DTYPE_INT64] = {"int64", FERRY_DL_INT, 64},
    [FERRY_DTYPE_UINT64] = {"uint64", FERRY_DL_UINT, 64},
    [FERRY_DTYPE_FLOAT16] = {"float16", FERRY_DL_FLOAT, 16},
    [FERRY_DTYPE_BFLOAT16] = {"bfloat16", FERRY_DL_BFLOAT, 16},
    [FERRY_DTYPE_FLOAT32] = {"float32", FERRY_DL_FLOAT, 32},
    [FERRY_DTYPE_FLOAT64] = {"float64", FERRY_DL_FLOAT, 64},
    [FERRY_DTYPE_BOOL] = {"bool", FERRY_DL_BOOL, 8},
};

#define TENSOR_NDTYPES (sizeof tensor_dtypes / sizeof tensor_dtypes[0])

static const tensor_dtype_info *tensor_dtype_find(ferry_dtype dtype)
{
    if ((unsigned)dtype == 0 || (unsigned)dtype >= TENSOR_NDTYPES)
        return NULL;
    return &tensor_dtypes[dtype];
}

size_t ferry_dtype_size(ferry_dtype dtype)
{
    const tensor_dtype_info *d = tensor_dtype_find(dtype);
    return d ? d->bits / 8u : 0;
}

const char *ferry_dtype_name(ferry_dtype dtype)
{
    const tensor_dtype_info *d = tensor_dtype_find(dtype);
    return d ? d->name : "unknown";
}

ferry_err ferry_dtype_to_dl(ferry_dtype dtype, ferry_dl_data_type *out)
{
    const tensor_dtype_info *d = tensor_dtype_find(dtype);
    if (!d || !out)
        return FERRY_EINVAL;
    out->code = d->code;
    out->bits = d->bits;
    out->lanes = 1;
    return FERRY_OK;
}

ferry_err ferry_dtype_from_dl(ferry_dl_data_type dl, ferry_dtype *out)
{
    if (!out || dl.lanes != 1)
        return FERRY_EINVAL;
    for (unsigned i = 1; i < TENSOR_NDTYPES; i++)
        if (tensor_dtypes[i].code == dl.code && tensor_dtypes[i].bits == dl.bits) {
            *out = (ferry_dtype)i;
            return FERRY_OK;
        }
    return FERRY_EINVAL;
}

/* ---------------------------------------------------------------------------------------------
 * Extent arithmetic: every quantity stays within INT64_MAX, so it is representable both as a
 * DLPack int64 and as a byte count.
 * ------------------------------------------------------------------------------------------- */

static bool tensor_mul(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > (uint64_t)INT64_MAX / a)
        return false;
    *out = a * b;
    return true;
}

/* Element count and extent in bytes of a shape and non-negative strides. */
static bool tensor_extent(size_t elem, uint32_t ndim, const int64_t *shape, const int64_t *strides,
                          uint64_t *numel, uint64_t *bytes)
{
    uint64_t n = 1, last = 0;
    bool empty = false;
    for (uint32_t i = 0; i < ndim; i++) {
        if (shape[i] < 0 || strides[i] < 0)
            return false;
        if (shape[i] == 0)
            empty = true;
    }
    if (empty) { /* no element: nothing is reached, whatever the other sizes */
        *numel = 0;
        *bytes = 0;
        return true;
    }
    for (uint32_t i = 0; i < ndim; i++) {
        if (!tensor_mul(n, (uint64_t)shape[i], &n))
            return false;
        uint64_t term;
        if (!tensor_mul((uint64_t)shape[i] - 1, (uint64_t)strides[i], &term) ||
            term > (uint64_t)INT64_MAX - last)
            return false;
        last += term;
    }
    /* last < INT64_MAX here, so last + 1 does not overflow. */
    if (!tensor_mul(last + 1, elem, bytes))
        return false;
    *numel = n;
    return true;
}

ferry_err ferry_tensor_header_init(ferry_tensor_header *h, ferry_dtype dtype, uint32_t ndim,
                                   const int64_t *shape, const int64_t *strides)
{
    ferry_dl_data_type dl;
    if (!h || ferry_dtype_to_dl(dtype, &dl) != FERRY_OK || ndim > FERRY_TENSOR_DIMS_MAX ||
        (ndim > 0 && !shape))
        return FERRY_EINVAL;
    int64_t st[FERRY_TENSOR_DIMS_MAX] = {0};
    if (strides) {
        memcpy(st, strides, ndim * sizeof st[0]);
    } else {
        uint64_t s = 1;
        for (uint32_t i = ndim; i-- > 0;) {
            if (shape[i] < 0)
                return FERRY_EINVAL;
            st[i] = (int64_t)s;
            if (i > 0 && !tensor_mul(s, (uint64_t)shape[i], &s))
                return FERRY_EINVAL;
        }
    }
    uint64_t numel, bytes;
    if (!tensor_extent(ferry_dtype_size(dtype), ndim, shape, st, &numel, &bytes))
        return FERRY_EINVAL;
    memset(h, 0, sizeof *h);
    h->magic = FERRY_TENSOR_MAGIC;
    h->version = FERRY_TENSOR_VERSION;
    h->header_size = sizeof(ferry_tensor_header);
    h->dtype = dl;
    h->ndim = ndim;
    h->device.device_type = FERRY_DL_CPU;
    h->device.device_id = 0;
    for (uint32_t i = 0; i < ndim; i++) {
        h->shape[i] = shape[i];
        h->strides[i] = st[i];
    }
    h->data_offset = FERRY_TENSOR_DATA_OFFSET;
    h->data_size = bytes;
    return FERRY_OK;
}

static bool tensor_check(const ferry_tensor_header *h, uint64_t region, ferry_tensor_view *v)
{
    if (h->magic != FERRY_TENSOR_MAGIC || h->version != FERRY_TENSOR_VERSION ||
        h->header_size != sizeof(ferry_tensor_header) || h->reserved_ != 0)
        return false;
    ferry_dtype dtype;
    if (ferry_dtype_from_dl(h->dtype, &dtype) != FERRY_OK || h->ndim > FERRY_TENSOR_DIMS_MAX)
        return false;
    for (uint32_t i = h->ndim; i < FERRY_TENSOR_DIMS_MAX; i++)
        if (h->shape[i] != 0 || h->strides[i] != 0)
            return false;
    bool cpu = h->device.device_type == FERRY_DL_CPU;
    if (cpu ? h->device.device_id != 0
            : h->device.device_type != FERRY_DL_CUDA || h->device.device_id < 0)
        return false;
    if (!memchr(h->frame_id, '\0', sizeof h->frame_id))
        return false;
    if (h->data_offset % FERRY_TENSOR_DATA_ALIGN != 0 || (cpu && h->data_offset < h->header_size))
        return false;
    if (h->data_offset > region || h->data_size > region - h->data_offset ||
        h->data_size > SIZE_MAX)
        return false;
    size_t elem = ferry_dtype_size(dtype);
    uint64_t numel, bytes;
    if (!tensor_extent(elem, h->ndim, h->shape, h->strides, &numel, &bytes) || bytes > h->data_size)
        return false;
    memset(v, 0, sizeof *v);
    v->header = *h;
    v->dtype = dtype;
    v->elem_size = elem;
    v->numel = numel;
    v->data_size = (size_t)h->data_size;
    return true;
}

ferry_err ferry_tensor_header_check(const ferry_tensor_header *h, uint64_t region_size,
                                    ferry_tensor_view *out)
{
    if (!h || !out)
        return FERRY_EINVAL;
    ferry_tensor_header copy;
    memcpy(&copy, h, sizeof copy);
    ferry_tensor_view v;
    if (!tensor_check(&copy, region_size, &v))
        return FERRY_EPROTO;
    *out = v;
    return FERRY_OK;
}

ferry_err ferry_tensor_loan(ferry_publisher *pub, ferry_dtype dtype, uint32_t ndim,
                            const int64_t *shape, const int64_t *strides, ferry_tensor *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!pub || !out)
        return FERRY_EINVAL;
    ferry_tensor_header h;
    ferry_err err = ferry_tensor_header_init(&h, dtype, ndim, shape, strides);
    if (err != FERRY_OK)
        return err;
    if (h.data_size > SIZE_MAX - h.data_offset)
        return FERRY_EINVAL;
    size_t total = (size_t)(h.data_offset + h.data_size);
    void *payload;
    if ((err = ferry_loan(pub, total, &payload)) != FERRY_OK)
        return err;
    /* The chunk may hold an older sample: clear the header and its padding, not the data. */
    memset(payload, 0, (size_t)h.data_offset);
    memcpy(payload, &h, sizeof h);
    out->header = payload;
    out->data = (unsigned char *)payload + h.data_offset;
    out->data_size = (size_t)h.data_size;
    out->payload = payload;
    out->payload_size = total;
    return FERRY_OK;
}

ferry_err ferry_tensor_publish(ferry_publisher *pub, ferry_tensor *t)
{
    if (!pub || !t || !t->payload || t->payload_size < sizeof(ferry_tensor_header))
        return FERRY_EINVAL;
    ferry_tensor_header h;
    ferry_tensor_view v;
    memcpy(&h, t->payload, sizeof h);
    if (!tensor_check(&h, t->payload_size, &v) || h.device.device_type != FERRY_DL_CPU)
        return FERRY_EINVAL;
    ferry_err err = ferry_publish(pub, t->payload, t->payload_size);
    if (err == FERRY_OK)
        memset(t, 0, sizeof *t);
    return err;
}

ferry_err ferry_tensor_loan_release(ferry_publisher *pub, ferry_tensor *t)
{
    if (!pub || !t || !t->payload)
        return FERRY_EINVAL;
    ferry_err err = ferry_loan_release(pub, t->payload);
    if (err == FERRY_OK)
        memset(t, 0, sizeof *t);
    return err;
}

ferry_err ferry_tensor_view_get(const ferry_sample *s, ferry_tensor_view *out)
{
    if (!s || !out)
        return FERRY_EINVAL;
    if (!s->data || s->size < sizeof(ferry_tensor_header))
        return FERRY_EPROTO;
    ferry_tensor_header h;
    memcpy(&h, s->data, sizeof h);
    ferry_tensor_view v;
    if (!tensor_check(&h, s->size, &v) || h.device.device_type != FERRY_DL_CPU)
        return FERRY_EPROTO;
    v.device = h.device;
    v.data = (const unsigned char *)s->data + h.data_offset;
    *out = v;
    return FERRY_OK;
}

/* ---------------------------------------------------------------------------------------------
 * DLPack export. Records come from a process-wide pool and go back to it, never to the heap, so
 * a second deleter call finds a dead record (ignored) instead of freed memory, as long as the
 * record was not handed out again; the pool is first in, first out to make that last long. Host
 * tensors and the GPU module's device tensors share it: a record holds a copy of what is to be
 * released (a sample, a device frame) and the function that releases it.
 * ------------------------------------------------------------------------------------------- */

#define EXPORT_LIVE 0x45564c5f534e5446ULL /* "FTNS_LVE" */
#define EXPORT_DEAD 0x444145445f534e54ULL

typedef struct tensor_export {
    _Atomic uint64_t state;
    struct tensor_export *next;
    ferry__export_release_fn release;
    void *owner, *arg;
    _Alignas(16) unsigned char item[FERRY__EXPORT_ITEM_MAX];
    int64_t shape[FERRY_TENSOR_DIMS_MAX];
    int64_t strides[FERRY_TENSOR_DIMS_MAX];
    ferry_dlpack_tensor plain;
    ferry_dlpack_tensor_versioned versioned;
} tensor_export;

static pthread_mutex_t export_lock = PTHREAD_MUTEX_INITIALIZER;
static tensor_export *export_head, *export_tail;

static tensor_export *export_get(void)
{
    pthread_mutex_lock(&export_lock);
    tensor_export *x = export_head;
    if (x) {
        export_head = x->next;
        if (!export_head)
            export_tail = NULL;
    }
    pthread_mutex_unlock(&export_lock);
    if (!x && !(x = calloc(1, sizeof *x)))
        return NULL;
    x->next = NULL;
    return x;
}

static void export_put(tensor_export *x)
{
    x->next = NULL;
    pthread_mutex_lock(&export_lock);
    if (export_tail)
        export_tail->next = x;
    else
        export_head = x;
    export_tail = x;
    pthread_mutex_unlock(&export_lock);
}

static void export_release(tensor_export *x)
{
    uint64_t live = EXPORT_LIVE;
    if (!atomic_compare_exchange_strong(&x->state, &live, EXPORT_DEAD))
        return;                            /* a second call */
    x->release(x->owner, x->item, x->arg); /* nothing to report to: DLPack deleters are void */
    x->owner = NULL;
    export_put(x);
}

static void export_delete_plain(ferry_dlpack_tensor *self)
{
    if (self && self->manager_ctx)
        export_release(self->manager_ctx);
}

static void export_delete_versioned(ferry_dlpack_tensor_versioned *self)
{
    if (self && self->manager_ctx)
        export_release(self->manager_ctx);
}

ferry_err ferry__tensor_export(const ferry_tensor_view *v, bool versioned,
                               ferry__export_release_fn release, void *owner, void *arg,
                               const void *item, size_t item_size, void **out)
{
    if (!v || !release || !item || item_size > FERRY__EXPORT_ITEM_MAX || !out)
        return FERRY_EINVAL;
    tensor_export *x = export_get();
    if (!x)
        return FERRY_ENOMEM;
    x->release = release;
    x->owner = owner;
    x->arg = arg;
    memcpy(x->item, item, item_size);
    memcpy(x->shape, v->header.shape, sizeof x->shape);
    memcpy(x->strides, v->header.strides, sizeof x->strides);
    ferry_dl_tensor dl;
    memset(&dl, 0, sizeof dl);
    dl.data = (void *)(uintptr_t)v->data;
    dl.device = v->device;
    dl.ndim = (int32_t)v->header.ndim;
    dl.dtype = v->header.dtype;
    dl.shape = x->shape;
    dl.strides = x->strides;
    dl.byte_offset = 0;
    if (versioned) {
        x->versioned.version.major = FERRY_DLPACK_MAJOR;
        x->versioned.version.minor = FERRY_DLPACK_MINOR;
        x->versioned.manager_ctx = x;
        x->versioned.deleter = export_delete_versioned;
        x->versioned.flags = FERRY_DLPACK_FLAG_READ_ONLY;
        x->versioned.dl_tensor = dl;
        *out = &x->versioned;
    } else {
        x->plain.dl_tensor = dl;
        x->plain.manager_ctx = x;
        x->plain.deleter = export_delete_plain;
        *out = &x->plain;
    }
    atomic_store(&x->state, EXPORT_LIVE);
    return FERRY_OK;
}

static void sample_release(void *owner, void *item, void *arg)
{
    (void)arg;
    (void)ferry_release(owner, item);
}

/* Checks that sample is a tensor held by sub, exports it and clears *sample (it is the export's).
 */
static ferry_err sample_export(ferry_subscriber *sub, ferry_sample *sample, bool versioned,
                               void **out)
{
    if (!sub || !sample || !out)
        return FERRY_EINVAL;
    ferry__sample_where w;
    ferry_err err = ferry__sample_where_get(sub, sample, &w);
    if (err != FERRY_OK)
        return err;
    ferry_tensor_view v;
    if ((err = ferry_tensor_view_get(sample, &v)) != FERRY_OK)
        return err;
    err =
        ferry__tensor_export(&v, versioned, sample_release, sub, NULL, sample, sizeof *sample, out);
    if (err == FERRY_OK)
        memset(sample, 0, sizeof *sample);
    return err;
}

ferry_err ferry_tensor_to_dlpack(ferry_subscriber *sub, ferry_sample *sample,
                                 ferry_dlpack_tensor **out)
{
    void *p;
    ferry_err err = sample_export(sub, sample, false, out ? &p : NULL);
    if (err == FERRY_OK)
        *out = p;
    return err;
}

ferry_err ferry_tensor_to_dlpack_versioned(ferry_subscriber *sub, ferry_sample *sample,
                                           ferry_dlpack_tensor_versioned **out)
{
    void *p;
    ferry_err err = sample_export(sub, sample, true, out ? &p : NULL);
    if (err == FERRY_OK)
        *out = p;
    return err;
}
