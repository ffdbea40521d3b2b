// Clients that break the rules, while a well-behaved Foxglove client watches /cam/image: an
// oversized text message (closed with 1009), a flood of subscribe messages from a client that
// never reads (bounded: statuses queue up to a cap, then it is disconnected), a subscribe with
// 1000 entries, many connections at once, and garbage instead of an upgrade. The good
// client keeps getting frames and the view's memory stays bounded. Run by run.sh.
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
const url = `ws://127.0.0.1:${port}/?token=${token}`;
const PROTO = FoxgloveClient.SUPPORTED_SUBPROTOCOL;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rssKiB = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${process.env.VIEW_PID}/status`, "utf8"))[1]);
const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 45000);

let good = 0;
const client = new FoxgloveClient({ ws: new WebSocket(url, [PROTO]) });
client.on("advertise", (chs) => { for (const c of chs) if (c.topic === "/cam/image/compressed") client.subscribe(c.id); });
client.on("message", () => good++);
for (let i = 0; i < 50 && good === 0; i++) await sleep(100);
assert.ok(good > 0, "the good client got no frame");
const rss0 = rssKiB();

// 1. A text message over 64 KiB: the connection is closed with 1009 (message too big).
{
  const ws = new WebSocket(url, [PROTO]);
  await new Promise((r) => ws.once("open", r));
  ws.send(JSON.stringify({ op: "subscribe", subscriptions: [], pad: "x".repeat(100000) }));
  const code = await new Promise((r) => ws.once("close", (c) => r(c)));
  assert.equal(code, 1009, `oversized message: close code ${code}`);
  console.log("ok: a 100 kB message closes the connection with 1009");
}

// 2. One subscribe with 1000 entries: refused as a whole, the connection stays.
{
  const ws = new WebSocket(url, [PROTO]);
  const statuses = [];
  ws.on("message", (d, binary) => { if (!binary) { const m = JSON.parse(d); if (m.op === "status") statuses.push(m); } });
  await new Promise((r) => ws.once("open", r));
  const subscriptions = Array.from({ length: 1000 }, (_, i) => ({ id: i, channelId: 1 }));
  ws.send(JSON.stringify({ op: "subscribe", subscriptions }));
  for (let i = 0; i < 50 && statuses.length === 0; i++) await sleep(100);
  assert.ok(statuses.length >= 1 && statuses[0].level === 2, "no error status for 1000 entries");
  assert.equal(ws.readyState, WebSocket.OPEN);
  ws.close();
  console.log(`ok: 1000 entries in one subscribe: "${statuses[0].message}"`);
}

// 3. A client that floods bad subscribes and never reads: what is queued for it stays bounded.
let flooder, kicked = false;
{
  flooder = net.connect(port, "127.0.0.1");
  flooder.on("error", () => { kicked = true; });
  flooder.on("close", () => { kicked = true; });
  await new Promise((r) => flooder.once("connect", r));
  flooder.pause();
  flooder.write(`GET /?token=${token} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
    `Sec-WebSocket-Key: ${randomBytes(16).toString("base64")}\r\nSec-WebSocket-Version: 13\r\n` +
    `Sec-WebSocket-Protocol: ${PROTO}\r\n\r\n`);
  const body = Buffer.from(JSON.stringify({ op: "subscribe", subscriptions: [{ id: 7, channelId: 999999 }] }));
  const frame = Buffer.alloc(6 + body.length);
  frame[0] = 0x81;
  frame[1] = 0x80 | body.length; // masked, with a zero mask: the payload goes as it is
  body.copy(frame, 6);
  const burst = Buffer.concat(Array(1000).fill(frame));
  for (let i = 0; i < 100; i++) {
    if (!flooder.write(burst)) await new Promise((r) => { flooder.once("drain", r); setTimeout(r, 200); });
    if (flooder.destroyed) break;
  }
  await sleep(500);
  assert.ok(kicked, "a client that floods and never reads is still connected");
  console.log("ok: a client that floods bad subscribes and never reads is disconnected");
}

// 4. 100 connections at once (more than the view takes), then all gone.
{
  const many = [];
  for (let i = 0; i < 100; i++) {
    const ws = new WebSocket(url, [PROTO]);
    ws.on("error", () => {});
    many.push(ws);
  }
  await sleep(1500);
  const open = many.filter((w) => w.readyState === WebSocket.OPEN).length;
  for (const w of many) w.terminate();
  assert.ok(open <= 64, `${open} connections open at once`);
  console.log(`ok: ${open} of 100 connections accepted at once`);
}

// 5. A WebSocket without the foxglove.websocket.v1 subprotocol is refused.
{
  const ws = new WebSocket(url);
  const opened = await new Promise((r) => { ws.once("open", () => r(true)); ws.once("error", () => r(false)); });
  assert.equal(opened, false, "a WebSocket without the subprotocol was accepted");
  console.log("ok: a WebSocket without the subprotocol is refused");
}

// 6. Garbage instead of an HTTP request.
{
  const s = net.connect(port, "127.0.0.1");
  s.on("error", () => {});
  await new Promise((r) => s.once("connect", r));
  s.write(randomBytes(20000));
  await sleep(300);
  s.destroy();
}

const before = good;
await sleep(1500);
const rss1 = rssKiB();
console.log(`good client: ${good} frames, ${good - before} in the last 1.5 s; view VmRSS ${rss0} -> ${rss1} KiB`);
assert.ok(good - before >= 15, `the good client got ${good - before} frames in 1.5 s`);
assert.ok(rss1 - rss0 < 32 * 1024, `VmRSS grew by ${rss1 - rss0} KiB`);
flooder.destroy();
clearTimeout(timer);
client.close();
process.exit(0);
