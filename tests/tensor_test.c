/*
 * Tensors (ferry/tensor.h): dtype tables, extent arithmetic and argument checks of the loan;
 * host tensors published by a forked process, viewed and exported as DLPack (values, shape,
 * strides, device, ownership); hostile headers (each field of a valid sample corrupted in turn)
 * refused with FERRY_EPROTO and no partial result; the export's deleter giving the sample back
 * (held count, the publisher's chunk), a second deleter call ignored, and the subscriber refusing
 * destruction while an export lives. Where DLPack's own header is installed, the ABI of the
 * ferry_dl* types is checked against it at compile time.
 */
#include "testutil.h"

#include <ferry/tensor.h>

#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>
#define HAVE_DLPACK_H 1
#endif
#endif

#ifdef HAVE_DLPACK_H
#define SAME_LAYOUT(ours, theirs) _Static_assert(sizeof(ours) == sizeof(theirs), #ours " size")
#define SAME_FIELD(ours, theirs, fo, ft)                                                           \
    _Static_assert(offsetof(ours, fo) == offsetof(theirs, ft), #ours "." #fo " offset")
SAME_LAYOUT(ferry_dl_device, DLDevice);
SAME_FIELD(ferry_dl_device, DLDevice, device_type, device_type);
SAME_FIELD(ferry_dl_device, DLDevice, device_id, device_id);
SAME_LAYOUT(ferry_dl_data_type, DLDataType);
SAME_FIELD(ferry_dl_data_type, DLDataType, code, code);
SAME_FIELD(ferry_dl_data_type, DLDataType, bits, bits);
SAME_FIELD(ferry_dl_data_type, DLDataType, lanes, lanes);
SAME_LAYOUT(ferry_dl_tensor, DLTensor);
SAME_FIELD(ferry_dl_tensor, DLTensor, data, data);
SAME_FIELD(ferry_dl_tensor, DLTensor, device, device);
SAME_FIELD(ferry_dl_tensor, DLTensor, ndim, ndim);
SAME_FIELD(ferry_dl_tensor, DLTensor, dtype, dtype);
SAME_FIELD(ferry_dl_tensor, DLTensor, shape, shape);
SAME_FIELD(ferry_dl_tensor, DLTensor, strides, strides);
SAME_FIELD(ferry_dl_tensor, DLTensor, byte_offset, byte_offset);
SAME_LAYOUT(ferry_dlpack_tensor, DLManagedTensor);
SAME_FIELD(ferry_dlpack_tensor, DLManagedTensor, dl_tensor, dl_tensor);
SAME_FIELD(ferry_dlpack_tensor, DLManagedTensor, manager_ctx, manager_ctx);
SAME_FIELD(ferry_dlpack_tensor, DLManagedTensor, deleter, deleter);
_Static_assert(kDLCPU == FERRY_DL_CPU && kDLCUDA == FERRY_DL_CUDA &&
                   kDLCUDAHost == FERRY_DL_CUDA_HOST,
               "device types");
_Static_assert(kDLInt == FERRY_DL_INT && kDLUInt == FERRY_DL_UINT && kDLFloat == FERRY_DL_FLOAT &&
                   kDLBfloat == FERRY_DL_BFLOAT,
               "type codes");
#if defined(DLPACK_MAJOR_VERSION)
SAME_LAYOUT(ferry_dlpack_tensor_versioned, DLManagedTensorVersioned);
SAME_FIELD(ferry_dlpack_tensor_versioned, DLManagedTensorVersioned, version, version);
SAME_FIELD(ferry_dlpack_tensor_versioned, DLManagedTensorVersioned, manager_ctx, manager_ctx);
SAME_FIELD(ferry_dlpack_tensor_versioned, DLManagedTensorVersioned, deleter, deleter);
SAME_FIELD(ferry_dlpack_tensor_versioned, DLManagedTensorVersioned, flags, flags);
SAME_FIELD(ferry_dlpack_tensor_versioned, DLManagedTensorVersioned, dl_tensor, dl_tensor);
_Static_assert(DLPACK_FLAG_BITMASK_READ_ONLY == FERRY_DLPACK_FLAG_READ_ONLY, "read-only flag");
#endif
#if defined(DLPACK_MAJOR_VERSION) || (defined(DLPACK_VERSION) && DLPACK_VERSION >= 80)
_Static_assert(kDLBool == FERRY_DL_BOOL, "bool code");
#endif
#endif

#define TOPIC "/tensor/t"
#define MSG_READY 1u
#define MSG_DONE 2u

/* --- tables and arithmetic ---------------------------------------------------------------- */

static void test_constants(void)
{
    TU_EQ_U64(FERRY_TENSOR_TYPE_HASH, ferry_hash(FERRY_TENSOR_TYPE_NAME));
    TU_EQ_U64(FERRY_TENSOR_MAGIC,
              (uint32_t)'F' | (uint32_t)'T' << 8 | (uint32_t)'N' << 16 | (uint32_t)'S' << 24);
    TU_EQ_U64(sizeof(ferry_tensor_header), 248);
    TU_EQ_U64(sizeof(ferry_dlpack_tensor), 64);
    TU_EQ_U64(sizeof(ferry_dlpack_tensor_versioned), 80);
    static const struct {
        ferry_dtype t;
        size_t size;
        const char *name;
        uint8_t code, bits;
    } want[] = {
        {FERRY_DTYPE_INT8, 1, "int8", 0, 8},        {FERRY_DTYPE_UINT8, 1, "uint8", 1, 8},
        {FERRY_DTYPE_INT16, 2, "int16", 0, 16},     {FERRY_DTYPE_UINT16, 2, "uint16", 1, 16},
        {FERRY_DTYPE_INT32, 4, "int32", 0, 32},     {FERRY_DTYPE_UINT32, 4, "uint32", 1, 32},
        {FERRY_DTYPE_INT64, 8, "int64", 0, 64},     {FERRY_DTYPE_UINT64, 8, "uint64", 1, 64},
        {FERRY_DTYPE_FLOAT16, 2, "float16", 2, 16}, {FERRY_DTYPE_BFLOAT16, 2, "bfloat16", 4, 16},
        {FERRY_DTYPE_FLOAT32, 4, "float32", 2, 32}, {FERRY_DTYPE_FLOAT64, 8, "float64", 2, 64},
        {FERRY_DTYPE_BOOL, 1, "bool", 6, 8},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        TU_EQ_U64(ferry_dtype_size(want[i].t), want[i].size);
        TU_EQ_STR(ferry_dtype_name(want[i].t), want[i].name);
        ferry_dl_data_type dl;
        TU_OK(ferry_dtype_to_dl(want[i].t, &dl));
        TU_EQ_U64(dl.code, want[i].code);
        TU_EQ_U64(dl.bits, want[i].bits);
        TU_EQ_U64(dl.lanes, 1);
        ferry_dtype back = 0;
        TU_OK(ferry_dtype_from_dl(dl, &back));
        TU_EQ_U64(back, want[i].t);
        dl.lanes = 4;
        TU_ERR(ferry_dtype_from_dl(dl, &back), FERRY_EINVAL);
    }
    TU_EQ_U64(ferry_dtype_size((ferry_dtype)0), 0);
    TU_EQ_U64(ferry_dtype_size((ferry_dtype)14), 0);
    TU_EQ_STR(ferry_dtype_name((ferry_dtype)99), "unknown");
    ferry_dl_data_type dl = {FERRY_DL_FLOAT, 8, 1};
    ferry_dtype t;
    TU_ERR(ferry_dtype_from_dl(dl, &t), FERRY_EINVAL);
    TU_ERR(ferry_dtype_from_dl(dl, NULL), FERRY_EINVAL);
    TU_ERR(ferry_dtype_to_dl((ferry_dtype)0, &dl), FERRY_EINVAL);
    TU_ERR(ferry_dtype_to_dl(FERRY_DTYPE_INT8, NULL), FERRY_EINVAL);
#ifdef HAVE_DLPACK_H
    printf("  DLPack ABI checked against <dlpack/dlpack.h> (DLPACK_VERSION %d)\n",
           (int)DLPACK_VERSION);
#else
    printf("  <dlpack/dlpack.h> not installed: ABI checked against written offsets only\n");
#endif
}

static void test_header_init(void)
{
    ferry_tensor_header h;
    const int64_t shape3[] = {3, 4, 5};
    TU_OK(ferry_tensor_header_init(&h, FERRY_DTYPE_FLOAT32, 3, shape3, NULL));
    TU_EQ_U64(h.strides[0], 20);
    TU_EQ_U64(h.strides[1], 5);
    TU_EQ_U64(h.strides[2], 1);
    TU_EQ_U64(h.data_size, 60 * 4);
    TU_EQ_U64(h.data_offset, FERRY_TENSOR_DATA_OFFSET);
    TU_EQ_U64(h.device.device_type, FERRY_DL_CPU);
    for (uint32_t i = 3; i < FERRY_TENSOR_DIMS_MAX; i++)
        TU_CHECK(h.shape[i] == 0 && h.strides[i] == 0);
    /* Transposed 4x3 view of 12 elements: extent (3*1 + 2*4 + 1) elements. */
    const int64_t shape2[] = {4, 3}, colmajor[] = {1, 4};
    TU_OK(ferry_tensor_header_init(&h, FERRY_DTYPE_INT16, 2, shape2, colmajor));
    TU_EQ_U64(h.data_size, 12 * 2);
    /* Padded rows: 2 rows of 3 with a row stride of 8. */
    const int64_t padded[] = {8, 1}, shape23[] = {2, 3};
    TU_OK(ferry_tensor_header_init(&h, FERRY_DTYPE_UINT8, 2, shape23, padded));
    TU_EQ_U64(h.data_size, 8 + 3);
    /* Broadcast (stride 0) and a scalar. */
    const int64_t bshape[] = {1000}, bstride[] = {0};
    TU_OK(ferry_tensor_header_init(&h, FERRY_DTYPE_FLOAT64, 1, bshape, bstride));
    TU_EQ_U64(h.data_size, 8);
    TU_OK(ferry_tensor_header_init(&h, FERRY_DTYPE_FLOAT64, 0, NULL, NULL));
    TU_EQ_U64(h.data_size, 8);
    /* Zero-size dimensions: no element, no byte. */
    const int64_t zshape[] = {0, 7};
    TU_OK(ferry_tensor_header_init(&h, FERRY_DTYPE_UINT8, 2, zshape, NULL));
    TU_EQ_U64(h.data_size, 0);
    TU_EQ_U64(h.strides[0], 7);
    const int64_t big_after_zero[] = {0, INT64_MAX, INT64_MAX};
    TU_ERR(ferry_tensor_header_init(&h, FERRY_DTYPE_UINT8, 3, big_after_zero, NULL), FERRY_EINVAL);
    const int64_t zero_late[] = {INT64_MAX, INT64_MAX, 0};
    TU_OK(ferry_tensor_header_init(&h, FERRY_DTYPE_UINT8, 3, zero_late, NULL));
    TU_EQ_U64(h.data_size, 0);

    /* Refusals. */
    const int64_t neg[] = {3, -1}, negstride[] = {1, -1};
    const int64_t huge[] = {INT64_MAX, 2}, max1[] = {INT64_MAX},
                  eight[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    TU_ERR(ferry_tensor_header_init(NULL, FERRY_DTYPE_UINT8, 1, shape3, NULL), FERRY_EINVAL);
    TU_ERR(ferry_tensor_header_init(&h, (ferry_dtype)0, 1, shape3, NULL), FERRY_EINVAL);
    TU_ERR(ferry_tensor_header_init(&h, (ferry_dtype)14, 1, shape3, NULL), FERRY_EINVAL);
    TU_ERR(ferry_tensor_header_init(&h, FERRY_DTYPE_UINT8, 2, NULL, NULL), FERRY_EINVAL);
    TU_ERR(ferry_tensor_header_init(&h, FERRY_DTYPE_UINT8, 2, neg, NULL), FERRY_EINVAL);
    TU_ERR(ferry_tensor_header_init(&h, FERRY_DTYPE_UINT8, 2, shape2, negstride), FERRY_EINVAL);
    TU_ERR(ferry_tensor_header_init(&h, FERRY_DTYPE_UINT8, 2, huge, NULL), FERRY_EINVAL);
    TU_ERR(ferry_tensor_header_init(&h, FERRY_DTYPE_UINT16, 1, max1, NULL), FERRY_EINVAL);
    TU_OK(ferry_tensor_header_init(&h, FERRY_DTYPE_UINT8, 1, max1, NULL));
    const int64_t bigstride[] = {3, INT64_MAX / 2};
    TU_ERR(ferry_tensor_header_init(&h, FERRY_DTYPE_UINT8, 2, shape3, bigstride), FERRY_EINVAL);
    TU_OK(ferry_tensor_header_init(&h, FERRY_DTYPE_UINT8, 8, eight, NULL));
    TU_ERR(ferry_tensor_header_init(&h, FERRY_DTYPE_UINT8, 9, nine, NULL), FERRY_EINVAL);
}

/* --- one process: loan arguments, DLPack ownership ----------------------------------------- */

typedef struct endpoints {
    ferry_node *node;
    ferry_publisher *pub;
    ferry_subscriber *sub;
} endpoints;

static endpoints open_endpoints(void)
{
    endpoints e;
    e.node = tu_node("tensor");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.max_sample_size = 1 << 20;
    TU_OK(ferry_publisher_create(&e.pub, e.node, TOPIC, FERRY_TENSOR_TYPE_NAME,
                                 FERRY_TENSOR_TYPE_HASH, &po));
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 8;
    TU_OK(ferry_subscriber_create(&e.sub, e.node, TOPIC, FERRY_TENSOR_TYPE_NAME,
                                  FERRY_TENSOR_TYPE_HASH, &so));
    tu_connect_local(e.pub, 1, e.sub, 1);
    return e;
}

static void close_endpoints(endpoints *e)
{
    TU_OK(ferry_subscriber_destroy(e->sub));
    TU_OK(ferry_publisher_destroy(e->pub));
    TU_OK(ferry_node_destroy(e->node));
}

static uint32_t held(ferry_subscriber *sub)
{
    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    return st.held;
}

static void wait_chunks_back(ferry_publisher *pub)
{
    ferry_time t0 = ferry_now();
    for (;;) {
        ferry_publisher_stats st;
        TU_OK(ferry_publisher_stats_get(pub, &st));
        if (st.chunks_in_use == 0 && st.chunks_loaned == 0)
            return;
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "chunks still in use: %u", st.chunks_in_use);
        TU_OK(ferry_publisher_poll(pub, 10 * TU_MS));
    }
}

static void drain(ferry_subscriber *sub)
{
    ferry_sample s;
    while (ferry_take(sub, &s) == FERRY_OK)
        TU_OK(ferry_release(sub, &s));
}

static void publish_seq_tensor(ferry_publisher *pub, uint64_t seq)
{
    const int64_t shape[] = {2, 3};
    ferry_tensor t;
    TU_OK(ferry_tensor_loan(pub, FERRY_DTYPE_INT32, 2, shape, NULL, &t));
    for (int i = 0; i < 6; i++)
        ((int32_t *)t.data)[i] = (int32_t)(seq * 100 + (uint64_t)i);
    TU_OK(ferry_tensor_publish(pub, &t));
}

static void test_loan_args(void)
{
    endpoints e = open_endpoints();
    ferry_tensor t;
    const int64_t shape[] = {2, 3}, neg[] = {-2, 3};
    memset(&t, 0xab, sizeof t);
    TU_ERR(ferry_tensor_loan(NULL, FERRY_DTYPE_INT32, 2, shape, NULL, &t), FERRY_EINVAL);
    TU_CHECK(t.payload == NULL);
    TU_ERR(ferry_tensor_loan(e.pub, FERRY_DTYPE_INT32, 2, shape, NULL, NULL), FERRY_EINVAL);
    TU_ERR(ferry_tensor_loan(e.pub, (ferry_dtype)0, 2, shape, NULL, &t), FERRY_EINVAL);
    TU_ERR(ferry_tensor_loan(e.pub, FERRY_DTYPE_INT32, 9, shape, NULL, &t), FERRY_EINVAL);
    TU_ERR(ferry_tensor_loan(e.pub, FERRY_DTYPE_INT32, 2, neg, NULL, &t), FERRY_EINVAL);
    TU_ERR(ferry_tensor_loan(e.pub, FERRY_DTYPE_INT32, 2, NULL, NULL, &t), FERRY_EINVAL);
    const int64_t too_big[] = {1 << 20};
    TU_ERR(ferry_tensor_loan(e.pub, FERRY_DTYPE_FLOAT32, 1, too_big, NULL, &t), FERRY_ETOOBIG);
    TU_CHECK(t.payload == NULL);
    TU_ERR(ferry_tensor_publish(e.pub, NULL), FERRY_EINVAL);
    TU_ERR(ferry_tensor_publish(e.pub, &t), FERRY_EINVAL);
    TU_ERR(ferry_tensor_loan_release(e.pub, &t), FERRY_EINVAL);
    {
        ferry_publisher_stats st;
        TU_OK(ferry_publisher_stats_get(e.pub, &st));
        TU_EQ_U64(st.chunks_loaned, 0);
    }

    /* A header the caller broke is refused at publish and stays on loan. */
    TU_OK(ferry_tensor_loan(e.pub, FERRY_DTYPE_INT32, 2, shape, NULL, &t));
    TU_EQ_U64(t.data_size, 24);
    TU_EQ_PTR(t.data, (unsigned char *)t.payload + FERRY_TENSOR_DATA_OFFSET);
    TU_EQ_U64(t.payload_size, FERRY_TENSOR_DATA_OFFSET + 24);
    t.header->shape[0] = 3;
    TU_ERR(ferry_tensor_publish(e.pub, &t), FERRY_EINVAL);
    t.header->shape[0] = 2;
    memset(t.header->frame_id, 'x', sizeof t.header->frame_id);
    TU_ERR(ferry_tensor_publish(e.pub, &t), FERRY_EINVAL);
    TU_CHECK(t.payload != NULL);
    TU_OK(ferry_tensor_loan_release(e.pub, &t));
    TU_CHECK(t.payload == NULL);

    /* A sample of another type of content is no tensor. */
    tu_publish_pattern(e.pub, 512, 1);
    ferry_sample s;
    TU_OK(ferry_wait(e.sub, TU_WAIT_NS));
    TU_OK(ferry_take(e.sub, &s));
    ferry_tensor_view v;
    TU_ERR(ferry_tensor_view_get(&s, &v), FERRY_EPROTO);
    ferry_dlpack_tensor *dl = NULL;
    TU_ERR(ferry_tensor_to_dlpack(e.sub, &s, &dl), FERRY_EPROTO);
    TU_CHECK(dl == NULL && s.data != NULL); /* still the caller's */
    TU_OK(ferry_release(e.sub, &s));
    TU_ERR(ferry_tensor_to_dlpack(e.sub, &s, &dl), FERRY_ESTATE);
    TU_ERR(ferry_tensor_view_get(NULL, &v), FERRY_EINVAL);
    TU_ERR(ferry_tensor_view_get(&s, NULL), FERRY_EINVAL);
    TU_ERR(ferry_tensor_to_dlpack(NULL, &s, &dl), FERRY_EINVAL);
    TU_ERR(ferry_tensor_to_dlpack(e.sub, NULL, &dl), FERRY_EINVAL);
    TU_ERR(ferry_tensor_to_dlpack(e.sub, &s, NULL), FERRY_EINVAL);
    close_endpoints(&e);
}

static void test_dlpack_ownership(void)
{
    endpoints e = open_endpoints();
    ferry_subscriber *other;
    TU_OK(ferry_subscriber_create(&other, e.node, TOPIC, FERRY_TENSOR_TYPE_NAME,
                                  FERRY_TENSOR_TYPE_HASH, NULL));
    tu_connect_local(e.pub, 2, other, 1);
    for (uint64_t seq = 1; seq <= 3; seq++)
        publish_seq_tensor(e.pub, seq);

    ferry_sample s1, s2, s3, so;
    TU_OK(ferry_wait(e.sub, TU_WAIT_NS));
    TU_OK(ferry_take(e.sub, &s1));
    TU_OK(ferry_take(e.sub, &s2));
    TU_OK(ferry_take(e.sub, &s3));
    TU_OK(ferry_wait(other, TU_WAIT_NS));
    TU_OK(ferry_take(other, &so));
    TU_EQ_U64(held(e.sub), 3);

    /* A sample of another subscriber is refused and stays its own. */
    ferry_dlpack_tensor *dl = NULL;
    TU_ERR(ferry_tensor_to_dlpack(e.sub, &so, &dl), FERRY_EFOREIGN);
    TU_CHECK(so.data != NULL);
    TU_OK(ferry_release(other, &so));

    const void *data1 = s1.data;
    TU_OK(ferry_tensor_to_dlpack(e.sub, &s1, &dl));
    TU_CHECK(s1.data == NULL && s1.size == 0); /* ownership went to the export */
    TU_EQ_U64(held(e.sub), 3);
    ferry_dl_tensor *t = &dl->dl_tensor;
    TU_EQ_PTR(t->data, (const unsigned char *)data1 + FERRY_TENSOR_DATA_OFFSET);
    TU_EQ_U64(t->device.device_type, FERRY_DL_CPU);
    TU_EQ_U64(t->device.device_id, 0);
    TU_EQ_U64(t->ndim, 2);
    TU_EQ_U64(t->dtype.code, FERRY_DL_INT);
    TU_EQ_U64(t->dtype.bits, 32);
    TU_EQ_U64(t->dtype.lanes, 1);
    TU_CHECK(t->shape[0] == 2 && t->shape[1] == 3);
    TU_CHECK(t->strides[0] == 3 && t->strides[1] == 1);
    TU_EQ_U64(t->byte_offset, 0);
    TU_CHECK(dl->manager_ctx != NULL && dl->deleter != NULL);
    for (int i = 0; i < 6; i++)
        TU_EQ_U64(((const int32_t *)t->data)[i], 100 + i);

    ferry_dlpack_tensor_versioned *vd = NULL;
    TU_OK(ferry_tensor_to_dlpack_versioned(e.sub, &s2, &vd));
    TU_EQ_U64(vd->version.major, 1);
    TU_EQ_U64(vd->version.minor, 0);
    TU_EQ_U64(vd->flags, FERRY_DLPACK_FLAG_READ_ONLY);
    TU_EQ_U64(((const int32_t *)vd->dl_tensor.data)[5], 205);
    TU_CHECK(s2.data == NULL);

    /* Exports hold their samples: the subscriber cannot go. */
    TU_ERR(ferry_subscriber_destroy(e.sub), FERRY_EBUSY);
    TU_OK(ferry_release(e.sub, &s3));
    TU_EQ_U64(held(e.sub), 2);
    TU_ERR(ferry_subscriber_destroy(e.sub), FERRY_EBUSY);

    dl->deleter(dl);
    TU_EQ_U64(held(e.sub), 1);
    dl->deleter(dl); /* ignored: it must not release the versioned export's sample */
    TU_EQ_U64(held(e.sub), 1);
    TU_ERR(ferry_subscriber_destroy(e.sub), FERRY_EBUSY);
    vd->deleter(vd);
    TU_EQ_U64(held(e.sub), 0);
    vd->deleter(vd);
    TU_EQ_U64(held(e.sub), 0);
    drain(other);
    wait_chunks_back(e.pub);

    /* Records are reused: many exports in a row, no growth of what is held. */
    for (uint64_t seq = 4; seq < 40; seq++) {
        publish_seq_tensor(e.pub, seq);
        ferry_sample s;
        TU_OK(ferry_wait(e.sub, TU_WAIT_NS));
        TU_OK(ferry_take(e.sub, &s));
        TU_OK(ferry_tensor_to_dlpack(e.sub, &s, &dl));
        TU_EQ_U64(((const int32_t *)dl->dl_tensor.data)[0], seq * 100);
        dl->deleter(dl);
        TU_EQ_U64(held(e.sub), 0);
        TU_OK(ferry_wait(other, TU_WAIT_NS));
        TU_OK(ferry_take(other, &so));
        TU_OK(ferry_release(other, &so));
    }
    wait_chunks_back(e.pub);
    TU_OK(ferry_subscriber_destroy(other));
    close_endpoints(&e);
}

/* --- hostile headers ------------------------------------------------------------------------ */

typedef struct sample_buf {
    unsigned char *mem;
    size_t size;
} sample_buf;

/* A valid float32 [2, 3, 4] tensor with values i, at data offset 256. */
static sample_buf make_valid(void)
{
    sample_buf b;
    b.size = FERRY_TENSOR_DATA_OFFSET + 24 * 4;
    b.mem = aligned_alloc(64, (b.size + 63) / 64 * 64);
    TU_CHECK(b.mem != NULL);
    memset(b.mem, 0, b.size);
    const int64_t shape[] = {2, 3, 4};
    ferry_tensor_header h;
    TU_OK(ferry_tensor_header_init(&h, FERRY_DTYPE_FLOAT32, 3, shape, NULL));
    strcpy(h.frame_id, "camera");
    memcpy(b.mem, &h, sizeof h);
    for (int i = 0; i < 24; i++) {
        float f = (float)i;
        memcpy(b.mem + FERRY_TENSOR_DATA_OFFSET + 4 * i, &f, 4);
    }
    return b;
}

/* The view of b as a sample of size bytes must be refused, and *out left untouched. */
static void expect_refused(const char *what, const ferry_tensor_header *h, size_t size)
{
    sample_buf b = make_valid();
    memcpy(b.mem, h, sizeof *h);
    ferry_sample s;
    memset(&s, 0, sizeof s);
    s.data = b.mem;
    s.size = size;
    ferry_tensor_view v, before;
    memset(&v, 0x5a, sizeof v);
    before = v;
    ferry_err err = ferry_tensor_view_get(&s, &v);
    TU_CHECK_MSG(err == FERRY_EPROTO, "%s: got %s, expected FERRY_EPROTO", what,
                 ferry_errname(err));
    TU_CHECK_MSG(memcmp(&v, &before, sizeof v) == 0, "%s: the view was written", what);
    free(b.mem);
}

static void test_hostile(void)
{
    sample_buf b = make_valid();
    ferry_sample s;
    memset(&s, 0, sizeof s);
    s.data = b.mem;
    s.size = b.size;
    ferry_tensor_view v;
    TU_OK(ferry_tensor_view_get(&s, &v));
    TU_EQ_U64(v.dtype, FERRY_DTYPE_FLOAT32);
    TU_EQ_U64(v.numel, 24);
    TU_EQ_U64(v.elem_size, 4);
    TU_EQ_U64(v.data_size, 96);
    TU_EQ_PTR(v.data, b.mem + FERRY_TENSOR_DATA_OFFSET);
    TU_EQ_STR(v.header.frame_id, "camera");
    TU_EQ_U64(v.device.device_type, FERRY_DL_CPU);
    ferry_tensor_header good;
    memcpy(&good, b.mem, sizeof good);

    /* Valid variations are accepted. */
    ferry_tensor_header h;
    ferry_tensor_header ok_cases[6];
    int nok = 0;
    h = good;
    h.shape[2] = 0; /* an empty tensor with data left over */
    ok_cases[nok++] = h;
    h = good;
    h.shape[0] = 0;
    h.data_size = 0;
    ok_cases[nok++] = h;
    h = good;
    h.strides[0] = 0; /* broadcast */
    ok_cases[nok++] = h;
    h = good;
    h.ndim = 0; /* a scalar: unused entries must be zero */
    memset(h.shape, 0, sizeof h.shape);
    memset(h.strides, 0, sizeof h.strides);
    ok_cases[nok++] = h;
    h = good;
    h.data_offset = 256 + 64;
    h.data_size = 32;
    h.shape[0] = 1;
    h.shape[1] = 2; /* elements 0..7: 32 bytes */
    ok_cases[nok++] = h;
    for (int i = 0; i < nok; i++) {
        memcpy(b.mem, &ok_cases[i], sizeof ok_cases[i]);
        TU_CHECK_MSG(ferry_tensor_view_get(&s, &v) == FERRY_OK, "valid case %d refused", i);
    }
    memcpy(b.mem, &good, sizeof good);

    /* Every field corrupted in turn. */
#define BAD(what, stmt)                                                                            \
    do {                                                                                           \
        h = good;                                                                                  \
        stmt;                                                                                      \
        expect_refused(what, &h, b.size);                                                          \
    } while (0)
    BAD("magic", h.magic ^= 1);
    BAD("version 0", h.version = 0);
    BAD("version 2", h.version = 2);
    BAD("header_size", h.header_size = 240);
    BAD("dtype code 3", h.dtype.code = 3);
    BAD("dtype code 5 (complex)", h.dtype.code = 5);
    BAD("dtype bits 12", h.dtype.bits = 12);
    BAD("dtype bits 0", h.dtype.bits = 0);
    BAD("dtype lanes 2", h.dtype.lanes = 2);
    BAD("dtype lanes 0", h.dtype.lanes = 0);
    BAD("bool of 16 bits", (h.dtype.code = FERRY_DL_BOOL, h.dtype.bits = 16));
    BAD("ndim 9", h.ndim = 9);
    BAD("ndim huge", h.ndim = UINT32_MAX);
    BAD("ndim 2 with a third size", h.ndim = 2);
    BAD("ndim 4: reach beyond data", (h.ndim = 4, h.shape[3] = 2, h.strides[3] = 1000));
    BAD("unused shape", h.shape[5] = 1);
    BAD("unused stride", h.strides[7] = 1);
    BAD("negative size", h.shape[1] = -1);
    BAD("negative stride", h.strides[1] = -1);
    BAD("INT64_MIN stride", h.strides[0] = INT64_MIN);
    BAD("size overflow", (h.shape[0] = INT64_MAX, h.shape[1] = INT64_MAX));
    BAD("stride overflow", h.strides[0] = INT64_MAX);
    BAD("extent overflow", (h.strides[0] = INT64_MAX / 2, h.strides[1] = INT64_MAX / 2));
    BAD("bytes overflow", (h.shape[0] = 2, h.strides[0] = INT64_MAX / 4));
    BAD("stride reaches past data", h.strides[0] = 13);
    BAD("size reaches past data", h.shape[2] = 5);
    BAD("CUDA device in a host sample", h.device.device_type = FERRY_DL_CUDA);
    BAD("unknown device", h.device.device_type = 99);
    BAD("device id", h.device.device_id = 1);
    BAD("frame_id unterminated", memset(h.frame_id, 'x', sizeof h.frame_id));
    BAD("reserved", h.reserved_ = 1);
    BAD("data_offset unaligned", h.data_offset = 257);
    BAD("data_offset 32", h.data_offset = 32);
    BAD("data_offset inside the header", h.data_offset = 192);
    BAD("data_offset 0", h.data_offset = 0);
    BAD("data_offset past the end", h.data_offset = 512);
    BAD("data_offset wraps", h.data_offset = UINT64_MAX - 63);
    BAD("data_size too small", h.data_size = 95);
    BAD("data_size past the end", h.data_size = 97);
    BAD("data_size wraps", h.data_size = UINT64_MAX);
    BAD("data_offset + size past the end", h.data_offset = 320);
#undef BAD
    expect_refused("sample shorter than the header", &good, sizeof good - 1);
    expect_refused("sample shorter than the data", &good, b.size - 1);
    s.data = NULL;
    TU_ERR(ferry_tensor_view_get(&s, &v), FERRY_EPROTO);

    /* The device form: data_offset counts in the frame, no header there. */
    h = good;
    h.device.device_type = FERRY_DL_CUDA;
    h.device.device_id = 3;
    h.data_offset = 0;
    TU_OK(ferry_tensor_header_check(&h, 96, &v));
    TU_EQ_U64(v.numel, 24);
    TU_ERR(ferry_tensor_header_check(&h, 95, &v), FERRY_EPROTO);
    h.device.device_id = -1;
    TU_ERR(ferry_tensor_header_check(&h, 96, &v), FERRY_EPROTO);
    TU_ERR(ferry_tensor_header_check(NULL, 96, &v), FERRY_EINVAL);
    TU_ERR(ferry_tensor_header_check(&good, 96, NULL), FERRY_EINVAL);
    free(b.mem);
}

/* --- across processes --------------------------------------------------------------------- */

#define XP_COUNT 24

typedef struct xp {
    tu_pipe to_pub;
} xp;

/* Tensor k of the cross-process run: four shapes in turn. */
static void xp_publish(ferry_publisher *pub, uint64_t k)
{
    ferry_tensor t;
    ferry_stamp stamp = {(int32_t)k, (uint32_t)k * 1000u};
    switch (k % 4) {
    case 0: { /* float32 [3, 4, 5], C-contiguous */
        const int64_t shape[] = {3, 4, 5};
        TU_OK(ferry_tensor_loan(pub, FERRY_DTYPE_FLOAT32, 3, shape, NULL, &t));
        for (int i = 0; i < 60; i++)
            ((float *)t.data)[i] = (float)(k * 1000 + (uint64_t)i);
        break;
    }
    case 1: { /* int16 [4, 3] column-major */
        const int64_t shape[] = {4, 3}, strides[] = {1, 4};
        TU_OK(ferry_tensor_loan(pub, FERRY_DTYPE_INT16, 2, shape, strides, &t));
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 3; c++)
                ((int16_t *)t.data)[r + 4 * c] = (int16_t)(k * 100 + (uint64_t)(r * 10 + c));
        break;
    }
    case 2: { /* uint8 [0, 7]: empty */
        const int64_t shape[] = {0, 7};
        TU_OK(ferry_tensor_loan(pub, FERRY_DTYPE_UINT8, 2, shape, NULL, &t));
        break;
    }
    default: /* float64 scalar */
        TU_OK(ferry_tensor_loan(pub, FERRY_DTYPE_FLOAT64, 0, NULL, NULL, &t));
        *(double *)t.data = (double)k + 0.5;
        break;
    }
    t.header->stamp = stamp;
    snprintf(t.header->frame_id, sizeof t.header->frame_id, "frame%u", (unsigned)k);
    TU_OK(ferry_tensor_publish(pub, &t));
}

