/*
 * MCAP files (https://mcap.dev/spec, major version 0), written and read by the recorder, the
 * player and `ferry bag info` (tools/ferry). A writer appends records to a file descriptor: every
 * message goes into a chunk (uncompressed, LZ4 frame or zstd) followed by its message indexes; on
 * close it writes Data End (with the data section's CRC), a summary section (schemas, channels,
 * statistics, chunk indexes, metadata indexes), the summary offsets and the footer. An
 * uncompressed chunk is written as it fills, straight from the caller's iovecs (the bulk of a
 * sample is never copied): its header is reserved first, with a length no reader accepts, and
 * filled in with pwrite when the chunk closes, so a file cut short (SIGKILL) reads up to its last
 * complete chunk.
 *
 * A reader takes a whole file in memory (a read-only mapping, or a caller's buffer for the fuzz
 * target) as untrusted input: every length is checked against what is left; what a file can make
 * it hold is bounded (the FERRY_MCAP_*_MAX limits below, the memory the process may still take,
 * and the caller's memory_max); what it can make it do is bounded by the file's own bytes (each
 * chunk and metadata record is read at most once per pass: index entries that list one twice or
 * overlap are refused) and can be cancelled from a signal handler. A malformed file is an error
 * with a message naming the offset, never a crash. A file without a usable summary (cut short,
 * written without one, or with one that lies) is scanned from its start.
 *
 * Internal to ferry (the static library ferry_mcap, linked by the CLI). A writer or a reader is
 * used by one thread at a time (the caller serialises).
 */
#ifndef FERRY_MCAP_H
#define FERRY_MCAP_H

#include <ferry/ferry.h>

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The eight bytes at both ends of an MCAP file. */
#define FERRY_MCAP_MAGIC "\x89MCAP0\r\n"
#define FERRY_MCAP_MAGIC_SIZE 8u

/** Record opcodes. */
enum {
    FERRY_MCAP_OP_HEADER = 0x01,
    FERRY_MCAP_OP_FOOTER = 0x02,
    FERRY_MCAP_OP_SCHEMA = 0x03,
    FERRY_MCAP_OP_CHANNEL = 0x04,
    FERRY_MCAP_OP_MESSAGE = 0x05,
    FERRY_MCAP_OP_CHUNK = 0x06,
    FERRY_MCAP_OP_MESSAGE_INDEX = 0x07,
    FERRY_MCAP_OP_CHUNK_INDEX = 0x08,
    FERRY_MCAP_OP_ATTACHMENT = 0x09,
    FERRY_MCAP_OP_ATTACHMENT_INDEX = 0x0a,
    FERRY_MCAP_OP_STATISTICS = 0x0b,
    FERRY_MCAP_OP_METADATA = 0x0c,
    FERRY_MCAP_OP_METADATA_INDEX = 0x0d,
    FERRY_MCAP_OP_SUMMARY_OFFSET = 0x0e,
    FERRY_MCAP_OP_DATA_END = 0x0f,
};

/** Largest uncompressed chunk a reader accepts (its records are decompressed into the heap; the
 *  chunk must also fit in the memory available, see ferry_mcap_reader_options). */
#define FERRY_MCAP_CHUNK_MAX ((uint64_t)1 << 30)
/** Most chunk indexes, or metadata records, a reader keeps. Schemas and channels are at most
 *  65535 and 65536 (their ids are 16 bits; a second record with a known id is ignored). Message
 *  indexes and attachments are skipped, never kept. */
#define FERRY_MCAP_RECORDS_MAX 1000000u
/** Longest name a reader copies: topic, schema name, message and schema encoding, metadata name,
 *  the Header's profile and library. */
#define FERRY_MCAP_NAME_MAX 1024u
/** Longest key or value of a metadata map (a channel's or a Metadata record's). */
#define FERRY_MCAP_STRING_MAX 65536u
/** Most entries of one metadata map. */
#define FERRY_MCAP_MAP_MAX 4096u
/** Largest schema (its data is copied). */
#define FERRY_MCAP_SCHEMA_MAX ((uint64_t)16 << 20)
/** Most heap a reader's description of a file (ferry_mcap_info: names, maps, schemas, tables)
 *  may take, the allocator's overhead included. */
#define FERRY_MCAP_INFO_MAX ((uint64_t)256 << 20)

