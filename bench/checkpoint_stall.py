"""The training stall of a checkpoint, synchronous against `checkpoint.async: true` (issue 42 item 3), on
the CPU: the issue's ~0.5 B model (a Llama of 0.51 B parameters, hidden 2048, 8 layers, a 32,000
vocabulary: startup_time.py's), fp32, one rank, 64 tokens a step (about 1.5 s a step on a quiet 2-core
machine, so that ten steps outlast a background write as the steps between saves of a real job do),
saving every 10 steps (6.1 GB a checkpoint), 35 steps: saves at steps 10, 20 and 30 are measured (the one
at the end of the run waits for its write by design and is left out). It needs ~15 GB of RAM (8.1 GB
of training state, the async copy 6.1 GB) and ~13 GB of disk.

For each save, from the run's trace (logging.trace) and metrics:
  stall_s        the training thread's time in the save: every `checkpoint` span of that step (sync:
                 the whole save; async: the copy to host memory, any wait for the previous write, and
                 the commit a step or two later once the write is done)
  after_s        what the 9 steps after the save took beyond the median step of a run that saves
                 nothing (async: the writer thread competing for the 2 cores, and the commit)
and the losses of every run, which must be equal (bitwise) with and without checkpoints, async or not.
Runs interleaved: none, sync, async, --runs times (3). The medians and spreads (min-max) over runs
of each run's median save.
    python3 bench/checkpoint_stall.py [--ptrain build/ptrain] [--runs 3]"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

from results import write_result

MODEL = "arch: llama, layers: 8, hidden: 2048, heads: 16, kv_heads: 8, ffn_hidden: 5632, vocab: 32000"
STEPS, EVERY, SEQ = 35, 10, 64
SAVES = [10, 20, 30]
JOB = """name: checkpoint-stall
backend: cpu
model: {{{model}, seq_len: {seq}}}
parallel: {{tp: 1, pp: 1, dp: 1, zero: 0}}
train: {{steps: {steps}, global_batch: 1, micro_batch: 1, precision: fp32, seed: 1}}
optimizer: {{kind: adamw, lr: 1.0e-4}}
data: {{format: synthetic}}
cluster: {{nodes: 1, gpus_per_node: 1, gpu: cpu}}
logging: {{every: 1, metrics: {dir}/metrics.jsonl, trace: {dir}/trace.json}}
{checkpoint}"""


def covered(spans):
    """Seconds the spans cover together (a synchronous save's commit span lies inside its save's)."""
    total, end = 0.0, None
    for s in sorted(spans, key=lambda s: s["ts"]):
        start, stop = s["ts"], s["ts"] + s["dur"]
        if end is None or start >= end:
            total, end = total + (stop - start), stop
        elif stop > end:
            total, end = total + (stop - end), stop
    return total / 1e6


def one(binary, d, mode):
    checkpoint = "" if mode == "none" else (
        f"checkpoint: {{dir: {d}/ckpt, every: {EVERY}, keep: 1, async: {'true' if mode == 'async' else 'false'}}}\n")
    path = os.path.join(d, "job.yaml")
    with open(path, "w") as f:
        f.write(JOB.format(model=MODEL, seq=SEQ, steps=STEPS, dir=d, checkpoint=checkpoint))
    r = subprocess.run([binary, "run", path], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"the {mode} run exited {r.returncode}:\n{r.stderr[-4000:]}")
    with open(os.path.join(d, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if '"step_s"' in line]
    with open(os.path.join(d, "trace.json")) as f:
        spans = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "checkpoint"]
    stall = {n: covered([s for s in spans if s["name"] == f"checkpoint step {n}" or
                         s["name"].startswith(f"checkpoint step {n}:")]) for n in SAVES}
    waits = [line for line in r.stderr.splitlines() if "to be written (at most one save in flight)" in line]
    return {"losses": [row["loss"] for row in rows], "step_s": [row["step_s"] for row in rows],
            "stall_s": stall, "wait_lines": waits}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ptrain", default="build/ptrain")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    binary = os.path.abspath(args.ptrain)
    runs = {"none": [], "sync": [], "async": []}
    for i in range(args.runs):
        for mode in runs:
            with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as d:
                runs[mode].append(one(binary, d, mode))
            print(f"run {i + 1} {mode}: median step {statistics.median(runs[mode][-1]['step_s']):.3f} s, "
                  f"stall per save {[round(v, 3) for v in runs[mode][-1]['stall_s'].values()]} s", flush=True)
    plain = statistics.median(s for run in runs["none"] for s in run["step_s"][1:])  # the first step warms up
    summary = {"median_step_without_checkpoints_s": plain}
    for mode in ("sync", "async"):
        per_run = []
        for run in runs[mode]:
            after = {n: sum(run["step_s"][n:n + EVERY - 1]) - (EVERY - 1) * plain for n in SAVES}
            run["after_s"] = after
            per_run.append({"stall_s": statistics.median(run["stall_s"].values()),
                            "after_s": statistics.median(after.values())})
        summary[mode] = {k: {"median": statistics.median(r[k] for r in per_run),
                             "min": min(r[k] for r in per_run), "max": max(r[k] for r in per_run)}
                         for k in ("stall_s", "after_s")}
    ratio = summary["async"]["stall_s"]["median"] / summary["sync"]["stall_s"]["median"]
    summary["async_stall_over_sync"] = ratio
    losses = {mode: [run["losses"] for run in rs] for mode, rs in runs.items()}
    reference = losses["none"][0]
    summary["losses_equal"] = all(l == reference for ls in losses.values() for l in ls)
    print(f"stall per save: sync {summary['sync']['stall_s']['median']:.3f} s, async "
          f"{summary['async']['stall_s']['median']:.3f} s ({100 * ratio:.1f}% of sync); the 9 steps after a save "
          f"beyond the plain median: sync {summary['sync']['after_s']['median']:+.3f} s, async "
          f"{summary['async']['after_s']['median']:+.3f} s; losses equal: {summary['losses_equal']}")
    load = os.getloadavg()
    write_result("checkpoint-stall", {
        "machine": "this CPU", "cores": os.cpu_count(),
        "load_average_at_end": load,
        "note": "a 2-core machine shared with other work: the load average at the end says how busy it was",
        "job": f"llama {MODEL}, seq 16, global batch 1, fp32, 1 rank, {STEPS} steps, checkpoint every {EVERY} "
               f"(keep 1); saves at steps {SAVES} measured",
        "runs": runs, "summary": summary})


if __name__ == "__main__":
    main()