static int xp_publisher(void *arg)
{
    xp *x = arg;
    ferry_node *node = tu_node("tpub");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.on_pool_exhausted = FERRY_POOL_BLOCK;
    po.block_timeout_ns = TU_WAIT_NS;
    ferry_publisher *pub;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, FERRY_TENSOR_TYPE_NAME, FERRY_TENSOR_TYPE_HASH,
                                 &po));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_serve_until(&pub, 1, &x->to_pub, TU_WAIT_MS), MSG_READY);
    for (uint64_t k = 0; k < XP_COUNT; k++)
        xp_publish(pub, k);
    TU_EQ_U64(tu_serve_until(&pub, 1, &x->to_pub, TU_WAIT_MS), MSG_DONE);
    wait_chunks_back(pub); /* every export's deleter gave its sample back */
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.published, XP_COUNT);
    TU_EQ_U64(st.dropped, 0);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static void xp_check(const ferry_dl_tensor *t, const ferry_tensor_view *v, uint64_t k)
{
    TU_EQ_PTR(t->data, v->data);
    TU_EQ_U64(t->device.device_type, FERRY_DL_CPU);
    TU_EQ_U64(t->ndim, v->header.ndim);
    TU_EQ_U64(t->byte_offset, 0);
    for (int32_t i = 0; i < t->ndim; i++) {
        TU_EQ_U64(t->shape[i], v->header.shape[i]);
        TU_EQ_U64(t->strides[i], v->header.strides[i]);
    }
    TU_EQ_U64(v->header.stamp.sec, k);
    TU_EQ_U64(v->header.stamp.nanosec, k * 1000);
    char id[32];
    snprintf(id, sizeof id, "frame%u", (unsigned)k);
    TU_EQ_STR(v->header.frame_id, id);
    switch (k % 4) {
    case 0:
        TU_EQ_U64(v->dtype, FERRY_DTYPE_FLOAT32);
        TU_CHECK(t->dtype.code == FERRY_DL_FLOAT && t->dtype.bits == 32);
        TU_CHECK(t->shape[0] == 3 && t->shape[1] == 4 && t->shape[2] == 5);
        TU_CHECK(t->strides[0] == 20 && t->strides[1] == 5 && t->strides[2] == 1);
        for (int i = 0; i < 60; i++)
            TU_CHECK_MSG(((const float *)t->data)[i] == (float)(k * 1000 + (uint64_t)i),
                         "tensor %u element %d", (unsigned)k, i);
        break;
    case 1:
        TU_EQ_U64(v->dtype, FERRY_DTYPE_INT16);
        TU_CHECK(t->strides[0] == 1 && t->strides[1] == 4);
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 3; c++) {
                int16_t e = ((const int16_t *)t->data)[r * t->strides[0] + c * t->strides[1]];
                TU_EQ_U64(e, k * 100 + (uint64_t)(r * 10 + c));
            }
        break;
    case 2:
        TU_EQ_U64(v->numel, 0);
        TU_EQ_U64(v->data_size, 0);
        TU_CHECK(t->shape[0] == 0 && t->shape[1] == 7);
        break;
    default:
        TU_EQ_U64(t->ndim, 0);
        TU_EQ_U64(v->numel, 1);
        TU_CHECK(*(const double *)t->data == (double)k + 0.5);
        break;
    }
}