/** Chunk compression. */
typedef enum ferry_mcap_compression {
    FERRY_MCAP_NONE = 0, /**< "" */
    FERRY_MCAP_LZ4,      /**< "lz4": the LZ4 frame format */
    FERRY_MCAP_ZSTD,     /**< "zstd" */
} ferry_mcap_compression;

/** The name a file gives a compression ("", "lz4", "zstd"). */
const char *ferry_mcap_compression_name(ferry_mcap_compression c);

/** A key and a value of a metadata map. */
typedef struct ferry_mcap_kv {
    const char *key;
    const char *value;
} ferry_mcap_kv;

/* ---------------------------------------------------------------------------------------------
 * Writer
 * ------------------------------------------------------------------------------------------- */

typedef struct ferry_mcap_writer ferry_mcap_writer;

/** Options of ferry_mcap_writer_open; zero fields mean the defaults. */
typedef struct ferry_mcap_writer_options {
    ferry_mcap_compression compression; /**< default FERRY_MCAP_NONE */
    /** A chunk closes once its uncompressed records reach this many bytes. Default 4 MiB. */
    size_t chunk_size;
    const char *profile; /**< the Header's profile; default "" */
    const char *library; /**< the Header's library; default "ferry <version>" */
    /** Leave the CRCs out (0 in the file: "not computed"). Default false. */
    bool no_crc;
    /** Leave the page cache alone. By default every 8 MiB written start their writeback
     *  (sync_file_range) and what was written back before leaves the cache (posix_fadvise), so
     *  that a long recording never meets a dirty-page stall; a thread of the writer's own makes
     *  those calls (they wait for room in the device's queue), made by ferry_mcap_writer_open
     *  with the caller's scheduling policy and joined by close or abandon. */
    bool no_write_behind;
} ferry_mcap_writer_options;

/**
 * Starts a file on fd, which must be empty and positioned at 0 (the writer keeps its own offset
 * and uses pwrite for the headers it reserves); writes the magic and the Header. The descriptor
 * stays the caller's, to close after ferry_mcap_writer_close.
 * @retval FERRY_OK      *out is a writer
 * @retval FERRY_EINVAL  a bad option
 * @retval FERRY_ENOMEM  out of memory
 * @retval FERRY_ESYS    a write failed (errno)
 */
ferry_err ferry_mcap_writer_open(ferry_mcap_writer **out, int fd,
                                 const ferry_mcap_writer_options *o);

/**
 * Adds a Schema (into the current chunk, and into the summary at close). Ids count from 1.
 * @retval FERRY_ELIMIT  65535 schemas already
 */
ferry_err ferry_mcap_writer_add_schema(ferry_mcap_writer *w, const char *name, const char *encoding,
                                       const void *data, size_t size, uint16_t *id);

/**
 * Adds a Channel of schema_id (0: no schema). Ids count from 0.
 * @retval FERRY_ELIMIT  65535 channels already
 * @retval FERRY_EINVAL  schema_id is not a schema of this writer
 */
ferry_err ferry_mcap_writer_add_channel(ferry_mcap_writer *w, uint16_t schema_id, const char *topic,
                                        const char *message_encoding, const ferry_mcap_kv *metadata,
                                        size_t nmetadata, uint16_t *id);

/**
 * Appends a Message whose data is the concatenation of iov[0..niov). In an uncompressed chunk the
 * pieces are written before the call returns (the caller may release their memory then) and
 * pieces of 4 KiB or more are never copied; compressed, they are compressed at once.
 * @retval FERRY_EINVAL  not a channel of this writer, or niov > 8
 * @retval FERRY_ESYS    a write failed (errno); the writer should be closed
 */
ferry_err ferry_mcap_writer_write(ferry_mcap_writer *w, uint16_t channel_id, uint32_t sequence,
                                  uint64_t log_time, uint64_t publish_time, const struct iovec *iov,
                                  unsigned niov);

/** Appends a Metadata record (outside chunks; the current chunk is closed first). */
ferry_err ferry_mcap_writer_add_metadata(ferry_mcap_writer *w, const char *name,
                                         const ferry_mcap_kv *kv, size_t n);

/** Closes the current chunk, if any, so that everything so far survives a crash. */
ferry_err ferry_mcap_writer_flush(ferry_mcap_writer *w);

