/*
 * The type descriptions of ros2_types.h from rmw_ferry_cpp's graph files. A file is a header
 * line "ferry-ros2-graph 1 <body length> <FNV-1a 64 of the body, 16 hex>" and a body of lines;
 * the ones read here are "D <type> <hash, 16 hex> <cdr|plain> <text>", text percent-encoded
 * (%25 %0A %0D %20 for '%', '\n', '\r', ' '). The writer rewrites a file in place, so a read
 * may see it half written: the checksum tells, and the file is read again.
 */
#include "ros2_types.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GRAPH_MAGIC "ferry-ros2-graph"
#define GRAPH_FOLDER ".ros2"
#define READ_ATTEMPTS 4

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    size_t i;

    for (i = 0; i < n; i++) {
        h ^= (uint8_t)p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* A decimal or hex number of at most max_digits digits at *p, ending at a space or newline. */
static bool read_number(const char **p, const char *end, unsigned base, unsigned max_digits,
                        uint64_t *out)
{
    uint64_t v = 0;
    unsigned n = 0;

    while (*p < end && n < max_digits) {
        char c = **p;
        unsigned d;

        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (base == 16 && c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else
            break;
        v = v * base + d;
        (*p)++;
        n++;
    }
    *out = v;
    return n > 0;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The text of a D line, decoded into a new string. */
static ferry_err decode_text(const char *p, const char *end, ferry_ros2_type_info *out)
{
    size_t n = (size_t)(end - p), o = 0;
    char *d;

    if (n > 3 * (size_t)FERRY_ROS2_DEFINITION_MAX)
        return FERRY_EPROTO;
    d = malloc(n + 1);
    if (d == NULL)
        return FERRY_ENOMEM;
    while (p < end) {
        if (*p == '%') {
            int hi, lo;

            if (end - p < 3 || (hi = hex_digit(p[1])) < 0 || (lo = hex_digit(p[2])) < 0) {
                free(d);
                return FERRY_EPROTO;
            }
            d[o++] = (char)(hi << 4 | lo);
            p += 3;
        } else {
            d[o++] = *p++;
        }
    }
    if (o > FERRY_ROS2_DEFINITION_MAX || memchr(d, '\0', o) != NULL) {
        free(d);
        return FERRY_EPROTO;
    }
    d[o] = '\0';
    out->definition = d;
    out->definition_size = o;
    return FERRY_OK;
}

/* One body line: FERRY_OK when it is the D line wanted, FERRY_EAGAIN when it is another. */
static ferry_err match_line(const char *p, const char *end, const char *type_name, size_t name_len,
                            uint64_t hash, ferry_ros2_type_info *out)
{
    uint64_t h;

    if (end - p < 2 || p[0] != 'D' || p[1] != ' ')
        return FERRY_EAGAIN;
    p += 2;
    if ((size_t)(end - p) <= name_len || memcmp(p, type_name, name_len) != 0 || p[name_len] != ' ')
        return FERRY_EAGAIN;
    p += name_len + 1;
    if (end - p < 17 || !read_number(&p, end, 16, 16, &h) || p == end || *p != ' ' ||
        (hash != FERRY_ROS2_HASH_ANY && h != hash))
        return FERRY_EAGAIN;
    p++;
    if (end - p >= 4 && memcmp(p, "cdr ", 4) == 0) {
        out->wire = FERRY_ROS2_WIRE_CDR;
        p += 4;
    } else if (end - p >= 6 && memcmp(p, "plain ", 6) == 0) {
        out->wire = FERRY_ROS2_WIRE_PLAIN;
        p += 6;
    } else {
        return FERRY_EAGAIN; /* an encoding of a later version */
    }
    out->hash = h;
    return decode_text(p, end, out);
}

ferry_err ferry_ros2_graph_find(const char *text, size_t size, const char *type_name, uint64_t hash,
                                ferry_ros2_type_info *out)
{
    const char *p = text, *end, *eol;
    size_t magic = sizeof GRAPH_MAGIC - 1, name_len;
    uint64_t version, len, sum;

    if (out == NULL)
        return FERRY_EINVAL;
    memset(out, 0, sizeof *out);
    if (text == NULL || type_name == NULL)
        return FERRY_EINVAL;
    name_len = strlen(type_name);
    if (name_len == 0 || name_len > FERRY_TYPE_NAME_MAX || strchr(type_name, ' ') != NULL)
        return FERRY_EAGAIN;
    end = text + size;
    eol = memchr(text, '\n', size < 128 ? size : 128);
    if (eol == NULL || size < magic + 1 || memcmp(p, GRAPH_MAGIC " ", magic + 1) != 0)
        return FERRY_EPROTO;
    p += magic + 1;
    if (!read_number(&p, eol, 10, 4, &version) || version != 1 || p == eol || *p++ != ' ' ||
        !read_number(&p, eol, 10, 12, &len) || p == eol || *p++ != ' ' ||
        !read_number(&p, eol, 16, 16, &sum) || p != eol)
        return FERRY_EPROTO;
    p = eol + 1;
    if (len > (size_t)(end - p) || fnv1a(p, (size_t)len) != sum)
        return FERRY_EPROTO;
    end = p + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl != NULL ? nl : end;
        ferry_err err = match_line(p, line_end, type_name, name_len, hash, out);

        if (err != FERRY_EAGAIN) {
            if (err == FERRY_EPROTO) { /* a bad line of ours: look further */
                memset(out, 0, sizeof *out);
            } else {
                return err;
            }
        }
        p = line_end + (nl != NULL);
    }
    memset(out, 0, sizeof *out);
    return FERRY_EAGAIN;
}

/* Reads one graph file (at most FERRY_ROS2_GRAPH_FILE_MAX bytes) into buf. */
static ssize_t read_graph(int fd, char *buf)
{
    struct stat st;
    size_t got = 0;

    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uint64_t)st.st_size > FERRY_ROS2_GRAPH_FILE_MAX)
        return -1;
    while (got < (size_t)st.st_size) {
        ssize_t n = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

ferry_err ferry_ros2_type_find(const char *domain_dir, const char *type_name, uint64_t hash,
                               ferry_ros2_type_info *out)
{
    ferry_err result = FERRY_EAGAIN;
    struct dirent *de;
    unsigned seen = 0;
    char *buf = NULL;
    int domain_fd, dir_fd, dup_fd;
    DIR *d;

    if (out == NULL)
        return FERRY_EINVAL;
    memset(out, 0, sizeof *out);
    if (domain_dir == NULL || type_name == NULL)
        return FERRY_EINVAL;
    domain_fd = open(domain_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (domain_fd < 0)
        return FERRY_EAGAIN;
    dir_fd = openat(domain_fd, GRAPH_FOLDER, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(domain_fd);
    if (dir_fd < 0)
        return FERRY_EAGAIN;
    dup_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
    d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (d == NULL) {
        if (dup_fd >= 0)
            close(dup_fd);
        close(dir_fd);
        return FERRY_EAGAIN;
    }
    buf = malloc(FERRY_ROS2_GRAPH_FILE_MAX);
    if (buf == NULL)
        result = FERRY_ENOMEM;
    while (buf != NULL && result == FERRY_EAGAIN && (de = readdir(d)) != NULL &&
           ++seen <= FERRY_ROS2_GRAPH_FILES_MAX) {
        size_t len = strlen(de->d_name);
        int fd, attempt;

        if (de->d_name[0] == '.' || len < 7 || strcmp(de->d_name + len - 6, ".graph") != 0)
            continue;
        fd = openat(dir_fd, de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            continue;
        for (attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
            ssize_t n = read_graph(fd, buf);
            ferry_err err;

            if (n <= 0)
                break;
            err = ferry_ros2_graph_find(buf, (size_t)n, type_name, hash, out);
            if (err != FERRY_EPROTO) {
                result = err;
                break;
            }
        }
        close(fd);
    }
    free(buf);
    closedir(d);
    close(dir_fd);
    if (result != FERRY_OK)
        memset(out, 0, sizeof *out);
    return result;
}

void ferry_ros2_type_info_free(ferry_ros2_type_info *info)
{
    if (info == NULL)
        return;
    free(info->definition);
    memset(info, 0, sizeof *info);
}
