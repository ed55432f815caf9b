"""Tokens/s of the demo job (configs/tiny-cpu.yaml) at dp 1 and dp 2 on this machine's cores, each
ZeRO stage at dp 2, median over the timed steps (the first steps are warm-up). Writes
bench/results/<date>-dp-scaling.json with the commit.
    python3 bench/dp_scaling.py [--steps 30] [--ptrain build/ptrain]"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile

from results import ROOT, write_result


def measure(ptrain, steps, nproc, zero, threads):
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "m.jsonl")
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        subprocess.run([ptrain, "run", "configs/tiny-cpu.yaml", "--nproc", str(nproc),
                        "--set", f"parallel.zero={zero}", "--set", f"train.steps={steps}",
                        "--set", "data.eval_every=0", "--set", f"checkpoint.dir={d}/ckpt",
                        "--set", "checkpoint.every=0", "--set", f"logging.metrics={metrics}"],
                       cwd=ROOT, env=env, check=True, capture_output=True)
        with open(metrics) as f:
            rows = [json.loads(line) for line in f]
    timed = rows[5:]
    return {"nproc": nproc, "zero": zero, "threads_per_rank": threads,
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
            "step_seconds": statistics.median(r["step_s"] for r in timed),
            "final_loss": rows[-1]["loss"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--ptrain", default=os.path.join(ROOT, "build", "ptrain"))
    args = parser.parse_args()
    cores = os.cpu_count()
    runs = [measure(args.ptrain, args.steps, 1, 1, cores)]
    for zero in range(4):
        runs.append(measure(args.ptrain, args.steps, 2, zero, max(1, cores // 2)))
    for r in runs:
        print(f"dp {r['nproc']} zero {r['zero']} ({r['threads_per_rank']} threads/rank): "
              f"{r['tokens_per_s']:8.0f} tok/s, {r['step_seconds'] * 1000:6.1f} ms/step, loss {r['final_loss']:.4f}")
    write_result("dp-scaling", {"machine": platform.processor() or platform.machine(), "cores": cores,
                                "job": "configs/tiny-cpu.yaml", "steps": args.steps, "runs": runs})


if __name__ == "__main__":
    main()
