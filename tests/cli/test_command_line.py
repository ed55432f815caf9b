"""What a newcomer meets on the command line (issue 44 item 5): the commands listed when none is
given or one is misspelt, progress on a long plan, the last step of a short run logged, a missing data
file named at its key with where a relative path was looked for, and one failure said once."""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import unittest

PTRAIN = ""
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMANDS = ["run", "validate", "plan", "schedule", "convert", "profile", "report"]


def ptrain(*args, cwd=None, timeout=120, env=None):
    return subprocess.run([PTRAIN, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT,
                          env=None if env is None else {**os.environ, **env})


JOB = """\
name: cli-test
backend: cpu
model: {{arch: gpt2, layers: 2, hidden: 32, heads: 4, vocab: 97, seq_len: 16}}
train: {{steps: {steps}, global_batch: 8, micro_batch: 2, precision: fp32, seed: 3}}
data: {{format: synthetic}}
cluster: {{nodes: 1, gpus_per_node: {ranks}, gpu: cpu}}
logging: {{every: 10, metrics: {dir}/metrics.jsonl}}
comm: {{timeout_s: 60}}
"""


def write_job(d, steps=10, ranks=1, text=JOB):
    path = os.path.join(d, "job.yaml")
    with open(path, "w") as f:
        f.write(text.format(steps=steps, ranks=ranks, dir=d))
    return path


def llmc_shard(path, count):
    """An llm.c token shard (engine/data/llmc_dataset.h): a 1024-byte header, then uint16 tokens."""
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, count, *[0] * 253))
        f.write(struct.pack(f"<{count}H", *[(7 * i) % 97 for i in range(count)]))


class NoCommand(unittest.TestCase):
    def assert_lists_commands(self, r):
        self.assertIn("usage: ptrain <command>", r.stderr)
        for name in COMMANDS:
            self.assertRegex(r.stderr, rf"(?m)^  {name} +\S.*$", f"no line for {name}")
        self.assertNotIn("A subcommand is required", r.stderr)

    def test_bare_ptrain_prints_the_usage_and_every_command(self):
        r = ptrain()
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assert_lists_commands(r)
        self.assertEqual(r.stdout, "")

    def test_a_misspelt_command_gets_the_nearest(self):
        for word, meant in (("validat", "validate"), ("shedule", "schedule"), ("sched", "schedule"),
                            ("rn", "run"), ("Plan", "plan")):
            with self.subTest(word=word):
                r = ptrain(word, "configs/tiny-cpu.yaml")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(f"error: '{word}' is not a ptrain command; did you mean '{meant}'?", r.stderr)
                self.assert_lists_commands(r)

    def test_a_word_far_from_any_command_gets_no_guess(self):
        r = ptrain("frobnicate")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("error: 'frobnicate' is not a ptrain command\n", r.stderr)
        self.assert_lists_commands(r)

    def test_help_and_version_still_exit_0(self):
        self.assertEqual(ptrain("--help").returncode, 0)
        self.assertEqual(ptrain("--version").returncode, 0)


