"""The pipeline's measured idle time against `ptrain validate`'s simulated bubble, on CPU.

Trains a small GPT-2 (8 layers, hidden 256, vocab 512, T 256; one OpenMP thread per rank) on two
pipeline stages (two processes, one core each) under gpipe, 1f1b and zb-h1 at 2, 4 and 8
microbatches, and reads metrics.jsonl's `pipeline_idle` (the measured bubble's share of the step's
pipeline, median over the steps after the first two) next to validate's `bubble_fraction` (the
simulated one's, costs from FLOPs): both the idle share of the pp rank computing most
(docs/schedules.md, "The bubble: one definition"; results before issue 44 item 3 took the rank
waiting most on both sides).
Writes bench/results/<date>-pipeline-bubble.json.
    python3 bench/pipeline_bubble.py [--ptrain build/ptrain] [--steps 8]"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

from results import ROOT, write_result
JOB = """\
name: pipeline-bubble
backend: cpu
model: {arch: gpt2, layers: 8, hidden: 256, heads: 4, vocab: 512, seq_len: 256}
parallel: {pp: 2}
train: {steps: STEPS, global_batch: GB, micro_batch: 1, precision: fp32, recompute: none}
data: {format: synthetic, eval_every: 0}
cluster: {nodes: 1, gpus_per_node: 2, gpu: cpu}
logging: {every: 100, metrics: METRICS}
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ptrain", default=os.path.join(ROOT, "build", "ptrain"))
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    runs = []
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as d:
        job = os.path.join(d, "job.yaml")
        metrics = os.path.join(d, "metrics.jsonl")
        for kind in ["gpipe", "1f1b", "zb-h1"]:
            for microbatches in [2, 4, 8]:
                with open(job, "w") as f:
                    f.write(JOB.replace("METRICS", metrics).replace("STEPS", str(args.steps))
                            .replace("GB", str(microbatches)))
                flags = ["--set", f"schedule.kind={kind}"]
                if os.path.exists(metrics):
                    os.remove(metrics)
                subprocess.run([args.ptrain, "run", job, *flags], check=True, capture_output=True, env=env)
                with open(metrics) as f:
                    rows = [json.loads(line) for line in f][2:]
                measured = statistics.median(r["pipeline_idle"] for r in rows)
                step_s = statistics.median(r["step_s"] for r in rows)
                report = json.loads(subprocess.run([args.ptrain, "validate", job, "--json", *flags], check=True,
                                                   capture_output=True, text=True).stdout)
                predicted = report["pipeline"]["bubble_fraction"]
                runs.append({"schedule": kind, "microbatches": microbatches, "measured_idle": measured,
                             "predicted_bubble": predicted, "step_s": step_s})
                print(f"{kind:6s} m={microbatches}: measured idle {100 * measured:5.1f}%, "
                      f"validate's bubble {100 * predicted:5.1f}%, step {step_s * 1000:6.1f} ms")
    write_result("pipeline-bubble", {"device": "cpu (2 ranks, 1 thread each)", "runs": runs})


if __name__ == "__main__":
    main()
