/*
 * ferry.Publisher: its options, its loans (ferry.Loan, loan.c: writable buffers over the
 * publisher's pages, which NumPy writes straight into), publishing them, and housekeeping. A
 * publisher closed while an array still reads or writes one of its loans is destroyed (its
 * segment unmapped) only when the last such array is gone (pub_finish). A publisher a
 * GpuPublisher (gpu_pub.c) publishes through carries that one's descriptors: it refuses loans
 * and publishes of its own, and is destroyed only after the GpuPublisher.
 */
#include "pub.h"

#include "args.h"
#include "functions.h"
#include "types.h"

#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Options
 * ------------------------------------------------------------------------------------------- */

#define U32MAX 0xffffffffull
#define SIZEMAX ((unsigned long long)SIZE_MAX)

static bool type_hash_of(PyObject *v, const char *type_name, uint64_t *out)
{
    unsigned long long h = ferry_hash(type_name);

    if (!pyf_opt_u64(v, "type_hash", ~0ull, &h))
        return false;
    *out = (uint64_t)h;
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * Publisher
 * ------------------------------------------------------------------------------------------- */

static int pub_close(PyObject *self);
static void pub_finish(PyObject *self);

/* Open, for loans and publishes: not while a GpuPublisher's descriptors go through it (a
 * sample of another kind would reach its device-frame subscribers). */
static bool pub_own_open(pyf_pub *p, const char *what)
{
    return pyf_child_open(&p->link, p->pub, what) && pyf_pub_own(p, what);
}

bool pyf_pub_own(pyf_pub *p, const char *what)
{
    if (p->owner == NULL)
        return true;
    if (p->owner_link->closed)
        pyf_raise(FERRY_EBUSY,
                  "%s('%s'): the GpuPublisher that published through it is closed, "
                  "but a tensor still reads one of its loans: delete that first",
                  what, p->topic);
    else
        pyf_raise(FERRY_EBUSY,
                  "%s('%s'): the publisher carries a GpuPublisher's device frames: "
                  "publish through it, or close it first",
                  what, p->topic);
    return false;
}

/* Destroys a closed publisher once no array is left over one of its loans and its GpuPublisher
 * is destroyed. Never waits for the lock: its holder finishes it when letting the lock go
 * (pyf_pub_unlock). In a forked child it only forgets it, without the lock. */
static void pub_finish(PyObject *self)
{
    pyf_pub *p = (pyf_pub *)self;
    bool home = pyf_home(p->link.gen);
    pyf_loan *l;

    if (!p->link.closed || p->pub == NULL || p->owner != NULL)
        return;
    for (l = p->loans; l != NULL; l = l->next)
        if (l->exports > 0)
            return;
    if (home && !PyThread_acquire_lock(p->lock, NOWAIT_LOCK))
        return;
    /* ferry_publisher_destroy gives outstanding loans up. */
    if (home)
        ferry_publisher_destroy(p->pub);
    p->pub = NULL;
    if (home)
        PyThread_release_lock(p->lock);
    pyf_child_unlink(&p->link);
}

/* Takes the publisher's lock; false (ClosedError) when it was closed meanwhile. */
static bool pub_lock(pyf_pub *p, const char *what)
{
    pyf_lock(p->lock);
    if (!p->link.closed)
        return true;
    pyf_pub_unlock(p);
    pyf_raise_closed(what);
    return false;
}

static const pyf_child_ops pub_ops = {"Publisher", PYF_CLOSE_PUB, pub_close, pub_finish};

PyObject *pyf_pub_new(pyf_node *node, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"topic",
                             "type",
                             "type_hash",
                             "max_sample_size",
                             "pool_bytes",
                             "max_chunks",
                             "max_subscribers",
                             "history",
                             "payload_align",
                             "on_pool_exhausted",
                             "block_timeout_ns",
                             "spin_ns",
                             "admit_blocking",
                             "max_chunks_per_subscriber",
                             "max_bytes_per_subscriber",
                             "max_pending",
                             "huge_pages",
                             NULL};
    static const char *const policies[] = {"error", "block"};
    static const char *const huge[] = {"off", "thp", "hugetlb", "auto"};
    PyObject *o_hash = NULL, *o_mss = NULL, *o_pool = NULL, *o_chunks = NULL, *o_subs = NULL,
             *o_hist = NULL, *o_align = NULL, *o_policy = NULL, *o_block = NULL, *o_spin = NULL,
             *o_admit = NULL, *o_cps = NULL, *o_bps = NULL, *o_pending = NULL, *o_huge = NULL;
    unsigned long long v;
    ferry_publisher_options o;
    const char *topic, *type, *type_name;
    uint64_t hash;
    int choice;
    ferry_err err;
    pyf_pub *p;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ss|$OOOOOOOOOOOOOOO:publisher", kwlist, &topic,
                                     &type, &o_hash, &o_mss, &o_pool, &o_chunks, &o_subs, &o_hist,
                                     &o_align, &o_policy, &o_block, &o_spin, &o_admit, &o_cps,
                                     &o_bps, &o_pending, &o_huge))
        return NULL;
    if (!pyf_node_open(node, "Node.publisher"))
        return NULL;
    type_name = pyf_type_name(type);
    if (!type_hash_of(o_hash, type_name, &hash))
        return NULL;
    ferry_publisher_options_init(&o);
