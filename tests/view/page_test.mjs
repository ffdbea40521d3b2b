// The page of ferry view in headless Chromium (playwright-core, the Debian chromium binary):
// it lists the image topic, shows it live at the camera's size with pixels that are not blank,
// and prints rate, latency and drops. Saves a screenshot to $FERRY_TEST_SHOT. Run by run.sh
// with a camera on /cam/image (WIDTHxHEIGHT in $VIEW_SIZE, default 320x240).
import { createRequire } from "node:module";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const require = createRequire(process.env.NODE_PATH + "/");
const { chromium } = require("playwright-core");
const { PNG } = require("pngjs");

const [width, height] = (process.env.VIEW_SIZE || "320x240").split("x").map(Number);
const url = `http://127.0.0.1:${process.env.VIEW_PORT}/?token=${process.env.VIEW_TOKEN}`;
const browser = await chromium.launch({
  executablePath: process.env.FERRY_TEST_CHROMIUM,
  // As root (CI) Chromium's sandbox cannot start; the page is ours.
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage({ viewport: { width: width + 100, height: height + 160 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (process.env.VIEW_DEBUG) console.log("page:", m.text()); });
  await page.goto(url);
  const view = page.locator("figure canvas").first();
  await page.waitForFunction(() => {
    const c = document.querySelector("figure canvas");
    return c && Number(c.dataset.frames) > 0;
  }, null, { timeout: 15000 });
  assert.equal(await page.locator("figcaption").first().textContent(), "/cam/image");
  const size = await view.evaluate((c) => [c.width, c.height, c.clientWidth, c.clientHeight]);
  assert.deepEqual(size, [width, height, width, height], "the view at the camera's size");

  // The pixels, read back from the canvas: a live camera is not one flat colour.
  const stats = await view.evaluate((c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let sum = 0, sq = 0, n = 0;
    for (let k = 0; k < d.length; k += 4) {
      const y = (d[k] + d[k + 1] + d[k + 2]) / 3;
      sum += y; sq += y * y; n++;
    }
    const mean = sum / n;
    return { mean, variance: sq / n - mean * mean };
  });
  assert.ok(stats.variance > 10, `image pixels look blank: ${JSON.stringify(stats)}`);

  // Rate, latency and drops are shown once a second.
  await page.waitForFunction(() => /Hz .*latency .* ms .*drops \d+/.test(
    document.querySelector(".stats").textContent), null, { timeout: 5000 });
  await page.waitForTimeout(1200);
  const line = await page.locator(".stats").first().textContent();
  const hz = Number(/([\d.]+) Hz/.exec(line)[1]);
  assert.ok(hz > 5, `rate ${hz} Hz on the page: ${line}`);

  const shot = process.env.FERRY_TEST_SHOT;
  await page.screenshot({ path: shot });
  const png = PNG.sync.read(readFileSync(shot));
  const box = await view.boundingBox();
  let sum = 0, sq = 0, n = 0;
  for (let y = Math.ceil(box.y); y < Math.floor(box.y + box.height); y += 2)
    for (let x = Math.ceil(box.x); x < Math.floor(box.x + box.width); x += 2) {
      const k = (y * png.width + x) * 4;
      const v = (png.data[k] + png.data[k + 1] + png.data[k + 2]) / 3;
      sum += v; sq += v * v; n++;
    }
  const mean = sum / n;
  assert.ok(sq / n - mean * mean > 10, "the screenshot's image area is blank");
  assert.deepEqual(errors, [], "errors on the page");
  console.log(`ok: ${size[0]}x${size[1]} on the page, variance ${stats.variance.toFixed(0)}; ${line}`);
} finally {
  await browser.close();
}
