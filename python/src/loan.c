/*
 * ferry.Loan: a loan of a publisher's memory (Publisher.loan*), exported writable through the
 * buffer protocol so that NumPy writes straight into the publisher's pages. Given back when
 * released or dropped unpublished; the last array over a loan of a closed publisher lets the
 * publisher be destroyed (its ops' finish). Calls util.c, args.c and export.c only.
 */
#include "pub.h"

#include "args.h"
#include "types.h"

#include <string.h>

pyf_loan *pyf_loan_new(pyf_pub *p, pyf_kind kind, pyf_geom *g)
{
    pyf_loan *l = (pyf_loan *)pyf_alloc(pyf.loan_type);

    if (l == NULL) {
        pyf_geom_clear(g);
        return NULL;
    }
    l->pub = (pyf_pub *)Py_NewRef((PyObject *)p);
    l->kind = kind;
    l->state = PYF_LOAN_HELD;
    l->geom = *g;
    PYF_LIST_PUSH(p->loans, l);
    return l;
}

/* ForkError unless in the process that made the loan. */
static bool loan_home(pyf_loan *l, const char *what)
{
    if (pyf_home(l->pub->link.gen))
        return true;
    pyf_raise_forked(what, "Loan", l->pub->link.pid);
    return false;
}

static void loan_give_back(pyf_loan *l)
{
    pyf_pub *p = l->pub;

    if (l->state != PYF_LOAN_HELD)
        return;
    l->state = PYF_LOAN_RELEASED;
    /* A forked child only forgets its parent's loan. */
    if (p->pub == NULL || !pyf_home(p->link.gen))
        return;
    pyf_lock(p->lock);
    if (p->pub != NULL) { /* not destroyed while this thread waited for the lock */
        switch (l->kind) {
        case PYF_IMAGE:
            ferry_image_loan_release(p->pub, &l->u.img);
            break;
        case PYF_CLOUD:
            ferry_pointcloud_loan_release(p->pub, &l->u.pc);
            break;
        case PYF_TENSOR:
            ferry_tensor_loan_release(p->pub, &l->u.t);
            break;
        default:
            ferry_loan_release(p->pub, l->payload);
            break;
        }
    }
    pyf_pub_unlock(p);
}

static void loan_dealloc(PyObject *self)
{
    pyf_loan *l = (pyf_loan *)self;
    pyf_pub *p = l->pub;

    if (p != NULL) {
        loan_give_back(l);
        PYF_LIST_REMOVE(p->loans, l);
        Py_DECREF((PyObject *)p);
    }
    pyf_geom_clear(&l->geom);
    pyf_free(self);
}

static int loan_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    pyf_loan *l = (pyf_loan *)self;

    if (!loan_home(l, "Loan buffer"))
        return -1;
    if (l->state != PYF_LOAN_HELD) {
        PyErr_SetString(PyExc_BufferError, "the loan was published or released: its memory is "
                                           "no longer yours to write");
        return -1;
    }
    if (pyf_geom_export(&l->geom, self, view, flags, false) < 0)
        return -1;
    l->exports++;
    return 0;
}

static void loan_releasebuffer(PyObject *self, Py_buffer *view)
{
    pyf_loan *l = (pyf_loan *)self;

    (void)view;
    l->exports--;
    /* The last array over a loan of a closed publisher: it can go now. */
    if (l->exports == 0 && l->pub->link.closed)
        pyf_child_finish(&l->pub->link);
}

/* release(); also __exit__ (exit_args, its arguments), which gives back a loan not published in
 * the block and says nothing otherwise. */
static PyObject *loan_release(PyObject *self, PyObject *exit_args)
{
    pyf_loan *l = (pyf_loan *)self;

    if (!loan_home(l, exit_args != NULL ? "Loan.__exit__" : "Loan.release"))
        return NULL;
    if (exit_args == NULL && l->state != PYF_LOAN_HELD)
        return pyf_raise(FERRY_ESTATE, "Loan.release: the loan was %s already",
                         l->state == PYF_LOAN_PUBLISHED ? "published" : "released");
    if (exit_args == NULL && l->pub->link.closed)
        return pyf_raise_closed("Loan.release: the publisher");
    loan_give_back(l);
    Py_RETURN_NONE;
}

