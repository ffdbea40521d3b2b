/* The MCAP reader's description of a file (ferry_mcap_info): schemas and channels found by id in
 * a table, metadata and chunk indexes, their strings and maps copied out of the file, and the
 * count of the heap it holds against FERRY_MCAP_INFO_MAX, memory_max and the memory the process
 * may still take; why a record failed is noted here too. One thread at a time per reader. */
#include "mcap_read.h"

#define IDS 65536u                        /* schema and channel ids are 16 bits */
#define HEAP_OVERHEAD 16u                 /* what the allocator adds to a block, about */
#define HEADROOM_STEP ((uint64_t)4 << 20) /* growth between two checks of the memory available */
#define MIB(n) ((n) >> 20)

void ferry__mcap_fault(ferry_mcap_reader *r, ferry_err err, const char *fmt, ...)
{
    va_list ap;

    if (r->fault != FERRY_OK)
        return;
    r->fault = err;
    va_start(ap, fmt);
    vsnprintf(r->fault_why, sizeof r->fault_why, fmt, ap);
    va_end(ap);
}

bool ferry__mcap_room_for(ferry_mcap_reader *r, uint64_t n, const char *what)
{
    uint64_t held = r->kept + r->ucap;

    if (r->memory_max != 0 && (held > r->memory_max || n > r->memory_max - held)) {
        ferry__mcap_fault(r, FERRY_ELIMIT,
                          "%s would take the reader over its limit of %" PRIu64 " MiB", what,
                          MIB(r->memory_max));
        return false;
    }
    if (n >= HEADROOM_STEP || r->unchecked + n >= HEADROOM_STEP) {
        uint64_t room = ferry__memory_headroom(), want = n >= HEADROOM_STEP ? n : HEADROOM_STEP;

        if (room < want) {
            ferry__mcap_fault(r, FERRY_ENOMEM,
                              "%s needs %" PRIu64
                              " MiB more, and this process may take only %" PRIu64
                              " MiB more (the memory available or a memory cgroup's limit)",
                              what, MIB(want + (1u << 20) - 1), MIB(room));
            return false;
        }
        r->unchecked = 0;
    } else {
        r->unchecked += n;
    }
    return true;
}

/* Counts n bytes (one allocation) into the description: within FERRY_MCAP_INFO_MAX and
 * ferry__mcap_room_for. */
static bool take(ferry_mcap_reader *r, uint64_t n)
{
    n += HEAP_OVERHEAD;
    if (r->kept + n > FERRY_MCAP_INFO_MAX) {
        ferry__mcap_fault(
            r, FERRY_ELIMIT,
            "the file's schemas, channels, indexes and metadata need more than %" PRIu64
            " MiB (FERRY_MCAP_INFO_MAX)",
            MIB(FERRY_MCAP_INFO_MAX));
        return false;
    }
    if (!ferry__mcap_room_for(r, n, "the file's description"))
        return false;
    r->kept += n;
    return true;
}

static void *take_alloc(ferry_mcap_reader *r, size_t n)
{
    void *p;

    if (!take(r, n))
        return NULL;
    p = malloc(n > 0 ? n : 1);
    if (p == NULL)
        ferry__mcap_fault(r, FERRY_ENOMEM, "out of memory");
    return p;
}

bool ferry__mcap_grow(ferry_mcap_reader *r, void **p, size_t *cap, size_t count, size_t elem,
                      size_t max, const char *what)
{
    size_t ncap;
    void *q;

    if (count < *cap)
        return true;
    if (count >= max) {
        ferry__mcap_fault(r, FERRY_ELIMIT, "more than %zu %s", max, what);
        return false;
    }
    ncap = *cap ? *cap * 2 : 8;
    if (ncap > max)
        ncap = max;
    if (!take(r, (uint64_t)(ncap - *cap) * elem))
        return false;
    q = realloc(*p, ncap * elem);
    if (q == NULL) {
        ferry__mcap_fault(r, FERRY_ENOMEM, "out of memory");
        return false;
    }
    *p = q;
    *cap = ncap;
    return true;
}

