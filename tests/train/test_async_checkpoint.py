"""checkpoint.async (issue 42 item 3; docs/faults.md, "Asynchronous checkpoints"), on CPU: the save copies
the shards to host memory and a background thread writes them while training goes on.

- The same losses and the very same checkpoint files as the synchronous save (1 rank fp32, 2 ranks
  ZeRO-1 bf16, FP8 delayed scaling's histories), and a resume from an async checkpoint is bitwise the
  uninterrupted run.
- kill -9 while a write is in flight (the debug fault kills rank 1 of 2 right after they started step
  6's save) leaves `latest` at the step before, which `--max-restarts` resumes from: bitwise the same curve.
  kill -9 at random moments of a run saving every step: each time `latest` loads and the run resumes.
- A stop signal waits for the write in flight; the end of a run waits too, and says how long.
- A failed background write (a file size limit, as a full disk) ends the job as a failed save does:
  exit 1, the same errors ("checkpoint step N not saved" where another rank failed), no temporary
  directory left, `latest` unchanged.
- validate counts the copy against the host's memory (cluster.host_memory_gb).
"""
import json
import os
import random
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

PTRAIN = ""


def env(**extra):
    e = {k: v for k, v in os.environ.items()
         if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PTRAIN_DEBUG_FAULT")}
    e["OMP_NUM_THREADS"] = "1"
    e.update(extra)
    return e


def job(d, steps=20, every=5, ranks=1, precision="fp32", zero=0, keep=0, asynchronous=True, fp8=None, hidden=32,
        layers=2):
    """A small Llama on `ranks` CPU ranks, written as JSON (a YAML document)."""
    train = {"steps": steps, "global_batch": 8, "micro_batch": 1, "precision": precision, "seed": 3}
    if fp8:
        train["fp8"] = {"scaling": fp8}
    spec = {
        "name": "async-checkpoint-test", "backend": "cpu",
        "model": {"arch": "llama", "layers": layers, "hidden": hidden, "heads": 4, "kv_heads": 2, "ffn_hidden": 2 * hidden,
                  "vocab": 97, "seq_len": 16},
        "train": train,
        "optimizer": {"lr": 1.0e-2, "min_lr": 1.0e-3, "warmup_steps": 5},
        "data": {"format": "synthetic"},
        "checkpoint": {"dir": os.path.join(d, "ckpt"), "every": every, "keep": keep, "async": asynchronous},
        "cluster": {"nodes": 1, "gpus_per_node": ranks, "gpu": "cpu"},
        "parallel": {"dp": "auto", "zero": zero},
        "comm": {"timeout_s": 60},
        "logging": {"every": 1, "metrics": os.path.join(d, "metrics.jsonl")},
    }
    path = os.path.join(d, "job.yaml")
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    return path


def run(path, *args, timeout=240, preexec_fn=None, **extra):
    return subprocess.run([PTRAIN, "run", path, *args], capture_output=True, text=True, env=env(**extra),
                          timeout=timeout, preexec_fn=preexec_fn)


def curve(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [(r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, f)]


def files(d, step):
    """The bytes of every rank file of checkpoint step `step` in run directory d."""
    folder = os.path.join(d, "ckpt", f"step_{step}")
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            with open(os.path.join(folder, name), "rb") as f:
                out[name] = f.read()
    return out


def latest(d):
    with open(os.path.join(d, "ckpt", "latest")) as f:
        return f.read().strip()


def leftovers(d):
    return [n for n in os.listdir(os.path.join(d, "ckpt")) if ".tmp-" in n]


def failure_lines(stderr):
    """The ranks' error lines without their time and host, the temporary directory's suffix masked."""
    return sorted({re.sub(r"\.tmp-[0-9a-zA-Z]+", ".tmp-*", line.split("] ", 1)[-1])
                   for line in stderr.splitlines()
                   if "train error: " in line and ("write failed" in line or "not saved" in line)})


def limit_file_size():
    """preexec_fn: files may not grow past 32 KiB (write() fails with EFBIG instead of a signal): the
    checkpoint's rank files fail as on a full disk while the small files are written."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (32 << 10, 32 << 10))


class SameAsSynchronous(unittest.TestCase):
    def test_same_losses_and_files_as_the_synchronous_save(self):
        cases = [dict(), dict(ranks=2, zero=1, precision="bf16"), dict(precision="fp8", fp8="delayed")]
        for case in cases:
            with self.subTest(**case), tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
                nproc = ["--nproc", str(case["ranks"])] if "ranks" in case else []
                r = run(job(a, asynchronous=False, **case), *nproc)
                self.assertEqual(r.returncode, 0, r.stderr)
                r = run(job(b, **case), *nproc)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(curve(a), curve(b))
                for step in (5, 10, 15, 20):
                    self.assertEqual(files(a, step), files(b, step), f"step {step}")
                self.assertEqual(latest(b), "step_20")
                self.assertEqual(leftovers(b), [])

    def test_a_resume_from_an_async_checkpoint_is_bitwise_exact(self):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            self.assertEqual(run(job(a, asynchronous=False)).returncode, 0)
            r = run(job(b), "--stop-after-steps", "10")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(latest(b), "step_10")
            r = run(job(b))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("resumed from", r.stderr)
            self.assertEqual(curve(a), curve(b))
            self.assertEqual(files(a, 20), files(b, 20))


class KillNineAtAnyMoment(unittest.TestCase):
    def test_a_kill_while_a_write_is_in_flight_resumes_from_the_step_before(self):
        # 2 ranks, every 2: step 6's save is started, then rank 1 is killed before step 7, before the
        # ranks could agree that it is written: `latest` still names step 4, whose save they finished.
        with tempfile.TemporaryDirectory() as ref, tempfile.TemporaryDirectory() as d:
            layout = dict(steps=10, every=2, ranks=2, zero=1)
            self.assertEqual(run(job(ref, asynchronous=False, **layout), "--nproc", "2").returncode, 0)
            r = run(job(d, **layout), "--nproc", "2", "--max-restarts", "1", PTRAIN_DEBUG_FAULT="1:7:kill")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stderr, r"rank 1 \(host [^,]+, pid \d+\) was killed by signal 9 \(SIGKILL\); "
                                       r".*resuming from step 4 ")
            self.assertEqual(curve(d), curve(ref))
            self.assertEqual(files(d, 10), files(ref, 10))
            self.assertEqual(leftovers(d), [])  # step_6.tmp-*: removed by the restart's claim

    def test_latest_loads_after_a_kill_at_random_moments(self):
        rng = random.Random(42)
        with tempfile.TemporaryDirectory() as ref, tempfile.TemporaryDirectory() as d:
            steps = 150
            self.assertEqual(run(job(ref, steps=steps, every=1, keep=2, asynchronous=False)).returncode, 0)
            path = job(d, steps=steps, every=1, keep=2)
            kills = 0
            for _ in range(3):
                p = subprocess.Popen([PTRAIN, "run", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env=env())
                deadline = time.time() + 60
                while time.time() < deadline and not os.path.exists(os.path.join(d, "ckpt", "latest")):
                    time.sleep(0.02)
                time.sleep(rng.uniform(0.05, 0.6))
                p.kill()  # SIGKILL
                err = p.communicate(timeout=60)[1]
                if p.returncode == 0:
                    break  # the run was over before the kill
                kills += 1
                self.assertEqual(p.returncode, -signal.SIGKILL, err)
                with open(os.path.join(d, "ckpt", latest(d), "manifest.json")) as f:
                    self.assertEqual(json.load(f)["step"], int(latest(d).split("_")[1]))
            self.assertGreater(kills, 0, "every run ended before its kill: make it longer")
            r = run(path)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("resumed from", r.stderr)
            self.assertEqual(curve(d), curve(ref))


class StopsAndFailures(unittest.TestCase):
    def test_a_stop_signal_waits_for_the_write_in_flight(self):
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.Popen([PTRAIN, "run", job(d, steps=100000, every=3)], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True, env=env())
            deadline = time.time() + 60
            while time.time() < deadline and not os.path.exists(os.path.join(d, "ckpt", "latest")):
                time.sleep(0.05)
            time.sleep(0.3)
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, err)
            self.assertIn("checkpoint saved", err)
            self.assertEqual(int(latest(d).split("_")[1]), len(curve(d)))
            self.assertEqual(leftovers(d), [])

    def test_a_save_that_waits_for_the_write_in_flight_says_how_long(self):
        # hidden 256, 4 layers: 2.4 M parameters, a 29 MB checkpoint, which takes more than a
        # millisecond to write: the end of the run waits for its last save and says how long.
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, steps=3, every=1, keep=1, hidden=256, layers=4))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stderr, r"ckpt info: the end of the run waited \d+\.\d{3} s for checkpoint step 3 "
                                       r"to be written \(at most one save in flight\)")
            self.assertEqual(latest(d), "step_3")

    def test_pruning_on_the_writers_thread_leaves_keep_steps_and_no_leftovers(self):
        # Rank 0 removes the steps beyond `keep` on the writer's thread after each commit; the next
        # save waits for it before claiming its directory, which the removal of leftovers (step_N.tmp-*)
        # would otherwise take from under it (it did: "rank_0.safetensors: cannot create").
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, steps=12, every=1, keep=2, hidden=256, layers=4))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sorted(os.listdir(os.path.join(d, "ckpt"))), ["job.lock", "latest", "step_11", "step_12"])
            self.assertEqual(latest(d), "step_12")

    def test_a_failed_background_write_ends_the_job_as_a_failed_save_does(self):
        # The second run's files may not grow past 32 KiB: every rank's file of step 10 fails (in the
        # background with async, found a step or two later): exit 1 and the same errors as the
        # synchronous save's, nothing left behind, `latest` unchanged.
        outcome = {}
        for asynchronous in (False, True):
            with tempfile.TemporaryDirectory() as d:
                first = run(job(d, steps=5, ranks=2, zero=1, asynchronous=asynchronous), "--nproc", "2")
                self.assertEqual(first.returncode, 0, first.stderr)
                r = run(job(d, steps=20, ranks=2, zero=1, asynchronous=asynchronous), "--nproc", "2",
                        preexec_fn=limit_file_size)
                errors = [e.replace(d, "RUN") for e in failure_lines(r.stderr)]
                outcome[asynchronous] = (r.returncode, errors, leftovers(d), latest(d),
                                         os.path.exists(os.path.join(d, "ckpt", "step_10")))
                self.assertLess(len(curve(d)), 20)
        self.assertEqual(outcome[True], outcome[False])
        code, errors, left, last, step_10 = outcome[True]
        self.assertEqual((code, left, last, step_10), (1, [], "step_5", False))
        self.assertTrue(any("rank_0.safetensors: write failed: File too large" in e for e in errors), errors)
        self.assertTrue(any("rank_1.safetensors: write failed: File too large" in e for e in errors), errors)

    def test_a_background_write_failing_on_one_rank_fails_every_rank(self):
        # Two torchrun-style ranks started by hand, only rank 1 with the file size limit: rank 0
        # writes its file, but the step is abandoned and both ranks say why.
        with tempfile.TemporaryDirectory() as d, socket.socket() as s:
            self.assertEqual(run(job(d, steps=5, ranks=2, zero=1), "--nproc", "2").returncode, 0)
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
            s.close()
            spec = job(d, steps=20, ranks=2, zero=1)
            ranks = [subprocess.Popen([PTRAIN, "run", spec], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True, preexec_fn=limit_file_size if rank else None,
                                      env=env(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                              MASTER_PORT=port, PTRAIN_JOB_TOKEN="async-one-rank-fails"))
                     for rank in range(2)]
            errors = [p.communicate(timeout=120)[1] for p in ranks]
            self.assertEqual([p.returncode for p in ranks], [1, 1], errors)
            self.assertIn("checkpoint step 10 not saved: rank 1: ", errors[0])
            self.assertIn("rank_1.safetensors: write failed: File too large", errors[0])
            self.assertIn("rank_1.safetensors: write failed: File too large", errors[1])
            self.assertEqual(sorted(os.listdir(os.path.join(d, "ckpt"))), ["job.lock", "latest", "step_5"])


class HostMemory(unittest.TestCase):
    def validate(self, path, *sets):
        args = [a for s in sets for a in ("--set", s)]
        return subprocess.run([PTRAIN, "validate", path, "--json", *args], capture_output=True, text=True,
                              timeout=60, env=env())

    def test_validate_counts_the_copy_against_the_hosts_memory(self):
        with tempfile.TemporaryDirectory() as d:
            path = job(d, ranks=2, zero=1)
            used = {}
            for on in (False, True):
                r = self.validate(path, f"checkpoint.async={str(on).lower()}")
                self.assertEqual(r.returncode, 0, r.stderr)
                memory = json.loads(r.stdout)["memory"]
                used[on] = memory["limit_used_bytes"]
                copy = memory["checkpoint_copy_bytes"]
                self.assertEqual(copy > 0, on)
            # Two ranks a host, each its ZeRO-1 half of the fp32 weights, m and v: 12 bytes an element.
            self.assertAlmostEqual(used[True] - used[False], 2 * copy, delta=1)
            between = (used[True] + used[False]) / 2 / 1e9
            fits = self.validate(path, "checkpoint.async=false", f"cluster.host_memory_gb={between}")
            self.assertEqual(fits.returncode, 0, fits.stdout + fits.stderr)
            over = self.validate(path, "checkpoint.async=true", f"cluster.host_memory_gb={between}")
            self.assertEqual(over.returncode, 2, over.stdout + over.stderr)
            self.assertIn("async checkpoint copy", over.stdout + over.stderr)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.run(sys.modules[__name__])
