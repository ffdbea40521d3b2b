/*
 * ferry.Node: a ferry_node and the list of its children, closed in order by Node.close().
 */
#include "util.h"

#include "args.h"
#include "pub.h"
#include "sub.h"
#include "types.h"
#include "waitset.h"

#include <unistd.h>

static PyObject *node_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"domain", "dir", "name", NULL};
    PyObject *domain_arg = Py_None, *dir_arg = Py_None;
    const char *name = NULL, *dir = NULL;
    ferry_node_options o;
    ferry_err err;
    pyf_node *n;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OOz:Node", kwlist, &domain_arg, &dir_arg,
                                     &name))
        return NULL;
    ferry_node_options_init(&o);
    if (!pyf_where(domain_arg, dir_arg, &o.domain, &dir))
        return NULL;
    o.dir = dir;
    o.name = name;
    n = (pyf_node *)pyf_alloc(type);
    if (n == NULL)
        return NULL;
    n->gen = pyf_fork_gen;
    n->pid = getpid();
    n->domain = o.domain;
    if ((dir != NULL && (n->dir = pyf_strdup(dir)) == NULL) ||
        (n->name = pyf_strdup(name != NULL ? name : "node")) == NULL) {
        Py_DECREF(n);
        return NULL;
    }
    err = ferry_node_create(&n->node, &o);
    if (err != FERRY_OK) {
        n->node = NULL;
        Py_DECREF(n);
        return pyf_raise(err, "ferry_node_create(domain %u, dir %s)", (unsigned)o.domain,
                         dir != NULL ? dir : "default");
    }
    return (PyObject *)n;
}

/* Closes the children rank by rank (PYF_CLOSE_*: the synchronisers, GPU subscribers and GPU
 * publishers first, as they take from subscribers or publish through publishers, then waitsets,
 * as they refer to subscribers, then subscribers and publishers); stops at the first that
 * refuses. A child whose memory an array still reads stays in the list, closed, until its last
 * export goes. */
static int node_close_children(pyf_node *n)
{
    int rank;

    for (rank = 0; rank < PYF_CLOSE_RANKS; rank++) {
        for (;;) {
            pyf_child *c = n->children;
            PyObject *self;
            int rc;

            /* The list may change under each close (a waitset lets go of its subscribers, a
             * child is unlinked): look from the head each time. */
            while (c != NULL && (c->ops->rank != rank || c->closed))
                c = c->next;
            if (c == NULL)
                break;
            self = c->self;
            /* Closing unlinks c, which may drop the last reference to n: hold it. */
            Py_INCREF(self);
            rc = c->ops->close(self);
            Py_DECREF(self);
            if (rc < 0)
                return -1;
        }
    }
    return 0;
}

static PyObject *node_close(PyObject *self, PyObject *unused)
{
    pyf_node *n = (pyf_node *)self;

    (void)unused;
    if (!pyf_home(n->gen))
        return pyf_raise_forked("Node.close", "Node", n->pid);
    if (n->closed || n->node == NULL)
        Py_RETURN_NONE;
    Py_INCREF(self);
    /* Closed first, so that a child finished during the closes destroys the node once it is
     * the last. */
    n->closed = true;
    if (node_close_children(n) < 0) {
        n->closed = false;
        Py_DECREF(self);
        return NULL;
    }
    if (n->children == NULL && n->node != NULL) {
        ferry_err err = ferry_node_destroy(n->node);

        if (err != FERRY_OK) {
            Py_DECREF(self);
            return pyf_raise(err, "ferry_node_destroy");
        }
        n->node = NULL;
    }
    Py_DECREF(self);
    Py_RETURN_NONE;
}

static void node_dealloc(PyObject *self)
{
    pyf_node *n = (pyf_node *)self;

    /* Children hold references to the node, so none is left here. In another process it is
     * only forgotten. */
    if (n->node != NULL && pyf_home(n->gen))
        ferry_node_destroy(n->node);
    PyMem_Free(n->dir);
    PyMem_Free(n->name);
    pyf_free(self);
}

static PyObject *node_publisher(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return pyf_pub_new((pyf_node *)self, args, kwargs);
}

static PyObject *node_subscribe(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return pyf_sub_new((pyf_node *)self, args, kwargs);
}

