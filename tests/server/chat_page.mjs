// The chat page at / in headless Chromium (Debian's `chromium`, driven by playwright-core):
//   node chat_page.mjs TANDEM MODEL [CHROMIUM]
// Type a message and see a streamed answer appear with its speed; then stop a long answer
// mid-way: the text stops growing, the page is ready for the next message, and the server
// cancelled the request. MODEL should decode slowly enough to be stopped (a random-weight
// TinyLlama-shaped layer does; it also seldom ends a reply by itself).
import { chromium } from "playwright-core";
import assert from "node:assert/strict";
import { startServer, finish, requireModel, metric } from "./common.mjs";

const [tandem, model, browserPath] = process.argv.slice(2);
requireModel(model);
const server = await startServer(tandem, ["-m", model, "-t", "1", "-np", "2", "-c", "2048", "--api-key", "test-key"]);
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
  const stats = await page.textContent("#stats");
  assert.match(stats, /ms to first token/);
  assert.match(stats, /tokens\/s/);
  assert.equal(await page.isEnabled("#stop"), true, "Stop is not enabled while an answer streams");

  // Stop it mid-way.
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
