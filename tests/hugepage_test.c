/*
 * Huge pages for data segments (ferry_publisher_options.huge_pages), tested with what this
 * machine offers; the test changes no system setting:
 *
 *   off            the default: 4 KiB pages, stats say off, nothing is logged; the subscriber's
 *                  mapping of a large segment still starts on a 2 MiB boundary
 *   fallback       each kind the machine does not offer (shmem_enabled never, too few free
 *                  hugetlb pages) gives a pool of 4 KiB pages, stats off, and one WARN line
 *                  through the node's log saying what was asked and why; frames published
 *                  and taken are intact
 *   thp            where shmem offers transparent huge pages: stats say thp with huge bytes,
 *                  chunks of 1080p frames start on 2 MiB boundaries after a small class was
 *                  carved, the subscriber maps them with PMDs too, frames are intact, and a
 *                  write through the subscriber's mapping faults (SIGSEGV in a child)
 *   hugetlb        the same where enough free 2 MiB hugetlb pages are set aside; and what the
 *                  pool reserved goes back to the system when it is destroyed
 *   auto           AUTO gets hugetlb, else thp, else 4 KiB pages with the warning
 *
 * A case the machine cannot test is skipped; the program exits 77 when every case is.
 */
#include "testutil.h"

#include "platform/platform.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define TYPE "test/huge"
#define TOPIC "/huge/cam"
#define MIB ((size_t)1 << 20)
#define FRAME ((size_t)6220800) /* 1920 x 1080 x 3 */
#define SMALL ((size_t)100000)
#define POOL (32 * MIB)
#define FRAMES 4

/* --- helpers ------------------------------------------------------------------------------ */

typedef struct logbook {
    int warns;
    char last[512];
} logbook;

static void log_cb(void *arg, ferry_log_level level, const char *message)
{
    logbook *b = arg;
    if (level != FERRY_LOG_WARN)
        return;
    b->warns++;
    snprintf(b->last, sizeof b->last, "%s", message);
}

static bool thp_offered(void)
{
    char mode[32];
    return ferry__thp_shmem_mode(mode, sizeof mode) == 0 && strcmp(mode, "never") != 0 &&
           strcmp(mode, "deny") != 0;
}

/* A POOL-byte pool needs its bytes plus 2 MiB of header in 2 MiB pages. */
static bool hugetlb_offered(void)
{
    uint64_t available, total;
    return ferry__hugetlb_pages(&available, &total) == 0 &&
           available >= POOL / FERRY__HUGE_PAGE + 1;
}

static const char *kind_name(ferry_huge_pages h)
{
    return h == FERRY_HUGE_PAGES_THP       ? "thp"
           : h == FERRY_HUGE_PAGES_HUGETLB ? "hugetlb"
           : h == FERRY_HUGE_PAGES_AUTO    ? "auto"
                                           : "off";
}

static ferry_node *node_logged(logbook *b)
{
    ferry_node_options no = tu_node_options("huge");
    no.log = log_cb;
    no.log_arg = b;
    ferry_node *node = NULL;
    TU_OK(ferry_node_create(&node, &no));
    return node;
}

static ferry_publisher *make_pub(ferry_node *node, ferry_huge_pages huge)
{
    ferry_publisher_options o;
    ferry_publisher_options_init(&o);
    o.pool_bytes = POOL;
    o.max_sample_size = 8 * MIB;
    o.huge_pages = huge;
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, 1, &o));
    return pub;
}

static ferry_subscriber *make_sub(ferry_node *node)
{
    ferry_subscriber_options o;
    ferry_subscriber_options_init(&o);
    o.depth = FRAMES;
    o.max_held = FRAMES;
    o.prefault = true;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, 1, &o));
    return sub;
}

static uint64_t mapping_huge_bytes(const void *addr)
{
    tu_mapping m;
    TU_CHECK_MSG(tu_map_of(addr, &m), "no mapping covers %p", addr);
    uint64_t bytes = 0;
    TU_CHECK(ferry__map_huge_bytes((const void *)m.start, &bytes) == 0);
    return bytes;
}

