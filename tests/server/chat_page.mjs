// The chat page at / in headless Chromium (Debian's `chromium`, driven by playwright-core):
//   node chat_page.mjs TANDEM MODEL [CHROMIUM]
// Type a message and see a streamed answer appear with its speed; then stop a long answer
// mid-way: the text stops growing, the page is ready for the next message, and the server
// cancelled the request. MODEL should decode slowly enough to be stopped (a random-weight
// TinyLlama-shaped layer does). A reply must not end by itself before the click, or nothing is
// left to cancel: the server ignores end-of-generation tokens, and each of the 2 slots has 16384
// cells of context (MODEL's trained context must allow it: make-model --context-length), about
// 45 s of decoding at 380 tokens/s, the one-layer model's speed on one thread of the development
// machine. With 1024 cells a reply ended after about 3 s, and a loaded CI machine clicked Stop
// after that.
import { chromium } from "playwright-core";
import assert from "node:assert/strict";
import { startServer, finish, requireModel, metric } from "./common.mjs";

const [tandem, model, browserPath] = process.argv.slice(2);
requireModel(model);
const server = await startServer(tandem, ["-m", model, "-t", "1", "-np", "2", "-c", "32768", "--ignore-eos", "--api-key", "test-key"]);
let failed = false;
let browser = null;
try {
  browser = await chromium.launch({ executablePath: browserPath ?? "/usr/bin/chromium", args: ["--no-sandbox"] });
  const page = await browser.newPage();
  // The page is public; the API behind it takes the key, given in the page's key field.
  await page.goto(server.url + "/");
  await page.fill("#key", "test-key");
  await page.dispatchEvent("#key", "change");
  await page.waitForFunction(() => document.getElementById("model").textContent.length > 0);

  // A message and its streamed answer.
  await page.fill("#input", "Hello there");
  await page.press("#input", "Enter");
  await page.waitForSelector(".msg.user");
  // While it streams the answer grows; wait for some text, then for the end (or stop it: this
  // model seldom ends by itself within its context).
  await page.waitForFunction(() => {
    const a = document.querySelectorAll(".msg.assistant .text");
    return a.length === 1 && a[0].textContent.length > 10;
  }, null, { timeout: 60000 });
  const grown = await page.$eval(".msg.assistant .text", (e) => e.textContent.length);
  await page.waitForFunction((n) => document.querySelector(".msg.assistant .text").textContent.length > n, grown,
                             { timeout: 60000 });
  // The reply is drawn at most once per animation frame, not once per token: setting the text
  // lays out the whole reply, and per token (hundreds a second here) that grew quadratically until
  // Chromium dropped the page. Count the text's changes against the frames over one second.
  await page.evaluate(() => {
    window.testFrames = 0;
    window.testDraws = 0;
    new MutationObserver((records) => { window.testDraws += records.length; })
      .observe(document.querySelector(".msg.assistant .text"), { childList: true, characterData: true, subtree: true });
    const tick = () => { window.testFrames++; requestAnimationFrame(tick); };
    requestAnimationFrame(tick);
  });
  await page.waitForTimeout(1000);
  const drawing = await page.evaluate(() => ({ frames: window.testFrames, draws: window.testDraws }));
  assert.ok(drawing.draws > 0, "the reply did not grow for a second");
  assert.ok(drawing.draws <= drawing.frames + 2, `the reply was drawn ${drawing.draws} times in ${drawing.frames} frames`);
  const stats = await page.textContent("#stats");
  assert.match(stats, /ms to first token/);
  assert.match(stats, /tokens\/s/);
  assert.equal(await page.isEnabled("#stop"), true, "Stop is not enabled while an answer streams");

  // Stop it mid-way (it has not ended by itself: otherwise there is nothing to cancel).
  assert.equal(await page.$(".msg.assistant[data-done='1']"), null, "the reply ended by itself before Stop");
  const cancelledBefore = await metric(server.url, "tandem_requests_cancelled_total");
  await page.click("#stop");
  await page.waitForSelector(".msg.assistant[data-done='1']", { timeout: 10000 });
  const stopped = await page.$eval(".msg.assistant .text", (e) => e.textContent);
  await page.waitForTimeout(1000);
  assert.equal(await page.$eval(".msg.assistant .text", (e) => e.textContent), stopped, "the text grew after Stop");
  assert.equal(await page.isEnabled("#stop"), false);
  assert.equal(await page.isEnabled("#send"), true);
  let cancelled = cancelledBefore;
  for (let i = 0; i < 50 && cancelled === cancelledBefore; i++) {
    await new Promise((r) => setTimeout(r, 100));
    cancelled = await metric(server.url, "tandem_requests_cancelled_total");
  }
  assert.equal(cancelled, cancelledBefore + 1, "the server did not cancel the stopped request");

  // The conversation goes on: a second turn streams below the first.
  await page.fill("#input", "And then?");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => {
    const a = document.querySelectorAll(".msg.assistant .text");
    return a.length === 2 && a[1].textContent.length > 5;
  }, null, { timeout: 60000 });
  await page.click("#stop");
  await page.waitForFunction(() => document.querySelectorAll(".msg.assistant[data-done='1']").length === 2);
  console.log(`chat page: streamed (${stats}), stopped mid-way at ${stopped.length} characters, second turn: ok`);
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  if (browser) await browser.close();
}
await finish(server, failed);
