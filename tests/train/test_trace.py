"""`logging.trace`: the Chrome trace of a real run. Every rank is a process of the file with its F/B
of every microbatch (named as `ptrain schedule --trace` names the simulated ones), its waits, its
collectives with group and bytes, its steps and optimizer updates; the ranks' clocks line up (a
stage's forward starts after the previous stage's forward of the same microbatch ended); and a rank
of a failed run leaves its own trace so far."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import test_distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import full_disk  # noqa: E402

STEPS = 3
MICROBATCHES = 4  # global batch 8, micro-batch 1, dp 2


def spans_by_rank(doc):
    """{pid: (label, [span, ...])} of a Chrome trace document."""
    labels, spans = {}, {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            labels[e["pid"]] = e["args"]["name"]
        elif e["ph"] == "X":
            spans.setdefault(e["pid"], []).append(e)
    return {pid: (labels[pid], spans.get(pid, [])) for pid in labels}


def coordinate(label, axis):
    return int(re.search(axis + r" (\d+)", label).group(1))


class RunTrace(unittest.TestCase):
    def traced_run(self, d, *flags, **env):
        path = os.path.join(d, "trace.json")
        r = dist.run(dist.job(d, dp=2, pp=2, layers=4, steps=STEPS, zero=1, **{"micro_batch": 1}), "--set",
                     f"logging.trace={path}", *flags, **env)
        return r, path

    def test_a_pipeline_by_data_parallel_run_traces_every_rank(self):
        with tempfile.TemporaryDirectory() as d:
            r, path = self.traced_run(d)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("trace written: " + path, r.stdout + r.stderr)
            with open(path) as f:
                ranks = spans_by_rank(json.load(f))
            self.assertEqual(sorted(ranks), [0, 1, 2, 3])
            schedule = self.simulated_names(d)
            for pid, (label, spans) in ranks.items():
                names = [s["name"] for s in spans]
                with self.subTest(rank=pid):
                    # F and B of every microbatch of every step, as the simulator names them for this stage
                    computed = [n for n in names if re.fullmatch(r"[FB] mb\d+ c\d+", n)]
                    self.assertEqual(len(computed), 2 * MICROBATCHES * STEPS)
                    self.assertEqual(set(computed), schedule[coordinate(label, "pp")])
                    self.assertEqual([n for n in names if n.startswith("step ")],
                                     [f"step {s}" for s in range(1, STEPS + 1)])
                    self.assertEqual(names.count("optimizer"), STEPS)
                    # collectives with their group and bytes: ZeRO-1 over dp, messages over pp
                    collectives = [s for s in spans if s["tid"] == 1]
                    groups = {s["args"]["group"].split("[")[0] for s in collectives}
                    self.assertTrue({"dp-cp", "pp"} <= groups, groups)
                    self.assertTrue(all(s["args"]["bytes"] > 0 for s in collectives))
                    self.assertTrue(all(s["dur"] >= 0 for s in spans))
            # Clocks line up across ranks: on each dp replica the second stage's F of a microbatch
            # starts after the first stage's F of it ended (it waits for the activation), to within
            # the start barrier's skew: 50 ms, since 4 ranks beside another test on 2 cores leave the
            # barrier as far apart as the scheduler keeps one of them waiting for a core (1.4 ms seen
            # in a full ctest -j 2, 5.6 ms once on 2026-12-07). A clock off by a step would be seconds.
            for dp in (0, 1):
                stage = {coordinate(label, "pp"): spans for label, spans in ranks.values()
                         if coordinate(label, "dp") == dp}
                first = [s for s in stage[0] if s["name"].startswith("F ")]
                second = [s for s in stage[1] if s["name"].startswith("F ")]
                for a, b in zip(first, second):
                    self.assertEqual(a["name"], b["name"])
                    self.assertGreaterEqual(b["ts"], a["ts"] + a["dur"] - 50000, f"dp {dp}, {a['name']}")

    def simulated_names(self, d):
        """{pp rank: the set of F/B names} of `ptrain schedule --trace` for the same job."""
        out = os.path.join(d, "simulated.json")
        r = subprocess.run([dist.PTRAIN, "schedule", os.path.join(d, "job.yaml"), "--trace", out],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            events = json.load(f)["traceEvents"]
        names = {}
        for e in events:
            if e["ph"] == "X" and e["name"][0] in "FB":
                names.setdefault(e["tid"], set()).add(e["name"])
        return names

    def test_a_failed_run_leaves_each_rank_its_own_trace(self):
        with tempfile.TemporaryDirectory() as d:
            # (8 s: 4 ranks beside another test on 2 cores must all start within it)
            r, path = self.traced_run(d, "--set", "train.steps=1000", "--set", "comm.timeout_s=8",
                                      PTRAIN_DEBUG_FAULT="1:3:stall")
            self.assertEqual(r.returncode, 1, r.stderr)
            own = os.path.join(d, "trace.rank0.json")
            self.assertIn("its trace so far written to " + own, r.stderr)
            with open(own) as f:
                ranks = spans_by_rank(json.load(f))
            self.assertEqual(list(ranks), [0])
            names = [s["name"] for s in ranks[0][1]]
            self.assertIn("step 2", names)  # the steps before the stall

    def test_a_trace_folder_is_made_and_an_unwritable_trace_is_bad_input(self):
        with tempfile.TemporaryDirectory() as d:
            r = dist.run(dist.job(d, dp=2, steps=2), "--set", f"logging.trace={d}/new/folder/trace.json")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(os.path.isfile(os.path.join(d, "new", "folder", "trace.json")))
        with tempfile.TemporaryDirectory() as d:
            r = dist.run(dist.job(d, dp=2, steps=2), "--set", f"logging.trace={d}/job.yaml/trace.json")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"logging.trace: cannot open '{d}/job.yaml/trace.json' for writing", r.stderr)
            self.assertEqual(dist.metrics(d), [])  # refused before the first step

    def test_a_trace_that_cannot_be_written_is_exit_1_and_the_earlier_one_stays(self):
        # On a full disk the trace was cut to what fit (the earlier one gone, the new one not JSON)
        # and the run exited 0, with one rank and with two.
        earlier = json.dumps({"displayTimeUnit": "ms", "traceEvents": []})
        for world in (1, 2):
            with self.subTest(ranks=world), tempfile.TemporaryDirectory() as d, \
                    full_disk.small_filesystem(self, "64k") as traces:
                path = os.path.join(traces, "trace.json")
                with open(path, "w") as f:
                    f.write(earlier)
                full_disk.fill(traces)
                # the trace is this run's own (a run replaces only its own: train/run_records.h)
                self.assertEqual(dist.run(dist.job(d, dp=world, steps=2)).returncode, 0)
                r = dist.run(dist.job(d, dp=world, steps=2), "--set", f"logging.trace={path}")
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn(f"logging.trace: cannot write '{path}': write failed: No space left on device",
                              r.stderr)
                with open(path) as f:
                    self.assertEqual(f.read(), earlier)
                self.assertEqual(sorted(os.listdir(traces)), ["filler", "trace.json"])
                self.assertNotIn("trace.rank", r.stderr)  # no rank's own trace tried beside it
                self.assertEqual(len(dist.metrics(d)), 2)  # it trained: only the trace is lost


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--ptrain" in args:
        i = args.index("--ptrain")
        dist.PTRAIN = args[i + 1]
        del args[i:i + 2]
    import test_script_main  # noqa: E402 (tests/ is on the path: full_disk above)
    test_script_main.main(sys.modules[__name__], args)