#define OPT_U(obj, field, max)                                                                     \
    do {                                                                                           \
        v = (unsigned long long)o.field;                                                           \
        if (!pyf_opt_u64(obj, #field, max, &v))                                                    \
            return NULL;                                                                           \
        o.field = (__typeof__(o.field))v;                                                          \
    } while (0)
    OPT_U(o_mss, max_sample_size, SIZEMAX);
    OPT_U(o_pool, pool_bytes, SIZEMAX);
    OPT_U(o_chunks, max_chunks, U32MAX);
    OPT_U(o_subs, max_subscribers, U32MAX);
    OPT_U(o_hist, history, U32MAX);
    OPT_U(o_align, payload_align, SIZEMAX);
    OPT_U(o_cps, max_chunks_per_subscriber, U32MAX);
    OPT_U(o_bps, max_bytes_per_subscriber, SIZEMAX);
    OPT_U(o_pending, max_pending, U32MAX);
#undef OPT_U
    if (!pyf_opt_i64(o_block, "block_timeout_ns", &o.block_timeout_ns) ||
        !pyf_opt_i64(o_spin, "spin_ns", &o.spin_ns) || !pyf_opt_bool(o_admit, &o.admit_blocking))
        return NULL;
    choice = (int)o.on_pool_exhausted;
    if (!pyf_opt_choice(o_policy, "on_pool_exhausted", policies, 2, &choice))
        return NULL;
    o.on_pool_exhausted = (ferry_pool_policy)choice;
    choice = (int)o.huge_pages;
    if (!pyf_opt_choice(o_huge, "huge_pages", huge, 4, &choice))
        return NULL;
    o.huge_pages = (ferry_huge_pages)choice;

    p = (pyf_pub *)pyf_alloc(pyf.pub_type);
    if (p == NULL)
        return NULL;
    p->kind = pyf_kind_of(type_name);
    p->lock = PyThread_allocate_lock();
    if (p->lock == NULL || (p->topic = pyf_strdup(topic)) == NULL ||
        (p->type_name = pyf_strdup(type_name)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        Py_DECREF(p);
        return NULL;
    }
    pyf_child_link(&p->link, node, &pub_ops, (PyObject *)p);
    err = ferry_publisher_create(&p->pub, node->node, topic, type_name, hash, &o);
    if (err != FERRY_OK) {
        p->pub = NULL;
        Py_DECREF(p);
        return pyf_raise(err, "ferry_publisher_create('%s', type %s)", topic, type_name);
    }
    return (PyObject *)p;
}

static int pub_close(PyObject *self)
{
    pyf_pub *p = (pyf_pub *)self;
    pyf_loan *l;

    if (!pyf_child_home(&p->link, "Publisher.close"))
        return -1;
    if (p->link.closed)
        return 0;
    /* An open GpuPublisher still publishes through it: close that first. A closed one that waits
     * for its tensors keeps this publisher until it is destroyed. */
    if (p->owner != NULL && !p->owner_link->closed && !pyf_pub_own(p, "Publisher.close"))
        return -1;
    p->link.closed = true;
    /* Unpublished loans are given up with the publisher; an array over one may still write it
     * until it goes, which nothing reads. */
    for (l = p->loans; l != NULL; l = l->next)
        if (l->state == PYF_LOAN_HELD)
            l->state = PYF_LOAN_RELEASED;
    pub_finish(self); /* now, unless an array still reads or writes a loan */
    return 0;
}

static void pub_dealloc(PyObject *self)
{
    pyf_pub *p = (pyf_pub *)self;

    /* Loans hold a reference to their publisher: none is left. */
    if (p->pub != NULL && pyf_home(p->link.gen))
        ferry_publisher_destroy(p->pub);
    pyf_child_unlink(&p->link);
    if (p->lock != NULL)
        PyThread_free_lock(p->lock);
    PyMem_Free(p->topic);
    PyMem_Free(p->type_name);
    pyf_free(self);
}

/* Gives back what a ferry loan call got when the Python side cannot be built. */
static void loan_undo(pyf_pub *p, void *payload)
{
    if (payload != NULL)
        ferry_loan_release(p->pub, payload);
}

static PyObject *pub_loan(PyObject *self, PyObject *args)
{
    pyf_pub *p = (pyf_pub *)self;
    Py_ssize_t n;
    void *payload = NULL;
    ferry_err err;
    pyf_geom g;
    pyf_loan *l;

    if (!PyArg_ParseTuple(args, "n:loan", &n))
        return NULL;
    if (!pub_own_open(p, "Publisher.loan"))
        return NULL;
    if (n <= 0)
        return pyf_raise(FERRY_EINVAL, "loan(%zd): the size must be at least 1", n);
    if (!pub_lock(p, "Publisher.loan"))
        return NULL;
    Py_BEGIN_ALLOW_THREADS err = ferry_loan(p->pub, (size_t)n, &payload);
    Py_END_ALLOW_THREADS if (err == FERRY_OK && p->link.closed)
    { /* closed by another thread meanwhile */
        ferry_loan_release(p->pub, payload);
        err = FERRY_ECLOSED;
    }
    pyf_pub_unlock(p);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_loan('%s', %zd bytes)", p->topic, n);
    if (!pyf_geom_bytes(&g, payload, (size_t)n) || (l = pyf_loan_new(p, PYF_BYTES, &g)) == NULL) {
        loan_undo(p, payload);
        return NULL;
    }
    l->payload = payload;
    l->size = (size_t)n;
    return (PyObject *)l;
}

static bool pub_kind(pyf_pub *p, pyf_kind kind, const char *what)
{
    if (p->kind == kind)
        return true;
    pyf_raise(FERRY_ETYPE, "%s on '%s': the publisher's type is %s", what, p->topic, p->type_name);
    return false;
}

static PyObject *pub_loan_image(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"width", "height", "encoding", "step", NULL};
    pyf_pub *p = (pyf_pub *)self;
    unsigned int w, h, step = 0;
    const char *enc = "rgb8";
    ferry_image_layout layout;
    ferry_image img;
    ferry_err err;
    pyf_geom g;
    pyf_loan *l;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "II|sI:loan_image", kwlist, &w, &h, &enc, &step))
        return NULL;
    if (!pub_own_open(p, "Publisher.loan_image") || !pub_kind(p, PYF_IMAGE, "loan_image"))
        return NULL;
    if (!pub_lock(p, "Publisher.loan_image"))
        return NULL;
    Py_BEGIN_ALLOW_THREADS err = ferry_image_loan(p->pub, w, h, enc, step, &img);
    Py_END_ALLOW_THREADS if (err == FERRY_OK && p->link.closed)
    {
        ferry_image_loan_release(p->pub, &img);
        err = FERRY_ECLOSED;
    }
    pyf_pub_unlock(p);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_image_loan('%s', %ux%u %s)", p->topic, w, h, enc);
    ferry_image_layout_get(img.header->encoding, w, h, img.header->step, &layout);
    if (!pyf_geom_image(&g, img.data, img.header, &layout) ||
        (l = pyf_loan_new(p, PYF_IMAGE, &g)) == NULL) {
        ferry_image_loan_release(p->pub, &img);
        return NULL;
    }
    l->u.img = img;
    l->payload = img.payload;
    l->size = img.payload_size;
    return (PyObject *)l;
}

