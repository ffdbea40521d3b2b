/*
 * Core internals for modules such as the GPU one. Attachments: descriptors a publisher hands to
 * every subscriber, present before the first sample that refers to them, for subscribers that
 * join early and late, and closed with the connection. Notes: what a module says of an
 * endpoint's path, in its node's log and in what ferry_inspect (ferry info) shows.
 */
#include "testutil.h"

#include "core/core.h"
#include "core/status.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define TYPE "test/attach"
#define KEY 0xfe11ULL

enum { MSG_READY = 1, MSG_GO = 2, MSG_TOOK = 3 };

typedef struct args {
    tu_pipe to_parent;
    tu_pipe to_child;
} args;

/* A subscriber that finds, for each sample, the memfd attached before it and reads through it
 * the value the sample names. */
static int subscriber(void *arg)
{
    args *a = arg;
    TU_EQ_U64(tu_recv(&a->to_child, TU_WAIT_MS), MSG_GO);
    ferry_node *node = tu_node("attach_sub");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.history = 1;
    ferry_subscriber *sub;
    TU_OK(ferry_subscriber_create(&sub, node, "/att", TYPE, ferry_hash(TYPE), &so));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(&a->to_parent, MSG_READY);
    for (int got = 0; got < 4;) {
        ferry_sample s;
        ferry_err err = ferry_take(sub, &s);
        if (err == FERRY_EAGAIN) {
            TU_OK(ferry_wait(sub, TU_WAIT_NS));
            continue;
        }
        TU_OK(err);
        ferry__sample_where w;
        TU_OK(ferry__sample_where_get(sub, &s, &w));
        int fds[FERRY__ATTACH_FDS], nfds = 0;
        TU_OK(ferry__subscriber_attachment(sub, w.slot, w.gen, KEY, fds, &nfds));
        TU_EQ_U64(nfds, 1);
        uint64_t *shared = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fds[0], 0);
        TU_CHECK(shared != MAP_FAILED);
        uint64_t want;
        memcpy(&want, s.data, sizeof want);
        TU_EQ_U64(shared[0], want);
        munmap(shared, 4096);
        /* A key nobody attached is not there, and says so; one attached while we were
         * connected came before the samples that followed it. */
        TU_ERR(ferry__subscriber_attachment(sub, w.slot, w.gen, KEY + 1, fds, &nfds), FERRY_EAGAIN);
        if (want == 42 || want == 43)
            TU_OK(ferry__subscriber_attachment(sub, w.slot, w.gen, KEY + 2, fds, &nfds));
        if (want == 44) /* withdrawn before this sample was published */
            TU_ERR(ferry__subscriber_attachment(sub, w.slot, w.gen, KEY + 2, fds, &nfds),
                   FERRY_EAGAIN);
        TU_OK(ferry_release(sub, &s));
        tu_send(&a->to_parent, MSG_TOOK);
        got++;
    }
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static void publish_value(ferry_publisher *pub, uint64_t *shared, uint64_t v)
{
    shared[0] = v;
    void *p;
    TU_OK(ferry_loan(pub, sizeof v, &p));
    memcpy(p, &v, sizeof v);
    TU_OK(ferry_publish(pub, p, 0));
}

