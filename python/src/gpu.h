/*
 * The GPU types, for their files (built with the GPU module, FERRY_PY_GPU): the helpers they
 * share (gpu_util.c); GpuSubscriber (gpu.c) and its frames (gpu_frame.c); GpuPublisher
 * (gpu_pub.c) and its loans (gpu_loan.c); HostGpuView (gpu_host.c) uses the helpers.
 */
#ifndef FERRY_PY_GPU_H
#define FERRY_PY_GPU_H

#include "pub.h"
#include "sub.h"
#include "util.h"

#ifdef FERRY_PY_GPU

#include <ferry/gpu.h>

#include <cuda_runtime.h>

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
/* A DLPack consumer's stream for an export (a frame or loan, `what`) made ready for stream own:
 * unless it is own, it is made to wait for own and added to the n others (at most
 * PYF_GPU_STREAMS_MAX) whose work the export's end waits for. False with BufferError. */
bool pyf_gpu_consumer(int device, uintptr_t own, uintptr_t *others, uint32_t *n, uintptr_t stream,
                      const char *what);

/* A GpuSubscriber: device frames through a Subscriber, under that subscriber's lock. */
typedef struct pyf_gpusub {
    PyObject_HEAD pyf_child link;
    pyf_sub *sub;               /* a strong reference */
    ferry_gpu_subscriber *gsub; /* NULL once destroyed (link.closed: closed) */
    int device;
    struct pyf_gpuframe *frames;     /* every frame taken and not given back */
    struct pyf_gpu_pending *pending; /* frames done while another thread held the lock */
} pyf_gpusub;
PYF_CHILD_OBJECT(pyf_gpusub);

/* gpu_frame.c */
/* A GpuFrame for frame f just taken on stream, the lock held (so that no close comes between
 * the take and the frame's place in the list); on failure the frame is given back. */
PyObject *pyf_gpuframe_wrap(pyf_gpusub *gs, const ferry_gpu_frame *f, uintptr_t stream);
/* Gives back the frames done while another thread held the lock, the subscriber's samples
 * likewise, and polls (ferry_gpu_subscriber_poll). The lock is held. */
void pyf_gpusub_drain(pyf_gpusub *gs);
/* Closing gs, the lock held: the frames no tensor reads go back now, the others when their last
 * tensor is deleted. */
void pyf_gpusub_release_frames(pyf_gpusub *gs);
/* The frames taken and not given back. */
unsigned pyf_gpusub_frames_held(const pyf_gpusub *gs);

/* Loans given back whose GPU work may still run, remembered until their memory is loaned again.
 * Beyond this many the oldest is waited for on the CPU. */
#define PYF_GPU_RETURNS_MAX 16

/* A loan given back: the next loan of ptr waits for done. */
typedef struct pyf_gpu_return {
    void *ptr;
    cudaEvent_t done;
} pyf_gpu_return;

/* A GpuPublisher: device frames through a Publisher, under that publisher's lock. */
typedef struct pyf_gpupub {
    PyObject_HEAD pyf_child link;
    pyf_pub *pub;              /* a strong reference */
    ferry_gpu_publisher *gpub; /* NULL once destroyed (link.closed: closed) */
    int device;
    ferry_gpu_ipc ipc;
    bool early_wake;
    struct pyf_gpuloan *loans; /* every GpuLoan alive */
    pyf_gpu_return returns[PYF_GPU_RETURNS_MAX];
    uint32_t nreturns;
} pyf_gpupub;
PYF_CHILD_OBJECT(pyf_gpupub);

enum { PYF_GLOAN_HELD = 0, PYF_GLOAN_PUBLISHED = 1, PYF_GLOAN_RELEASED = 2 };

/* A GpuLoan: device memory of the GpuPublisher's, exported writable with __dlpack__. */
typedef struct pyf_gpuloan {
    PyObject_HEAD pyf_gpupub *gp; /* a strong reference */
    struct pyf_gpuloan *prev, *next;
    bool linked; /* in gp->loans */
    int state;   /* PYF_GLOAN_* */
    bool out;    /* the device memory is still loaned: held, or released under a tensor */
    Py_ssize_t exports;
    void *ptr;
    size_t size; /* bytes loaned */
    bool tensor;
    ferry_tensor_header h; /* dtype, shape, strides, data_size; stamp and frame_id: the user's */
    ferry_dtype dtype;     /* FERRY_DTYPE_UINT8 for a byte loan */
    uintptr_t loan_stream; /* the stream ferry_gpu_loan made ready */
    uintptr_t streams[PYF_GPU_STREAMS_MAX]; /* consumer streams it was exported to */
    uint32_t nstreams;
} pyf_gpuloan;

/* gpu_loan.c */
/* A GpuLoan of gp's with nothing loaned yet (released). */
pyf_gpuloan *pyf_gpuloan_new(pyf_gpupub *gp);
/* Waits (on the CPU) for every given-back loan's work and forgets them: the memory is freed
 * next. The lock is held. */
void pyf_gpupub_returns_drain(pyf_gpupub *gp);
/* Makes stream wait for the work of a loan of ptr given back earlier, if any. The lock is held.
 */
ferry_err pyf_gpupub_returns_wait(pyf_gpupub *gp, void *ptr, uintptr_t stream);

#endif

#endif
