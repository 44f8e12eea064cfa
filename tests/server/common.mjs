// Shared by the server tests: start `tandem serve` on a free port and stop it.
import { spawn } from "node:child_process";
import fs from "node:fs";

// Exits with 77 (CTest's skip code here) when a model the test reads is absent, as the C++ tests
// skip without ../shared.
export function requireModel(path) {
  if (!fs.existsSync(path)) {
    console.log(`skipped: no model at ${path}`);
    process.exit(77);
  }
}

// Starts `tandem serve` with `args`; resolves to { proc, url, pid } once it listens.
export function startServer(tandem, args, env = {}) {
  return new Promise((resolve, reject) => {
    const proc = spawn(tandem, ["serve", "--port", "0", ...args], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, ...env },
    });
    let out = "";
    let err = "";
    const timer = setTimeout(() => reject(new Error("tandem serve did not start in 60 s:\n" + out + err)), 60000);
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[^ ]+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, url: m[1], pid: proc.pid, stderr: () => err });
      }
    });
    proc.stderr.on("data", (d) => {
      err += d;
      if (err.length > 1 << 20) err = err.slice(-(1 << 19));
    });
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`tandem serve exited with ${code} before listening:\n${out}${err}`));
    });
  });
}

// Sends SIGTERM and resolves to the exit code (a sanitizer's report makes it non-zero).
export function stopServer(server) {
  return new Promise((resolve) => {
    server.proc.removeAllListeners("exit");
    server.proc.on("exit", (code, signal) => resolve(code === null ? 128 + (signal === "SIGKILL" ? 9 : 15) : code));
    server.proc.kill("SIGTERM");
    setTimeout(() => server.proc.kill("SIGKILL"), 30000).unref();
  });
}

// Resident memory of a process in bytes (Linux).
export function residentBytes(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  const m = status.match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) * 1024 : 0;
}

export async function metric(url, name) {
  const text = await (await fetch(url + "/metrics", { headers: { Authorization: "Bearer test-key" } })).text();
  const m = text.match(new RegExp("^" + name + " ([0-9.e+-]+)$", "m"));
  return m ? Number(m[1]) : NaN;
}

// A deterministic pseudo-random sequence (so a failing soak can be rerun as it ran).
export function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 4294967296;
  };
}

// Stops the server and exits: 1 if the test failed or the server did not exit cleanly.
export async function finish(server, failed) {
  const code = await stopServer(server);
  if (code !== 0) {
    console.error(`tandem serve exited with ${code}:\n${server.stderr()}`);
    failed = true;
  }
  process.exit(failed ? 1 : 0);
}
