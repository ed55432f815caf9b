"""Seconds from `ptrain run` to the first step: a Llama whose step is short (16 tokens), so start-up
(loading the job, allocating, drawing the initial weights, the device's module and context) dominates;
wall time of a 1-step run less its step, and the run's own "start-up:" line split into its parts.
One binary or two side by side (--before an older build, runs interleaved).
  --size 0.5b (default): hidden 2048, 8 layers, vocab 32,000, fp32 (0.51 B parameters: this CPU's size)
  --size 3b: Llama 3.2 3B's shapes (hidden 3072, 28 layers, vocab 128,256, untied: 3.61 B), bf16 --
             issue 20's goal, a 3B shard's first step in under 10 s on a 16-core H100 host
  --backend cpu (default) | cuda (on a GPU machine; the CPU's cores still draw the weights)
Writes bench/results/<date>-startup-time[-<size>-<backend>].json (the default keeps the plain name).
    python3 bench/startup_time.py [--ptrain build/ptrain] [--before OTHER_BINARY] [--runs 3]
                                  [--size 0.5b|3b] [--backend cpu|cuda]"""
import argparse
import mmap
import os
import re
import statistics
import subprocess
import tempfile
import time

from results import before_after, run_job, write_result

SIZES = {  # name: (model keys, precision, parameters as validate counts them)
    "0.5b": ("arch: llama, layers: 8, hidden: 2048, heads: 16, kv_heads: 8, ffn_hidden: 5632, vocab: 32000",
             "fp32", 508_594_176),
    "3b": ("arch: llama, layers: 28, hidden: 3072, heads: 24, kv_heads: 8, ffn_hidden: 8192, vocab: 128256",
           "bf16", 3_606_752_256),
}
JOB = """name: startup
backend: {backend}
model: {{{model}, seq_len: 16}}
parallel: {{tp: 1, pp: 1, dp: 1, zero: 0}}
train: {{steps: 1, global_batch: 1, micro_batch: 1, precision: {precision}, seed: 1}}
optimizer: {{kind: adamw, lr: 1.0e-4}}
data: {{format: synthetic}}
cluster: {{nodes: 1, gpus_per_node: 1, gpu: {gpu}}}
logging: {{every: 1, metrics: {metrics}}}
"""


def one(binary, d, size, backend):
    model, precision, _ = SIZES[size]
    job = JOB.format(backend=backend, model=model, precision=precision, metrics="{metrics}",
                     gpu="h100-sxm" if backend == "cuda" else "cpu")
    steps, stderr, wall = run_job(binary, d, job)
    parts = {}
    for line in stderr.splitlines():
        if "start-up:" in line:  # "<prefix> start-up: ...: job 0.01 s, ..., weights 9.1 s (drawn ...), first step 0.3 s"
            for part in line.split("start-up: ", 1)[1].split(": ", 1)[-1].split(", "):
                name, value = re.match(r"([a-z ]+) ([0-9.]+) s", part).groups()
                parts[name] = float(value)
    return wall, steps[0]["step_s"], parts


def machine(backend):
    if backend == "cpu":
        return "this CPU"
    r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else "a CUDA device"


def transparent_hugepages():
    """The kernel's THP settings, which decide whether the CPU backend's madvise(MADV_HUGEPAGE) gets
    huge pages: {"enabled": "madvise", "defrag": "madvise"} (the bracketed choice of each file)."""
    settings = {}
    for name in ("enabled", "defrag"):
        try:
            with open(f"/sys/kernel/mm/transparent_hugepage/{name}") as f:
                text = f.read()
            settings[name] = text[text.index("[") + 1:text.index("]")]
        except (OSError, ValueError):
            settings[name] = None
    return settings


def first_touch_floor(size):
    """What this machine's memory costs before ptrain does anything: seconds to fault in, one byte a
    4 KiB page, an anonymous mapping of the bytes the CPU job's training state takes (16 a parameter:
    fp32 weights, gradients, m and v) asked for transparent huge pages as ptrain's buffers are. On a
    VM whose host takes back freed memory this is anywhere from a fraction of a second to many (the
    host faults the pages in again): the floor under the `allocation` part, measured before each run
    (one thread's touches, where ptrain's allocation touches with every core; and the probe's pages,
    freed, are at hand for the run after it: that run's allocation is the warm case)."""
    size_bytes = 16 * SIZES[size][2]
    with mmap.mmap(-1, size_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as m:  # shared: no THP
        if hasattr(mmap, "MADV_HUGEPAGE"):
            m.madvise(mmap.MADV_HUGEPAGE)
        t0 = time.perf_counter()
        m[::4096] = b"\x01" * len(range(0, size_bytes, 4096))
        return time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=sorted(SIZES), default="0.5b")
    parser.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    binaries, args = before_after(runs=3, parser=parser)
    runs = args.runs
    samples = {b: [] for b in binaries}
    floors = {b: [] for b in binaries}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(runs):
            for b, binary in binaries.items():
                if args.backend == "cpu":
                    floors[b].append(first_touch_floor(args.size))
                samples[b].append(one(binary, d, args.size, args.backend))
    rows = []
    for b, runs in samples.items():
        startup = [wall - step for wall, step, _ in runs]
        row = {"binary": b, "path": binaries[b], "runs": len(runs), "startup_s": statistics.median(startup),
               "startup_min_s": min(startup), "first_step_s": statistics.median(s for _, s, _ in runs)}
        if runs[0][2]:
            row["parts_s"] = {name: statistics.median(p[name] for _, _, p in runs) for name in runs[0][2]}
        if floors[b]:  # each run's: its allocation against the floor measured just before it
            row["first_touch_floor_s"] = floors[b]
            row["allocation_s"] = [p.get("allocation") for _, _, p in runs]
        rows.append(row)
        print(f"{b:6s} start-up {row['startup_s']:6.2f} s (min {row['startup_min_s']:.2f}), first step "
              f"{row['first_step_s']:.2f} s" + (f", parts {row['parts_s']}" if "parts_s" in row else "") +
              (f"; allocation per run {row['allocation_s']} s against the machine's first-touch floor "
               f"{[round(f, 2) for f in row['first_touch_floor_s']]} s" if "first_touch_floor_s" in row else ""))
    name = "startup-time" if (args.size, args.backend) == ("0.5b", "cpu") else f"startup-time-{args.size}-{args.backend}"
    write_result(name, {"machine": machine(args.backend), "cores": os.cpu_count(), "size": args.size,
                        "backend": args.backend, "parameters": SIZES[args.size][2],
                        "transparent_hugepage": transparent_hugepages(), "rows": rows})


if __name__ == "__main__":
    main()