static PyObject *pub_loan_pointcloud(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"width", "height", "fields", "point_step", NULL};
    ferry_point_field fields[FERRY_POINTCLOUD_FIELDS_MAX];
    pyf_pub *p = (pyf_pub *)self;
    unsigned int w, h, point_step = 0;
    PyObject *fseq;
    uint32_t n;
    ferry_pointcloud pc;
    ferry_err err;
    pyf_geom g;
    pyf_loan *l;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "IIO|I:loan_pointcloud", kwlist, &w, &h, &fseq,
                                     &point_step))
        return NULL;
    if (!pub_own_open(p, "Publisher.loan_pointcloud") || !pub_kind(p, PYF_CLOUD, "loan_pointcloud"))
        return NULL;
    if (!pyf_point_fields(fseq, fields, &n))
        return NULL;
    if (!pub_lock(p, "Publisher.loan_pointcloud"))
        return NULL;
    Py_BEGIN_ALLOW_THREADS err = ferry_pointcloud_loan(p->pub, w, h, fields, n, point_step, &pc);
    Py_END_ALLOW_THREADS if (err == FERRY_OK && p->link.closed)
    {
        ferry_pointcloud_loan_release(p->pub, &pc);
        err = FERRY_ECLOSED;
    }
    pyf_pub_unlock(p);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_pointcloud_loan('%s', %ux%u points)", p->topic, w, h);
    if (!pyf_geom_cloud(&g, pc.data, pc.header) || (l = pyf_loan_new(p, PYF_CLOUD, &g)) == NULL) {
        ferry_pointcloud_loan_release(p->pub, &pc);
        return NULL;
    }
    l->u.pc = pc;
    l->payload = pc.payload;
    l->size = pc.payload_size;
    return (PyObject *)l;
}

