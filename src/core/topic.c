/* Names: topics, types, nodes, and the directories they map to. */
#include "core/core.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static bool is_word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

ferry_err ferry__topic_normalize(const char *topic, char *norm, size_t norm_cap, char *dirname,
                                 size_t dir_cap)
{
    if (!topic)
        return FERRY_EINVAL;
    const char *p = topic[0] == '/' ? topic + 1 : topic;
    size_t len = strnlen(p, FERRY_TOPIC_MAX + 1);
    if (len == 0 || len + (topic[0] == '/') > FERRY_TOPIC_MAX)
        return FERRY_ENAME;
    /* Segments of word characters separated by single slashes; '/' maps to '.', which no topic
     * contains, so the mapping is one to one. */
    bool seg_start = true;
    for (size_t i = 0; i < len; i++) {
        if (p[i] == '/') {
            if (seg_start)
                return FERRY_ENAME;
            seg_start = true;
        } else if (is_word_char(p[i])) {
            seg_start = false;
        } else {
            return FERRY_ENAME;
        }
    }
    if (seg_start)
        return FERRY_ENAME;
    if (norm) {
        if (norm_cap < len + 2)
            return FERRY_EINVAL;
        norm[0] = '/';
        memcpy(norm + 1, p, len + 1);
    }
    if (dirname) {
        if (dir_cap < len + 1)
            return FERRY_EINVAL;
        for (size_t i = 0; i <= len; i++)
            dirname[i] = p[i] == '/' ? '.' : p[i];
    }
    return FERRY_OK;
}

ferry_err ferry_topic_validate(const char *topic)
{
    if (!topic)
        return FERRY_EINVAL;
    return ferry__topic_normalize(topic, NULL, 0, NULL, 0);
}

ferry_err ferry__type_name_validate(const char *type_name)
{
    if (!type_name)
        return FERRY_EINVAL;
    size_t len = strnlen(type_name, FERRY_TYPE_NAME_MAX + 1);
    if (len == 0 || len > FERRY_TYPE_NAME_MAX)
        return FERRY_ENAME;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)type_name[i];
        if (c <= ' ' || c >= 0x7f)
            return FERRY_ENAME;
    }
    return FERRY_OK;
}

ferry_err ferry__node_name_validate(const char *name)
{
    size_t len = strnlen(name, FERRY_NODE_NAME_MAX + 1);
    if (len == 0 || len > FERRY_NODE_NAME_MAX)
        return FERRY_ENAME;
    for (size_t i = 0; i < len; i++)
        if (!is_word_char(name[i]) && name[i] != '-')
            return FERRY_ENAME;
    return FERRY_OK;
}

ferry_err ferry__root_path(const char *dir, char *out, size_t cap)
{
    if (dir && !dir[0])
        return FERRY_EINVAL;
    int n = dir ? snprintf(out, cap, "%s", dir)
                : snprintf(out, cap, "/dev/shm/ferry-%u", (unsigned)geteuid());
    if (n < 0 || (size_t)n >= cap)
        return FERRY_ENAME;
    return FERRY_OK;
}

ferry_err ferry__domain_path(const char *dir, uint32_t domain, char *out, size_t cap)
{
    if (domain > FERRY_DOMAIN_MAX)
        return FERRY_EINVAL;
    char root[PATH_MAX];
    ferry_err err = ferry__root_path(dir, root, sizeof root);
    if (err)
        return err;
    int n = snprintf(out, cap, "%s/%u", root, domain);
    if (n < 0 || (size_t)n >= cap)
        return FERRY_ENAME;
    return FERRY_OK;
}
