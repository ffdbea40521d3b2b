// ferry view through the official Foxglove client (@foxglove/ws-protocol): serverInfo, the
// subprotocols (foxglove.websocket.v1 alone, and foxglove.sdk.v1 alone, the Foxglove SDK's name
// for it), the channels of an image topic (schema name, encoding, schema text), Image,
// PointCloud2 and CameraInfo CDR decoded independently with the advertised schemas
// (@foxglove/rosmsg + @foxglove/rosmsg2-serialization), the JPEG channel, unsubscribe, errors for
// hostile messages, a topic that comes and goes (advertise, then unadvertise), and --topic and
// --origin on a second view. Run by run.sh with a 320x240 rgb8 camera on /cam/image.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import assert from "node:assert/strict";

const require = createRequire(process.env.NODE_PATH + "/");
const { FoxgloveClient } = require("@foxglove/ws-protocol");
const WebSocket = require("ws");
const { parse } = require("@foxglove/rosmsg");
const { MessageReader } = require("@foxglove/rosmsg2-serialization");

const url = `ws://127.0.0.1:${process.env.VIEW_PORT}/?token=${process.env.VIEW_TOKEN}`;
const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 40000);
const ws = new WebSocket(url, [FoxgloveClient.SUPPORTED_SUBPROTOCOL]);
const client = new FoxgloveClient({ ws });
const channels = new Map();
const waiters = [];
const statuses = [];
let serverInfo = null;
const received = new Map(); // subscription id -> messages

function until(what, test, ms = 10000) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
    const w = () => { const v = test(); if (v) { clearTimeout(t); resolve(v); return true; } return false; };
    if (!w()) waiters.push(w);
  });
}
function poke() { for (let i = waiters.length - 1; i >= 0; i--) if (waiters[i]()) waiters.splice(i, 1); }
const byTopic = (topic) => [...channels.values()].find((c) => c.topic === topic);

client.on("error", (e) => { console.error("client error:", e); process.exit(1); });
client.on("serverInfo", (info) => { serverInfo = info; poke(); });
client.on("status", (s) => { statuses.push(s); poke(); });
client.on("advertise", (chs) => { for (const c of chs) channels.set(c.id, c); poke(); });
client.on("unadvertise", (ids) => { for (const id of ids) channels.delete(id); poke(); });
client.on("message", (m) => {
  if (!received.has(m.subscriptionId)) received.set(m.subscriptionId, []);
  const list = received.get(m.subscriptionId);
  if (list.length < 20) list.push(m);
  else list.count = (list.count || 20) + 1;
  poke();
});

await until("serverInfo", () => serverInfo);
assert.equal(serverInfo.name, "ferry view");
assert.ok(Array.isArray(serverInfo.capabilities));

const raw = await until("the /cam/image channel", () => byTopic("/cam/image"));
const jpeg = await until("the /cam/image/compressed channel", () => byTopic("/cam/image/compressed"));
assert.equal(raw.encoding, "cdr");
assert.equal(raw.schemaName, "sensor_msgs/msg/Image");
assert.equal(raw.schemaEncoding, "ros2msg");
assert.ok(raw.schema.length > 0, "Image schema text is empty");
assert.equal(jpeg.encoding, "cdr");
assert.equal(jpeg.schemaName, "sensor_msgs/msg/CompressedImage");
assert.equal(jpeg.schemaEncoding, "ros2msg");
assert.ok(jpeg.schema.length > 0, "CompressedImage schema text is empty");

const rawSub = client.subscribe(raw.id);
const jpegSub = client.subscribe(jpeg.id);
await until("3 Image messages", () => (received.get(rawSub) || []).length >= 3);
await until("3 CompressedImage messages", () => (received.get(jpegSub) || []).length >= 3);

// The independent check: decode with the schema the server advertised.
const imageReader = new MessageReader(parse(raw.schema, { ros2: true }));
for (const m of received.get(rawSub)) {
  const img = imageReader.readMessage(m.data);
  assert.equal(img.width, 320);
  assert.equal(img.height, 240);
  assert.equal(img.encoding, "rgb8");
  assert.equal(img.step, 320 * 3);
  assert.equal(img.data.length, 320 * 240 * 3);
  assert.equal(img.header.frame_id, "image");
  // builtin_interfaces/Time: "nanosec" from @foxglove/rosmsg2-serialization 3, "nsec" from 2.
  const nanosec = img.header.stamp.nanosec ?? img.header.stamp.nsec;
  const ageMs = Date.now() - (img.header.stamp.sec * 1e3 + nanosec / 1e6);
  assert.ok(ageMs > -1000 && ageMs < 5000, `header stamp ${ageMs} ms away from now`);
  assert.equal(typeof m.timestamp, "bigint");
}
const compressedReader = new MessageReader(parse(jpeg.schema, { ros2: true }));
for (const m of received.get(jpegSub)) {
  const c = compressedReader.readMessage(m.data);
  assert.equal(c.format, "jpeg");
  assert.equal(c.header.frame_id, "image");
  assert.ok(c.data.length > 100 && c.data.length < 320 * 240 * 3, `JPEG of ${c.data.length} bytes`);
  assert.equal(c.data[0], 0xff);
  assert.equal(c.data[1], 0xd8);
  assert.equal(c.data[c.data.length - 2], 0xff);
  assert.equal(c.data[c.data.length - 1], 0xd9);
}
console.log(`ok: ${received.get(rawSub).length} Image and ${received.get(jpegSub).length} CompressedImage messages decoded`);
assert.equal(ws.protocol, "foxglove.websocket.v1");

