"""CPU ranks x threads against the cores they may use (issue 44 item 6): `ptrain run` warns before its
ranks start where this machine's ranks x threads per rank exceed the cores of its CPU affinity
(here narrowed to one core by `taskset -c 0`), saying the ranks, threads, cores, the slowdown and the
fix, and stays silent where they fit; validate says it of a CPU job's node, from the cores its CPU
profile measured or else this machine's.
    python3 tests/launch/test_oversubscription.py --ptrain build/ptrain [-v]"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

PTRAIN = ""
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

JOB = """\
name: cores-test
backend: cpu
model: {{arch: gpt2, layers: 1, hidden: 32, heads: 4, vocab: 97, seq_len: 16}}
train: {{steps: 2, global_batch: 8, micro_batch: 1, precision: fp32}}
data: {{format: synthetic}}
cluster: {{nodes: 1, gpus_per_node: {per_node}, gpu: cpu{profile}}}
comm: {{timeout_s: 60}}
"""

LAUNCH_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
               "PTRAIN_LAUNCHED", "PTRAIN_JOB_TOKEN", "PTRAIN_STORE_FD", "PTRAIN_DEBUG_FAULT", "OMP_NUM_THREADS"}


def one_core(*args, threads=None):
    """`ptrain ARGS` on core 0 alone, OMP_NUM_THREADS=`threads` (unset: None)."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and not k.startswith(("OMPI_", "PMI_", "SLURM_"))}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return subprocess.run(["taskset", "-c", "0", PTRAIN, *args], capture_output=True, text=True, env=env, timeout=240)


class Oversubscription(unittest.TestCase):
    def setUp(self):
        if shutil.which("taskset") is None:
            self.skipTest("taskset (util-linux) is not installed")
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)

    def job(self, per_node=1, profile=""):
        path = os.path.join(self.dir, "job.yaml")
        with open(path, "w") as f:
            f.write(JOB.format(per_node=per_node, profile=profile))
        return path

    def test_four_ranks_of_two_threads_on_one_core_are_warned_of_before_they_start(self):
        r = one_core("run", self.job(), "--nproc", "4", threads=2)
        self.assertEqual(r.returncode, 0, r.stderr)
        warning = [line for line in r.stderr.splitlines() if "threads on 1 core" in line]
        self.assertEqual(len(warning), 1, r.stderr)
        line = warning[0]
        self.assertIn("launch warning: 4 ranks x 2 threads = 8 threads on 1 core (the CPU affinity", line)
        self.assertIn("every step takes about 8.0x as long as with a core per thread", line)
        self.assertIn("the predicted step time does not count that", line)
        self.assertIn("fix: start at most 1 rank(s) here (--nproc 1", line)
        self.assertIn("OMP_NUM_THREADS=1", line)
        self.assertLess(r.stderr.index(line), r.stderr.index("start-up:"), "warned before the ranks ran")

    def test_one_rank_of_more_threads_than_cores_is_told_the_threads_to_use(self):
        r = one_core("run", self.job(), "--nproc", "1", threads=2)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("1 rank x 2 threads = 2 threads on 1 core", r.stderr)
        self.assertIn("fix: OMP_NUM_THREADS=1 (threads per rank), or unset it", r.stderr)

    def test_ranks_that_fit_the_cores_draw_no_warning(self):
        # OMP_NUM_THREADS unset: one rank gets the one core of its affinity (not the machine's cores).
        for threads in (None, 1):
            with self.subTest(threads=threads):
                r = one_core("run", self.job(), "--nproc", "1", threads=threads)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertNotIn("threads on", r.stderr)

    def test_validate_warns_of_more_ranks_on_a_node_than_this_machines_cores(self):
        r = one_core("validate", self.job(per_node=4), "--world", "4", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        (warning,) = [w for w in json.loads(r.stdout)["warnings"] if w["key"] == "cluster.gpus_per_node"]
        self.assertIn("4 CPU ranks on a node of 1 core (this machine's: no cluster.profile)", warning["message"])
        self.assertIn("4.0x slower than on a core of its own", warning["message"])
        self.assertIn("the step time above does not count it", warning["message"])
        self.assertIn("at most 1 ranks per node", warning["fix"])
        r = one_core("validate", self.job(per_node=1), "--world", "1", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([w for w in json.loads(r.stdout)["warnings"] if w["key"] == "cluster.gpus_per_node"], [])

    def test_validate_takes_the_cores_a_cpu_profile_measured(self):
        profile = os.path.join(ROOT, "profiles", "cpu.json")  # measured on 2 cores
        with open(profile) as f:
            self.assertEqual(json.load(f)["cores"], 2)
        r = one_core("validate", self.job(per_node=8, profile=f", profile: {profile}"), "--world", "8", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        (warning,) = [w for w in json.loads(r.stdout)["warnings"] if w["key"] == "cluster.gpus_per_node"]
        self.assertIn("8 CPU ranks on a node of 2 cores (as cluster.profile measured it)", warning["message"])
        self.assertIn("(the step time above counts it)", warning["message"])
        r = one_core("validate", self.job(per_node=2, profile=f", profile: {profile}"), "--world", "2", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([w for w in json.loads(r.stdout)["warnings"] if w["key"] == "cluster.gpus_per_node"], [])


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.run(sys.modules[__name__])
