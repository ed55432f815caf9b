"""Every file a command writes in one piece (plan --out, profile --out, report --out, schedule --svg
and --trace) is written whole or not at all: on a full disk the command exits 1 naming the file and
the cause, the file that was there is as it was, and nothing else is left beside it. An --out path
that cannot be written is exit 2 before any work, and profile, as plan, replaces no file of the
user's without --force (issue #45, 13-14).
    python3 tests/cli/test_output_files.py --ptrain build/ptrain --root . [-v]"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import full_disk  # noqa: E402

PTRAIN = ""
ROOT = ""

METRICS = "".join('{"step": %d, "loss": %.3f, "tokens_per_s": 1000, "mfu": 0.1, "step_s": 0.5}\n' % (s, 3 - s / 10)
                  for s in range(1, 11))


def ptrain(*args, timeout=300):
    return subprocess.run([PTRAIN, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def tiny_job():
    return os.path.join(ROOT, "configs", "tiny-cpu.yaml")


class FullDisk(unittest.TestCase):
    """Each output over an earlier file of the same name, on a filesystem with no room left."""

    def assert_kept(self, r, path, before):
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(f"error: cannot write {path}: write failed: No space left on device", r.stderr)
        with open(path) as f:
            self.assertEqual(f.read(), before)
        self.assertEqual(sorted(os.listdir(os.path.dirname(path))), sorted(["filler", os.path.basename(path)]))

    def command_on_full_disk(self, name, args, before="an earlier file, whole\n"):
        """`ptrain ARGS` with PATH in them naming d/NAME, which holds `before`, d full."""
        with full_disk.small_filesystem(self, "64k") as d:
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write(before)
            full_disk.fill(d)
            r = ptrain(*[a.replace("PATH", path) for a in args])
            self.assert_kept(r, path, before)

    def test_schedule_drawings(self):
        for flag in ("--svg", "--trace"):
            with self.subTest(flag=flag):
                self.command_on_full_disk("drawing", ["schedule", tiny_job(), flag, "PATH"])

    def test_report_page(self):
        with tempfile.TemporaryDirectory() as run_dir:
            with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
                f.write(METRICS)
            self.command_on_full_disk("report.html", ["report", run_dir, "--out", "PATH"])

    def test_plan_job_file(self):
        earlier = "# Written by `ptrain plan` from an earlier run\nname: earlier\n"
        self.command_on_full_disk("job.plan.yaml", ["plan", tiny_job(), "--gpus", "4", "--out", "PATH"], earlier)

    def test_profile(self):
        # The measuring takes a while (--quick: ~20 s here): the one profile this file runs.
        earlier = json.dumps({"schema": "ptrain.profile.v2", "device": "an earlier measurement"})
        self.command_on_full_disk("profile.json", ["profile", "--quick", "--out", "PATH"], earlier)


class UnwritableOut(unittest.TestCase):
    def test_a_path_that_cannot_be_written_is_exit_2_before_any_work(self):
        out = "/nonexistent/folder/out"
        for args in (["schedule", tiny_job(), "--svg", out], ["schedule", tiny_job(), "--trace", out],
                     ["plan", tiny_job(), "--gpus", "4", "--out", out], ["profile", "--quick", "--out", out]):
            with self.subTest(command=args[0], flag=args[-2]):
                r = ptrain(*args, timeout=30)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(f"error: {args[-2]} {out} cannot be written: No such file or directory", r.stderr)
        with tempfile.TemporaryDirectory() as run_dir:
            with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
                f.write(METRICS)
            r = ptrain("report", run_dir, "--out", out, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"error: --out {out} cannot be written: No such file or directory", r.stderr)


class ProfileReplacesOnlyProfiles(unittest.TestCase):
    """`ptrain profile --quick --out job.yaml` replaced the job file (exit 0): as plan --out, profile
    refuses a file it did not write unless --force, before measuring anything."""

    def test_a_file_of_the_users_is_refused_without_force(self):
        with tempfile.TemporaryDirectory() as d:
            job = os.path.join(d, "job.yaml")
            with open(tiny_job()) as src, open(job, "w") as dst:
                dst.write(src.read())
            with open(job) as f:
                before = f.read()
            r = ptrain("profile", "--quick", "--out", job, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"error: {job} exists and was not written by ptrain profile; not replacing it "
                          "(fix: pass --out with another path, or --force)", r.stderr)
            self.assertNotIn("profiling", r.stderr)  # refused before measuring
            with open(job) as f:
                self.assertEqual(f.read(), before)
            self.assertEqual(os.listdir(d), ["job.yaml"])

    def test_an_earlier_profile_is_no_file_of_the_users(self):
        # It is replaced, as plan replaces its own file: shown here by it getting past the check
        # to a bad --backend's refusal, which comes after it.
        with tempfile.TemporaryDirectory() as d:
            earlier = os.path.join(d, "profile.json")
            with open(os.path.join(ROOT, "profiles", "cpu.json")) as src, open(earlier, "w") as dst:
                dst.write(src.read())
            r = ptrain("profile", "--backend", "cuda", "--out", earlier, timeout=30)
            self.assertNotIn("not replacing it", r.stderr)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.run(sys.modules[__name__], "root")
