// A viewer that stops reading must cost the camera nothing: a raw WebSocket client subscribes
// to the raw and JPEG channels of a 640x480 rgb8 camera at 30 Hz and then never reads again.
// Meanwhile the camera's rate (ferry hz) and latency (ferry delay) stay as they were without
// it, a well-behaved Foxglove client keeps getting frames, and the view's resident memory stays
// bounded (VmRSS of $VIEW_PID). Run by run.sh.
import { execFile } from "node:child_process";
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import net from "node:net";
import assert from "node:assert/strict";

const require = createRequire(process.env.NODE_PATH + "/");
const { FoxgloveClient } = require("@foxglove/ws-protocol");
const WebSocket = require("ws");

const port = Number(process.env.VIEW_PORT);
const token = process.env.VIEW_TOKEN;
const ferry = process.env.FERRY_BIN;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rssKiB = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${process.env.VIEW_PID}/status`, "utf8"))[1]);
const run = (args) => new Promise((resolve, reject) =>
  execFile(ferry, args, { timeout: 15000 }, (e, out) => (e ? reject(e) : resolve(out))));

// The camera as another subscriber sees it: rate over 2 s, delay p50 / p99 over 60 samples.
async function camera() {
  const [hz, delay] = await Promise.all([
    run(["hz", "/cam/image", "--count", "2", "--window", "30"]),
    run(["delay", "/cam/image", "--count", "60", "--window", "60"]),
  ]);
  const rate = Number([...hz.matchAll(/rate ([\d.]+) Hz/g)].pop()[1]);
  const total = /total delay .* p50 ([\d.]+) ms\s+p99 ([\d.]+) ms/.exec(delay);
  return { rate, p50: Number(total[1]), p99: Number(total[2]) };
}

// A WebSocket client by hand, so that it can stop reading: the upgrade, then server frames
// parsed just enough to find the channels, then one masked subscribe.
function frameText(text) {
  const body = Buffer.from(text);
  const mask = randomBytes(4);
  const head = body.length < 126 ? Buffer.from([0x81, 0x80 | body.length])
    : Buffer.from([0x81, 0x80 | 126, body.length >> 8, body.length & 255]);
  const masked = Buffer.from(body.map((b, i) => b ^ mask[i % 4]));
  return Buffer.concat([head, mask, masked]);
}
async function stalledClient() {
  const sock = net.connect(port, "127.0.0.1");
  await new Promise((r) => sock.once("connect", r));
  sock.write(`GET /?token=${token} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
    `Sec-WebSocket-Key: ${randomBytes(16).toString("base64")}\r\nSec-WebSocket-Version: 13\r\n` +
    `Sec-WebSocket-Protocol: foxglove.websocket.v1\r\n\r\n`);
  let buf = Buffer.alloc(0);
  let headers = false;
  const channels = [];
  await new Promise((resolve, reject) => {
    sock.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      if (!headers) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        if (!/^HTTP\/1.1 101/.test(buf.toString("latin1", 0, end))) reject(new Error("no upgrade"));
        headers = true;
        buf = buf.subarray(end + 4);
      }
      for (;;) {
        if (buf.length < 2) return;
        let len = buf[1] & 127, at = 2;
        if (len === 126) { if (buf.length < 4) return; len = buf.readUInt16BE(2); at = 4; }
        else if (len === 127) { if (buf.length < 10) return; len = Number(buf.readBigUInt64BE(2)); at = 10; }
        if (buf.length < at + len) return;
        if ((buf[0] & 15) === 1) {
          const msg = JSON.parse(buf.toString("utf8", at, at + len));
          if (msg.op === "advertise") for (const c of msg.channels) if (c.topic.startsWith("/cam/image")) channels.push(c.id);
          if (channels.length >= 2) { resolve(); return; }
        }
        buf = buf.subarray(at + len);
      }
    });
    sock.on("error", reject);
  });
  sock.removeAllListeners("data");
  sock.pause(); // from here on, never read
  sock.write(frameText(JSON.stringify({ op: "subscribe",
    subscriptions: channels.map((channelId, i) => ({ id: i + 1, channelId })) })));
  return sock;
}

const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 45000);
await sleep(500);
const before = await camera();
console.log(`without a stalled viewer: ${before.rate} Hz, delay p50 ${before.p50} ms p99 ${before.p99} ms`);

const sock = await stalledClient();
await sleep(1500); // the socket's buffers fill, the view stops writing to it
const rss0 = rssKiB();

// A well-behaved client meanwhile.
let good = 0;
const ws = new WebSocket(`ws://127.0.0.1:${port}/?token=${token}`, [FoxgloveClient.SUPPORTED_SUBPROTOCOL]);
const client = new FoxgloveClient({ ws });
client.on("advertise", (chs) => {
  for (const c of chs) if (c.topic === "/cam/image/compressed") client.subscribe(c.id);
});
client.on("message", () => good++);

const during = await camera();
const rss1 = rssKiB();
await sleep(2000);
const rss2 = rssKiB();
console.log(`with a stalled viewer:    ${during.rate} Hz, delay p50 ${during.p50} ms p99 ${during.p99} ms`);
console.log(`view VmRSS ${rss0} KiB -> ${rss1} KiB -> ${rss2} KiB; the good client got ${good} frames`);

assert.ok(during.rate > 0.9 * before.rate, `rate fell from ${before.rate} to ${during.rate} Hz`);
// Latency: the same as before within scheduling noise on a shared machine.
assert.ok(during.p50 < before.p50 + 2, `delay p50 rose from ${before.p50} to ${during.p50} ms`);
assert.ok(during.p99 < before.p99 + 20, `delay p99 rose from ${before.p99} to ${during.p99} ms`);
// Bounded: a frame (900 KiB) per subscription and one in flight, whatever the duration.
assert.ok(rss2 - rss0 < 8 * 1024, `VmRSS grew by ${rss2 - rss0} KiB while the viewer stalled`);
assert.ok(good > 30, `the good client got only ${good} frames in about 4 s`);
clearTimeout(timer);
client.close();
sock.destroy();
process.exit(0);