// The Foxglove SDK's name for the same protocol: a client that offers only foxglove.sdk.v1 is
// upgraded with it and served the same way.
{
  const w = new WebSocket(url, ["foxglove.sdk.v1"]);
  const c2 = new FoxgloveClient({ ws: w });
  let info2 = null, sub2 = null, got = 0;
  c2.on("serverInfo", (i) => { info2 = i; });
  c2.on("advertise", (chs) => {
    const j = chs.find((c) => c.topic === "/cam/image/compressed");
    if (j && sub2 === null) sub2 = c2.subscribe(j.id);
  });
  c2.on("message", (m) => { if (m.subscriptionId === sub2) got++; });
  const end = Date.now() + 10000;
  while (got < 2 && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
  assert.equal(w.protocol, "foxglove.sdk.v1");
  assert.equal(info2 && info2.name, "ferry view", "serverInfo over foxglove.sdk.v1");
  assert.ok(got >= 2, `${got} messages over foxglove.sdk.v1`);
  c2.close();
  console.log("ok: a client offering only foxglove.sdk.v1 is served");
}

// Unsubscribed: nothing more comes for it (after what was in flight).
client.unsubscribe(rawSub);
await new Promise((r) => setTimeout(r, 300));
const before = received.get(rawSub).count || received.get(rawSub).length;
await new Promise((r) => setTimeout(r, 500));
assert.equal(received.get(rawSub).count || received.get(rawSub).length, before, "messages after unsubscribe");

// Hostile or wrong messages get an error status; the connection stays.
const errors = () => statuses.filter((s) => s.level === 2).length;
const sendRaw = (text) => ws.send(text);
sendRaw("{not json");
await until("an error for invalid JSON", () => errors() >= 1);
sendRaw(JSON.stringify({ op: "subscribe", subscriptions: [{ id: 99, channelId: 424242 }] }));
await until("an error for an unknown channel", () => errors() >= 2);
sendRaw(JSON.stringify({ op: "subscribe", subscriptions: [{ id: jpegSub, channelId: raw.id }] }));
await until("an error for a reused subscription id", () => errors() >= 3);
sendRaw(JSON.stringify({ op: "subscribe", subscriptions: [{ id: -1, channelId: 1.5 }] }));
await until("an error for bad ids", () => errors() >= 4);
sendRaw(JSON.stringify({ op: "fly" }));
await until("an error for an unknown op", () => errors() >= 5);
sendRaw("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
await until("an error for deep nesting", () => errors() >= 6);
const n = (received.get(jpegSub).count || received.get(jpegSub).length);
await until("JPEG messages still coming", () => (received.get(jpegSub).count || received.get(jpegSub).length) > n + 2);
console.log(`ok: ${errors()} error statuses for bad messages, the stream goes on`);

// The other types, decoded with their advertised schemas: a point cloud and a camera info.
const others = [
  spawn(process.env.FERRY_BIN, ["pub", "/lidar/points", "--cloud", "128x4", "--rate", "20"], { stdio: "ignore" }),
  spawn(process.env.FERRY_BIN, ["pub", "/cam2/image", "--image", "32x24", "--rate", "20", "--camera-info"],
        { stdio: "ignore" }),
];
const cloud = await until("the /lidar/points channel", () => byTopic("/lidar/points"), 5000);
const info = await until("the /cam2/camera_info channel", () => byTopic("/cam2/camera_info"), 5000);
assert.equal(cloud.schemaName, "sensor_msgs/msg/PointCloud2");
assert.equal(info.schemaName, "sensor_msgs/msg/CameraInfo");
const cloudSub = client.subscribe(cloud.id);
const infoSub = client.subscribe(info.id);
await until("a PointCloud2", () => (received.get(cloudSub) || []).length >= 1);
await until("a CameraInfo", () => (received.get(infoSub) || []).length >= 1);
const pc = new MessageReader(parse(cloud.schema, { ros2: true })).readMessage(received.get(cloudSub)[0].data);
assert.equal(pc.width, 128);
assert.equal(pc.height, 4);
assert.equal(pc.point_step, 16);
assert.deepEqual(pc.fields.map((f) => f.name), ["x", "y", "z", "intensity"]);
assert.equal(pc.data.length, 128 * 4 * 16);
const ci = new MessageReader(parse(info.schema, { ros2: true })).readMessage(received.get(infoSub)[0].data);
assert.equal(ci.width, 32);
assert.equal(ci.height, 24);
assert.equal(ci.distortion_model, "plumb_bob");
assert.equal(ci.k[0], 32);
client.unsubscribe(cloudSub);
client.unsubscribe(infoSub);
for (const p of others) p.kill("SIGTERM");
console.log("ok: PointCloud2 and CameraInfo decoded with their advertised schemas");

// A topic that comes and goes: advertised within the rescan, unadvertised when it is gone.
const pub = spawn(process.env.FERRY_BIN, ["pub", "/cam/brief", "--image", "64x48", "--rate", "30", "--count", "60"],
                  { stdio: "ignore" });
const brief = await until("the /cam/brief channel", () => byTopic("/cam/brief"), 5000);
assert.equal(brief.schemaName, "sensor_msgs/msg/Image");
await new Promise((r) => pub.on("exit", r));
await until("/cam/brief unadvertised", () => !channels.has(brief.id), 5000);
console.log("ok: /cam/brief advertised, then unadvertised");

// ferryStats, for a client that asks (a plain WebSocket: Foxglove's client refuses unknown ops).
{
  const w = new WebSocket(url, [FoxgloveClient.SUPPORTED_SUBPROTOCOL]);
  const stats = await new Promise((resolve) => {
    w.on("message", (d, binary) => {
      if (binary) return;
      const m = JSON.parse(d);
      if (m.op === "advertise" && m.channels.length) {
        w.send(JSON.stringify({ op: "subscribe", subscriptions: [{ id: 5, channelId: jpeg.id }] }));
        w.send(JSON.stringify({ op: "ferrySubscribeStats" }));
      }
      if (m.op === "ferryStats" && m.subscriptions.length && m.subscriptions[0].sent > 0) resolve(m);
    });
  });
  w.close();
  const s0 = stats.subscriptions[0];
  assert.equal(s0.id, 5);
  for (const k of ["sent", "dropped", "gaps", "capped"]) assert.equal(typeof s0[k], "number", k);
  console.log(`ok: ferryStats ${JSON.stringify(s0)}`);
}

// A second view, with --topic and --origin: it offers only what matches, lets in (with its
// token) clients without an Origin, its own page and the listed origins, and refuses other web
// pages and requests without the token.
const view2 = spawn(process.env.FERRY_BIN, ["view", "--port", "0", "--topic", "/cam/none*",
                                            "--origin", "https://app.foxglove.dev"],
                    { stdio: ["ignore", "pipe", "inherit"] });
const [port2, token2] = await new Promise((resolve, reject) => {
  let out = "";
  view2.stdout.on("data", (d) => {
    out += d;
    const m = /serving http:\/\/127\.0\.0\.1:(\d+)\/\?token=([0-9a-f]+) /.exec(out);
    if (m) resolve([m[1], m[2]]);
  });
  view2.on("exit", () => reject(new Error("the second view exited")));
});
const connect2 = (origin, token = token2) => new Promise((resolve) => {
  const w = new WebSocket(`ws://127.0.0.1:${port2}/?token=${token}`, [FoxgloveClient.SUPPORTED_SUBPROTOCOL],
                          origin ? { origin } : {});
  w.on("message", (d, binary) => {
    const m = binary ? null : JSON.parse(d);
    if (m && m.op === "advertise") { w.close(); resolve(m.channels); }
  });
  w.on("error", () => resolve(null));
});
assert.deepEqual(await connect2(null), [], "--topic /cam/none*: an empty advertise");
assert.deepEqual(await connect2("https://app.foxglove.dev"), [], "a listed origin is let in");
assert.deepEqual(await connect2(`http://127.0.0.1:${port2}`), [], "the view's own page is let in");
assert.equal(await connect2("https://evil.example"), null, "another origin is refused");
assert.equal(await connect2("https://app.foxglove.dev", "0".repeat(32)), null,
             "a listed origin without the token is refused");
view2.kill("SIGTERM");
// Without --origin, the first view refuses a web page of another origin, token or not.
{
  const w = new WebSocket(url, [FoxgloveClient.SUPPORTED_SUBPROTOCOL], { origin: "https://app.foxglove.dev" });
  const opened = await new Promise((r) => { w.once("open", () => r(true)); w.once("error", () => r(false)); });
  if (opened) w.close();
  assert.equal(opened, false, "without --origin, another origin was let in");
}
console.log("ok: --topic offers only what matches; --origin lets the listed origin in with the token; " +
            "other web pages are refused");

clearTimeout(timer);
client.close();
process.exit(0);