static PyObject *pub_loan_tensor(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"shape", "dtype", "strides", NULL};
    int64_t shape[FERRY_TENSOR_DIMS_MAX], strides[FERRY_TENSOR_DIMS_MAX];
    pyf_pub *p = (pyf_pub *)self;
    PyObject *o_shape, *o_dtype, *o_strides = Py_None;
    uint32_t ndim, nstrides;
    ferry_dtype dtype;
    ferry_tensor t;
    ferry_err err;
    pyf_geom g;
    pyf_loan *l;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O:loan_tensor", kwlist, &o_shape, &o_dtype,
                                     &o_strides))
        return NULL;
    if (!pub_own_open(p, "Publisher.loan_tensor") || !pub_kind(p, PYF_TENSOR, "loan_tensor"))
        return NULL;
    if (!pyf_int64_list(o_shape, "shape", shape, &ndim) || !pyf_tensor_dtype(o_dtype, &dtype))
        return NULL;
    if (o_strides != Py_None) {
        if (!pyf_int64_list(o_strides, "strides", strides, &nstrides))
            return NULL;
        if (nstrides != ndim)
            return pyf_raise(FERRY_EINVAL, "strides has %u entries, shape %u", nstrides, ndim);
    }
    if (!pub_lock(p, "Publisher.loan_tensor"))
        return NULL;
    Py_BEGIN_ALLOW_THREADS err =
        ferry_tensor_loan(p->pub, dtype, ndim, shape, o_strides != Py_None ? strides : NULL, &t);
    Py_END_ALLOW_THREADS if (err == FERRY_OK && p->link.closed)
    {
        ferry_tensor_loan_release(p->pub, &t);
        err = FERRY_ECLOSED;
    }
    pyf_pub_unlock(p);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_tensor_loan('%s', %u dimensions of %s)", p->topic, ndim,
                         ferry_dtype_name(dtype));
    if (!pyf_geom_tensor(&g, t.data, t.header) || (l = pyf_loan_new(p, PYF_TENSOR, &g)) == NULL) {
        ferry_tensor_loan_release(p->pub, &t);
        return NULL;
    }
    l->u.t = t;
    l->payload = t.payload;
    l->size = t.payload_size;
    return (PyObject *)l;
}

static bool loan_check(PyObject *obj, pyf_pub *p, pyf_loan **out)
{
    pyf_loan *l;

    if (!PyObject_TypeCheck(obj, pyf.loan_type)) {
        PyErr_SetString(PyExc_TypeError, "publish() takes a Loan (use publish_copy for bytes)");
        return false;
    }
    l = (pyf_loan *)obj;
    if (l->pub != p) {
        pyf_raise(FERRY_EFOREIGN, "publish on '%s': the loan is of another publisher", p->topic);
        return false;
    }
    if (l->state != PYF_LOAN_HELD) {
        pyf_raise(FERRY_ESTATE, "publish on '%s': the loan was %s already", p->topic,
                  l->state == PYF_LOAN_PUBLISHED ? "published" : "released");
        return false;
    }
    *out = l;
    return true;
}

