"""What the optimizer offload's overlap saves on this machine's CPU: a Llama on 1 rank (ZeRO 0; the
forward on one core, the host's AdamW free to use the other, as on a GPU node whose cores idle
while the device computes) and on 2 ranks (dp 2, ZeRO 1 and 3: both cores busy with the forward)
with `parallel.offload: optimizer`, beside the same job without offload, each run
--runs times, binaries interleaved when --before names an older build (before: the host's AdamW
and the copies serial with the step; after: AdamW unit by unit on a host thread while the next
forward runs; a case a build refuses is left out). Per run the median step after the first two, and its parts (compute_s: the
pipeline outside its calls, where the overlapped update now runs beside the forward; optimizer_s;
dp's collectives), then the median over runs. Writes bench/results/<date>-offload-overlap.json.
    python3 bench/offload_overlap.py [--ptrain build/ptrain] [--before OTHER_BINARY] [--runs 3]"""
import json
import os
import statistics
import subprocess
import tempfile

from results import before_after, write_result

# Adam's work is sized like a forward here (many parameters, few tokens), where an overlap shows.
JOB = """name: offload-overlap
backend: cpu
model: {{arch: llama, layers: 4, hidden: 512, heads: 8, kv_heads: 4, ffn_hidden: 1408, vocab: 8192, seq_len: 128}}
parallel: {{dp: {dp}, zero: {zero}, offload: {offload}}}
train: {{steps: 12, global_batch: 4, micro_batch: 2, precision: fp32, seed: 1}}
optimizer: {{kind: adamw, lr: 1.0e-4}}
data: {{format: synthetic}}
cluster: {{nodes: 1, gpus_per_node: {dp}, gpu: cpu}}
logging: {{every: 1, metrics: {metrics}}}
"""

# name: (dp, zero, offload)
CASES = [("1 rank", 1, 0, "none"), ("1 rank offload", 1, 0, "optimizer"),
         ("dp 2 zero 1", 2, 1, "none"), ("dp 2 zero 1 offload", 2, 1, "optimizer"),
         ("dp 2 zero 3", 2, 3, "none"), ("dp 2 zero 3 offload", 2, 3, "optimizer")]


def one_run(ptrain, d, dp, zero, offload):
    metrics = os.path.join(d, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    job = os.path.join(d, "job.yaml")
    with open(job, "w") as f:
        f.write(JOB.format(dp=dp, zero=zero, offload=offload, metrics=metrics))
    r = subprocess.run([ptrain, "run", job], capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if r.returncode == 2:  # an older build refuses the case (zero 3 with offload before it existed)
        return None
    r.check_returncode()
    with open(metrics) as f:
        steps = [json.loads(line) for line in f if '"step_s"' in line][2:]
    return {"step_s": statistics.median(s["step_s"] for s in steps),
            "compute_s": statistics.median(s["compute_s"] for s in steps),
            "optimizer_s": statistics.median(s["optimizer_s"] for s in steps),
            "dp_s": statistics.median(s.get("comm_s", {}).get("dp", 0.0) for s in steps)}


def main():
    binaries, runs = before_after(3)
    samples = {(b, name): [] for b in binaries for name, *_ in CASES}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(runs):
            for name, dp, zero, offload in CASES:
                for b, ptrain in binaries.items():
                    samples[(b, name)].append(one_run(ptrain, d, dp, zero, offload))
    rows = []
    for (b, name), got in samples.items():
        got = [g for g in got if g is not None]
        if not got:
            print(f"{b:6s} {name:20s} refused")
            continue
        row = {"binary": b, "case": name, **{k: statistics.median(g[k] for g in got) for k in got[0]}}
        rows.append(row)
        print(f"{b:6s} {name:20s} step {row['step_s'] * 1e3:7.1f} ms  compute {row['compute_s'] * 1e3:7.1f} ms  "
              f"optimizer {row['optimizer_s'] * 1e3:6.1f} ms  dp {row['dp_s'] * 1e3:6.1f} ms")
    write_result("offload-overlap", {"machine": "this CPU (2 cores), OMP_NUM_THREADS=1 per rank", "runs": runs,
                                     "binaries": binaries, "rows": rows})


if __name__ == "__main__":
    main()
