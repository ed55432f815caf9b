"""What `ptrain run` allocates on rank 0 (metrics.jsonl `memory_bytes`: parameters, gradients,
optimizer state, ZeRO windows, activation arena, pipeline send buffers) against `ptrain validate
--json`'s prediction for the same rank of the same job, for GPT-2 124M (T 1024, micro-batch 1, CPU)
in fp32 and bf16 mixed precision under each recompute mode and ZeRO stage 0 (dp 1), then on two
pipeline stages (4 microbatches) under 1f1b, interleaved-1f1b and zb-h1. Writes
bench/results/<date>-memory-vs-validate.json.
    python3 bench/memory_vs_validate.py [--ptrain build/ptrain]"""
import argparse
import json
import os
import subprocess
import tempfile

from results import ROOT, write_result
JOB = """\
name: memory-vs-validate
backend: cpu
model: {arch: gpt2, layers: 12, hidden: 768, heads: 12, vocab: 50257, seq_len: 1024}
train: {steps: 1, global_batch: 1, micro_batch: 1, precision: fp32, recompute: none}
data: {format: synthetic, eval_every: 0}
cluster: {nodes: 1, gpus_per_node: 1, gpu: cpu}
logging: {every: 1, metrics: METRICS}
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ptrain", default=os.path.join(ROOT, "build", "ptrain"))
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as d:
        job = os.path.join(d, "job.yaml")
        metrics = os.path.join(d, "metrics.jsonl")
        with open(job, "w") as f:
            f.write(JOB.replace("METRICS", metrics))
        cases = [(p, m, "") for p in ["fp32", "bf16"] for m in ["none", "selective", "full"]]
        cases += [("fp32", "none", "1f1b"), ("fp32", "selective", "interleaved-1f1b"), ("fp32", "none", "zb-h1")]
        for precision, mode, pipeline in cases:
            flags = ["--set", f"train.recompute={mode}", "--set", f"train.precision={precision}"]
            if pipeline:
                flags += ["--set", "parallel.pp=2", "--set", f"schedule.kind={pipeline}", "--set",
                          "train.global_batch=4", "--set", "cluster.gpus_per_node=2"]
                if pipeline == "interleaved-1f1b":
                    flags += ["--set", "schedule.virtual_stages=2"]
            if os.path.exists(metrics):
                os.remove(metrics)
            subprocess.run([args.ptrain, "run", job, *flags], check=True, capture_output=True)
            with open(metrics) as f:
                allocated = json.loads(f.readlines()[-1])["memory_bytes"]
            report = json.loads(subprocess.run([args.ptrain, "validate", job, "--json", *flags], check=True,
                                               capture_output=True, text=True).stdout)
            predicted = next(r for r in report["memory_per_rank"] if r["rank"] == 0)["total_bytes"]
            runs.append({"precision": precision, "recompute": mode, "pipeline": pipeline or "pp 1",
                         "allocated_bytes": allocated, "predicted_bytes": predicted, "ratio": allocated / predicted})
            print(f"gpt2-124m {precision} recompute {mode:9s} {pipeline or 'pp 1':16s}: allocated "
                  f"{allocated / 2**20:8.1f} MiB, predicted {predicted / 2**20:8.1f} MiB, "
                  f"ratio {allocated / predicted:.5f}")
    write_result("memory-vs-validate", {"device": "cpu", "runs": runs})


if __name__ == "__main__":
    main()
