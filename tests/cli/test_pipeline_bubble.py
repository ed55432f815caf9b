"""One pipeline bubble (issue 44 item 3): the idle time of the pp rank computing most
(engine/pipeline/simulator.h), the same figure and the same rank in validate's Pipeline line, its
Estimate, its JSON, and a run's measured-against-predicted table. validate once printed `bubble 94.0%`
(the idlest rank's share) beside `bubble 5.5 ms` (the busiest rank's seconds), and a pp 2 run
compared the idlest rank's waits with the busiest rank's prediction: 89.95x.
    python3 tests/cli/test_pipeline_bubble.py --ptrain build/ptrain --root . [-v]"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

PTRAIN = ""
ROOT = ""

# The demo's model (configs/tiny-cpu.yaml) on two pipeline stages, on synthetic tokens: its head
# (50257 x 128, tied) outweighs its first stage, so the stages' idle shares differ widely.
TINY_PP2 = """\
name: tiny-pp2
backend: cpu
model: {arch: gpt2, layers: 4, hidden: 128, heads: 4, vocab: 50257, seq_len: 128}
parallel: {tp: 1, pp: 2, zero: 1}
schedule: {kind: 1f1b}
train: {steps: 8, global_batch: 8, micro_batch: 4, precision: fp32, recompute: none, seed: 1234}
optimizer: {lr: 2.0e-3, warmup_steps: 2}
data: {format: synthetic, eval_every: 0}
cluster: {nodes: 1, gpus_per_node: 2, gpu: cpu, profile: PROFILE}
logging: {every: 4, metrics: RUN/metrics.jsonl}
"""

PIPELINE = re.compile(r"^Pipeline .*: bubble ([\d.]+)% = ([\d.]+) ms of the ([\d.]+) ms pipeline "
                      r"\(pp rank (\d+), computing most\)", re.M)
ESTIMATE = re.compile(r"^ +exposed comm: .*; bubble ([\d.]+) ms \(pp messages in it\)", re.M)


def ptrain(*args, timeout=120):
    return subprocess.run([PTRAIN, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


class ValidateAgreesWithItself(unittest.TestCase):
    LAYOUTS = {
        "1f1b pp 4": ["configs/llama3-8b.yaml", "--set", "parallel.pp=4"],
        "interleaved pp 4 vpp 2": ["configs/llama3-8b.yaml", "--set", "parallel.pp=4", "--set",
                                   "schedule.kind=interleaved-1f1b", "--set", "schedule.virtual_stages=2"],
        "zb-h1 pp 4": ["configs/llama3-8b.yaml", "--set", "parallel.pp=4", "--set", "schedule.kind=zb-h1"],
        "the demo on 2 stages": ["configs/tiny-cpu.yaml", "--set", "parallel.pp=2"],
    }

    def test_the_share_and_the_milliseconds_are_one_figure(self):
        for name, args in self.LAYOUTS.items():
            with self.subTest(name):
                r = ptrain("validate", *args)
                self.assertEqual(r.returncode, 0, r.stderr)
                pipeline, estimate = PIPELINE.search(r.stdout), ESTIMATE.search(r.stdout)
                self.assertIsNotNone(pipeline, r.stdout)
                self.assertIsNotNone(estimate, r.stdout)
                share, ms, makespan_ms = (float(pipeline.group(i)) for i in (1, 2, 3))
                self.assertEqual(float(estimate.group(1)), ms)  # the Estimate's bubble is the Pipeline line's
                # share x pipeline = seconds, to the printed digits (0.05% of it, 0.05 ms)
                self.assertLessEqual(abs(share / 100 * makespan_ms - ms), 0.0005 * makespan_ms + 0.05 + 1e-9)
                self.assertGreater(ms, 0)

                j = ptrain("validate", *args, "--json")
                self.assertEqual(j.returncode, 0, j.stderr)
                report = json.loads(j.stdout)
                p, b = report["pipeline"], report["step_breakdown"]
                self.assertAlmostEqual(b["bubble_s"], p["bubble_fraction"] * p["makespan_s"],
                                       delta=1e-9 * p["makespan_s"])
                self.assertEqual(p["bubble_rank"], int(pipeline.group(4)))
                self.assertNotIn("pp", b["comm_exposed_s"])  # the messages' latency is in the bubble
                parts = (b["gemm_s"] + b["attention_s"] + b["memory_bound_s"] + sum(b["comm_exposed_s"].values()) +
                         b["bubble_s"] + b["optimizer_s"])
                self.assertAlmostEqual(parts, report["step_time_s"], delta=1e-9 * report["step_time_s"])

    def test_an_imbalanced_split_names_its_idlest_rank_apart(self):
        # The demo's head makes stage 1 the critical rank; stage 0 idles most of the pipeline,
        # which validate says on its own line rather than as the bubble.
        r = ptrain("validate", "configs/tiny-cpu.yaml", "--set", "parallel.pp=2")
        self.assertEqual(r.returncode, 0, r.stderr)
        pipeline = PIPELINE.search(r.stdout)
        self.assertEqual(pipeline.group(4), "1")
        self.assertLess(float(pipeline.group(1)), 30)
        idle = re.search(r"^ +pp rank 0 idles ([\d.]+)% of it, waiting on heavier stages", r.stdout, re.M)
        self.assertIsNotNone(idle, r.stdout)
        self.assertGreater(float(idle.group(1)), 50)


class RunComparesTheSameRank(unittest.TestCase):
    def test_measured_and_predicted_bubble_are_one_rank_and_near(self):
        with tempfile.TemporaryDirectory() as d:
            job = os.path.join(d, "job.yaml")
            with open(job, "w") as f:
                f.write(TINY_PP2.replace("RUN", d).replace("PROFILE", os.path.join(ROOT, "profiles", "cpu.json")))
            r = ptrain("run", job, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            row = re.search(r"^  pipeline bubble +([\d.]+) s +([\d.]+) s +([\d.]+)x$", r.stdout, re.M)
            self.assertIsNotNone(row, r.stdout)
            self.assertNotIn("pp messages and idle", r.stdout)
            ranks = re.search(r"measured pp rank (\d+), predicted pp rank (\d+)\)", r.stdout)
            self.assertIsNotNone(ranks, r.stdout)
            self.assertEqual(ranks.group(1), ranks.group(2), r.stdout)  # the head's stage on both sides
            self.assertEqual(ranks.group(2), "1")
            measured, predicted = float(row.group(1)), float(row.group(2))
            # the same quantity on both sides: within a factor 10 on a loaded 2-core machine (a delayed
            # stage 0 grows the measured bubble), not the 90x of the bug this guards against
            self.assertGreater(predicted, 0)
            self.assertLess(max(measured / predicted, predicted / max(measured, 1e-6)), 10.0, r.stdout)
            with open(os.path.join(d, "metrics.jsonl")) as f:
                rows = [json.loads(line) for line in f if '"step"' in line]
            for m in rows:
                if "pipeline_bubble_s" in m:
                    self.assertEqual(m["pipeline_bubble_rank"], 1, m)
                    self.assertLessEqual(m["pipeline_bubble_s"], m["step_s"], m)
                    self.assertGreaterEqual(m["pipeline_idle"], 0, m)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.run(sys.modules[__name__], "root")
