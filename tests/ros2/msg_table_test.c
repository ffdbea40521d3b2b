/*
 * The table of src/ros2/msg_table.h against the .msg texts it holds: every kind's members are the
 * fields of its ROS 2 type, in order, with their types and array kinds, nested types resolved as
 * rosidl resolves them; every definition is the one rosbag2 composes from those texts; every
 * layout fits the buffers the walkers use. Given a ROS 2 share directory
 * (/opt/ros/humble/share), each text is also compared with ROS 2's own .msg file, comments and
 * runs of blanks left out (exit 77 when the directory is not there).
 */
#include "testutil.h"

#include "msg_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_ 256

/* The next line of *text (without its '\n') into line; false at the end. */
static bool next_line(const char **text, char line[LINE_MAX_])
{
    const char *nl;
    size_t n;

    if (**text == '\0')
        return false;
    nl = strchr(*text, '\n');
    TU_CHECK(nl != NULL);
    n = (size_t)(nl - *text);
    TU_CHECK(n < LINE_MAX_);
    memcpy(line, *text, n);
    line[n] = '\0';
    *text = nl + 1;
    return true;
}

/* "pkg/msg/Name" of a field's type name as written in def: "Name" (def's package),
 * "pkg/Name" or "pkg/msg/Name". */
static void full_name(const ferry_ros2_msg_def *def, const char *type, char out[3 * LINE_MAX_])
{
    const char *slash = strchr(type, '/');

    if (slash == NULL)
        snprintf(out, 3 * LINE_MAX_, "%.*s/msg/%s", (int)(strchr(def->name, '/') - def->name),
                 def->name, type);
    else if (strstr(type, "/msg/") != NULL)
        snprintf(out, 3 * LINE_MAX_, "%s", type);
    else
        snprintf(out, 3 * LINE_MAX_, "%.*s/msg/%s", (int)(slash - type), type, slash + 1);
}

static uint8_t prim_type(const char *t)
{
    static const struct {
        const char *name;
        uint8_t type;
    } prims[] = {
        {"bool", FERRY_ROS2_M_BOOL},     {"uint8", FERRY_ROS2_M_U8},  {"int32", FERRY_ROS2_M_I32},
        {"uint32", FERRY_ROS2_M_U32},    {"int64", FERRY_ROS2_M_I64}, {"float64", FERRY_ROS2_M_F64},
        {"string", FERRY_ROS2_M_STRING},
    };
    size_t i;

    for (i = 0; i < sizeof prims / sizeof prims[0]; i++)
        if (strcmp(t, prims[i].name) == 0)
            return prims[i].type;
    return FERRY_ROS2_M_STRUCT;
}

/* The members of def match its text's fields, recursively. */
static void check_members(const ferry_ros2_msg_def *def, const ferry_ros2_member *m, uint32_t n)
{
    const char *text = def->text;
    char line[LINE_MAX_], type[LINE_MAX_], name[LINE_MAX_], full[3 * LINE_MAX_];
    uint32_t i = 0;

    while (next_line(&text, line)) {
        char *bracket;
        uint8_t want, array = FERRY_ROS2_A_NONE;
        unsigned long len = 0;

        TU_CHECK_MSG(sscanf(line, "%255s %255s", type, name) == 2, "%s: '%s'", def->name, line);
        if (strchr(name, '=') != NULL) /* a constant */
            continue;
        TU_CHECK_MSG(i < n, "%s: no member for '%s'", def->name, line);
        TU_EQ_STR(m[i].name, name);
        bracket = strchr(type, '[');
        if (bracket != NULL) {
            *bracket = '\0';
            array = bracket[1] == ']' ? FERRY_ROS2_A_SEQ : FERRY_ROS2_A_FIXED;
            len = strtoul(bracket + 1, NULL, 10);
        }
        want = prim_type(type);
        if (m[i].type == FERRY_ROS2_M_BULK) {
            TU_CHECK_MSG(want == FERRY_ROS2_M_U8 && array == FERRY_ROS2_A_SEQ, "%s.%s", def->name,
                         name);
        } else if (m[i].type == FERRY_ROS2_M_DTYPE) {
            TU_CHECK_MSG(want == FERRY_ROS2_M_STRING && array == FERRY_ROS2_A_NONE, "%s.%s",
                         def->name, name);
        } else {
            TU_CHECK_MSG(m[i].type == want, "%s.%s: type %u, the text's %u", def->name, name,
                         (unsigned)m[i].type, (unsigned)want);
            TU_CHECK_MSG(m[i].array == array, "%s.%s: array %u, the text's %u", def->name, name,
                         (unsigned)m[i].array, (unsigned)array);
            if (array == FERRY_ROS2_A_FIXED)
                TU_EQ_U64(m[i].len, len);
            if (array == FERRY_ROS2_A_SEQ)
                TU_CHECK_MSG(m[i].len > 0, "%s.%s holds no element", def->name, name);
            TU_CHECK_MSG(m[i].json == 0 || m[i].type == FERRY_ROS2_M_BOOL, "%s.%s", def->name,
                         name);
        }
        if (want == FERRY_ROS2_M_STRUCT) {
            full_name(def, type, full);
            TU_CHECK_MSG(m[i].def != NULL && m[i].members != NULL, "%s.%s", def->name, name);
            TU_EQ_STR(m[i].def->name, full);
            TU_CHECK_MSG(array == FERRY_ROS2_A_NONE ||
                             (m[i].view_stride > 0 && m[i].msg_stride > 0),
                         "%s.%s: strides", def->name, name);
            check_members(m[i].def, m[i].members, m[i].nmembers);
        }
        i++;
    }
    TU_CHECK_MSG(i == n, "%s: %u members for %u fields", def->name, (unsigned)n, (unsigned)i);
}

