"""Restarts without a person and the rank that hung named (issue 42 items 4 and 5), under the local
launcher, on CPU.

`ptrain run --max-restarts N`: a rank killed (kill -9, by the debug fault) at step k ends with exit 0
and the very loss curve of an uninterrupted run (bitwise: same layout, restarted from `latest`; the
records drop the rows after the checkpoint as a resume does); a failure at every attempt ends, after
N restarts, with the exit code it has without restarts; bad input (exit 2) is never retried. A rank
started by hand (RANK/WORLD_SIZE, as under srun or mpirun) that fails at runtime with restarts left
exits 75, for a requeue script.

A rank stopped by SIGSTOP in a 4-rank job: the job ends non-zero within comm.timeout_s + 10 s, and the
first error line names the stopped rank (by its heartbeat; rank 0, which hosts the store, as not
answering), not the first rank that gave up.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

PTRAIN = ""

LAUNCH_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
               "PTRAIN_LAUNCHED", "PTRAIN_JOB_TOKEN", "PTRAIN_STORE_FD", "PTRAIN_DEBUG_FAULT",
               "PTRAIN_RESTART_ATTEMPT", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}


def env(**extra):
    e = {k: v for k, v in os.environ.items()
         if k not in LAUNCH_VARS and not k.startswith(("OMPI_", "PMI_", "PMIX_", "SLURM_"))}
    e["OMP_NUM_THREADS"] = "1"
    e.update(extra)
    return e


def job(d, steps=10, every=3, ranks=2, timeout=30):
    """A small data-parallel GPT-2 (ZeRO-1) on `ranks` CPU ranks, written as JSON (a YAML document)."""
    spec = {
        "name": "restart-test", "backend": "cpu",
        "model": {"arch": "gpt2", "layers": 2, "hidden": 32, "heads": 4, "vocab": 97, "seq_len": 16},
        "train": {"steps": steps, "global_batch": 8, "micro_batch": 1, "precision": "fp32", "seed": 3},
        "optimizer": {"lr": 1.0e-2, "min_lr": 1.0e-3, "warmup_steps": 5},
        "data": {"format": "synthetic"},
        # Synchronous saves: the step a restart resumes from is then exactly the last one saved (an
        # asynchronous save counts once committed, a step or more later: test_async_checkpoint.py).
        "checkpoint": {"dir": os.path.join(d, "ckpt"), "every": every, "keep": 2, "async": False},
        "cluster": {"nodes": 1, "gpus_per_node": ranks, "gpu": "cpu"},
        "parallel": {"dp": "auto", "zero": 1},
        "comm": {"timeout_s": timeout},
        "logging": {"every": 1, "metrics": os.path.join(d, "metrics.jsonl")},
    }
    path = os.path.join(d, "job.yaml")
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    return path


def run(d, *args, timeout=240, **extra):
    p = subprocess.run([PTRAIN, "run", os.path.join(d, "job.yaml"), *args], capture_output=True, text=True,
                       env=env(**extra), timeout=timeout)
    return p


def faults(stderr, action):
    """How many times the debug fault struck: the worker's own lines, not the launcher's report of them."""
    return sum(1 for line in stderr.splitlines()
               if f"debug fault: rank 1 runs '{action}'" in line and " launch error: " not in line)


def curve(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [(r["step"], r["loss"]) for r in map(json.loads, f)]


class Restarts(unittest.TestCase):
    def test_a_killed_rank_restarts_from_latest_and_the_curve_is_bitwise_the_same(self):
        with tempfile.TemporaryDirectory() as ref, tempfile.TemporaryDirectory() as d:
            job(ref), job(d)
            self.assertEqual(run(ref).returncode, 0)
            r = run(d, "--max-restarts", "1", PTRAIN_DEBUG_FAULT="1:5:kill")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(faults(r.stderr, "kill"), 1, "the fault struck again")
            self.assertRegex(r.stderr, r"launch warning: restart 1 of 1 \(--max-restarts\): rank 1 \(host [^,]+, pid \d+\) "
                                       r"was killed by signal 9 \(SIGKILL\); every rank starts again in the same layout; "
                                       r"resuming from step 3 \(the latest checkpoint in .*\); the run had logged step 4: "
                                       r"1 step\(s\) lost")
            self.assertEqual(curve(d), curve(ref))  # bitwise: the same layout from the same checkpoint
            self.assertIn("the rows of steps 4-4 are dropped", r.stderr)

    def test_a_hang_past_the_timeout_is_restarted_and_named(self):
        with tempfile.TemporaryDirectory() as d:
            job(d, timeout=3)
            r = run(d, "--max-restarts", "1", PTRAIN_DEBUG_FAULT="1:5:stall")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stderr, r"restart 1 of 1 \(--max-restarts\): rank 0 \(host [^,]+, pid \d+\) exited with code 1 "
                                       r"\(first error: rank 1 never entered ")
            self.assertEqual([s for s, _ in curve(d)], list(range(1, 11)))

    def test_a_failure_past_the_restarts_ends_with_its_exit_code(self):
        with tempfile.TemporaryDirectory() as d:
            job(d)
            r = run(d, "--max-restarts", "2", PTRAIN_DEBUG_FAULT="1:5:exit:3")
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertEqual(faults(r.stderr, "exit"), 3)
            self.assertEqual(len(re.findall(r"restart \d of 2", r.stderr)), 2)

    def test_bad_input_is_never_retried(self):
        with tempfile.TemporaryDirectory() as d:
            job(d)
            r = run(d, "--max-restarts", "3", PTRAIN_DEBUG_FAULT="not-a-fault")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertNotIn("restart 1", r.stderr)

    def test_a_rank_started_by_hand_asks_for_a_requeue(self):
        # As under srun or mpirun: rank 1 exits (the fault), rank 0 fails at runtime and, with a
        # restart left, exits 75; at the last attempt (PTRAIN_RESTART_ATTEMPT, else SLURM_RESTART_COUNT) 1.
        for attempt_var, code in [({}, 75), ({"SLURM_RESTART_COUNT": "1"}, 1), ({"PTRAIN_RESTART_ATTEMPT": "1"}, 1)]:
            with self.subTest(**attempt_var), tempfile.TemporaryDirectory() as d:
                path = job(d, timeout=10)
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
                procs = [subprocess.Popen([PTRAIN, "run", path, "--max-restarts", "1"], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True,
                                          env=env(RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                                  MASTER_PORT=str(port), PTRAIN_JOB_TOKEN="t-requeue",
                                                  PTRAIN_DEBUG_FAULT="1:5:exit:9", **attempt_var))
                         for r in (0, 1)]
                errs = [p.communicate(timeout=120)[1] for p in procs]
                self.assertEqual(procs[1].returncode, 3, errs[1])  # the fault's own code
                self.assertEqual(procs[0].returncode, code, errs[0])


def lines_in(path):
    with open(path) as f:
        return f.read().count("\n")


def workers_of(launcher):
    """rank -> pid of the local launcher's workers."""
    out = {}
    for pid in subprocess.run(["pgrep", "-P", str(launcher)], capture_output=True, text=True).stdout.split():
        try:
            with open(f"/proc/{pid}/environ") as f:
                for item in f.read().split("\0"):
                    if item.startswith("RANK="):
                        out[int(item[5:])] = int(pid)
        except OSError:
            pass
    return out


