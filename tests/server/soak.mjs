// Soak: 300 requests from 6 concurrent clients with random cancellations and random stop strings
//   node soak.mjs TANDEM MODEL [REQUESTS] [--sanitized]
// No request may fail (cancelled ones end with the client's abort error), the server's resident
// memory must stay flat after warm-up, and it must exit cleanly (an ASan/UBSan build reports
// leaks and errors through its exit status). --sanitized (an ASan build) skips the memory bound:
// ASan keeps freed memory in quarantine, so its resident size grows by design.
import OpenAI from "openai";
import assert from "node:assert/strict";
import { startServer, finish, requireModel, residentBytes, metric, rng } from "./common.mjs";

const [tandem, model, count, flag] = process.argv.slice(2);
const sanitized = flag === "--sanitized";
const total = Number(count ?? 300);
const clients = 6;
const random = rng(20261204);
const words = ["Once upon a time", "The little dog", "Lily and Ben", "One day", "The sun", "Mom said", "A bird"];
const stops = [".", " the", ",", "!", " a", "\n", "and"];

requireModel(model);
const server = await startServer(tandem, ["-m", model, "-t", "1", "-np", "4", "--api-key", "test-key"],
                                 { ASAN_OPTIONS: "detect_leaks=1", UBSAN_OPTIONS: "print_stacktrace=1" });
let failed = false;
try {
  const client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "test-key", maxRetries: 0, timeout: 120000 });
  let done = 0, cancelled = 0, errors = 0, warmRss = 0;
  const one = async () => {
    const prompt = words[Math.floor(random() * words.length)] + " " + words[Math.floor(random() * words.length)];
    const stop = random() < 0.5 ? [stops[Math.floor(random() * stops.length)]] : undefined;
    const streamIt = random() < 0.6;
    const cancelAfter = random() < 0.25 ? Math.floor(random() * 30) : -1;
    const chat = random() < 0.5;
    const max_tokens = 1 + Math.floor(random() * 64);
    const temperature = random() < 0.5 ? 0 : 0.8;
    const controller = new AbortController();
    if (cancelAfter >= 0 && !streamIt) setTimeout(() => controller.abort(), cancelAfter);
    try {
      const body = chat ? { model: "m", messages: [{ role: "user", content: prompt }] } : { model: "m", prompt };
      Object.assign(body, { max_tokens, temperature, stop, stream: streamIt, seed: Math.floor(random() * 1000) });
      const api = chat ? client.chat.completions : client.completions;
      const r = await api.create(body, { signal: controller.signal });
      if (streamIt) {
        let n = 0;
        for await (const chunk of r) {
          if (cancelAfter >= 0 && ++n > cancelAfter) controller.abort();
          void chunk;
        }
      } else {
        assert.ok(r.usage.completion_tokens <= max_tokens);
      }
    } catch (e) {
      if (e instanceof OpenAI.APIUserAbortError || e.name === "AbortError" || controller.signal.aborted) {
        cancelled++;
      } else {
        errors++;
        console.error("request failed:", e.message ?? e);
      }
    }
    done++;
    if (done === 50) warmRss = residentBytes(server.pid);
  };
  let next = 0;
  await Promise.all(Array.from({ length: clients }, async () => {
    while (next < total) {
      next++;
      await one();
    }
  }));
  // Let the server notice the last cancellations.
  await new Promise((r) => setTimeout(r, 500));
  const endRss = residentBytes(server.pid);
  const health = await fetch(server.url + "/health");
  const requests = await metric(server.url, "tandem_requests_total");
  const busy = await metric(server.url, "tandem_slots_busy");
  console.log(`soak: ${done} requests, ${cancelled} cancelled by the client, ${errors} errors; ` +
              `server requests ${requests}, slots busy ${busy}; resident ${(warmRss / 1048576).toFixed(1)} MiB ` +
              `after 50, ${(endRss / 1048576).toFixed(1)} MiB at the end`);
  assert.equal(errors, 0, "requests failed");
  assert.equal(done, total);
  assert.ok(cancelled > 0, "no request was cancelled: the soak did not test cancellation");
  assert.equal(health.status, 200);
  assert.equal(busy, 0, "a slot is still busy after every request ended");
  // Flat after warm-up: growth under 8 MiB (a leak of one request's buffers would pass that in 250 requests).
  if (!sanitized) {
    assert.ok(endRss - warmRss < 8 * 1048576, `resident memory grew by ${((endRss - warmRss) / 1048576).toFixed(1)} MiB`);
  }
} catch (e) {
  failed = true;
  console.error(e);
}
await finish(server, failed);
