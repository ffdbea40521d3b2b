// An independent reader of the files `ferry record` writes: Foxglove's @mcap/core (the
// TypeScript reference implementation), with lz4js and fzstd for the compressed chunks.
//
//   node mcap_check.mjs MODULES_DIR FILE.mcap [--count TOPIC=N ...] [--compression C]
//
// Reads the file through the summary (McapIndexedReader: footer, summary CRC, chunk indexes)
// and again from its start (McapStreamReader: every record, chunk CRCs), checks the data
// section's CRC, the header's profile, the schemas (ros2msg definitions of the ROS 2 types),
// the channels (cdr, or ferry-raw with the ferry type in their metadata), the statistics
// against the messages actually read, and each Image's CDR (its header and that its data is
// height * step bytes). Prints what `ros2 bag info` would show. Exits 1 on the first mismatch.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const [modules, file, ...rest] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(modules), "node_modules", "x.js"));
const { McapIndexedReader, McapStreamReader } = require("@mcap/core");
const { crc32 } = require("@foxglove/crc");
const lz4 = require("lz4js");
const fzstd = require("fzstd");

const expectCounts = new Map();
let expectCompression = null;
for (let i = 0; i < rest.length; i++) {
  if (rest[i] === "--count") {
    const [t, n] = rest[++i].split("=");
    expectCounts.set(t, BigInt(n));
  } else if (rest[i] === "--compression") {
    expectCompression = rest[++i];
  }
}

function fail(msg) {
  console.error(`mcap_check: ${file}: ${msg}`);
  process.exit(1);
}

const bytes = new Uint8Array(readFileSync(file));
const decompressHandlers = {
  lz4: (buf, size) => new Uint8Array(lz4.decompress(buf, Number(size))),
  zstd: (buf, size) => fzstd.decompress(buf, new Uint8Array(Number(size))),
};
const readable = {
  size: async () => BigInt(bytes.length),
  read: async (offset, length) => bytes.subarray(Number(offset), Number(offset + length)),
};

const reader = await McapIndexedReader.Initialize({ readable, decompressHandlers });
if (reader.header.profile !== "ros2") fail(`profile '${reader.header.profile}'`);
if (!reader.header.library.startsWith("ferry ")) fail(`library '${reader.header.library}'`);
const stats = reader.statistics;
if (stats == undefined) fail("no statistics");
if (reader.chunkIndexes.length === 0) fail("no chunk indexes");
if (BigInt(reader.chunkIndexes.length) !== BigInt(stats.chunkCount))
  fail(`${reader.chunkIndexes.length} chunk indexes, statistics say ${stats.chunkCount}`);
for (const ci of reader.chunkIndexes) {
  const c = ci.compression === "" ? "none" : ci.compression;
  if (expectCompression != null && c !== expectCompression)
    fail(`a chunk of compression '${c}', expected '${expectCompression}'`);
}

const definitionHints = {
  "sensor_msgs/msg/Image": ["std_msgs/Header header", "string encoding", "uint8[] data"],
  "sensor_msgs/msg/PointCloud2": ["PointField[] fields", "bool is_dense", "MSG: sensor_msgs/PointField"],
  "sensor_msgs/msg/CameraInfo": ["string distortion_model", "float64[] d", "MSG: sensor_msgs/RegionOfInterest"],
};
for (const [id, ch] of reader.channelsById) {
  const schema = reader.schemasById.get(ch.schemaId);
  if (schema == undefined) fail(`channel ${id} (${ch.topic}) has no schema`);
  if (ch.messageEncoding === "cdr") {
    if (schema.encoding !== "ros2msg") fail(`${ch.topic}: schema encoding '${schema.encoding}'`);
    const text = new TextDecoder().decode(schema.data);
    for (const hint of definitionHints[schema.name] ?? [])
      if (!text.includes(hint)) fail(`${ch.topic}: the ${schema.name} definition lacks '${hint}'`);
    if (text.length === 0) fail(`${ch.topic}: empty definition`);
  } else if (ch.messageEncoding === "ferry-raw") {
    if (ch.metadata.get("ferry.type") !== schema.name || !ch.metadata.get("ferry.type_hash"))
      fail(`${ch.topic}: ferry-raw without ferry.type/ferry.type_hash metadata`);
  } else {
    fail(`${ch.topic}: message encoding '${ch.messageEncoding}'`);
  }
}