class HungRank(unittest.TestCase):
    TIMEOUT = 10

    def stop_one(self, victim):
        with tempfile.TemporaryDirectory() as d:
            path = job(d, steps=100000, every=100000, ranks=4, timeout=self.TIMEOUT)
            p = subprocess.Popen([PTRAIN, "run", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 env=env())
            try:
                metrics = os.path.join(d, "metrics.jsonl")
                deadline = time.time() + 120
                while not (os.path.exists(metrics) and lines_in(metrics) >= 2):
                    self.assertIsNone(p.poll(), "the job ended before it trained")
                    self.assertLess(time.time(), deadline, "no step within 120 s")
                    time.sleep(0.05)
                pids = workers_of(p.pid)
                os.kill(pids[victim], signal.SIGSTOP)
                stopped = time.monotonic()
                _, err = p.communicate(timeout=120)
                seconds = time.monotonic() - stopped
            finally:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
            print(f"    rank {victim} stopped: the job ended after {seconds:.1f} s, exit {p.returncode}", file=sys.stderr)
            self.assertNotEqual(p.returncode, 0, err)
            self.assertLess(seconds, self.TIMEOUT + 10, err)
            first = next(line for line in err.splitlines() if " error: " in line)
            message = first.split(" error: ", 1)[1]
            named = rf"rank {victim} stopped beating" if victim else r"rank 0, which hosts the job's store, does not answer"
            self.assertRegex(message, "^" + named, err)
            self.assertNotRegex(message, rf"ranks? (?!{victim}\b)\d+ (stopped beating|never entered)")

    def test_a_stopped_rank_is_named_first(self):
        self.stop_one(2)

    def test_a_stopped_rank_0_the_store_host_is_named_first(self):
        self.stop_one(0)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.run(sys.modules[__name__])