char *ferry__mcap_get_str(ferry_mcap_reader *r, ferry__mcap_cur *c, uint32_t max, const char *what)
{
    uint32_t n = ferry__mcap_get_u32(c);
    const uint8_t *p;
    char *s;

    if (c->failed)
        return NULL;
    if (n > max) {
        ferry__mcap_fault(r, FERRY_ELIMIT, "%s of %" PRIu32 " bytes, over the limit of %" PRIu32,
                          what, n, max);
        c->failed = true;
        return NULL;
    }
    p = ferry__mcap_get_bytes(c, n);
    if (p == NULL)
        return NULL;
    s = take_alloc(r, (size_t)n + 1);
    if (s == NULL) {
        c->failed = true;
        return NULL;
    }
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

static void free_kv(ferry_mcap_kv *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free((char *)kv[i].key);
        free((char *)kv[i].value);
    }
    free(kv);
}

/* A Map<string, string>. */
static bool get_map(ferry_mcap_reader *r, ferry__mcap_cur *c, ferry_mcap_kv **out, size_t *count)
{
    ferry__mcap_cur m = ferry__mcap_get_len32(c);
    ferry_mcap_kv *kv = NULL;
    size_t n = 0, cap = 0;

    while (!m.failed && m.left > 0) {
        char *k, *v;

        if (!ferry__mcap_grow(r, (void **)&kv, &cap, n, sizeof *kv, FERRY_MCAP_MAP_MAX,
                              "entries in a map")) {
            m.failed = true;
            break;
        }
        k = ferry__mcap_get_str(r, &m, FERRY_MCAP_STRING_MAX, "a map key");
        v = ferry__mcap_get_str(r, &m, FERRY_MCAP_STRING_MAX, "a map value");
        if (k == NULL || v == NULL) {
            free(k);
            free(v);
            m.failed = true;
            break;
        }
        kv[n].key = k;
        kv[n].value = v;
        n++;
    }
    if (m.failed || c->failed) {
        free_kv(kv, n);
        c->failed = true;
        return false;
    }
    *out = kv;
    *count = n;
    return true;
}

static ferry_mcap_schema *find_schema(const ferry_mcap_reader *r, uint16_t id)
{
    uint32_t at = r->schema_at != NULL ? r->schema_at[id] : 0;

    return at != 0 ? &r->info.schemas[at - 1] : NULL;
}

const ferry_mcap_channel *ferry_mcap_reader_channel(const ferry_mcap_reader *r, uint16_t id)
{
    return r != NULL ? ferry__mcap_find_channel(r, id) : NULL;
}

const ferry_mcap_schema *ferry_mcap_reader_schema(const ferry_mcap_reader *r, uint16_t id)
{
    return r != NULL ? find_schema(r, id) : NULL;
}

const ferry_mcap_info *ferry_mcap_reader_info(const ferry_mcap_reader *r)
{
    return r != NULL ? &r->info : NULL;
}

/* The id table *at (allocated on first use). */
static bool id_table(ferry_mcap_reader *r, uint32_t **at)
{
    if (*at != NULL)
        return true;
    if (!take(r, IDS * sizeof **at))
        return false;
    *at = calloc(IDS, sizeof **at);
    if (*at == NULL)
        ferry__mcap_fault(r, FERRY_ENOMEM, "out of memory");
    return *at != NULL;
}

bool ferry__mcap_add_schema(ferry_mcap_reader *r, ferry__mcap_cur c)
{
    ferry_mcap_schema s;
    uint32_t n;
    const uint8_t *data;

    memset(&s, 0, sizeof s);
    s.id = ferry__mcap_get_u16(&c);
    if (c.failed)
        return false;
    if (s.id == 0 || find_schema(r, s.id) != NULL)
        return true;
    s.name = ferry__mcap_get_str(r, &c, FERRY_MCAP_NAME_MAX, "a schema name");
    s.encoding = ferry__mcap_get_str(r, &c, FERRY_MCAP_NAME_MAX, "a schema encoding");
    n = ferry__mcap_get_u32(&c);
    if (!c.failed && n > FERRY_MCAP_SCHEMA_MAX)
        ferry__mcap_fault(r, FERRY_ELIMIT,
                          "a schema of %" PRIu32 " bytes, over the limit of %" PRIu64, n,
                          FERRY_MCAP_SCHEMA_MAX);
    else if ((data = ferry__mcap_get_bytes(&c, n)) != NULL && (s.data = take_alloc(r, n)) != NULL)
        memcpy((uint8_t *)s.data, data, n);
    s.size = n;
    if (s.name != NULL && s.encoding != NULL && s.data != NULL && !c.failed &&
        id_table(r, &r->schema_at) &&
        ferry__mcap_grow(r, (void **)&r->info.schemas, &r->cap_schemas, r->info.nschemas, sizeof s,
                         IDS, "schemas")) {
        r->info.schemas[r->info.nschemas++] = s;
        r->schema_at[s.id] = (uint32_t)r->info.nschemas;
        return true;
    }
    free(s.name);
    free(s.encoding);
    free((uint8_t *)s.data);
    return false;
}

