"""Seconds from `ptrain run` to the first step on this machine's CPU: a 0.51B-parameter Llama (hidden 2048,
8 layers, vocab 32,000) whose step is short (16 tokens), so start-up (loading the job, allocating,
drawing the initial weights) dominates; wall time of a 1-step run less its step, and the run's own
"start-up:" line split into its parts (where the binary prints one). One binary or two side by side
(--before an older build, runs interleaved). Writes bench/results/<date>-startup-time.json.
    python3 bench/startup_time.py [--ptrain build/ptrain] [--before OTHER_BINARY] [--runs 3]"""
import json
import os
import re
import statistics
import subprocess
import tempfile
import time

from results import before_after, write_result

JOB = """name: startup
backend: cpu
model: {{arch: llama, layers: 8, hidden: 2048, heads: 16, kv_heads: 8, ffn_hidden: 5632, vocab: 32000, seq_len: 16}}
parallel: {{tp: 1, pp: 1, dp: 1, zero: 0}}
train: {{steps: 1, global_batch: 1, micro_batch: 1, precision: fp32, seed: 1}}
optimizer: {{kind: adamw, lr: 1.0e-4}}
data: {{format: synthetic}}
cluster: {{nodes: 1, gpus_per_node: 1, gpu: cpu}}
logging: {{every: 1, metrics: {metrics}}}
"""


def one(binary, d):
    metrics = os.path.join(d, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    job = os.path.join(d, "job.yaml")
    with open(job, "w") as f:
        f.write(JOB.format(metrics=metrics))
    start = time.perf_counter()
    r = subprocess.run([binary, "run", job], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    with open(metrics) as f:
        step = json.loads(f.readline())["step_s"]
    parts = {}
    for line in r.stderr.splitlines():
        if "start-up:" in line:  # "... : job 0.01 s, backend 0.00 s, ..., weights 9.1 s (drawn ...), first step 0.3 s"
            for part in line.split(": ", 2)[-1].split(", "):
                name, value = re.match(r"([a-z ]+) ([0-9.]+) s", part).groups()
                parts[name] = float(value)
    return wall, step, parts


def main():
    binaries, runs = before_after(runs=3)
    samples = {b: [] for b in binaries}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(runs):
            for b, binary in binaries.items():
                samples[b].append(one(binary, d))
    rows = []
    for b, runs in samples.items():
        startup = [wall - step for wall, step, _ in runs]
        row = {"binary": b, "path": binaries[b], "runs": len(runs), "startup_s": statistics.median(startup),
               "startup_min_s": min(startup), "first_step_s": statistics.median(s for _, s, _ in runs)}
        if runs[0][2]:
            row["parts_s"] = {name: statistics.median(p[name] for _, _, p in runs) for name in runs[0][2]}
        rows.append(row)
        print(f"{b:6s} start-up {row['startup_s']:6.2f} s (min {row['startup_min_s']:.2f}), first step "
              f"{row['first_step_s']:.2f} s" + (f", parts {row['parts_s']}" if "parts_s" in row else ""))
    write_result("startup-time", {"machine": "this CPU", "parameters": 508_594_176, "rows": rows})


if __name__ == "__main__":
    main()