static PyObject *loan_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    return pyf_entered(self, loan_home((pyf_loan *)self, "Loan.__enter__"));
}

static ferry_stamp *loan_stamp(pyf_loan *l)
{
    switch (l->kind) {
    case PYF_IMAGE:
        return &l->u.img.header->stamp;
    case PYF_CLOUD:
        return &l->u.pc.header->stamp;
    case PYF_TENSOR:
        return &l->u.t.header->stamp;
    default:
        return NULL;
    }
}

static char *loan_frame_id(pyf_loan *l)
{
    switch (l->kind) {
    case PYF_IMAGE:
        return l->u.img.header->frame_id;
    case PYF_CLOUD:
        return l->u.pc.header->frame_id;
    case PYF_TENSOR:
        return l->u.t.header->frame_id;
    default:
        return NULL;
    }
}

static bool loan_usable(pyf_loan *l, const char *what)
{
    if (l->state == PYF_LOAN_HELD)
        return true;
    pyf_raise(FERRY_ESTATE, "Loan.%s: the loan was %s", what,
              l->state == PYF_LOAN_PUBLISHED ? "published" : "released");
    return false;
}

enum {
    LG_SIZE,
    LG_STATE,
    LG_STAMP,
    LG_FRAME_ID,
    LG_WIDTH,
    LG_HEIGHT,
    LG_ENCODING,
    LG_STEP,
    LG_KIND,
    LG_SHAPE,
    LG_DTYPE
};

static PyObject *loan_get(PyObject *self, void *closure)
{
    static const char *const states[] = {"loaned", "published", "released"};
    pyf_loan *l = (pyf_loan *)self;
    int what = (int)(intptr_t)closure;

    if (!loan_home(l, "Loan attribute"))
        return NULL;
    if (what == LG_STATE)
        return PyUnicode_FromString(states[l->state]);
    if (what == LG_KIND)
        return PyUnicode_FromString(pyf_kind_name(l->kind));
    if (what == LG_SIZE)
        return PyLong_FromSize_t(l->size);
    if (!loan_usable(l, "header"))
        return NULL;
    switch (what) {
    case LG_STAMP:
        if (loan_stamp(l) != NULL)
            return pyf_stamp_get(loan_stamp(l));
        break;
    case LG_FRAME_ID:
        if (loan_frame_id(l) != NULL)
            return PyUnicode_FromString(loan_frame_id(l));
        break;
    case LG_WIDTH:
        if (l->kind == PYF_IMAGE)
            return PyLong_FromUnsignedLong(l->u.img.header->width);
        if (l->kind == PYF_CLOUD)
            return PyLong_FromUnsignedLong(l->u.pc.header->width);
        break;
    case LG_HEIGHT:
        if (l->kind == PYF_IMAGE)
            return PyLong_FromUnsignedLong(l->u.img.header->height);
        if (l->kind == PYF_CLOUD)
            return PyLong_FromUnsignedLong(l->u.pc.header->height);
        break;
    case LG_ENCODING:
        if (l->kind == PYF_IMAGE)
            return PyUnicode_FromString(l->u.img.header->encoding);
        break;
    case LG_STEP:
        if (l->kind == PYF_IMAGE)
            return PyLong_FromUnsignedLong(l->u.img.header->step);
        break;
    case LG_SHAPE:
        if (l->kind != PYF_BYTES) {
            PyObject *t = PyTuple_New(l->geom.ndim);
            int i;

            if (t == NULL)
                return NULL;
            for (i = 0; i < l->geom.ndim; i++)
                PyTuple_SetItem(t, i, PyLong_FromSsize_t(l->geom.shape[i]));
            return t;
        }
        break;
    case LG_DTYPE:
        if (l->kind == PYF_TENSOR) {
            ferry_dtype dt = 0;

            ferry_dtype_from_dl(l->u.t.header->dtype, &dt);
            return PyUnicode_FromString(ferry_dtype_name(dt));
        }
        break;
    }
    PyErr_Format(PyExc_AttributeError, "a %s loan has no such attribute", pyf_kind_name(l->kind));
    return NULL;
}