static void test_attachments(void)
{
    /* Children first, so that they do not inherit the publisher's mappings. */
    args a[2];
    pid_t kids[2];
    for (int i = 0; i < 2; i++) {
        a[i].to_parent = tu_pipe_make();
        a[i].to_child = tu_pipe_make();
        kids[i] = tu_fork(subscriber, &a[i], 30);
    }
    ferry_node *node = tu_node("attach_pub");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.history = 1;
    ferry_publisher *pub;
    TU_OK(ferry_publisher_create(&pub, node, "/att", TYPE, ferry_hash(TYPE), &po));
    int fd = memfd_create("attach-test", MFD_CLOEXEC);
    TU_CHECK(fd >= 0 && ftruncate(fd, 4096) == 0);
    uint64_t *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    TU_CHECK(shared != MAP_FAILED);

    /* Bad arguments are refused; the descriptor is duplicated, so ours may close. */
    TU_ERR(ferry__publisher_attach(pub, KEY, &fd, 0), FERRY_EINVAL);
    TU_ERR(ferry__publisher_attach(pub, KEY, NULL, 1), FERRY_EINVAL);
    TU_OK(ferry__publisher_attach(pub, KEY, &fd, 1));
    close(fd);

    /* Two subscribers join after the attachment and after the first sample, which history
     * gives them: the attachment must reach them first. */
    publish_value(pub, shared, 41);
    for (int i = 0; i < 2; i++) {
        tu_send(&a[i].to_child, MSG_GO);
        TU_EQ_U64(tu_serve_until(&pub, 1, &a[i].to_parent, TU_WAIT_MS), MSG_READY);
    }
    /* One more, attached while they are connected. */
    int fd2 = memfd_create("attach-test-2", MFD_CLOEXEC);
    TU_CHECK(fd2 >= 0);
    TU_OK(ferry__publisher_attach(pub, KEY + 2, &fd2, 1));
    close(fd2);
    for (uint64_t v = 42; v <= 44; v++) {
        /* The value lives outside the sample: change it only once both took the last one. */
        for (int i = 0; i < 2; i++)
            TU_EQ_U64(tu_serve_until(&pub, 1, &a[i].to_parent, TU_WAIT_MS), MSG_TOOK);
        if (v == 44)
            TU_OK(ferry__publisher_detach(pub, KEY + 2));
        publish_value(pub, shared, v);
    }
    for (int i = 0; i < 2; i++) {
        TU_EQ_U64(tu_serve_until(&pub, 1, &a[i].to_parent, TU_WAIT_MS), MSG_TOOK);
        TU_CHILD_OK(kids[i]);
    }
    /* A key withdrawn already, or never attached, cannot be withdrawn. */
    TU_ERR(ferry__publisher_detach(pub, KEY + 2), FERRY_ESTATE);
    munmap(shared, 4096);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

static char note_log[1024];
static void collect_log(void *arg, ferry_log_level level, const char *message)
{
    (void)arg;
    size_t n = strlen(note_log);
    if (level == FERRY_LOG_INFO)
        snprintf(note_log + n, sizeof note_log - n, "%s\n", message);
}

typedef struct notes_seen {
    int endpoints;
    char pub[FERRY_ENDPOINT_NOTE_MAX + 1], sub[FERRY_ENDPOINT_NOTE_MAX + 1];
} notes_seen;

static bool note_cb(void *arg, const ferry_endpoint_info *e)
{
    notes_seen *n = arg;
    n->endpoints++;
    memcpy(e->kind == FERRY_ENDPOINT_PUBLISHER ? n->pub : n->sub, e->note, sizeof e->note);
    return true;
}

static void test_notes(void)
{
    ferry_node_options no = tu_node_options("note");
    no.log = collect_log;
    no.log_level = FERRY_LOG_INFO;
    ferry_node *node;
    TU_OK(ferry_node_create(&node, &no));
    ferry_publisher *pub;
    ferry_subscriber *sub;
    TU_OK(ferry_publisher_create(&pub, node, "/note", TYPE, ferry_hash(TYPE), NULL));
    TU_OK(ferry_subscriber_create(&sub, node, "/note", TYPE, ferry_hash(TYPE), NULL));

    /* No note until a module gives one. */
    notes_seen seen;
    memset(&seen, 0x55, sizeof seen);
    seen.endpoints = 0;
    TU_OK(ferry_inspect(tu_dir(), tu_domain(), "/note", note_cb, &seen));
    TU_EQ_U64(seen.endpoints, 2);
    TU_CHECK(seen.pub[0] == '\0' && seen.sub[0] == '\0');

    /* A note is logged and shown; a long one is cut to the field, a later one replaces it
     * whole, and control characters are not passed to a terminal. */
    note_log[0] = '\0';
    char lng[400];
    memset(lng, 'x', sizeof lng - 1);
    lng[sizeof lng - 1] = '\0';
    ferry__endpoint_note(pub, "path %d", 1);
    ferry__endpoint_note(sub, "%s", lng);
    ferry__endpoint_note(sub, "short\x1b[2J");
    TU_CHECK(strstr(note_log, "/note: path 1\n") != NULL);
    TU_CHECK(strstr(note_log, "/note: short\x1b[2J\n") != NULL);
    memset(&seen, 0, sizeof seen);
    TU_OK(ferry_inspect(tu_dir(), tu_domain(), "/note", note_cb, &seen));
    TU_CHECK(strcmp(seen.pub, "path 1") == 0);
    TU_CHECK(strcmp(seen.sub, "short?[2J") == 0);
    ferry__endpoint_note(sub, "%s", lng);
    TU_OK(ferry_inspect(tu_dir(), tu_domain(), "/note", note_cb, &seen));
    TU_EQ_U64(strlen(seen.sub), FERRY_ENDPOINT_NOTE_MAX);
    TU_CHECK(strspn(seen.sub, "x") == FERRY_ENDPOINT_NOTE_MAX);
    ferry__endpoint_note(NULL, "ignored");

    /* A status file another process scribbled on: a note without its NUL, all escapes, is read
     * as far as the field goes, every byte made printable. */
    char dir[PATH_MAX], path[PATH_MAX + 300];
    tu_topic_path("/note", dir, sizeof dir);
    DIR *d = opendir(dir);
    TU_CHECK(d != NULL);
    int scribbled = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, "sub.", 4) != 0 || !strstr(e->d_name, ".status"))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        TU_CHECK(fd >= 0);
        char esc[FERRY_ENDPOINT_NOTE_MAX + 1];
        memset(esc, 0x1b, sizeof esc);
        TU_CHECK(pwrite(fd, esc, sizeof esc, offsetof(ferry__status, note)) == sizeof esc);
        close(fd);
        scribbled++;
    }
    closedir(d);
    TU_EQ_U64(scribbled, 1);
    TU_OK(ferry_inspect(tu_dir(), tu_domain(), "/note", note_cb, &seen));
    TU_EQ_U64(strlen(seen.sub), FERRY_ENDPOINT_NOTE_MAX);
    TU_CHECK(strspn(seen.sub, "?") == FERRY_ENDPOINT_NOTE_MAX);

    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

int main(void)
{
    TU_RUN(test_attachments);
    TU_RUN(test_notes);
    return 0;
}
