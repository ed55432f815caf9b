"""The optimizer's seconds a step on this machine's CPU: a bf16 Llama of 0.32B parameters whose step
is short (16 tokens), so the update dominates, with train.grad_clip low enough that every step clips
(the clip's scale and the bf16 working copy are the passes AdamW now does in its own; before, the
gradients were scaled, AdamW ran, and the masters were converted, three passes over the shard).
The run's optimizer_s (the update, host-timed: on the CPU backend the update itself) and step_s,
medians over the steps after the first two, one binary or two interleaved (--before an older build).
Writes bench/results/<date>-optimizer-step.json.
    python3 bench/optimizer_step.py [--ptrain build/ptrain] [--before OTHER_BINARY] [--runs 3]"""
import os
import statistics
import tempfile

from results import before_after, run_job, write_result

JOB = """name: optimizer
backend: cpu
model: {arch: llama, layers: 4, hidden: 2048, heads: 16, kv_heads: 8, ffn_hidden: 5632, vocab: 32000, seq_len: 16}
parallel: {tp: 1, pp: 1, dp: 1, zero: 0}
train: {steps: 8, global_batch: 1, micro_batch: 1, precision: bf16, seed: 1, grad_clip: 0.001}
optimizer: {kind: adamw, lr: 1.0e-4}
data: {format: synthetic}
cluster: {nodes: 1, gpus_per_node: 1, gpu: cpu}
logging: {every: 1, metrics: {metrics}}
"""


def one(binary, d):
    steps = run_job(binary, d, JOB)[0][2:]
    return statistics.median(s["optimizer_s"] for s in steps), statistics.median(s["step_s"] for s in steps)


def main():
    binaries, runs = before_after(runs=3)
    samples = {b: [] for b in binaries}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(runs):
            for b, binary in binaries.items():
                samples[b].append(one(binary, d))
    rows = []
    for b, got in samples.items():
        row = {"binary": b, "path": binaries[b], "runs": len(got),
               "optimizer_s": statistics.median(o for o, _ in got), "step_s": statistics.median(s for _, s in got)}
        rows.append(row)
        print(f"{b:6s} optimizer {row['optimizer_s'] * 1e3:7.1f} ms, step {row['step_s'] * 1e3:7.1f} ms")
    write_result("optimizer-step", {"machine": "this CPU", "cores": os.cpu_count(), "parameters": 319_834_112,
                                    "rows": rows})


if __name__ == "__main__":
    main()