/**
 * After a write failed (a full disk, a quota, an I/O error): takes the file back to the end of
 * its last complete chunk or metadata record (ftruncate, which also gives the space of the rest
 * back), forgets the messages after it and clears the error, so that ferry_mcap_writer_add_metadata
 * and ferry_mcap_writer_close can still finish a file every reader takes whole. kept[i], for the
 * channel ids i < nkept, is set to how many messages of channel i the file holds then (a message
 * whose write call failed may or may not have been taken into the open chunk). Schemas and
 * channels added since stay in the summary (a channel without messages). A writer without an
 * error is cut the same way (its open chunk dropped).
 * @retval FERRY_OK      cut; the writer takes calls again
 * @retval FERRY_EINVAL  kept is NULL with nkept > 0
 * @retval FERRY_ESYS    ftruncate failed (errno); the writer keeps that error
 */
ferry_err ferry_mcap_writer_cut(ferry_mcap_writer *w, uint64_t *kept, size_t nkept);

/** Bytes written so far (the file's size, reserved headers included). */
uint64_t ferry_mcap_writer_size(const ferry_mcap_writer *w);

/**
 * Finishes the file (the chunk, Data End, the summary, the footer, the magic) and frees the
 * writer, also when that fails (the first error is returned). NULL is a no-op.
 */
ferry_err ferry_mcap_writer_close(ferry_mcap_writer *w);

/** Frees the writer without finishing the file (what a crash would leave). */
void ferry_mcap_writer_abandon(ferry_mcap_writer *w);

/* ---------------------------------------------------------------------------------------------
 * Reader
 * ------------------------------------------------------------------------------------------- */

typedef struct ferry_mcap_schema {
    uint16_t id;
    char *name, *encoding;
    const uint8_t *data; /**< the reader's copy (a schema may come from a decompressed chunk) */
    size_t size;
} ferry_mcap_schema;

typedef struct ferry_mcap_channel {
    uint16_t id, schema_id;
    char *topic, *message_encoding;
    ferry_mcap_kv *metadata; /**< owned copies */
    size_t nmetadata;
    uint64_t messages; /**< from the statistics, else counted by the scan */
    uint64_t bytes;    /**< message data bytes, when a scan counted them (else 0) */
} ferry_mcap_channel;

typedef struct ferry_mcap_chunk_index {
    uint64_t start_time, end_time;
    uint64_t offset, length; /**< of the Chunk record, opcode included */
    uint64_t compressed_size, uncompressed_size;
    char compression[8]; /**< "", "lz4", "zstd" or "?" for another */
} ferry_mcap_chunk_index;

typedef struct ferry_mcap_metadata {
    char *name;
    ferry_mcap_kv *kv;
    size_t n;
} ferry_mcap_metadata;

/** What a reader found in a file. */
typedef struct ferry_mcap_info {
    char *profile, *library;
    uint64_t file_size;
    bool has_summary; /**< a footer pointed at a summary that parsed and whose CRC matched */
    bool truncated;   /**< no valid footer: the file was cut short (the scan stopped early) */
    /** Why the summary the footer points at was not used and the file was scanned instead (its
     *  CRC does not match, or its indexes lie: "its chunk indexes list the chunk at offset 28
     *  twice"); "" when it was used, or when there is none. */
    char summary_ignored[160];
    uint64_t message_count;
    uint64_t start_time, end_time; /**< of the messages; 0 when none */
    uint32_t chunk_count;
    ferry_mcap_schema *schemas;
    size_t nschemas;
    ferry_mcap_channel *channels;
    size_t nchannels;
    ferry_mcap_chunk_index *chunks;
    size_t nchunks;
    ferry_mcap_metadata *metadata;
    size_t nmetadata;
} ferry_mcap_info;

typedef struct ferry_mcap_reader ferry_mcap_reader;

/** Options of ferry_mcap_reader_open_with; zero fields mean the defaults. */
typedef struct ferry_mcap_reader_options {
    /** When *cancel becomes nonzero (a flag a SIGINT or SIGTERM handler sets) the reader stops
     *  within one step of its work (a record; 64 MiB of a CRC, of an LZ4 chunk or of the pages of
     *  a new chunk buffer; one zstd chunk): an open that scans fails with FERRY_ESYS and errno
     *  EINTR, a walk of messages ends as when its callback stops it. NULL (default): never. */
    const volatile sig_atomic_t *cancel;
    /** The most heap the reader may hold at once: its description of the file and the chunk it
     *  decompressed. Default: no limit but FERRY_MCAP_INFO_MAX and FERRY_MCAP_CHUNK_MAX. Whatever
     *  it says, the reader takes no more than the memory the process may still take (MemAvailable
     *  and its memory cgroups' limits, less a margin), checked before a chunk's buffer grows and
     *  every 4 MiB the description grows: a file that needs more is refused with FERRY_ENOMEM
     *  where it would have called the OOM killer. */
    uint64_t memory_max;
} ferry_mcap_reader_options;