class PlanProgress(unittest.TestCase):
    def test_a_long_search_says_where_it_is_on_stderr_only(self):
        # Mixtral 8x7B on 64 GPUs: ~8 s of search on a 2-core machine, silent before.
        with tempfile.TemporaryDirectory() as d:
            r = ptrain("plan", "configs/mixtral-8x7b.yaml", "--gpus", "64", "--json", "--top", "3",
                       "--out", os.path.join(d, "best.yaml"), timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        json.loads(r.stdout)  # --json's stdout is the one object, nothing else
        self.assertRegex(r.stderr, r"plan info: (searching: \d+ layouts looked at|ranking: \d+ of \d+ fitting)")
        self.assertRegex(r.stderr, r"plan info: searched \d+ layouts and estimated \d+ in full in [\d.]+ s")

    def test_a_short_search_says_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            r = ptrain("plan", "configs/tiny-cpu.yaml", "--gpus", "2", "--out", os.path.join(d, "best.yaml"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("plan info:", r.stderr)


class LastStepLogged(unittest.TestCase):
    def test_a_run_stopped_before_logging_every_logs_its_last_step(self):
        # --stop-after-steps 4 with logging.every 10 printed no step line at all.
        with tempfile.TemporaryDirectory() as d:
            r = ptrain("run", write_job(d, steps=20), "--stop-after-steps", "4")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, r"(?m)^step +4/20 \| loss \d")
            self.assertEqual(len(re.findall(r"(?m)^step +\d+/", r.stdout)), 1, r.stdout)
            with open(os.path.join(d, "metrics.jsonl")) as f:
                self.assertEqual([json.loads(line)["step"] for line in f], [1, 2, 3, 4])

    def test_a_run_shorter_than_logging_every_logs_its_end(self):
        with tempfile.TemporaryDirectory() as d:
            r = ptrain("run", write_job(d, steps=7))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, r"(?m)^step +7/7 \| loss \d")


class MissingData(unittest.TestCase):
    def job_with_data(self, d, valid):
        train = os.path.join(d, "train.bin")
        llmc_shard(train, 4000)
        text = JOB.replace("data: {{format: synthetic}}",
                           f"data: {{{{format: llmc, train: {train}, valid: {valid}, eval_every: 5}}}}")
        return write_job(d, ranks=2, text=text)

    def test_a_missing_validation_file_is_named_at_data_valid_once(self):
        with tempfile.TemporaryDirectory() as d:
            job = self.job_with_data(d, "no/such/val.bin")
            r = ptrain("run", job, cwd=d)
            self.assertEqual(r.returncode, 2, r.stderr)
            line = next((x for x in r.stderr.splitlines() if "no/such/val.bin" in x), "")
            # file:line:col and the key, as every other config error says them
            self.assertRegex(line, re.escape(job) + r":5:\d+: data\.valid: ")
            # a relative path: where it was looked for
            self.assertIn(f"(relative to the working directory {os.path.realpath(d)}: "
                          f"{os.path.realpath(d)}/no/such/val.bin)", line)
            self.assertEqual(r.stderr.count("no/such/val.bin: expected at least one file"), 1, r.stderr)
            self.assertNotIn("[rank ", r.stderr)  # refused before any rank started
            self.assertFalse(os.path.exists(os.path.join(d, "metrics.jsonl")))

    def test_an_absolute_path_is_said_as_it_is(self):
        with tempfile.TemporaryDirectory() as d:
            missing = os.path.join(d, "gone.bin")
            r = ptrain("run", self.job_with_data(d, missing))
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("data.valid: " + missing + ": expected at least one file matching this pattern, found none",
                          r.stderr)
            self.assertNotIn("relative to the working directory", r.stderr)


class OneErrorOnce(unittest.TestCase):
    def test_an_error_every_rank_meets_is_shown_once(self):
        # Four ranks each meet a bad token of data.valid before their first step: the terminal showed the
        # error four times and the launcher's report a fifth. Each rank's log file still has its own.
        with tempfile.TemporaryDirectory() as d:
            train, valid = os.path.join(d, "train.bin"), os.path.join(d, "valid.bin")
            llmc_shard(train, 4000)
            llmc_shard(valid, 2000)
            with open(valid, "r+b") as f:
                f.seek(1024)
                f.write(struct.pack("<H", 200))
            text = JOB.replace("data: {{format: synthetic}}",
                               f"data: {{{{format: llmc, train: {train}, valid: {valid}, eval_every: 5}}}}")
            r = ptrain("run", write_job(d, ranks=4, text=text), "--set", "train.micro_batch=1",
                       env={"OMP_NUM_THREADS": "1"})
            self.assertEqual(r.returncode, 2, r.stderr)
            said = valid + ": byte 1024: token id out of range: expected < 97 (model.vocab), found 200"
            self.assertEqual(r.stderr.count(said), 1, r.stderr)
            self.assertRegex(r.stderr, r"rank (\d)'s error above was repeated by ranks [0-3, -]+ \(the same error")
            for rank in range(4):
                with open(os.path.join(d, "logs", f"rank_{rank}.log")) as f:
                    self.assertIn(said, f.read(), f"rank {rank}'s log file")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.run(sys.modules[__name__])
