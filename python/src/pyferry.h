/*
 * What the object files of ferry._ferry declare for each other, above the ground floor (util.h,
 * args.h).
 */
#ifndef FERRY_PY_PYFERRY_H
#define FERRY_PY_PYFERRY_H

#include "args.h"
#include "export.h"
#include "functions.h"
#include "pub.h"
#include "sub.h"
#include "types.h"
#include "util.h"


/* node.c */

/* publisher.c */

/* loan.c */

/* sync.c */

#ifdef FERRY_PY_GPU
/* gpu_util.c */
/* Streams a loan or frame may be exported to besides its own. */
#define PYF_GPU_STREAMS_MAX 8
/* A cudaStream_t argument: None, an int, or a stream object (__cuda_stream__, cuda_stream or
 * ptr); the legacy default stream is 0. */
bool pyf_gpu_stream_arg(PyObject *o, uintptr_t *out);
/* __dlpack__'s consumer stream as a cudaStream_t; *sync false for -1 (no synchronisation). */
bool pyf_gpu_dl_stream(PyObject *o, uintptr_t *out, bool *sync);
/* Makes device current for the CUDA calls that follow (false: it cannot be); *prev is what
 * pyf_gpu_device_leave restores. */
bool pyf_gpu_device_enter(int device, int *prev);
void pyf_gpu_device_leave(int device, int prev);
/* Makes stream waiter wait (on the GPU) for the work enqueued on done so far. */
ferry_err pyf_gpu_stream_order(int device, uintptr_t waiter, uintptr_t done);

/* gpu.c */

/* gpu_pub.c */

#endif

/* waitset.c */
PyObject *pyf_waitset_new(pyf_node *node);

#endif
