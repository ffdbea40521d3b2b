/*
 * Fuzz target: arbitrary bytes as an MCAP file (src/record/mcap.h), the input `ferry play` and
 * `ferry bag info` take from anyone. The reader opens it or refuses it with a message; what it
 * opens must describe itself consistently (chunk indexes inside the file, sorted and apart,
 * channels with their topics, names within FERRY_MCAP_NAME_MAX), every message it hands out must
 * lie inside the input or the chunk it was decompressed into, and every schema's bytes must stay
 * readable after the walk (they were once left pointing into a freed chunk buffer). Messages of
 * a ROS 2 channel also go through the CDR parser, as the player sends them. The reader may hold
 * 256 MiB (memory_max), well under libFuzzer's RSS limit: a chunk that inflates to more is
 * refused.
 */
#include "fuzz_util.h"
#include "mcap.h"
#include "ros2/ros2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct fz_walk {
    const ferry_mcap_reader *r;
    const uint8_t *data;
    size_t size;
    uint64_t messages, bytes;
} fz_walk;

static bool on_message(void *arg, const ferry_mcap_message *m)
{
    fz_walk *w = arg;
    const ferry_mcap_channel *c = ferry_mcap_reader_channel(w->r, m->channel_id);
    volatile uint8_t sink = 0;

    /* Every byte handed out must be readable (the sanitizer checks a decompressed chunk's). */
    if (m->size > 0)
        sink ^= m->data[0] ^ m->data[m->size - 1];
    (void)sink;
    if (m->data >= w->data && m->data < w->data + w->size)
        FZ_ASSERT(m->size <= (size_t)(w->data + w->size - m->data));
    if (c != NULL) {
        const ferry_mcap_schema *s = ferry_mcap_reader_schema(w->r, c->schema_id);

        if (s != NULL && strcmp(c->message_encoding, "cdr") == 0) {
            ferry_ros2_kind kind = ferry_ros2_kind_of_name(s->name);
            ferry_ros2_msg msg;

            if (kind != FERRY_ROS2_NONE)
                (void)ferry_ros2_cdr_parse(kind, m->data, m->size, &msg);
        }
    }
    w->messages++;
    w->bytes += m->size;
    return w->messages < 100000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ferry_mcap_reader *r;
    ferry_mcap_reader_options o;
    const ferry_mcap_info *in;
    fz_walk w = {NULL, data, size, 0, 0};
    char why[256];
    volatile uint8_t sink = 0;

    memset(&o, 0, sizeof o);
    o.memory_max = (uint64_t)256 << 20;
    if (ferry_mcap_reader_open_mem_with(&r, data, size, &o, why, sizeof why) != FERRY_OK) {
        FZ_ASSERT(why[0] != '\0');
        return 0;
    }
    in = ferry_mcap_reader_info(r);
    FZ_ASSERT(in->file_size == size && in->profile != NULL && in->library != NULL);
    for (size_t i = 0; i < in->nchannels; i++) {
        FZ_ASSERT(in->channels[i].topic != NULL);
        FZ_ASSERT(strlen(in->channels[i].topic) <= FERRY_MCAP_NAME_MAX);
        FZ_ASSERT(ferry_mcap_reader_channel(r, in->channels[i].id) == &in->channels[i]);
    }
    for (size_t i = 0; i < in->nchunks; i++) {
        FZ_ASSERT(in->chunks[i].offset <= size &&
                  in->chunks[i].length <= size - in->chunks[i].offset);
        /* Read once each: sorted by offset, none starting inside the one before. */
        if (i > 0)
            FZ_ASSERT(in->chunks[i].offset >= in->chunks[i - 1].offset + in->chunks[i - 1].length);
    }
    w.r = r;
    why[0] = '\0';
    if (ferry_mcap_reader_messages(r, 0, UINT64_MAX, on_message, &w, why, sizeof why) != FERRY_OK)
        FZ_ASSERT(why[0] != '\0');
    for (size_t i = 0; i < in->nschemas; i++)
        for (size_t k = 0; k < in->schemas[i].size; k++)
            sink ^= in->schemas[i].data[k];
    (void)sink;
    ferry_mcap_reader_close(r);
    return 0;
}