static PyObject *pub_publish(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"loan", "size", NULL};
    pyf_pub *p = (pyf_pub *)self;
    PyObject *obj, *o_size = Py_None;
    Py_ssize_t size = 0;
    ferry_err err;
    pyf_loan *l;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O:publish", kwlist, &obj, &o_size))
        return NULL;
    if (!pub_own_open(p, "Publisher.publish") || !loan_check(obj, p, &l))
        return NULL;
    if (o_size != Py_None) {
        if (l->kind != PYF_BYTES)
            return pyf_raise(FERRY_EINVAL, "publish: size applies to byte loans only");
        size = PyLong_AsSsize_t(o_size);
        if (size == -1 && PyErr_Occurred())
            return NULL;
        if (size <= 0 || (size_t)size > l->size)
            return pyf_raise(FERRY_EINVAL, "publish: size %zd is outside 1..%zu", size, l->size);
    }
    if (!pub_lock(p, "Publisher.publish"))
        return NULL;
    Py_BEGIN_ALLOW_THREADS switch (l->kind)
    {
    case PYF_IMAGE:
        err = ferry_image_publish(p->pub, &l->u.img);
        break;
    case PYF_CLOUD:
        err = ferry_pointcloud_publish(p->pub, &l->u.pc);
        break;
    case PYF_TENSOR:
        err = ferry_tensor_publish(p->pub, &l->u.t);
        break;
    default:
        err = ferry_publish(p->pub, l->payload, (size_t)size);
        break;
    }
    Py_END_ALLOW_THREADS pyf_pub_unlock(p);
    if (err != FERRY_OK)
        return pyf_raise(err, "publish on '%s'", p->topic);
    l->state = PYF_LOAN_PUBLISHED;
    Py_RETURN_NONE;
}

static PyObject *pub_publish_copy(PyObject *self, PyObject *arg)
{
    pyf_pub *p = (pyf_pub *)self;
    ferry_err err;
    Py_buffer b;

    if (!pub_own_open(p, "Publisher.publish_copy"))
        return NULL;
    if (PyObject_GetBuffer(arg, &b, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (b.len == 0) {
        PyBuffer_Release(&b);
        return pyf_raise(FERRY_EINVAL, "publish_copy on '%s': no byte to publish", p->topic);
    }
    if (!pub_lock(p, "Publisher.publish_copy")) {
        PyBuffer_Release(&b);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS err = ferry_publish_copy(p->pub, b.buf, (size_t)b.len);
    Py_END_ALLOW_THREADS pyf_pub_unlock(p);
    PyBuffer_Release(&b);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_publish_copy('%s')", p->topic);
    Py_RETURN_NONE;
}

static PyObject *pub_reserve(PyObject *self, PyObject *args)
{
    pyf_pub *p = (pyf_pub *)self;
    Py_ssize_t size;
    unsigned int count;
    ferry_err err;

    if (!PyArg_ParseTuple(args, "nI:reserve", &size, &count))
        return NULL;
    if (!pyf_child_open(&p->link, p->pub, "Publisher.reserve"))
        return NULL;
    if (size <= 0)
        return pyf_raise(FERRY_EINVAL, "reserve: size %zd", size);
    if (!pub_lock(p, "Publisher.reserve"))
        return NULL;
    Py_BEGIN_ALLOW_THREADS err = ferry_publisher_reserve(p->pub, (size_t)size, count);
    Py_END_ALLOW_THREADS pyf_pub_unlock(p);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_publisher_reserve('%s')", p->topic);
    Py_RETURN_NONE;
}

static PyObject *pub_poll(PyObject *self, PyObject *args)
{
    pyf_pub *p = (pyf_pub *)self;
    PyObject *o_timeout = NULL;
    int64_t ns = 0;
    ferry_err err;

    if (!PyArg_ParseTuple(args, "|O:poll", &o_timeout))
        return NULL;
    if (!pyf_child_open(&p->link, p->pub, "Publisher.poll"))
        return NULL;
    if (o_timeout != NULL && !pyf_timeout_ns(o_timeout, &ns))
        return NULL;
    if (ns < 0 || ns > PYF_WAIT_SLICE_NS)
        ns = PYF_WAIT_SLICE_NS;
    if (!pub_lock(p, "Publisher.poll"))
        return NULL;
    Py_BEGIN_ALLOW_THREADS err = ferry_publisher_poll(p->pub, ns);
    Py_END_ALLOW_THREADS pyf_pub_unlock(p);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_publisher_poll('%s')", p->topic);
    Py_RETURN_NONE;
}

/* wait_subscribers(): each slice takes the lock anew, so that other threads publish between. */
typedef struct subs_waiting {
    pyf_pub *p;
    unsigned int count;
} subs_waiting;

static ferry_err subs_step(void *arg)
{
    return pub_lock(((subs_waiting *)arg)->p, "Publisher.wait_subscribers") ? FERRY_EAGAIN
                                                                            : PYF_ERAISED;
}

static ferry_err subs_block(void *arg, int64_t slice_ns)
{
    subs_waiting *w = arg;

    return ferry_publisher_wait_subscribers(w->p->pub, w->count, slice_ns);
}

static void subs_after(void *arg)
{
    pyf_pub_unlock(((subs_waiting *)arg)->p);
}

static const pyf_wait subs_slices = {subs_step, subs_block, subs_after, false, 0};

static PyObject *pub_wait_subscribers(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"count", "timeout", NULL};
    subs_waiting w = {(pyf_pub *)self, 1};
    PyObject *o_timeout = Py_None;
    ferry_err err;
    int64_t ns;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|IO:wait_subscribers", kwlist, &w.count,
                                     &o_timeout))
        return NULL;
    if (!pyf_child_open(&w.p->link, w.p->pub, "Publisher.wait_subscribers") ||
        !pyf_timeout_ns(o_timeout, &ns))
        return NULL;
    err = pyf_wait_sliced(&subs_slices, &w, pyf_deadline(ns));
    if (err == PYF_ERAISED)
        return NULL;
    if (err != FERRY_OK)
        return pyf_raise(err, "wait_subscribers('%s', %u)", w.p->topic, w.count);
    Py_RETURN_NONE;
}