/* Publishes a small sample and FRAMES frames, takes them all in the same process and checks
 * them; with huge set, also that the frames lie in 2 MiB-aligned chunks mapped with huge pages
 * on both sides and that the subscriber cannot write them. */
static void run_frames(ferry_publisher *pub, ferry_subscriber *sub, bool huge)
{
    tu_connect_local(pub, 1, sub, 1);
    tu_publish_pattern(pub, SMALL, 1);
    TU_TAKE_INTACT(sub, SMALL);
    ferry_sample s[FRAMES];
    for (int i = 0; i < FRAMES; i++)
        tu_publish_pattern(pub, FRAME, 2 + (uint64_t)i);
    for (int i = 0; i < FRAMES; i++) {
        TU_TAKE(sub, &s[i]);
        TU_SAMPLE_INTACT(&s[i], FRAME);
    }
    tu_mapping m;
    TU_CHECK_MSG(tu_map_of(s[0].data, &m), "no mapping covers %p", s[0].data);
    TU_CHECK_MSG(strcmp(m.perms, "r--s") == 0, "subscriber mapping %s", m.perms);
    TU_EQ_U64(m.start % FERRY__HUGE_PAGE, 0);
    if (huge) {
        /* The chunk (its header is the payload's first 64 bytes before it) is aligned. */
        for (int i = 0; i < FRAMES; i++)
            TU_EQ_U64(((uintptr_t)s[i].data - 64) % FERRY__HUGE_PAGE, 0);
        uint64_t mapped = mapping_huge_bytes(s[0].data);
        TU_CMP_U64(mapped, >=, FERRY__HUGE_PAGE);
        printf("    subscriber maps %llu MiB with huge pages\n",
               (unsigned long long)(mapped / MIB));
        errno = 0;
        TU_CHECK(mprotect((void *)m.start, FERRY__HUGE_PAGE, PROT_READ | PROT_WRITE) != 0);
        TU_CMP_I64(errno, ==, EACCES);
        int st = tu_write_status(s[1].data);
        TU_CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
                     "a write into a taken sample did not fault (status 0x%x)", st);
    }
    for (int i = 0; i < FRAMES; i++) {
        TU_SAMPLE_INTACT(&s[i], FRAME);
        TU_OK(ferry_release(sub, &s[i]));
    }
}

/* The whole scenario for one asked kind; expect is what the pool must end up with. */
static void scenario(ferry_huge_pages asked, ferry_huge_pages expect)
{
    logbook book = {0};
    ferry_node *node = node_logged(&book);
    ferry_publisher *pub = make_pub(node, asked);
    ferry_subscriber *sub = make_sub(node);
    bool huge = expect != FERRY_HUGE_PAGES_OFF;
    if (asked != FERRY_HUGE_PAGES_OFF && !huge) {
        /* Loud: one warning that names what was asked and what is used instead. */
        char want[64];
        snprintf(want, sizeof want, "huge pages (%s) unavailable: ", kind_name(asked));
        TU_EQ_U64(book.warns, 1);
        TU_CHECK_MSG(strstr(book.last, want) && strstr(book.last, "; using 4 KiB pages"),
                     "warning: %s", book.last);
        printf("    logged: %s\n", book.last);
    } else {
        TU_CHECK_MSG(book.warns == 0, "unexpected warning: %s", book.last);
    }
    run_frames(pub, sub, huge);
    ferry_publisher_stats ps;
    TU_OK(ferry_publisher_stats_get(pub, &ps));
    TU_CHECK_MSG(ps.huge_pages == expect, "stats say %s, expected %s", kind_name(ps.huge_pages),
                 kind_name(expect));
    if (huge) {
        /* Four frames of three huge pages each, and the small class. */
        TU_CMP_U64(ps.huge_bytes, >=, FERRY__HUGE_PAGE);
        TU_CMP_U64(ps.huge_bytes, <=, ps.pool_bytes + FERRY__HUGE_PAGE);
        printf("    %s pool: %llu of %llu MiB carved are huge\n", kind_name(expect),
               (unsigned long long)(ps.huge_bytes / MIB),
               (unsigned long long)(ps.pool_bytes / MIB));
    } else {
        TU_EQ_U64(ps.huge_bytes, 0);
    }
    TU_EQ_U64(ps.published, FRAMES + 1);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
}

