// Throughput of `tandem serve` with continuous batching, measured side by side in one run:
//   node bench/serve_bench.mjs TANDEM MODEL [--workers N] [--threads T] [--streams S] [--tokens N]
//                              [--rounds R] [--np N] [--groups G]
// Starts N workers on loopback (0: this machine alone) and a server, then alternates, R times:
//   one stream of N greedy tokens (EOS ignored), and S concurrent streams of N tokens each,
// and prints the generated tokens/s of each (decode only: from each stream's first token to its
// last), their median ratio; the time to first token of a 512-token prompt arriving while S
// streams decode, with the streams' tokens/s meanwhile; and the prompt tokens a chat's second
// turn computes after a ~400-token first turn. Plain fetch, no dependencies.
import { spawn } from "node:child_process";

const args = process.argv.slice(2);
const [tandem, model] = args;
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const nWorkers = opt("--workers", 0), threads = opt("--threads", 2), streams = opt("--streams", 4);
const tokens = opt("--tokens", 128), rounds = opt("--rounds", 3), np = opt("--np", Math.max(4, streams));
const groups = opt("--groups", 0);
if (!tandem || !model) {
  console.error("usage: node bench/serve_bench.mjs TANDEM MODEL [--workers N] [--threads T] [--streams S] " +
                "[--tokens N] [--rounds R] [--np N]");
  process.exit(2);
}

function start(cmd, pattern) {
  return new Promise((resolve, reject) => {
    const p = spawn(tandem, cmd, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "", err = "";
    p.stdout.on("data", (d) => {
      out += d;
      const m = out.match(pattern);
      if (m) resolve({ p, m });
    });
    p.stderr.on("data", (d) => { err += d; });
    p.on("exit", (c) => reject(new Error(`${cmd[0]} exited with ${c}: ${out}${err}`)));
  });
}

const procs = [];
const workerAddrs = [];
for (let i = 0; i < nWorkers; i++) {
  const w = await start(["worker", "--port", "0", "-t", String(threads), "-m", model], /listening on ([^ ]+) /);
  procs.push(w.p);
  workerAddrs.push(w.m[1]);
}
const serveArgs = ["serve", "-m", model, "--port", "0", "-t", String(threads), "-np", String(np), "-c", String(np * 1024)];
if (workerAddrs.length) serveArgs.push("--plan", "memory");  // every worker holds layers
for (const a of workerAddrs) serveArgs.push("--worker", a);
if (groups) serveArgs.push("--pipeline-groups", String(groups));
const server = await start(serveArgs, /listening on (http:\/\/[^ ]+) .* slots of (\d+) tokens/);
procs.push(server.p);
const url = server.m[1];
const ctxTrain = Number(server.m[2]) * np;  // the server prints its slots' size

// One streamed completion; resolves to its timing.
async function complete(prompt, maxTokens, extra = {}) {
  const t0 = performance.now();
  const res = await fetch(url + "/v1/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream: true,
                           stream_options: { include_usage: true }, ...extra }),
  });
  if (!res.ok) throw new Error(`${res.status} ${await res.text()}`);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "", first = 0, last = 0, usage = null, pieces = 0;
  const times = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const j = JSON.parse(ev.slice(6));
      if (j.usage) usage = j.usage;
      if (j.choices?.[0]?.text) {
        const now = performance.now();
        if (!first) first = now;
        last = now;
        pieces++;
        times.push(now);
      }
    }
  }
  return { t0, first, last, usage, pieces, times };
}

const prompts = ["Once upon a time", "The little dog", "In a small town", "One day, a girl", "The old man said",
                 "A bird flew", "Under the sea", "The king and", "It was raining"];
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];

await complete("warm up", 16);
const single = [], multi = [], ratio = [];
for (let r = 0; r < rounds; r++) {
  const one = await complete(prompts[r % prompts.length] + " " + r, tokens);
  const oneRate = (one.usage.completion_tokens - 1) / ((one.last - one.first) / 1000);
  const many = await Promise.all(Array.from({ length: streams }, (_, i) => complete(prompts[i] + " " + r, tokens)));
  const begin = Math.min(...many.map((m) => m.first)), end = Math.max(...many.map((m) => m.last));
  const total = many.reduce((s, m) => s + m.usage.completion_tokens - 1, 0);
  const manyRate = total / ((end - begin) / 1000);
  single.push(oneRate);
  multi.push(manyRate);
  ratio.push(manyRate / oneRate);
  console.log(`round ${r + 1}: 1 stream ${oneRate.toFixed(2)} t/s; ${streams} streams ${manyRate.toFixed(2)} t/s in all ` +
              `(${(manyRate / oneRate).toFixed(2)}x)`);
}
const where = nWorkers ? `main + ${nWorkers} workers on loopback` : "one node";
console.log(`${where}, ${threads} threads per node, ${tokens} greedy tokens per request, -np ${np}` +
            `${groups ? ", " + groups + " pipeline group(s)" : ""}: ` +
            `1 stream ${median(single).toFixed(2)} t/s, ${streams} streams ${median(multi).toFixed(2)} t/s in all, ` +
            `ratio ${median(ratio).toFixed(2)}x (medians of ${rounds})`);

// Time to first token of a long prompt (512 tokens, or what a slot holds with room for 4 more)
// while `streams` - 1 streams decode.
{
  const slot = Math.floor(ctxTrain / np);
  const promptLen = Math.min(512, slot - 4);
  const running = Array.from({ length: Math.max(1, streams - 1) }, (_, i) => complete(prompts[i] + " busy", slot - 16));
  await new Promise((r) => setTimeout(r, 1500));
  const tokenIds = Array.from({ length: promptLen }, (_, i) => 100 + ((i * 37) % 20000));
  const sent = performance.now();
  const p = await complete(tokenIds, 4);
  const ttft = p.first - sent;
  const during = await Promise.all(running);
  let n = 0;
  for (const d of during) n += d.times.filter((t) => t >= sent && t <= p.first).length;
  console.log(`${promptLen}-token prompt while ${during.length} streams decode: time to first token ${(ttft / 1000).toFixed(2)} s; ` +
              `the streams made ${(n / (ttft / 1000)).toFixed(2)} t/s in all meanwhile`);
}

// A chat's second turn after a ~400-token first turn.
{
  // About 400 tokens of conversation: words added until /tokenize counts 360 (the template and
  // the reply add the rest).
  const words = [];
  const count = async (text) => (await (await fetch(url + "/tokenize", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ content: text }),
  })).json()).tokens.length;
  while (await count(words.join(" ")) < 360) {
    words.push(["the", "cat", "sat", "on", "a", "mat", "and", "looked", "at", "sky"][words.length % 10]);
  }
  const messages = [{ role: "user", content: words.join(" ") }];
  const chat = async (m) => {
    const res = await fetch(url + "/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ messages: m, max_tokens: 32, temperature: 0 }),
    });
    const j = await res.json();
    if (!res.ok) throw new Error(JSON.stringify(j));
    return j;
  };
  const a = await chat(messages);
  const m2 = [...messages, { role: "assistant", content: a.choices[0].message.content }, { role: "user", content: "And then?" }];
  const b = await chat(m2);
  console.log(`chat: first turn ${a.usage.prompt_tokens} prompt tokens (${a.usage.prompt_tokens_details.cached_tokens} cached); ` +
              `second turn ${b.usage.prompt_tokens} prompt tokens, ${b.usage.prompt_tokens_details.cached_tokens} cached, ` +
              `${b.usage.prompt_tokens - b.usage.prompt_tokens_details.cached_tokens} computed`);
}

for (const p of procs) p.kill("SIGTERM");
process.exit(0);
