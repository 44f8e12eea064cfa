// The official openai client (pinned in package.json) against `tandem serve`:
//   node openai_client.mjs TANDEM MODEL
// chat and completions, streamed and whole, agree; usage is reported; errors arrive as the
// client's typed errors. (Concurrent streams: batching.mjs.)
import OpenAI from "openai";
import assert from "node:assert/strict";
import { startServer, finish, requireModel } from "./common.mjs";

const [tandem, model] = process.argv.slice(2);
if (!tandem || !model) {
  console.error("usage: node openai_client.mjs TANDEM MODEL");
  process.exit(2);
}

const prompt = "Once upon a time, there was a little girl";

requireModel(model);
const server = await startServer(tandem, ["-m", model, "-t", "1", "-np", "8", "-c", "4096", "--api-key", "test-key"]);
let failed = false;
try {
  const client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "test-key", maxRetries: 0 });

  // Models.
  const models = await client.models.list();
  assert.equal(models.data.length, 1);

  // Chat, whole and streamed.
  // (The tiny reference model has a 512-token context: 64 per slot with -np 8, so short turns.)
  const messages = [{ role: "user", content: "A cat." }];
  const whole = await client.chat.completions.create({ model: "any", messages, max_tokens: 16, temperature: 0 });
  const text = whole.choices[0].message.content;
  assert.ok(text.length > 0, "empty chat reply");
  assert.equal(whole.choices[0].finish_reason, "length");
  assert.equal(whole.usage.completion_tokens, 16);
  assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + 16);
  const stream = await client.chat.completions.create({
    model: "any", messages, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let streamed = "";
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length === 0) continue;
    streamed += chunk.choices[0].delta.content ?? "";
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  assert.equal(streamed, text);
  assert.equal(finish, "length");
  assert.equal(usage.completion_tokens, 16);
  // The same conversation again: its prompt is in a slot's cache.
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0, "no cached tokens reported");

  // Completions, whole and streamed.
  const c1 = await client.completions.create({ model: "any", prompt, max_tokens: 20, temperature: 0 });
  assert.equal(c1.usage.completion_tokens, 20);
  let c2 = "";
  for await (const chunk of await client.completions.create({
    model: "any", prompt, max_tokens: 20, temperature: 0, stream: true,
  })) {
    c2 += chunk.choices[0]?.text ?? "";
  }
  assert.equal(c2, c1.choices[0].text);
  // Stop strings: the text ends before the stop string.
  const stop = c1.choices[0].text.slice(6, 9);
  const c3 = await client.completions.create({ model: "any", prompt, max_tokens: 20, temperature: 0, stop: [stop] });
  assert.equal(c3.choices[0].text, c1.choices[0].text.slice(0, c1.choices[0].text.indexOf(stop)));
  assert.equal(c3.choices[0].finish_reason, "stop");

  // Errors as the client's typed errors.
  await assert.rejects(
    client.chat.completions.create({ model: "any", messages: [{ role: "pirate", content: "arr" }] }),
    (e) => e instanceof OpenAI.BadRequestError && /messages\[0\]\.role/.test(e.message));
  await assert.rejects(
    client.completions.create({ model: "any", prompt: "x".repeat(40000) }),
    (e) => e instanceof OpenAI.BadRequestError && /context/.test(e.message));
  const wrongKey = new OpenAI({ baseURL: server.url + "/v1", apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(wrongKey.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  console.log("openai client: chat, completions, stop strings, errors: ok");
} catch (e) {
  failed = true;
  console.error(e);
}
await finish(server, failed);
