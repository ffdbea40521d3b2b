/*
 * How the recorder should write large frames to disk: the same stream of 720p RGB8 frames
 * (2,764,800 bytes, a 31-byte record header in front of each) written four ways, each to its own
 * file, and the throughput and the slowest single write printed:
 *   writev       buffered writev of header + frame (what ferry record does)
 *   writev+sfr   the same, plus sync_file_range(WRITE) of each 8 MiB written and
 *                posix_fadvise(DONTNEED) of what the kernel finished, so dirty pages never pile up
 *   odirect      O_DIRECT: each frame copied into an aligned buffer (the cost of alignment)
 *   uring        io_uring writev, 8 in flight (buffers must stay valid until completion)
 *
 *   cc -O2 -o io_bench bench/record/io_bench.c -luring && ./io_bench DIR [MiB per method]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define FRAME 2764800u
#define HEAD 31u
#define SFR_STEP (8u << 20)
#define RING 8

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void report(const char *name, uint64_t bytes, int64_t t0, int64_t worst)
{
    double s = (double)(now_ns() - t0) / 1e9;

    printf("%-11s %7.0f MB/s  slowest write %7.2f ms  (%.0f MB in %.2f s, fsync included)\n", name,
           (double)bytes / 1e6 / s, (double)worst / 1e6, (double)bytes / 1e6, s);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    uint64_t total = (uint64_t)(argc > 2 ? atoi(argv[2]) : 4096) << 20;
    uint64_t frames = total / (FRAME + HEAD);
    uint8_t head[HEAD], *frame = malloc(FRAME), *aligned;
    char path[4096];

    memset(head, 5, sizeof head);
    for (size_t i = 0; i < FRAME; i++)
        frame[i] = (uint8_t)(i * 31);
    if (posix_memalign((void **)&aligned, 4096, FRAME + HEAD + 8192) != 0)
        return 1;

    for (int method = 0; method < 4; method++) {
        static const char *names[] = {"writev", "writev+sfr", "odirect", "uring"};
        int flags = O_WRONLY | O_CREAT | O_TRUNC | (method == 2 ? O_DIRECT : 0);
        int64_t t0, worst = 0;
        uint64_t off = 0, synced = 0;
        int fd;

        snprintf(path, sizeof path, "%s/ferry-io-bench-%d.bin", dir, method);
        fd = open(path, flags, 0644);
        if (fd < 0) {
            fprintf(stderr, "%s: %s\n", path, strerror(errno));
            return 1;
        }
        t0 = now_ns();
        if (method == 3) {
            struct io_uring ring;
            struct iovec iov[RING][2];
            unsigned inflight = 0;

            if (io_uring_queue_init(RING, &ring, 0) != 0) {
                fprintf(stderr, "io_uring not available\n");
                close(fd);
                unlink(path);
                continue;
            }
            for (uint64_t i = 0; i < frames; i++) {
                int64_t w0 = now_ns();
                struct io_uring_sqe *sqe;
                unsigned slot = (unsigned)(i % RING);

                if (inflight == RING) {
                    struct io_uring_cqe *cqe;

                    io_uring_wait_cqe(&ring, &cqe);
                    io_uring_cqe_seen(&ring, cqe);
                    inflight--;
                }
                iov[slot][0] = (struct iovec){head, HEAD};
                iov[slot][1] = (struct iovec){frame, FRAME};
                sqe = io_uring_get_sqe(&ring);
                io_uring_prep_writev(sqe, fd, iov[slot], 2, off);
                io_uring_submit(&ring);
                inflight++;
                off += HEAD + FRAME;
                if (now_ns() - w0 > worst)
                    worst = now_ns() - w0;
            }
            while (inflight-- > 0) {
                struct io_uring_cqe *cqe;

                io_uring_wait_cqe(&ring, &cqe);
                io_uring_cqe_seen(&ring, cqe);
            }
            io_uring_queue_exit(&ring);
        } else {
            for (uint64_t i = 0; i < frames; i++) {
                int64_t w0 = now_ns();
                ssize_t n;

                if (method == 2) {
                    /* O_DIRECT wants aligned lengths: whole 4 KiB blocks, padding included. */
                    size_t len = (HEAD + FRAME + 4095) & ~(size_t)4095;

                    memcpy(aligned, head, HEAD);
                    memcpy(aligned + HEAD, frame, FRAME);
                    n = write(fd, aligned, len);
                    off += len;
                } else {
                    struct iovec iov[2] = {{head, HEAD}, {frame, FRAME}};

                    n = writev(fd, iov, 2);
                    off += HEAD + FRAME;
                }
                if (n < 0) {
                    perror("write");
                    return 1;
                }
                if (method == 1 && off - synced >= SFR_STEP) {
                    sync_file_range(fd, (off64_t)synced, (off64_t)(off - synced),
                                    SYNC_FILE_RANGE_WRITE);
                    if (synced >= SFR_STEP)
                        posix_fadvise(fd, 0, (off_t)(synced - SFR_STEP), POSIX_FADV_DONTNEED);
                    synced = off;
                }
                if (now_ns() - w0 > worst)
                    worst = now_ns() - w0;
            }
        }
        fsync(fd);
        report(names[method], off, t0, worst);
        close(fd);
        unlink(path);
    }
    free(frame);
    free(aligned);
    return 0;
}
