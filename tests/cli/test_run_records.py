"""A run's records are never lost (issue 42, item 1). At 28bb51d a fresh run into a directory holding
another run's records cut its metrics to the new run's rows and replaced its job.yaml, without a
word; a run resumed in another layout was judged against the last job alone, and its report drew a
trace an earlier layout left with the new job's labels. Now: a run whose paths hold another run's
records is refused (exit 2, naming the key and the fix) before it writes anything; a resumed run
continues its own records after the checkpoint's step, its first row opening a segment that records
its job; `ptrain report` shows each segment with its own layout and predictions, marks where each
begins, and draws a trace only beside the segment whose job wrote it.
    python3 tests/cli/test_run_records.py --ptrain build/ptrain [-v]"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

PTRAIN = ""

# Two CPU ranks, a checkpoint every 2 steps; pipeline parallel unless --set parallel.pp=1 (then dp 2).
JOB = """\
name: records-test
backend: cpu
model: {{arch: gpt2, layers: 2, hidden: 32, heads: 4, ffn_hidden: 64, vocab: 97, seq_len: 16}}
parallel: {{pp: 2}}
train: {{steps: 8, global_batch: 4, micro_batch: 1, precision: fp32, seed: 3}}
data: {{format: synthetic}}
checkpoint: {{dir: {d}/ckpt, every: 2, keep: 4}}
cluster: {{nodes: 1, gpus_per_node: 2, gpu: cpu}}
logging: {{every: 1, metrics: {d}/metrics.jsonl, trace: {d}/trace.json}}
"""


def ptrain(*args, env=None):
    return subprocess.run([PTRAIN, *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))


def rows(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def read(path):
    with open(path, "rb") as f:
        return f.read()


class Records(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = os.path.join(self.tmp.name, "run")
        self.job = os.path.join(self.tmp.name, "job.yaml")  # elsewhere: the run records its own job.yaml
        with open(self.job, "w") as f:
            f.write(JOB.format(d=self.d))

    def tearDown(self):
        self.tmp.cleanup()

    def test_a_fresh_run_does_not_write_over_another_runs_records(self):
        r = ptrain("run", self.job)
        self.assertEqual(r.returncode, 0, r.stderr)
        kept = {name: read(os.path.join(self.d, name)) for name in ("metrics.jsonl", "job.yaml", "trace.json")}
        self.assertEqual([row["step"] for row in rows(self.d)], list(range(1, 9)))
        # the case: another checkpoint.dir, the same logging paths
        other = os.path.join(self.tmp.name, "r1")
        r = ptrain("run", self.job, "--set", f"checkpoint.dir={other}/ckpt")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("logging.metrics: '" + os.path.join(self.d, "metrics.jsonl") + "' holds the records of another "
                      "run: steps 1-8 of `ptrain run " + self.job + "`", r.stderr)
        self.assertIn(f"--set logging.metrics={other}/metrics.jsonl", r.stderr)
        for name, before in kept.items():
            self.assertEqual(read(os.path.join(self.d, name)), before, name)
        self.assertFalse(os.path.exists(other), "a refused run wrote nothing")
        # without checkpoint.dir (a run that cannot resume) alike
        r = ptrain("run", self.job, "--set", "checkpoint.dir=null")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("holds the records of another run", r.stderr)
        # the fix it names works, and the records of both runs stand
        r = ptrain("run", self.job, "--set", f"checkpoint.dir={other}/ckpt", "--set",
                   f"logging.metrics={other}/metrics.jsonl", "--set", f"logging.trace={other}/trace.json")
        self.assertEqual(r.returncode, 0, r.stderr)
        for name, before in kept.items():
            self.assertEqual(read(os.path.join(self.d, name)), before, name)
        self.assertEqual(len(rows(other)), 8)
        # a trace alone (no metrics to name its run) is not replaced by a run from the beginning
        os.remove(os.path.join(other, "metrics.jsonl"))
        shutil.rmtree(os.path.join(other, "ckpt"))
        r = ptrain("run", self.job, "--set", f"checkpoint.dir={other}/ckpt", "--set",
                   f"logging.metrics={other}/metrics.jsonl", "--set", f"logging.trace={other}/trace.json")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"logging.trace: '{other}/trace.json' holds the trace of an earlier run", r.stderr)

    def test_a_resumed_run_continues_its_records_as_a_new_segment(self):
        # rank 0 fails before step 6: rows 1-5, checkpoints at 2 and 4 (saved in the foreground: a
        # background save of step 4 commits only once every rank has written it, which on a loaded
        # machine may come after the crash, and the run then resumes from step 2)
        r = ptrain("run", self.job, "--set", "checkpoint.async=false", env={"PTRAIN_DEBUG_FAULT": "0:6:exit"})
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertEqual([row["step"] for row in rows(self.d)], [1, 2, 3, 4, 5])
        # resumed in another layout: step 5 is trained again, its old row dropped, and said
        r = ptrain("run", self.job, "--set", "parallel.pp=1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("the rows of steps 5-5 are dropped", r.stderr)
        self.assertIn("as segment 2", r.stderr)
        got = rows(self.d)
        self.assertEqual([row["step"] for row in got], list(range(1, 9)))
        first, second = got[0]["segment"], got[4]["segment"]
        self.assertEqual([i for i, row in enumerate(got) if "segment" in row], [0, 4])
        self.assertEqual((first["number"], first["after_step"]), (1, 0))
        self.assertEqual((second["number"], second["after_step"]), (2, 4))
        self.assertIn("pp 2, cp 1, dp 1", first["layout"])
        self.assertIn("pp 1, cp 1, dp 2", second["layout"])
        self.assertEqual(second["command"], self.job + " --set parallel.pp=1")
        self.assertEqual(second["checkpoint_dir"], os.path.realpath(os.path.join(self.d, "ckpt")))
        self.assertIn("parallel: {pp: 1}", second["job"])
        for key in ("loss", "lr", "step_s"):  # the step's own fields are as before
            self.assertIn(key, got[4])

        r = ptrain("report", self.d)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.d, "report.html")) as f:
            html = f.read()
        table = html[html.index('<table id="segments">'):]
        table = table[:table.index("</table>")]
        self.assertEqual(len(re.findall(r"<tr><td>\d", table)), 2)
        self.assertIn("<td>1</td><td>1-4</td>", table)
        self.assertIn("<td>2</td><td>5-8</td>", table)
        self.assertIn("ptrain run " + self.job + " --set parallel.pp=1", table)
        # each segment's prediction over its own steps, and the boundary where the second begins
        step_chart = html[html.index('aria-label="Step time"'):]
        step_chart = step_chart[:step_chart.index("</svg>")]
        # (the two predictions may round to one pixel when a slow step stretches the axis: the table
        # holds their values, the chart draws each over its own steps, meeting at the boundary)
        predicted = re.findall(r"</td><td>([\d.e-]+) s</td><td>[\d.]+%</td>", table)
        self.assertEqual(len(predicted), 2, table)
        self.assertNotEqual(predicted[0], predicted[1])
        spans = re.findall(r'x1="([\d.]+)" x2="([\d.]+)" y1="[\d.]+" y2="[\d.]+" class="reference"', step_chart)
        self.assertEqual(len(spans), 2, step_chart)
        (a_from, a_to), (b_from, b_to) = [(float(x1), float(x2)) for x1, x2 in spans]
        self.assertLess(a_from, a_to)
        self.assertEqual(a_to, b_from)
        self.assertLess(b_from, b_to)
        boundary = re.search(r'x1="([\d.]+)"[^>]*class="boundary"', step_chart)
        self.assertEqual(float(boundary.group(1)), b_from)
        self.assertIn(">segment 2</text>", step_chart)
        # the trace of the second run, which wrote it, beside the second segment
        self.assertRegex(html, r"measured: step 8 \(segment 2, tp 0, cp 0, dp 0\)")

    def test_a_run_directory_moved_whole_goes_on_with_its_records(self):
        r = ptrain("run", self.job, "--stop-after-steps", "4")
        self.assertEqual(r.returncode, 0, r.stderr)
        moved = os.path.join(self.tmp.name, "moved")
        shutil.move(self.d, moved)
        with open(self.job, "w") as f:
            f.write(JOB.format(d=moved))
        r = ptrain("run", self.job)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = rows(moved)
        self.assertEqual([row["step"] for row in got], list(range(1, 9)))
        self.assertEqual(got[4]["segment"]["number"], 2)
        self.assertEqual(got[4]["segment"]["checkpoint_dir_from_metrics"], "ckpt")

    def test_report_draws_a_trace_beside_the_segment_of_its_job_only(self):
        r = ptrain("run", self.job, "--stop-after-steps", "4")
        self.assertEqual(r.returncode, 0, r.stderr)
        first_trace = os.path.join(self.tmp.name, "first-trace.json")
        shutil.copy(os.path.join(self.d, "trace.json"), first_trace)
        r = ptrain("run", self.job, "--set", "parallel.pp=1")
        self.assertEqual(r.returncode, 0, r.stderr)
        # the trace the first layout left: drawn beside its own segment, with its two stages
        shutil.copy(first_trace, os.path.join(self.d, "trace.json"))
        r = ptrain("report", self.d)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.d, "report.html")) as f:
            html = f.read()
        self.assertRegex(html, r"measured: step 4 \(segment 1, tp 0, cp 0, dp 0\)")
        measured = html[html.index('id="measured"'):html.index('id="simulated"')]
        self.assertEqual(len(re.findall(r'class="op"', measured)), 2 * 2 * 4)  # F and B of 4 microbatches, 2 stages
        # a trace of another job: not drawn, and the page says why
        other = os.path.join(self.tmp.name, "other")
        r = ptrain("run", self.job, "--set", "train.seed=4", "--set", f"checkpoint.dir={other}/ckpt", "--set",
                   f"logging.metrics={other}/metrics.jsonl", "--set", f"logging.trace={other}/trace.json")
        self.assertEqual(r.returncode, 0, r.stderr)
        shutil.copy(os.path.join(other, "trace.json"), os.path.join(self.d, "trace.json"))
        r = ptrain("report", self.d)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.d, "report.html")) as f:
            html = f.read()
        self.assertNotIn('<figure id="measured">', html)
        self.assertIn("was written by a job that trained none of these segments", html)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.run(sys.modules[__name__])