/**
 * Opens a file (mapped read-only) or a caller's buffer (which must outlive the reader), reads
 * its header and summary, or scans it when the summary is missing or cannot be trusted (CRC
 * mismatch, offsets outside the data section, chunk or metadata indexes that list one record
 * twice or overlap: info.summary_ignored says why). o may be NULL (the defaults).
 * @retval FERRY_OK      *out is a reader
 * @retval FERRY_EPROTO  not an MCAP file, or malformed where no scan can go on (its header, a
 *                       record of the data section)
 * @retval FERRY_ELIMIT  the file needs more than a limit of the reader (a name, map, schema or
 *                       chunk over its FERRY_MCAP_*_MAX, too many records, the description over
 *                       FERRY_MCAP_INFO_MAX, or over o->memory_max)
 * @retval FERRY_ENOMEM  the file needs more memory than the process may still take
 * @retval FERRY_ESYS    the file could not be opened or mapped (errno), or *o->cancel was set
 *                       (errno EINTR, why "interrupted")
 * why (may be NULL, 256 bytes) receives a message on error.
 */
ferry_err ferry_mcap_reader_open_with(ferry_mcap_reader **out, const char *path,
                                      const ferry_mcap_reader_options *o, char *why,
                                      size_t why_size);
ferry_err ferry_mcap_reader_open_mem_with(ferry_mcap_reader **out, const void *data, size_t size,
                                          const ferry_mcap_reader_options *o, char *why,
                                          size_t why_size);
/** ferry_mcap_reader_open_with and _open_mem_with with the default options. */
ferry_err ferry_mcap_reader_open(ferry_mcap_reader **out, const char *path, char *why,
                                 size_t why_size);
ferry_err ferry_mcap_reader_open_mem(ferry_mcap_reader **out, const void *data, size_t size,
                                     char *why, size_t why_size);
void ferry_mcap_reader_close(ferry_mcap_reader *r);

/** Sets the cancel flag of an open reader (the option cancel; NULL: none), for a caller that
 *  installs its signal handlers after the open. */
void ferry_mcap_reader_set_cancel(ferry_mcap_reader *r, const volatile sig_atomic_t *cancel);

/** What the reader found; valid while it is open. */
const ferry_mcap_info *ferry_mcap_reader_info(const ferry_mcap_reader *r);

/** A channel by id, or NULL. */
const ferry_mcap_channel *ferry_mcap_reader_channel(const ferry_mcap_reader *r, uint16_t id);
/** A schema by id, or NULL. */
const ferry_mcap_schema *ferry_mcap_reader_schema(const ferry_mcap_reader *r, uint16_t id);

/** A message as a reader hands it out: data points into the file or a decompressed chunk, and
 *  is valid until the callback returns (the next chunk reuses the buffer). */
typedef struct ferry_mcap_message {
    uint16_t channel_id;
    uint32_t sequence;
    uint64_t log_time, publish_time;
    const uint8_t *data;
    size_t size;
} ferry_mcap_message;

/** Called per message; return false to stop the walk. */
typedef bool (*ferry_mcap_message_fn)(void *arg, const ferry_mcap_message *m);

/**
 * Calls fn for every message with start <= log_time <= end, in file order (the recorder writes in
 * log-time order). With chunk indexes, chunks outside the range are skipped unread; without, the
 * data section is scanned. Every chunk's CRC is checked. Each chunk is read once.
 * @retval FERRY_OK      the walk ended (or fn stopped it, or the cancel flag was set)
 * @retval FERRY_EPROTO  a malformed record or a CRC mismatch (why says where); the messages
 *                       before it were handed out
 * @retval FERRY_ELIMIT  a chunk over FERRY_MCAP_CHUNK_MAX or the option memory_max
 * @retval FERRY_ENOMEM  a chunk larger than the memory the process may still take
 */
ferry_err ferry_mcap_reader_messages(ferry_mcap_reader *r, uint64_t start, uint64_t end,
                                     ferry_mcap_message_fn fn, void *arg, char *why,
                                     size_t why_size);

#ifdef __cplusplus
}
#endif
#endif