static PyObject *pub_fileno(PyObject *self, PyObject *unused)
{
    pyf_pub *p = (pyf_pub *)self;
    ferry_err err;
    int fd = -1;

    (void)unused;
    if (!pyf_child_open(&p->link, p->pub, "Publisher.fileno"))
        return NULL;
    err = ferry_publisher_fd(p->pub, &fd);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_publisher_fd('%s')", p->topic);
    return PyLong_FromLong(fd);
}

static PyObject *pub_stats(PyObject *self, PyObject *unused)
{
    pyf_pub *p = (pyf_pub *)self;
    ferry_publisher_stats st;
    ferry_err err;

    (void)unused;
    if (!pyf_child_open(&p->link, p->pub, "Publisher.stats"))
        return NULL;
    if (!pub_lock(p, "Publisher.stats"))
        return NULL;
    err = ferry_publisher_stats_get(p->pub, &st);
    pyf_pub_unlock(p);
    if (err != FERRY_OK)
        return pyf_raise(err, "ferry_publisher_stats_get('%s')", p->topic);
    return pyf_publisher_stats(&st);
}

static PyObject *pub_get(PyObject *self, void *closure)
{
    pyf_pub *p = (pyf_pub *)self;

    switch ((int)(intptr_t)closure) {
    case 0:
        return PyUnicode_FromString(p->topic);
    case 1:
        return PyUnicode_FromString(p->type_name);
    case 2:
        return PyUnicode_FromString(pyf_kind_name(p->kind));
    default:
        return PyBool_FromLong(p->link.closed);
    }
}

