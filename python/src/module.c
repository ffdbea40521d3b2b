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

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "ferry._ferry",
    "The C extension behind the ferry package: zero-copy transport of large frames between\n"
    "processes on one host. Import ferry, not this module.",
    -1,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

/* The GPU module's types and functions where it is built, and HAVE_GPU. */
static bool gpu_types(PyObject *m)
{
#ifdef FERRY_PY_GPU
    return pyf_gpusub_types(m) && pyf_gpuframe_types(m) && pyf_gpupub_types(m) &&
           pyf_gpuloan_types(m) && pyf_hostview_types(m) && pyf_gpu_functions_add(m) &&
           PyModule_AddObjectRef(m, "HAVE_GPU", Py_True) == 0;
#else
    return pyf_hostview_types(m) && PyModule_AddObjectRef(m, "HAVE_GPU", Py_False) == 0;
#endif
}

/* What each file adds to the module, in this order. */
static bool (*const registrations[])(PyObject *module) = {
    pyf_functions_add, errors_create, pyf_node_types, pyf_pub_types, pyf_loan_types,
    pyf_sub_types, pyf_sample_types, pyf_waitset_types, pyf_sync_types, gpu_types,
};

PyMODINIT_FUNC PyInit__ferry(void);

PyMODINIT_FUNC PyInit__ferry(void)
{
    PyObject *m = PyModule_Create(&module_def);
    size_t i;

    if (m == NULL) return NULL;
    if (!pyf_fork_track()) goto fail;
    for (i = 0; i < sizeof registrations / sizeof registrations[0]; i++)
        if (!registrations[i](m)) goto fail;
    if (PyModule_AddIntConstant(m, "SPIN_OFF", FERRY_SPIN_OFF) < 0 ||
        PyModule_AddIntConstant(m, "PROTOCOL_VERSION", FERRY_PROTOCOL_VERSION) < 0 ||
        PyModule_AddStringConstant(m, "IMAGE_TYPE_NAME", FERRY_IMAGE_TYPE_NAME) < 0 ||
        PyModule_AddStringConstant(m, "POINTCLOUD_TYPE_NAME", FERRY_POINTCLOUD_TYPE_NAME) < 0 ||
        PyModule_AddStringConstant(m, "TENSOR_TYPE_NAME", FERRY_TENSOR_TYPE_NAME) < 0 ||
        PyModule_AddObject(m, "__version__",
                           PyUnicode_FromFormat("%d.%d", FERRY_VERSION_MAJOR,
                                                FERRY_VERSION_MINOR)) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
