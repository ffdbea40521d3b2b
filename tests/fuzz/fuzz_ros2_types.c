/*
 * Fuzz target: the ROS 2 types ferry's tools know only by their definition (src/ros2/ros2_types.h),
 * all of it input from other processes. The input is a ros2msg definition, a NUL byte, then a
 * message: the definition is parsed, and a schema that parses walks the message as CDR and, for
 * a plain type, in its C layout (with the conversion to CDR, which must walk back); the whole
 * input is also read as a graph file. Every string a walk reports must be NUL-terminated where
 * its length says and every byte array must lie inside the message.
 */
#include "fuzz_util.h"
#include "ros2/ros2_types.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct fz_msg {
    const uint8_t *p;
    size_t size;
    uint64_t events;
} fz_msg;

static void on_event(void *arg, const ferry_ros2_event *ev)
{
    fz_msg *m = arg;
    volatile uint8_t sink = 0;

    m->events++;
    if (ev->kind == FERRY_ROS2_EV_STRING)
        FZ_ASSERT(ev->s[ev->n] == '\0');
    if (ev->kind == FERRY_ROS2_EV_BYTES && ev->n > 0) {
        FZ_ASSERT(ev->p >= m->p && ev->n <= m->size &&
                  ev->p - m->p <= (ptrdiff_t)(m->size - ev->n));
        sink ^= ev->p[0] ^ ev->p[ev->n - 1];
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t def_size = nul != NULL ? (size_t)(nul - data) : size;
    ferry_ros2_type_info info;
    ferry_ros2_schema *s = NULL;
    char why[128];

    if (ferry_ros2_graph_find((const char *)data, size, "std_msgs/msg/String", 0xab, &info) ==
        FERRY_OK) {
        FZ_ASSERT(info.definition != NULL && strlen(info.definition) == info.definition_size);
        ferry_ros2_type_info_free(&info);
    }
    if (ferry_ros2_schema_parse("fuzz_msgs/msg/Top", (const char *)data, def_size, &s, why,
                                sizeof why) != FERRY_OK)
        return 0;
    if (nul != NULL) {
        /* The message in a block of its own size, so that a read past it is seen. */
        size_t n = size - def_size - 1, plain = ferry_ros2_schema_plain_size(s);
        uint8_t *msg = malloc(n ? n : 1);
        fz_msg m = {msg, n, 0};

        FZ_ASSERT(msg != NULL);
        memcpy(msg, nul + 1, n);
        (void)ferry_ros2_walk(s, FERRY_ROS2_WIRE_CDR, msg, n, 4, on_event, &m);
        (void)ferry_ros2_walk(s, FERRY_ROS2_WIRE_CDR, msg, n, 0, NULL, NULL);
        if (plain != 0 && plain <= (1u << 20)) {
            uint8_t *struct_bytes = calloc(1, plain), *cdr = malloc(plain + 8);
            size_t cdr_size = 0;

            FZ_ASSERT(struct_bytes != NULL && cdr != NULL);
            memcpy(struct_bytes, msg, n < plain ? n : plain);
            FZ_ASSERT(ferry_ros2_walk(s, FERRY_ROS2_WIRE_PLAIN, struct_bytes, plain, 4, on_event,
                                      &(fz_msg){struct_bytes, plain, 0}) == FERRY_ROS2_WALK_OK);
            FZ_ASSERT(ferry_ros2_plain_to_cdr(s, struct_bytes, plain, cdr, plain + 8, &cdr_size) ==
                      FERRY_OK);
            FZ_ASSERT(ferry_ros2_walk(s, FERRY_ROS2_WIRE_CDR, cdr, cdr_size, 0, NULL, NULL) ==
                      FERRY_ROS2_WALK_OK);
            /* Back to the C layout, and again to CDR: the same bytes (the padding and any
             * byte of a bool above 1 are gone in both), and any CDR input either converts or
             * is refused. */
            {
                uint8_t *back = malloc(plain), *cdr2 = malloc(plain + 8);
                size_t cdr2_size = 0;

                FZ_ASSERT(back != NULL && cdr2 != NULL);
                FZ_ASSERT(ferry_ros2_cdr_to_plain(s, cdr, cdr_size, back, plain) ==
                          FERRY_ROS2_WALK_OK);
                FZ_ASSERT(ferry_ros2_plain_to_cdr(s, back, plain, cdr2, plain + 8, &cdr2_size) ==
                          FERRY_OK);
                FZ_ASSERT(cdr2_size == cdr_size && memcmp(cdr2, cdr, cdr_size) == 0);
                (void)ferry_ros2_cdr_to_plain(s, msg, n, back, plain);
                free(back);
                free(cdr2);
            }
            free(struct_bytes);
            free(cdr);
        }
        free(msg);
    }
    ferry_ros2_schema_free(s);
    return 0;
}
