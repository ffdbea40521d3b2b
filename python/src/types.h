/*
 * What each file of the extension adds to the module at import: its types, or its functions.
 * Only module.c calls these (each file includes this header for its own).
 */
#ifndef FERRY_PY_TYPES_H
#define FERRY_PY_TYPES_H

#include <Python.h>

#include <stdbool.h>

bool pyf_functions_add(PyObject *module); /* functions.c: now, hash, strerror, inspect, clean */
bool pyf_node_types(PyObject *module);     /* node.c: Node */
bool pyf_pub_types(PyObject *module);      /* publisher.c: Publisher */
bool pyf_loan_types(PyObject *module);     /* loan.c: Loan */
bool pyf_sub_types(PyObject *module);      /* subscriber.c: Subscriber */
bool pyf_sample_types(PyObject *module);   /* sample.c: Sample */
bool pyf_waitset_types(PyObject *module);  /* waitset.c: WaitSet */
bool pyf_sync_types(PyObject *module);     /* sync.c: Sync, SyncSet */
/* gpu_host.c: HostGpuView and _sample_cuda (Sample.cuda()); without the GPU module, only a
 * _sample_cuda that raises NotSupportedError. */
bool pyf_hostview_types(PyObject *module);
#ifdef FERRY_PY_GPU
bool pyf_gpu_functions_add(PyObject *module); /* gpu_util.c: gpu_device_count */
bool pyf_gpusub_types(PyObject *module);      /* gpu.c: GpuSubscriber */
bool pyf_gpuframe_types(PyObject *module);    /* gpu_frame.c: GpuFrame */
bool pyf_gpupub_types(PyObject *module);      /* gpu_pub.c: GpuPublisher */
bool pyf_gpuloan_types(PyObject *module);     /* gpu_loan.c: GpuLoan */
#endif

#endif
