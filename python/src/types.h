/*
 * What each file of the extension adds to the module at import: its types (as pyf_type_add
 * makes them) and its functions. Only module.c adds them; each file includes this header for
 * its own.
 */
#ifndef FERRY_PY_TYPES_H
#define FERRY_PY_TYPES_H

#include "util.h"

extern PyMethodDef pyf_functions[];        /* functions.c: now, hash, strerror, inspect, clean */
extern const pyf_type_def pyf_node_def;    /* node.c: Node */
extern const pyf_type_def pyf_pub_def;     /* publisher.c: Publisher */
extern const pyf_type_def pyf_loan_def;    /* loan.c: Loan */
extern const pyf_type_def pyf_sub_def;     /* subscriber.c: Subscriber */
extern const pyf_type_def pyf_sample_def;  /* sample.c: Sample */
extern const pyf_type_def pyf_waitset_def; /* waitset.c: WaitSet */
extern const pyf_type_def pyf_sync_def;    /* sync.c: Sync */
extern const pyf_type_def pyf_syncset_def; /* sync.c: SyncSet */
/* gpu_host.c: _sample_cuda (Sample.cuda()), which raises NotSupportedError without the GPU
 * module. */
extern PyMethodDef pyf_hostview_functions[];
#ifdef FERRY_PY_GPU
extern const pyf_type_def pyf_gpusub_def;   /* gpu.c: GpuSubscriber */
extern const pyf_type_def pyf_gpuframe_def; /* gpu_frame.c: GpuFrame */
extern const pyf_type_def pyf_gpupub_def;   /* gpu_pub.c: GpuPublisher */
extern const pyf_type_def pyf_gpuloan_def;  /* gpu_loan.c: GpuLoan */
extern const pyf_type_def pyf_hostview_def; /* gpu_host.c: HostGpuView */
extern PyMethodDef pyf_gpu_functions[];     /* gpu_util.c: gpu_device_count */
#endif

#endif
