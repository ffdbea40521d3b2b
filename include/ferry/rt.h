/*
 * ferry real-time controls: pin the calling thread to CPUs, give it SCHED_FIFO, lock the
 * process's memory as it is touched, and touch stack and heap in advance, so that a loop built
 * on ferry_loan/ferry_publish or ferry_take/ferry_release runs without page faults, without
 * heap calls and without being preempted by ordinary threads. Also the counters a test needs to
 * prove it (page faults) and the number of online CPUs.
 *
 * Concurrency: affinity and scheduling apply to the calling thread only; the memory lock and the
 * heap settings apply to the whole process. Call ferry_rt_apply from the thread to be made
 * real-time, before its loop starts (it makes system calls and may allocate). The other
 * functions are safe from any thread.
 *
 * Permissions: SCHED_FIFO needs CAP_SYS_NICE or an RLIMIT_RTPRIO at least the priority
 * (`ulimit -r`, LimitRTPRIO= in systemd); locking memory needs CAP_IPC_LOCK or an RLIMIT_MEMLOCK
 * (`ulimit -l`, LimitMEMLOCK=) that covers the process's whole address space, now and later
 * (segments are mapped whole and count fully against it). Refusals say which is missing.
 */
#ifndef FERRY_RT_H
#define FERRY_RT_H

#include <ferry/ferry.h>

#ifdef __cplusplus
extern "C" {
#endif

/** What ferry_rt_apply should do. Zeroed fields (ferry_rt_options_init) change nothing. */
typedef struct ferry_rt_options {
    /** Pin the calling thread to these CPUs (each online, 0..ferry_rt_cpu_count()-1 on most
     *  machines). ncpus 0: leave the affinity as it is. The array is read during the call only. */
    const int *cpus;
    /** Entries of cpus; 0: leave the affinity as it is. */
    size_t ncpus;
    /** 1..99: SCHED_FIFO at this priority for the calling thread; 0: leave the policy as it is.
     *  A SCHED_FIFO thread that never sleeps starves every ordinary thread of its CPU: use it
     *  for loops that wait on ferry_wait or a timer. */
    int fifo_priority;
    /** mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT): every page of the process stays in
     *  memory once touched. ONFAULT because segments are large and sparse: MCL_FUTURE alone
     *  would populate every mapping whole, a 256 MiB pool included, at the time it is mapped. */
    bool lock_memory;
    /** Touch this many bytes of the calling thread's stack now (after locking, they stay);
     *  0: none. Must fit in what is left of the stack. */
    size_t prefault_stack_bytes;
    /** Allocate, touch and free this many heap bytes, and keep them in the process
     *  (M_TRIM_THRESHOLD and M_MMAP_MAX through mallopt), so that later allocations up to that
     *  total do not fault; 0: none. Applies to the allocator arena of the calling thread;
     *  mallopt's settings are process-wide (and ignored by a sanitizer's allocator). */
    size_t prefault_heap_bytes;
} ferry_rt_options;

/** What ferry_rt_apply did. */
typedef struct ferry_rt_report {
    bool pinned;      /**< the affinity was set */
    bool fifo;        /**< SCHED_FIFO was set */
    bool locked;      /**< memory is locked */
    bool prefaulted;  /**< the stack and heap prefaults asked for were done */
    int failed_errno; /**< errno of the first failure, 0 if none */
    /** Printable: what failed and how to permit it ("SCHED_FIFO priority 80 refused: EPERM;
     *  needs CAP_SYS_NICE or an RLIMIT_RTPRIO >= 80 (ulimit -r), which is 0"), or a summary of
     *  what was applied. Always terminated. */
    char message[256];
} ferry_rt_report;

/** Fills o with "change nothing": no pinning, no SCHED_FIFO, no lock, no prefault. */
FERRY_API void ferry_rt_options_init(ferry_rt_options *o);

/**
 * Applies o in this order: affinity, SCHED_FIFO, memory lock, stack prefault, heap prefault.
 * Stops at the first failure; what was applied before it stays applied (report says what).
 * Arguments are checked before anything is applied.
 *
 * @param report  NULL, or receives what was applied and, on failure, a message
 * @retval FERRY_OK      everything asked for is applied
 * @retval FERRY_EINVAL  o is NULL; ncpus > 0 with cpus NULL; a CPU is negative, not online or
 *                       outside the CPUs this thread may use (cpuset); fifo_priority outside
 *                       0..99 (or above the system's maximum); prefault_stack_bytes larger
 *                       than what is left of the stack
 * @retval FERRY_EPERM   not permitted: SCHED_FIFO without CAP_SYS_NICE or a sufficient
 *                       RLIMIT_RTPRIO (or refused by the cgroup's real-time budget); memory
 *                       lock without CAP_IPC_LOCK or a sufficient RLIMIT_MEMLOCK; affinity
 *                       refused
 * @retval FERRY_ENOTSUP the kernel lacks MCL_ONFAULT (before 4.4)
 * @retval FERRY_ENOMEM  the heap prefault could not allocate
 * @retval FERRY_ESYS    another system call failed (errno and report->failed_errno say why)
 */
FERRY_API ferry_err ferry_rt_apply(const ferry_rt_options *o, ferry_rt_report *report);

/**
 * This process's page faults since it started (getrusage): minor (a page mapped without I/O:
 * first touch, populate) and major (with I/O). Either pointer may be NULL.
 * @retval FERRY_OK    filled
 * @retval FERRY_ESYS  getrusage failed
 */
FERRY_API ferry_err ferry_rt_page_faults(uint64_t *minor, uint64_t *major);

/**
 * The number of online CPUs.
 * @retval FERRY_OK      *count >= 1
 * @retval FERRY_EINVAL  count is NULL
 * @retval FERRY_ESYS    the system would not say
 */
FERRY_API ferry_err ferry_rt_cpu_count(uint32_t *count);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_RT_H */