static PyObject *node_waitset(PyObject *self, PyObject *unused)
{
    (void)unused;
    return pyf_waitset_new((pyf_node *)self);
}

static PyObject *node_get_dir(PyObject *self, void *closure)
{
    pyf_node *n = (pyf_node *)self;

    (void)closure;
    if (!pyf_node_open(n, "Node.dir"))
        return NULL;
    return PyUnicode_FromString(ferry_node_dir(n->node));
}

static PyObject *node_get_domain(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLong(((pyf_node *)self)->domain);
}

static PyObject *node_get_name(PyObject *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(((pyf_node *)self)->name);
}

static PyObject *node_get_closed(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(((pyf_node *)self)->closed || ((pyf_node *)self)->node == NULL);
}

static PyMethodDef node_methods[] = {
    {"publisher", (PyCFunction)(void (*)(void))node_publisher, METH_VARARGS | METH_KEYWORDS,
     "publisher(topic, type, *, type_hash=None, **options) -> Publisher\n\n"
     "Creates a publisher. type is \"image\" (sensor_msgs/Image), \"pointcloud\"\n"
     "(sensor_msgs/PointCloud2), \"tensor\" (ferry/Tensor) or any other type name, whose\n"
     "payloads are bytes; type_hash defaults to ferry.hash(type name). The options are the\n"
     "fields of ferry_publisher_options: max_sample_size, pool_bytes, max_chunks,\n"
     "max_subscribers, history, payload_align, on_pool_exhausted (\"error\" or \"block\"),\n"
     "block_timeout_ns, spin_ns, admit_blocking, max_chunks_per_subscriber,\n"
     "max_bytes_per_subscriber, max_pending, huge_pages (\"off\", \"thp\", \"hugetlb\",\n"
     "\"auto\")."},
    {"subscribe", (PyCFunction)(void (*)(void))node_subscribe, METH_VARARGS | METH_KEYWORDS,
     "subscribe(topic, type=None, *, type_hash=None, depth=2, overflow=\"drop_oldest\",\n"
     "          history=0, max_held=16, max_publishers=16, prefault=False, spin_ns=0,\n"
     "          busy_poll=False, background=False, timeout=None) -> Subscriber\n\n"
     "Creates a subscriber. type None takes the type of the topic's live publishers (else of\n"
     "its live subscribers), as `ferry echo` does: with neither yet, it waits for one (the GIL\n"
     "released, Ctrl-C interrupts) up to timeout seconds (None: for ever, 0: not at all), then\n"
     "raises TimeoutError. A type given subscribes at once."},
    {"waitset", node_waitset, METH_NOARGS,
     "waitset() -> WaitSet\n\nCreates a WaitSet on this node (ferry_waitset_create)."},
    {"close", node_close, METH_NOARGS,
     "close()\n\nCloses the node's synchronisers, GPU subscribers, waitsets, subscribers and\n"
     "publishers, in that order, then the node. What an array, memoryview or DLPack tensor\n"
     "still reads stays mapped: the subscriber or publisher it came from, and the node, are\n"
     "destroyed when the last of them is gone. Closing twice does nothing."},
    {"__enter__", pyf_enter_method, METH_NOARGS, "Returns the node."},
    /* node_close ignores its second argument: __exit__'s. */
    {"__exit__", node_close, METH_VARARGS, "Closes the node."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef node_getset[] = {
    {"dir", node_get_dir, NULL, "The domain directory (ferry_node_dir).", NULL},
    {"domain", node_get_domain, NULL, "The domain number.", NULL},
    {"name", node_get_name, NULL, "The node's name.", NULL},
    {"closed", node_get_closed, NULL, "True once close() ran.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

const pyf_type_def pyf_node_def = {
    .name = "ferry.Node",
    .size = sizeof(pyf_node),
    .new_ = node_new,
    .dealloc = node_dealloc,
    .methods = node_methods,
    .getset = node_getset,
    .doc = "Node(domain=None, dir=None, name=None)\n\n"
           "A context for publishers and subscribers of one domain (ferry_node_create).\n"
           "domain and dir default to the environment variables FERRY_DOMAIN (else 0) and\n"
           "FERRY_DIR (else /dev/shm/ferry-<uid>), as for the ferry command; name (letters,\n"
           "digits, '_' and '-') shows in `ferry info`. A context manager: leaving the\n"
           "block closes it (close()).",
};