static PyMethodDef pub_methods[] = {
    {"loan", pub_loan, METH_VARARGS,
     "loan(nbytes) -> Loan\n\nLoans nbytes of the publisher's pool (ferry_loan). The Loan is a\n"
     "writable buffer over the publisher's own pages: np.frombuffer(loan, dtype) or\n"
     "np.asarray(loan) writes there directly. Publish it with publish(loan)."},
    {"loan_image", (PyCFunction)(void (*)(void))pub_loan_image, METH_VARARGS | METH_KEYWORDS,
     "loan_image(width, height, encoding=\"rgb8\", step=0) -> Loan\n\n"
     "Loans an image (ferry_image_loan); np.asarray(loan) is its pixels: (H, W, C) uint8 for\n"
     "rgb8/bgr8/rgba8/bgra8, (H, W) uint8 for mono8, uint16 for mono16/16UC1, float32 for\n"
     "32FC1, (H, W, 2) uint8 for the YUV 4:2:2 encodings, (H*3/2, W) uint8 for nv12. Set\n"
     "loan.stamp and loan.frame_id before publishing. Image publishers only."},
    {"loan_pointcloud", (PyCFunction)(void (*)(void))pub_loan_pointcloud,
     METH_VARARGS | METH_KEYWORDS,
     "loan_pointcloud(width, height, fields, point_step=0) -> Loan\n\n"
     "Loans a point cloud of height rows of width points (ferry_pointcloud_loan). fields is\n"
     "a sequence of (name, datatype[, count]) laid out one after the other, or (name, offset,\n"
     "datatype, count); datatype is \"float32\", \"uint8\", ... or a PointField constant.\n"
     "np.asarray(loan) is a structured array of the points. Point cloud publishers only."},
    {"loan_tensor", (PyCFunction)(void (*)(void))pub_loan_tensor, METH_VARARGS | METH_KEYWORDS,
     "loan_tensor(shape, dtype, strides=None) -> Loan\n\n"
     "Loans a host tensor (ferry_tensor_loan); dtype is a name (\"float32\", \"uint8\",\n"
     "\"bfloat16\", ...) or a numpy dtype; strides in elements, None for C order.\n"
     "np.asarray(loan) is the tensor. Tensor publishers only."},
    {"publish", (PyCFunction)(void (*)(void))pub_publish, METH_VARARGS | METH_KEYWORDS,
     "publish(loan, size=None)\n\nPublishes a loan to every subscriber without a copy. size\n"
     "(byte loans only) publishes the first size bytes. Arrays over the loan stay valid but\n"
     "must not be written any more: the memory is the subscribers' to read."},
    {"publish_copy", pub_publish_copy, METH_O,
     "publish_copy(data)\n\nCopies a bytes-like object into a loan and publishes it\n"
     "(ferry_publish_copy); counted in stats()['bytes_copied']."},
    {"reserve", pub_reserve, METH_VARARGS,
     "reserve(size, count)\n\nCarves and touches count chunks for samples of up to size bytes\n"
     "(ferry_publisher_reserve), so that the stream's first frames neither carve nor fault."},
    {"poll", pub_poll, METH_VARARGS,
     "poll(timeout=0)\n\nRuns housekeeping (ferry_publisher_poll), waiting up to timeout\n"
     "seconds (at most 0.05) for something to do."},
    {"wait_subscribers", (PyCFunction)(void (*)(void))pub_wait_subscribers,
     METH_VARARGS | METH_KEYWORDS,
     "wait_subscribers(count=1, timeout=None)\n\nWaits until count subscribers are connected;\n"
     "TimeoutError after timeout seconds. Releases the GIL while it waits."},
    {"fileno", pub_fileno, METH_NOARGS,
     "fileno() -> int\n\nA descriptor that becomes readable when housekeeping is due\n"
     "(ferry_publisher_fd); call poll() then. Owned by the publisher."},
    {"stats", pub_stats, METH_NOARGS,
     "stats() -> dict\n\nThe publisher's counters (ferry_publisher_stats)."},
    PYF_CHILD_CLOSE_METHODS(
        "close()\n\nDestroys the publisher; unpublished loans are given up. While an array or\n"
        "memoryview over a loan is left, the publisher's memory stays mapped: it is destroyed\n"
        "when the last of them is gone. Closing twice does nothing.",
        "publisher"),
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef pub_getset[] = {
    {"topic", pub_get, NULL, "The topic name as given.", (void *)0},
    {"type_name", pub_get, NULL, "The type name (\"sensor_msgs/Image\", ...).", (void *)1},
    {"kind", pub_get, NULL, "\"image\", \"pointcloud\", \"tensor\" or \"bytes\".", (void *)2},
    {"closed", pub_get, NULL, "True once closed.", (void *)3},
    {NULL, NULL, NULL, NULL, NULL},
};

const pyf_type_def pyf_pub_def = {
    .name = "ferry.Publisher",
    .size = sizeof(pyf_pub),
    .dealloc = pub_dealloc,
    .methods = pub_methods,
    .getset = pub_getset,
    .doc = "A publisher on one topic (Node.publisher).",
};
