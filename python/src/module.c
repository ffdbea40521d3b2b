/*
 * ferry._ferry: the module, its exceptions (one per ferry_err), its constants, and the
 * registration of every type and function. The one file that knows every other file.
 */
#include "util.h"

#include "types.h"

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
    {FERRY_EQOS, "ferry.QosError", NULL,
     "FERRY_EQOS: the publisher does not offer a policy the subscriber requires."},
};

static bool errors_create(PyObject *module)
{
    size_t i;

    pyf.error = PyErr_NewExceptionWithDoc(
        "ferry.Error",
        "Base of every ferry error. .code is the ferry_err number, .errname its enum name "
        "(\"FERRY_ETIMEDOUT\"); the message is the context and ferry_strerror().",
        NULL, NULL);
    if (pyf.error == NULL || PyModule_AddObjectRef(module, "Error", pyf.error) < 0)
        return false;
    for (i = 0; i < sizeof error_specs / sizeof error_specs[0]; i++) {
        const pyf_error_spec *e = &error_specs[i];
        PyObject *bases =
            e->base != NULL ? PyTuple_Pack(2, pyf.error, *e->base) : PyTuple_Pack(1, pyf.error);
        PyObject *cls;

        if (bases == NULL)
            return false;
        cls = PyErr_NewExceptionWithDoc(e->name, e->doc, bases, NULL);
        Py_DECREF(bases);
        if (cls == NULL)
            return false;
        pyf.errors[e->code] = cls;
        if (PyModule_AddObjectRef(module, strchr(e->name, '.') + 1, cls) < 0)
            return false;
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

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "ferry._ferry",
    "The C extension behind the ferry package: zero-copy transport of large frames between\n"
    "processes on one host. Import ferry, not this module.",
    -1,
    pyf_functions,
    NULL,
    NULL,
    NULL,
    NULL,
};

/* The types, in the order they are added, each kept in the module's state. */
static const struct {
    PyTypeObject **type;
    const pyf_type_def *def;
} types[] = {
    {&pyf.node_type, &pyf_node_def},         {&pyf.pub_type, &pyf_pub_def},
    {&pyf.loan_type, &pyf_loan_def},         {&pyf.sub_type, &pyf_sub_def},
    {&pyf.sample_type, &pyf_sample_def},     {&pyf.waitset_type, &pyf_waitset_def},
    {&pyf.sync_type, &pyf_sync_def},         {&pyf.syncset_type, &pyf_syncset_def},
#ifdef FERRY_PY_GPU
    {&pyf.gpusub_type, &pyf_gpusub_def},     {&pyf.gpuframe_type, &pyf_gpuframe_def},
    {&pyf.gpupub_type, &pyf_gpupub_def},     {&pyf.gpuloan_type, &pyf_gpuloan_def},
    {&pyf.hostview_type, &pyf_hostview_def},
#endif
};

/* The functions beside the module's own (functions.c). */
static PyMethodDef *const functions[] = {
    pyf_hostview_functions,
#ifdef FERRY_PY_GPU
    pyf_gpu_functions,
#endif
};

#ifdef FERRY_PY_GPU
#define HAVE_GPU Py_True
#else
#define HAVE_GPU Py_False
#endif

PyMODINIT_FUNC PyInit__ferry(void);

PyMODINIT_FUNC PyInit__ferry(void)
{
    PyObject *m = PyModule_Create(&module_def);
    size_t i;

    if (m == NULL)
        return NULL;
    if (!pyf_fork_track() || !errors_create(m))
        goto fail;
    for (i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!pyf_type_add(m, types[i].type, types[i].def))
            goto fail;
    for (i = 0; i < sizeof functions / sizeof functions[0]; i++)
        if (PyModule_AddFunctions(m, functions[i]) < 0)
            goto fail;
    if (PyModule_AddObjectRef(m, "HAVE_GPU", HAVE_GPU) < 0 ||
        PyModule_AddIntConstant(m, "SPIN_OFF", FERRY_SPIN_OFF) < 0 ||
        PyModule_AddIntConstant(m, "PROTOCOL_VERSION", FERRY_PROTOCOL_VERSION) < 0 ||
        PyModule_AddStringConstant(m, "IMAGE_TYPE_NAME", FERRY_IMAGE_TYPE_NAME) < 0 ||
        PyModule_AddStringConstant(m, "POINTCLOUD_TYPE_NAME", FERRY_POINTCLOUD_TYPE_NAME) < 0 ||
        PyModule_AddStringConstant(m, "TENSOR_TYPE_NAME", FERRY_TENSOR_TYPE_NAME) < 0 ||
        PyModule_AddObject(
            m, "__version__",
            PyUnicode_FromFormat("%d.%d", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR)) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
