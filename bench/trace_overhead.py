"""What `logging.trace` costs a step on this machine's CPU: a small Llama on 4 ranks (pp 2 x dp 2 under
ZeRO 3: every F/B, wait, and the most collectives a step makes) run with and without a trace,
interleaved; the median step of each run after its first two, then the median over runs. Writes
bench/results/<date>-trace-overhead.json.
    python3 bench/trace_overhead.py [--ptrain build/ptrain] [--runs 5]"""
import argparse
import json
import os
import statistics
import tempfile

from results import ROOT, run_job, write_result

JOB = """name: trace-overhead
backend: cpu
model: {arch: llama, layers: 4, hidden: 256, heads: 8, kv_heads: 4, ffn_hidden: 704, vocab: 2048, seq_len: 256}
parallel: {tp: 1, pp: 2, dp: 2, zero: 3}
schedule: {kind: 1f1b}
train: {steps: 20, global_batch: 16, micro_batch: 2, precision: fp32, seed: 1}
optimizer: {kind: adamw, lr: 1.0e-4}
data: {format: synthetic}
cluster: {nodes: 1, gpus_per_node: 4, gpu: cpu}
logging: {every: 1, metrics: {metrics}}
"""


def median_step(ptrain, d, traced):
    flags = ["--set", "logging.trace=" + os.path.join(d, "trace.json")] if traced else []
    steps = [r["step_s"] for r in run_job(ptrain, d, JOB, flags)[0][2:]]
    spans = 0
    if traced:
        with open(os.path.join(d, "trace.json")) as f:
            spans = sum(1 for e in json.load(f)["traceEvents"] if e["ph"] == "X")
    return statistics.median(steps), spans


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ptrain", default=os.path.join(ROOT, "build", "ptrain"))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    plain, traced, spans = [], [], 0
    with tempfile.TemporaryDirectory() as d:
        for _ in range(args.runs):
            plain.append(median_step(args.ptrain, d, False)[0])
            step, spans = median_step(args.ptrain, d, True)
            traced.append(step)
    off, on = statistics.median(plain), statistics.median(traced)
    print(f"step without trace {off * 1e3:.1f} ms, with trace {on * 1e3:.1f} ms ({(on / off - 1) * 100:+.1f}%), "
          f"{spans} spans over 4 ranks and 20 steps; runs without {[round(x * 1e3, 1) for x in plain]}, "
          f"with {[round(x * 1e3, 1) for x in traced]}")
    write_result("trace-overhead", {"machine": "this CPU (2 cores), 4 ranks", "runs": args.runs,
                                    "step_s_without": off, "step_s_with": on, "overhead": on / off - 1,
                                    "spans": spans, "without_runs_s": plain, "with_runs_s": traced})


if __name__ == "__main__":
    main()
