"""Seconds from a rank's failure to the first step after `ptrain run --max-restarts 1` restarted the job
(issue 42 item 4): a small 2-rank data-parallel GPT-2 on CPU, checkpointing every 3 steps; rank 1
kills itself (kill -9, the debug fault) before step 5; the launcher ends the other rank, starts both
again from `latest` (step 3) and they train step 4 again. Each line of the run is stamped as it
arrives: the failure is the fault's own line (written just before the SIGKILL), the first step after
it is the first step line that follows the launcher's "restart 1 of 1" line. Also split: failure to
the restart line (taking the old attempt down), restart line to the first step (start-up, rendezvous,
loading the checkpoint, the step). Median of --runs (3).
    python3 bench/restart_time.py [--ptrain build/ptrain] [--runs 3]"""
import argparse
import os
import statistics
import subprocess
import tempfile
import threading
import time

from results import write_result

JOB = """name: restart-time
backend: cpu
model: {{arch: gpt2, layers: 2, hidden: 64, heads: 4, vocab: 97, seq_len: 32}}
train: {{steps: 8, global_batch: 8, micro_batch: 1, precision: fp32, seed: 3}}
optimizer: {{lr: 1.0e-2, min_lr: 1.0e-3, warmup_steps: 5}}
data: {{format: synthetic}}
checkpoint: {{dir: {dir}/ckpt, every: 3, keep: 2}}
cluster: {{nodes: 1, gpus_per_node: 2, gpu: cpu}}
parallel: {{dp: 2, zero: 1}}
comm: {{timeout_s: 60}}
logging: {{every: 1, metrics: {dir}/metrics.jsonl}}
"""


def stamped_lines(stream, out):
    for line in stream:
        out.append((time.monotonic(), line))


def one(binary, d):
    path = os.path.join(d, "job.yaml")
    with open(path, "w") as f:
        f.write(JOB.format(dir=d))
    env = dict(os.environ, OMP_NUM_THREADS="1", PTRAIN_DEBUG_FAULT="1:5:kill")
    p = subprocess.Popen([binary, "run", path, "--max-restarts", "1"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    lines = []  # (arrival, line) from both streams, in arrival order per stream
    readers = [threading.Thread(target=stamped_lines, args=(s, lines)) for s in (p.stdout, p.stderr)]
    for r in readers:
        r.start()
    p.wait(timeout=300)
    for r in readers:
        r.join()
    if p.returncode != 0:
        raise SystemExit(f"the restarted run exited {p.returncode}:\n" + "".join(l for _, l in lines[-40:]))
    lines.sort(key=lambda x: x[0])
    failed = next(t for t, l in lines if "debug fault: rank 1 runs 'kill'" in l)
    restarted = next(t for t, l in lines if "restart 1 of 1" in l)
    first_step = next(t for t, l in lines if t > restarted and l.startswith("step "))
    return failed, restarted, first_step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ptrain", default="build/ptrain")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    binary = os.path.abspath(args.ptrain)
    samples = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as d:
            failed, restarted, first_step = one(binary, d)
        samples.append({"failure_to_first_step_s": first_step - failed, "failure_to_restart_s": restarted - failed,
                        "restart_to_first_step_s": first_step - restarted})
        print(f"run {i + 1}: failure -> first step {first_step - failed:.2f} s (taking the attempt down "
              f"{restarted - failed:.2f} s, restart -> first step {first_step - restarted:.2f} s)")
    median = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
    print(f"median: failure -> first step after the restart {median['failure_to_first_step_s']:.2f} s")
    write_result("restart-time", {"machine": "this CPU", "cores": os.cpu_count(),
                                  "job": "gpt2 2 layers, hidden 64, dp 2 (2 ranks), checkpoint every 3 steps; "
                                         "rank 1 killed (SIGKILL) before step 5, resumed from step 3",
                                  "runs": samples, "median": median})


if __name__ == "__main__":
    main()
