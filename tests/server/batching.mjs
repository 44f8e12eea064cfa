// Concurrent streams share decode steps, and batching does not change a greedy stream:
//   node batching.mjs TANDEM MODEL
// 8 greedy completions are run one at a time, then all 8 at once, streamed, through the official
// openai client: each concurrent stream must equal its lone run, and the concurrent ones must
// take far fewer decode steps than the 8 x 40 tokens they generate. MODEL should take a few
// milliseconds a step (a random-weight TinyLlama-shaped layer does), so that 40 steps outlast the
// time a client on a loaded machine needs to send 8 requests; with stories260K a step takes a
// fraction of a millisecond. (This check once failed on a loaded machine with 179 steps: the
// server's listening queue held 5 connections and the 8th client's SYN was dropped, so it
// started a second later, after the others had finished; server_test's
// ABurstOfConnectionsIsQueuedWhileTheServerIsBusy covers that.)
import OpenAI from "openai";
import assert from "node:assert/strict";
import { startServer, finish, requireModel, metric } from "./common.mjs";

const [tandem, model] = process.argv.slice(2);
if (!tandem || !model) {
  console.error("usage: node batching.mjs TANDEM MODEL");
  process.exit(2);
}

const prompts = [
  "Once upon a time, there was a little girl",
  "The dog ran",
  "Tom and Sue went to the park. They saw a big tree and",
  "One day, a bird",
  "Lily wanted to play with her ball, but",
  "The sun was hot",
  "There was a boy who liked to eat apples. Every day he",
  "Mom said",
];
const kTokens = 40;

requireModel(model);
const server = await startServer(tandem, ["-m", model, "-t", "1", "-np", "8", "-c", "2048", "--api-key", "test-key"]);
let failed = false;
try {
  const client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "test-key", maxRetries: 0 });
  const alone = [];
  for (const p of prompts) {
    const r = await client.completions.create({ model: "any", prompt: p, max_tokens: kTokens, temperature: 0 });
    assert.equal(r.usage.completion_tokens, kTokens, "a lone completion ended early");
    alone.push(r.choices[0].text);
  }
  const stepsBefore = await metric(server.url, "tandem_steps_total");
  const together = await Promise.all(prompts.map(async (p) => {
    let t = "";
    for await (const chunk of await client.completions.create({
      model: "any", prompt: p, max_tokens: kTokens, temperature: 0, stream: true,
    })) {
      t += chunk.choices[0]?.text ?? "";
    }
    return t;
  }));
  const steps = (await metric(server.url, "tandem_steps_total")) - stepsBefore;
  for (let i = 0; i < prompts.length; i++) assert.equal(together[i], alone[i], `stream ${i} differs from alone`);
  // They really ran together: far fewer steps than the 8 x 40 tokens.
  assert.ok(steps < prompts.length * kTokens / 2, `${steps} steps for 8 concurrent streams of ${kTokens} tokens`);
  console.log(`batching: 8 concurrent streams of ${kTokens} tokens in ${steps} steps, each equal to its lone run`);
} catch (e) {
  failed = true;
  console.error(e);
}
await finish(server, failed);
