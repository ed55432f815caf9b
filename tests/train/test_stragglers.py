"""Stragglers (issue 42 item 6): each step's record names the rank whose compute was the largest
multiple of the median rank's, with both times and the ratio, in the metrics JSONL, in TensorBoard
and in `ptrain report`; rank 0 warns once a rank stays above logging.straggler_ratio for
logging.straggler_steps steps in a row. A rank is slowed by PTRAIN_DEBUG_FAULT=<rank>:<step>:slow=<ms>
(it sleeps inside each step's compute from that step on); a run without it draws no warning; one
rank is its own median. Needs python3-protobuf (the TensorBoard reader of test_tensorboard.py).
    /usr/bin/python3 tests/train/test_stragglers.py --ptrain build/ptrain [-v]"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import test_tensorboard as tb

PTRAIN = ""
STEPS = 8
SLOW_MS = 200

JOB = """\
name: stragglers-test
backend: cpu
model: {{arch: gpt2, layers: 2, hidden: 64, heads: 4, vocab: 97, seq_len: 32}}
train: {{steps: {steps}, global_batch: 8, micro_batch: 2, precision: fp32, seed: 7}}
optimizer: {{lr: 1.0e-2, warmup_steps: 2}}
data: {{format: synthetic}}
cluster: {{nodes: 1, gpus_per_node: 2, gpu: cpu}}
logging: {{every: 1, metrics: {d}/metrics.jsonl, tensorboard: {d}/tb}}
comm: {{timeout_s: 60}}
"""

LAUNCH_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
               "PTRAIN_LAUNCHED", "PTRAIN_JOB_TOKEN", "PTRAIN_STORE_FD", "PTRAIN_DEBUG_FAULT"}


def straggler_lines(stderr):
    return [line for line in stderr.splitlines() if "straggles" in line]


class Stragglers(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.job = os.path.join(self.dir, "job.yaml")
        with open(self.job, "w") as f:
            f.write(JOB.format(d=self.dir, steps=STEPS))

    def run_job(self, *flags, fault=None, command="run"):
        env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
        env["OMP_NUM_THREADS"] = "1"
        if fault is not None:
            env["PTRAIN_DEBUG_FAULT"] = fault
        return subprocess.run([PTRAIN, command, self.job, *flags], capture_output=True, text=True, env=env, timeout=300)

    def rows(self):
        with open(os.path.join(self.dir, "metrics.jsonl")) as f:
            return [json.loads(line) for line in f]

    def events(self):
        (path,) = glob.glob(os.path.join(self.dir, "tb", "events.out.tfevents.*"))
        Event = tb.tensorboard_event_class()
        events = [Event.FromString(payload) for payload in tb.records(path)]
        return {e.step: {v.tag: v.simple_value for v in e.summary.value} for e in events if e.WhichOneof("what") == "summary"}

    def test_a_slowed_rank_is_named_everywhere_and_warned_of(self):
        r = self.run_job("--set", "logging.straggler_steps=3", fault=f"1:2:slow={SLOW_MS}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"debug fault: rank 1 computes {SLOW_MS} ms longer in every step from step 2 on", r.stderr)
        rows = self.rows()
        self.assertEqual([row["step"] for row in rows], list(range(1, STEPS + 1)))
        for row in rows[1:]:
            with self.subTest(step=row["step"]):
                self.assertEqual(row["slowest_rank"], 1)
                self.assertGreaterEqual(row["slowest_rank_s"], SLOW_MS / 1000)
                self.assertLess(row["median_rank_s"], row["slowest_rank_s"])
                self.assertAlmostEqual(row["slowest_rank_ratio"], row["slowest_rank_s"] / row["median_rank_s"], places=9)
                self.assertGreater(row["slowest_rank_ratio"], 1.2)
                self.assertEqual(row["compute_s"], row["slowest_rank_s"])  # one stage: the busiest rank
        # Warned once, by rank 0, after three steps above the ratio in a row: steps 2-4 (or 1-3, where
        # the unslowed first step happened to find rank 1 slower too).
        (line,) = straggler_lines(r.stderr)
        warned = re.search(r"\[rank 0/2 .*\] train warning: rank 1 straggles: its compute took [0-9.]+ s in step (\d+) "
                           r"against the median rank's [0-9.]+ s \([0-9.]+x\), over logging.straggler_ratio 1.20 "
                           r"for 3 steps in a row \(from step (\d+)\)", line)
        self.assertIsNotNone(warned, line)
        self.assertIn((int(warned.group(1)), int(warned.group(2))), [(4, 2), (3, 1)], line)
        # TensorBoard holds the same.
        events = self.events()
        for row in rows[1:]:
            scalars = events[row["step"]]
            self.assertEqual(scalars["stragglers/slowest_rank"], 1)
            self.assertAlmostEqual(scalars["stragglers/slowest_rank_ratio"], row["slowest_rank_ratio"],
                                   delta=row["slowest_rank_ratio"] * 1e-6)
            self.assertAlmostEqual(scalars["stragglers/median_rank_s"], row["median_rank_s"], delta=row["median_rank_s"] * 1e-6)
        # And the report names it for the segment.
        r = subprocess.run([PTRAIN, "report", self.dir], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.dir, "report.html")) as f:
            page = f.read()
        table = re.search(r'<table id="stragglers">.*?</table>', page, re.S)
        self.assertIsNotNone(table, "no stragglers table")
        self.assertRegex(table.group(0), rf"<td>1</td><td>1-{STEPS}</td><td>rank 1 \(({STEPS - 1}|{STEPS}) of {STEPS} steps, "
                                         r"[0-9.]+x the median on average\)</td><td>rank 1, [0-9.]+x at step \d+</td>"
                                         r"<td>1.20x for 3 steps in a row</td>")
        self.assertIn("Slowest rank&#39;s compute over the median rank&#39;s", page)  # the ratio's chart

    def test_a_ratio_above_the_slowdown_warns_of_nothing(self):
        r = self.run_job("--set", "logging.straggler_steps=3", "--set", "logging.straggler_ratio=100",
                         fault=f"1:2:slow={SLOW_MS}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(straggler_lines(r.stderr), [])
        self.assertEqual(self.rows()[-1]["slowest_rank"], 1)

    def test_an_even_run_draws_no_warning(self):
        # A busy machine can make one rank a real straggler for a while (a build sharing its core):
        # such a warning must then be what the metrics show, and the run is tried again, up to 3 times.
        for attempt in (1, 2, 3):
            if attempt > 1:
                shutil.rmtree(self.dir)
                os.makedirs(self.dir)
                with open(self.job, "w") as f:
                    f.write(JOB.format(d=self.dir, steps=STEPS))
            r = self.run_job()
            self.assertEqual(r.returncode, 0, r.stderr)
            rows = self.rows()
            for row in rows:
                self.assertIn(row["slowest_rank"], (0, 1))
                self.assertGreaterEqual(row["slowest_rank_ratio"], 1.0)
            if not straggler_lines(r.stderr):
                return
            shown = any(all(row["slowest_rank_ratio"] > 1.2 and row["slowest_rank"] == rows[i]["slowest_rank"]
                            for row in rows[i:i + 5]) for i in range(len(rows) - 4))
            self.assertTrue(shown, f"a warning the metrics do not show: {straggler_lines(r.stderr)}")
        self.skipTest(f"this machine made a rank a real straggler in each of 3 runs (every warning as the metrics "
                      f"show): {straggler_lines(r.stderr)}")

    def test_one_rank_is_its_own_median(self):
        r = self.run_job("--nproc", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        for row in self.rows():
            self.assertEqual((row["slowest_rank"], row["slowest_rank_ratio"]), (0, 1.0))
            self.assertEqual(row["slowest_rank_s"], row["median_rank_s"])
            self.assertEqual(row["slowest_rank_s"], row["compute_s"])
        self.assertEqual(straggler_lines(r.stderr), [])

    def test_the_keys_and_the_fault_are_checked(self):
        for setting, message in [("logging.straggler_ratio=1", "logging.straggler_ratio: must be > 1"),
                                 ("logging.straggler_steps=0", "logging.straggler_steps:")]:
            with self.subTest(setting=setting):
                r = self.run_job("--set", setting, command="validate")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(message, r.stderr)
        for fault in ("1:2:slow", "1:2:slow=0", "1:2:slow=5x", "1:2:kill=5"):
            with self.subTest(fault=fault):
                r = self.run_job(fault=fault)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(f"PTRAIN_DEBUG_FAULT='{fault}': expected", r.stderr)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.run(sys.modules[__name__])