/* --- cases -------------------------------------------------------------------------------- */

static int test_off(void)
{
    scenario(FERRY_HUGE_PAGES_OFF, FERRY_HUGE_PAGES_OFF);
    return 0;
}

static int test_fallback(void)
{
    int tested = 0;
    if (!thp_offered()) {
        scenario(FERRY_HUGE_PAGES_THP, FERRY_HUGE_PAGES_OFF);
        tested++;
    }
    if (!hugetlb_offered()) {
        scenario(FERRY_HUGE_PAGES_HUGETLB, FERRY_HUGE_PAGES_OFF);
        tested++;
    }
    if (!thp_offered() && !hugetlb_offered()) {
        scenario(FERRY_HUGE_PAGES_AUTO, FERRY_HUGE_PAGES_OFF);
        tested++;
    }
    if (tested == 0)
        printf("    every kind is offered here: no fallback to see\n");
    return tested ? 0 : TU_SKIP;
}

static int test_thp(void)
{
    if (!thp_offered()) {
        printf("    shmem_enabled offers no transparent huge pages\n");
        return TU_SKIP;
    }
    scenario(FERRY_HUGE_PAGES_THP, FERRY_HUGE_PAGES_THP);
    return 0;
}

static int test_hugetlb(void)
{
    uint64_t before, total;
    if (!hugetlb_offered()) {
        printf("    too few free 2 MiB hugetlb pages\n");
        return TU_SKIP;
    }
    TU_CHECK(ferry__hugetlb_pages(&before, &total) == 0);
    scenario(FERRY_HUGE_PAGES_HUGETLB, FERRY_HUGE_PAGES_HUGETLB);
    uint64_t after;
    TU_CHECK(ferry__hugetlb_pages(&after, &total) == 0);
    TU_EQ_U64(after, before);
    return 0;
}

static int test_auto(void)
{
    if (!thp_offered() && !hugetlb_offered())
        return TU_SKIP; /* the fallback case covers it */
    scenario(FERRY_HUGE_PAGES_AUTO,
             hugetlb_offered() ? FERRY_HUGE_PAGES_HUGETLB : FERRY_HUGE_PAGES_THP);
    return 0;
}

static int test_options(void)
{
    ferry_node *node = tu_node("opts");
    ferry_publisher_options o;
    ferry_publisher_options_init(&o);
    TU_EQ_U64(o.huge_pages, FERRY_HUGE_PAGES_OFF);
    o.huge_pages = (ferry_huge_pages)(FERRY_HUGE_PAGES_AUTO + 1);
    ferry_publisher *pub = NULL;
    TU_ERR(ferry_publisher_create(&pub, node, TOPIC, TYPE, 1, &o), FERRY_EINVAL);
    TU_OK(ferry_node_destroy(node));
    return 0;
}

/* --- main --------------------------------------------------------------------------------- */

int main(void)
{
    int results[] = {
        TU_RUN_ISOLATED(test_options),  TU_RUN_ISOLATED(test_off),
        TU_RUN_ISOLATED(test_fallback), TU_RUN_ISOLATED(test_thp),
        TU_RUN_ISOLATED(test_hugetlb),  TU_RUN_ISOLATED(test_auto),
    };
    /* test_options and test_off test nothing of the machine's huge pages: they do not count. */
    return tu_results(results, (int)(sizeof results / sizeof results[0]), 2);
}