// Every message, through the chunk indexes, with CRCs checked.
const counts = new Map();
let total = 0n;
let first = null, last = null;
const imageTopics = new Set(
  [...reader.channelsById.values()]
    .filter((c) => reader.schemasById.get(c.schemaId)?.name === "sensor_msgs/msg/Image")
    .map((c) => c.id));
for await (const m of reader.readMessages({ validateCrcs: true })) {
  counts.set(m.channelId, (counts.get(m.channelId) ?? 0n) + 1n);
  total++;
  if (first === null || m.logTime < first) first = m.logTime;
  if (last === null || m.logTime > last) last = m.logTime;
  if (imageTopics.has(m.channelId)) checkImage(m.data);
}
if (total !== stats.messageCount) fail(`read ${total} messages, statistics say ${stats.messageCount}`);
if (total > 0n && (first !== stats.messageStartTime || last !== stats.messageEndTime))
  fail("the statistics' start or end time is not that of the messages");
for (const [id, n] of counts)
  if (stats.channelMessageCounts.get(id) !== n)
    fail(`channel ${id}: read ${n}, statistics say ${stats.channelMessageCounts.get(id)}`);
for (const [topic, n] of expectCounts) {
  const ch = [...reader.channelsById.values()].find((c) => c.topic === topic);
  const got = ch ? counts.get(ch.id) ?? 0n : 0n;
  if (got !== n) fail(`${topic}: ${got} messages, expected ${n}`);
}

// The whole file from its start, record by record, and the data section's CRC.
const stream = new McapStreamReader({ decompressHandlers, validateCrcs: true });
stream.append(bytes);
let streamed = 0n, dataEnd = null, offset = 0;
for (let r; (r = stream.nextRecord()); ) {
  if (r.type === "Message") streamed++;
  if (r.type === "DataEnd") dataEnd = r;
}
if (!stream.done()) fail("the stream reader did not reach the end");
if (streamed !== total) fail(`the stream reader read ${streamed} messages, the indexed ${total}`);
if (dataEnd == null) fail("no Data End record");
{
  // Data End is the record right before the summary.
  const view = new DataView(bytes.buffer, bytes.byteOffset);
  const footer = bytes.length - 8 - 29;
  const summaryStart = Number(view.getBigUint64(footer + 9, true));
  offset = summaryStart - 13;
  if (bytes[offset] !== 0x0f) fail("Data End is not right before the summary");
  if (dataEnd.dataSectionCrc !== 0 && crc32(bytes.subarray(0, offset)) !== dataEnd.dataSectionCrc)
    fail("data section CRC mismatch");
}

function checkImage(data) {
  const v = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let o = 4;
  const align = (n) => { o = 4 + Math.ceil((o - 4) / n) * n; };
  const u32 = () => { align(4); const x = v.getUint32(o, true); o += 4; return x; };
  const str = () => { const n = u32(); o += n; return n; };
  if (data[0] !== 0 || data[1] !== 1) fail("an Image that is not CDR_LE");
  u32(); u32(); str(); // stamp, frame_id
  const height = u32(); u32(); str(); o += 1; // width, encoding, is_bigendian
  const step = u32(), size = u32();
  if (size !== height * step || o + size > data.byteLength)
    fail(`an Image of ${size} data bytes, height ${height} x step ${step}`);
}

// What `ros2 bag info` prints.
const secs = (ns) => `${ns / 1000000000n}.${String(ns % 1000000000n).padStart(9, "0")}`;
console.log(`Files:             ${path.basename(file)}`);
console.log(`Bag size:          ${bytes.length} B`);
console.log(`Storage id:        mcap`);
console.log(`Duration:          ${secs(stats.messageEndTime - stats.messageStartTime)}s`);
console.log(`Start:             ${new Date(Number(stats.messageStartTime / 1000000n)).toISOString()} (${secs(stats.messageStartTime)})`);
console.log(`End:               ${new Date(Number(stats.messageEndTime / 1000000n)).toISOString()} (${secs(stats.messageEndTime)})`);
console.log(`Messages:          ${stats.messageCount}`);
let lead = "Topic information: ";
for (const [id, ch] of reader.channelsById) {
  console.log(`${lead}Topic: ${ch.topic} | Type: ${reader.schemasById.get(ch.schemaId).name} | ` +
              `Count: ${counts.get(id) ?? 0n} | Serialization Format: ${ch.messageEncoding}`);
  lead = "                   ";
}
console.log(`(checked: summary CRC, CRCs of ${reader.chunkIndexes.length} chunks, data section CRC, ` +
            `${total} messages read twice)`);