static int loan_set(PyObject *self, PyObject *value, void *closure)
{
    pyf_loan *l = (pyf_loan *)self;
    int what = (int)(intptr_t)closure;

    if (!loan_home(l, "Loan attribute"))
        return -1;
    if (!loan_usable(l, "header"))
        return -1;
    if (what == LG_STAMP && loan_stamp(l) != NULL)
        return pyf_stamp_set(loan_stamp(l), value);
    if (what == LG_FRAME_ID && loan_frame_id(l) != NULL) {
        Py_ssize_t n;
        const char *s;

        if (value == NULL) {
            PyErr_SetString(PyExc_AttributeError, "frame_id cannot be deleted");
            return -1;
        }
        s = PyUnicode_AsUTF8AndSize(value, &n);
        if (s == NULL)
            return -1;
        if (n > FERRY_FRAME_ID_MAX || (Py_ssize_t)strlen(s) != n) {
            pyf_raise(FERRY_EINVAL, "frame_id: at most %u bytes and no NUL", FERRY_FRAME_ID_MAX);
            return -1;
        }
        memset(loan_frame_id(l), 0, FERRY_FRAME_ID_MAX + 1);
        memcpy(loan_frame_id(l), s, (size_t)n);
        return 0;
    }
    PyErr_Format(PyExc_AttributeError, "this attribute of a %s loan is read-only",
                 pyf_kind_name(l->kind));
    return -1;
}

static PyMethodDef loan_methods[] = {
    {"release", loan_release, METH_NOARGS,
     "release()\n\nGives the loan back unpublished (ferry_loan_release)."},
    {"__enter__", loan_enter, METH_NOARGS, "Returns the loan."},
    {"__exit__", loan_release, METH_VARARGS,
     "Gives the loan back if it was not published in the block."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef loan_getset[] = {
    {"size", loan_get, NULL, "Bytes of the loan, header included.", (void *)LG_SIZE},
    {"state", loan_get, NULL, "\"loaned\", \"published\" or \"released\".", (void *)LG_STATE},
    {"kind", loan_get, NULL, "\"image\", \"pointcloud\", \"tensor\" or \"bytes\".",
     (void *)LG_KIND},
    {"stamp", loan_get, loan_set,
     "Acquisition time (sec, nanosec); set it from a tuple or an int of nanoseconds.",
     (void *)LG_STAMP},
    {"frame_id", loan_get, loan_set, "The header's frame_id (at most 63 bytes).",
     (void *)LG_FRAME_ID},
    {"width", loan_get, NULL, "Image or point cloud width.", (void *)LG_WIDTH},
    {"height", loan_get, NULL, "Image or point cloud height.", (void *)LG_HEIGHT},
    {"encoding", loan_get, NULL, "Image encoding.", (void *)LG_ENCODING},
    {"step", loan_get, NULL, "Image bytes per row.", (void *)LG_STEP},
    {"shape", loan_get, NULL, "Shape of the exported array.", (void *)LG_SHAPE},
    {"dtype", loan_get, NULL, "Tensor dtype name.", (void *)LG_DTYPE},
    {NULL, NULL, NULL, NULL, NULL},
};

const pyf_type_def pyf_loan_def = {
    .name = "ferry.Loan",
    .size = sizeof(pyf_loan),
    .dealloc = loan_dealloc,
    .methods = loan_methods,
    .getset = loan_getset,
    .getbuffer = loan_getbuffer,
    .releasebuffer = loan_releasebuffer,
    .doc = "A writable loan of a publisher's memory (Publisher.loan*): a buffer that\n"
           "np.asarray() turns into an array over the publisher's own pages. Publish it\n"
           "with Publisher.publish(loan); a loan dropped unpublished is given back.",
};