/* What rosbag2 composes: def's text, then each type used, depth first in order of first use. */
static void compose(const ferry_ros2_member *m, uint32_t n, const ferry_ros2_msg_def **seen,
                    size_t *nseen, char *out, size_t cap)
{
    uint32_t i;
    size_t k;

    for (i = 0; i < n; i++) {
        const ferry_ros2_msg_def *d = m[i].def;
        const char *slash;
        size_t used = strlen(out);

        if (m[i].type != FERRY_ROS2_M_STRUCT)
            continue;
        for (k = 0; k < *nseen && seen[k] != d; k++) {
        }
        if (k < *nseen)
            continue;
        seen[(*nseen)++] = d;
        slash = strchr(d->name, '/');
        snprintf(out + used, cap - used,
                 "================================================================================"
                 "\nMSG: %.*s/%s\n%s",
                 (int)(slash - d->name), d->name, slash + 5, d->text);
        compose(m[i].members, m[i].nmembers, seen, nseen, out, cap);
    }
}

static void test_kinds(void)
{
    ferry_ros2_msg msg;
    int k;

    for (k = FERRY_ROS2_NONE + 1; k < FERRY_ROS2_KIND_COUNT_; k++) {
        const ferry_ros2_kind_desc *d = ferry_ros2_kind_desc_of((ferry_ros2_kind)k);
        const ferry_ros2_msg_def *seen[64];
        size_t nseen = 0;
        char def[8192];

        TU_CHECK(d != NULL && d == &ferry_ros2_kind_descs[k - 1]);
        TU_EQ_U64(d->kind, k);
        TU_CMP_U64(d->view_size, <=, FERRY_ROS2_VIEW_MAX);
        TU_CMP_U64(d->msg_size, <=, sizeof msg.u);
        TU_EQ_U64(ferry_ros2_kind_of_ferry(d->ferry_type, d->ferry_hash), k);
        TU_EQ_U64(ferry_ros2_kind_of_name(d->def->name), k);
        check_members(d->def, d->members, d->nmembers);
        snprintf(def, sizeof def, "%s", d->def->text);
        compose(d->members, d->nmembers, seen, &nseen, def, sizeof def);
        TU_EQ_STR(ferry_ros2_definition((ferry_ros2_kind)k), def);
    }
    TU_CHECK(ferry_ros2_kind_desc_of(FERRY_ROS2_NONE) == NULL);
    TU_CHECK(ferry_ros2_kind_desc_of(FERRY_ROS2_KIND_COUNT_) == NULL);
}

/* A .msg file as the table keeps it: no comments, no blank lines, single blanks, none around
 * a constant's '='. */
static char *normalise(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[1024], *out;
    size_t used = 0, cap = 1 << 16;

    TU_CHECK_MSG(f != NULL, "cannot open %s", path);
    out = calloc(1, cap);
    TU_CHECK(out != NULL);
    while (fgets(line, sizeof line, f) != NULL) {
        char *hash = strchr(line, '#'), *p = line;
        bool blank = true, had = false;

        if (hash != NULL)
            *hash = '\0';
        for (; *p != '\0'; p++) {
            if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
                had = !blank;
                continue;
            }
            if (had && *p != '=' && out[used - 1] != '=')
                out[used++] = ' ';
            out[used++] = *p;
            blank = had = false;
            TU_CHECK(used + 2 < cap);
        }
        if (!blank)
            out[used++] = '\n';
    }
    fclose(f);
    return out;
}

static const char *share;

static void test_ros_files(void)
{
    size_t i, compared = 0;

    for (i = 0; i < ferry_ros2_msg_defs_count; i++) {
        const ferry_ros2_msg_def *d = ferry_ros2_msg_defs[i];
        const char *slash = strchr(d->name, '/');
        char path[1024];
        char *text;

        if (strncmp(d->name, "ferry_msgs/", 11) == 0) /* ferry's own */
            continue;
        snprintf(path, sizeof path, "%s/%.*s/msg/%s.msg", share, (int)(slash - d->name), d->name,
                 slash + 5);
        text = normalise(path);
        TU_EQ_STR(d->text, text);
        free(text);
        compared++;
    }
    TU_CMP_U64(compared, >, 0);
}

int main(int argc, char **argv)
{
    char probe[1024];
    FILE *f;

    TU_RUN(test_kinds);
    if (argc < 2)
        return 0;
    share = argv[1];
    snprintf(probe, sizeof probe, "%s/std_msgs/msg/Header.msg", share);
    f = fopen(probe, "r");
    if (f == NULL) {
        printf("SKIP: no ROS 2 .msg files under %s\n", share);
        return TU_SKIP;
    }
    fclose(f);
    TU_RUN(test_ros_files);
    return 0;
}