static void test_across_processes(void)
{
    ferry_node *node = tu_node("tsub");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 64;
    so.max_held = 8;
    ferry_subscriber *sub;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, FERRY_TENSOR_TYPE_NAME, FERRY_TENSOR_TYPE_HASH,
                                  &so));
    xp x;
    x.to_pub = tu_pipe_make();
    pid_t pid = tu_fork(xp_publisher, &x, 60);
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(&x.to_pub, MSG_READY);

    /* Keep up to four exports alive at once, released oldest first. */
    ferry_dlpack_tensor *live[4] = {NULL};
    ferry_dlpack_tensor_versioned *vlive[4] = {NULL};
    for (uint64_t k = 0; k < XP_COUNT; k++) {
        ferry_sample s;
        ferry_err err;
        while ((err = ferry_take(sub, &s)) == FERRY_EAGAIN)
            TU_OK(ferry_wait(sub, TU_WAIT_NS));
        TU_OK(err);
        TU_EQ_U64(s.sequence, k + 1);
        ferry_tensor_view v;
        TU_OK(ferry_tensor_view_get(&s, &v));
        int slot = (int)(k % 4);
        if (live[slot]) {
            live[slot]->deleter(live[slot]);
            live[slot] = NULL;
        }
        if (vlive[slot]) {
            vlive[slot]->deleter(vlive[slot]);
            vlive[slot] = NULL;
        }
        if (k % 2 == 0) {
            TU_OK(ferry_tensor_to_dlpack(sub, &s, &live[slot]));
            xp_check(&live[slot]->dl_tensor, &v, k);
        } else {
            TU_OK(ferry_tensor_to_dlpack_versioned(sub, &s, &vlive[slot]));
            TU_EQ_U64(vlive[slot]->flags, FERRY_DLPACK_FLAG_READ_ONLY);
            xp_check(&vlive[slot]->dl_tensor, &v, k);
        }
        TU_CHECK(s.data == NULL);
        TU_CMP_U64(held(sub), <=, 4);
    }
    TU_ERR(ferry_subscriber_destroy(sub), FERRY_EBUSY);
    for (int i = 0; i < 4; i++) {
        if (live[i])
            live[i]->deleter(live[i]);
        if (vlive[i])
            vlive[i]->deleter(vlive[i]);
    }
    TU_EQ_U64(held(sub), 0);
    tu_send(&x.to_pub, MSG_DONE);
    TU_CHILD_OK(pid);
    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    TU_EQ_U64(st.received, XP_COUNT);
    TU_EQ_U64(st.dropped, 0);
    TU_EQ_U64(st.bytes_copied, 0);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_pipe_close(&x.to_pub);
}

int main(void)
{
    TU_RUN(test_constants);
    TU_RUN(test_header_init);
    TU_RUN(test_loan_args);
    TU_RUN(test_dlpack_ownership);
    TU_RUN(test_hostile);
    TU_RUN(test_across_processes);
    printf("tensor_test: all passed\n");
    return 0;
}
