#!/usr/bin/env python3
"""resume_bench.py TANDEM_BIN MODEL: what a lost worker costs (pipeline/resuming_executor.h).

Main node plus 2 workers on loopback. Each round runs a greedy generation, kills the second worker
with SIGKILL once the output reaches a point (rounds spread over 20..70% of the text), and
measures the time from the kill to the next piece of text, split as the main node reports it:
the new pipeline (probe, plan, load) and the re-computation of the committed tokens. The text must
equal the undisturbed run's. Prints one line per round and the medians.

Environment: N (tokens, default 300), ROUNDS (default 5), T (threads per node, default 1).
"""
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

binary, model = sys.argv[1], sys.argv[2]
n = int(os.environ.get("N", "300"))
rounds = int(os.environ.get("ROUNDS", "5"))
threads = os.environ.get("T", "1")
prompt = "Once upon a time"
tmp = tempfile.mkdtemp()


def start_worker(name):
    out = open(os.path.join(tmp, name + ".out"), "w+")
    p = subprocess.Popen([binary, "worker", "--port", "0", "-t", threads, "-m", model],
                         stdout=out, stderr=subprocess.DEVNULL)
    for _ in range(400):
        out.seek(0)
        m = re.search(r"127\.0\.0\.1:(\d+)", out.read())
        if m:
            return p, "127.0.0.1:" + m.group(1)
        time.sleep(0.05)
    raise SystemExit("worker did not start")


def run(workers, kill_at=None, victim=None):
    """Returns (text, seconds from the kill to the next text, stderr, tokens/s line)."""
    args = [binary, "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "-t", threads, "--plan", "memory"]
    for w in workers:
        args += ["--worker", w]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = []
    t = threading.Thread(target=lambda: err.append(p.stderr.read().decode()))
    t.start()
    text = b""
    killed_at = None
    gap = None
    fd = p.stdout.fileno()
    while True:
        chunk = os.read(fd, 65536)
        now = time.monotonic()
        if not chunk:
            break
        if killed_at is not None and gap is None:
            gap = now - killed_at
        text += chunk
        if kill_at is not None and killed_at is None and len(text) >= kill_at:
            victim.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
    p.wait()
    t.join()
    return text.decode(errors="replace"), gap, err[0], p.returncode


a, addr_a = start_worker("a")
b, addr_b = start_worker("b")
try:
    want, _, err, rc = run([addr_a, addr_b])
    if rc != 0:
        raise SystemExit("undisturbed run failed: " + err)
    speed = re.search(r"generation: .*", err)
    print(f"== undisturbed: {len(want)} characters; {speed.group(0) if speed else ''}")
    gaps, opens, recomputes, tokens = [], [], [], []
    for r in range(rounds):
        point = int(len(want) * (0.2 + 0.5 * r / max(rounds - 1, 1)))
        text, gap, err, rc = run([addr_a, addr_b], kill_at=point, victim=b)
        m = re.search(r"resumed in ([0-9.]+) s \(new pipeline ([0-9.]+) s, (\d+) tokens re-computed in ([0-9.]+) s\)", err)
        same = text == want
        if rc != 0 or not m or gap is None:
            print(f"round {r}: failed (rc {rc}, same text {same})\n{err}")
        else:
            gaps.append(gap)
            opens.append(float(m.group(2)))
            tokens.append(int(m.group(3)))
            recomputes.append(float(m.group(4)))
            print(f"round {r}: killed at {point} chars; next text after {gap * 1000:.0f} ms; new pipeline "
                  f"{float(m.group(2)) * 1000:.0f} ms; {m.group(3)} tokens re-computed in "
                  f"{float(m.group(4)) * 1000:.0f} ms; text identical: {same}")
        b.wait()
        b, addr_b_new = start_worker("b")  # a fresh worker (another port) for the next round
        addr_b = addr_b_new
    if gaps:
        print(f"== medians over {len(gaps)} rounds: kill -> next text {statistics.median(gaps) * 1000:.0f} ms = "
              f"new pipeline {statistics.median(opens) * 1000:.0f} ms + re-computing "
              f"{statistics.median(tokens):.0f} tokens {statistics.median(recomputes) * 1000:.0f} ms + the rest "
              f"(detection, the next step)")
finally:
    for p in (a, b):
        p.kill()