bool ferry__mcap_add_channel(ferry_mcap_reader *r, ferry__mcap_cur c)
{
    ferry_mcap_channel ch;

    memset(&ch, 0, sizeof ch);
    ch.id = ferry__mcap_get_u16(&c);
    ch.schema_id = ferry__mcap_get_u16(&c);
    if (c.failed)
        return false;
    if (ferry__mcap_find_channel(r, ch.id) != NULL)
        return true;
    ch.topic = ferry__mcap_get_str(r, &c, FERRY_MCAP_NAME_MAX, "a topic");
    ch.message_encoding = ferry__mcap_get_str(r, &c, FERRY_MCAP_NAME_MAX, "a message encoding");
    if (ch.topic != NULL && ch.message_encoding != NULL &&
        get_map(r, &c, &ch.metadata, &ch.nmetadata)) {
        if (id_table(r, &r->channel_at) &&
            ferry__mcap_grow(r, (void **)&r->info.channels, &r->cap_channels, r->info.nchannels,
                             sizeof ch, IDS, "channels")) {
            r->info.channels[r->info.nchannels++] = ch;
            r->channel_at[ch.id] = (uint32_t)r->info.nchannels;
            return true;
        }
        free_kv(ch.metadata, ch.nmetadata);
    }
    /* get_map left nothing when it failed. */
    free(ch.topic);
    free(ch.message_encoding);
    return false;
}

bool ferry__mcap_add_metadata(ferry_mcap_reader *r, ferry__mcap_cur c)
{
    ferry_mcap_metadata m;

    memset(&m, 0, sizeof m);
    m.name = ferry__mcap_get_str(r, &c, FERRY_MCAP_NAME_MAX, "a metadata name");
    if (m.name == NULL || !get_map(r, &c, &m.kv, &m.n)) {
        free(m.name);
        return false;
    }
    if (!ferry__mcap_grow(r, (void **)&r->info.metadata, &r->cap_metadata, r->info.nmetadata,
                          sizeof m, FERRY_MCAP_RECORDS_MAX, "metadata records")) {
        free(m.name);
        free_kv(m.kv, m.n);
        return false;
    }
    r->info.metadata[r->info.nmetadata++] = m;
    return true;
}

bool ferry__mcap_add_chunk_index(ferry_mcap_reader *r, const ferry_mcap_chunk_index *ci)
{
    if (!ferry__mcap_grow(r, (void **)&r->info.chunks, &r->cap_chunks, r->info.nchunks, sizeof *ci,
                          FERRY_MCAP_RECORDS_MAX, "chunks"))
        return false;
    r->info.chunks[r->info.nchunks++] = *ci;
    return true;
}

void ferry__mcap_info_reset(ferry_mcap_reader *r)
{
    ferry_mcap_info *in = &r->info;

    for (size_t i = 0; i < in->nschemas; i++) {
        free(in->schemas[i].name);
        free(in->schemas[i].encoding);
        free((uint8_t *)in->schemas[i].data);
    }
    for (size_t i = 0; i < in->nchannels; i++) {
        free(in->channels[i].topic);
        free(in->channels[i].message_encoding);
        free_kv(in->channels[i].metadata, in->channels[i].nmetadata);
    }
    for (size_t i = 0; i < in->nmetadata; i++) {
        free(in->metadata[i].name);
        free_kv(in->metadata[i].kv, in->metadata[i].n);
    }
    free(in->schemas);
    free(in->channels);
    free(in->chunks);
    free(in->metadata);
    free(r->schema_at);
    free(r->channel_at);
    r->schema_at = r->channel_at = NULL;
    in->schemas = NULL;
    in->channels = NULL;
    in->chunks = NULL;
    in->metadata = NULL;
    in->nschemas = in->nchannels = in->nchunks = in->nmetadata = 0;
    r->cap_schemas = r->cap_channels = r->cap_chunks = r->cap_metadata = 0;
    in->message_count = in->start_time = in->end_time = 0;
    in->chunk_count = 0;
    r->kept = 0; /* what is left (the profile and library) is under a few KiB */
}
