"""`ptrain run` with train.precision: fp8 on CPU (docs/fp8.md), under current and delayed scaling: it
tracks the bf16 curve without being it, every layout tracks the one-rank FP8 curve, delayed scaling's
amax histories are the one-rank histories in every layout and resume exactly, and what is not built
yet is refused at its key.

    python3 test_fp8.py --ptrain build/ptrain            # the suite's part (synthetic tokens)
    python3 test_fp8.py --ptrain build/ptrain --fortunes  # 200 steps on data/tiny (ctest label `long`)
"""
import json
import os
import subprocess
import sys
import struct
import tempfile
import unittest

PTRAIN = ""
FORTUNES = False
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

JOB = """\
name: fp8-test
backend: cpu
model: {{arch: {arch}, layers: {layers}, hidden: {hidden}, heads: 4, kv_heads: {kv_heads}, ffn_hidden: {ffn}, vocab: {vocab}, seq_len: {seq}{moe}}}
parallel: {{tp: 1, pp: 1, cp: 1, zero: 0}}
train: {{steps: {steps}, global_batch: 8, micro_batch: 1, precision: fp8, fp8: {{scaling: {scaling}}}, seed: 5, recompute: selective}}
optimizer: {{lr: {lr}, min_lr: 1.0e-4, warmup_steps: 4}}
data: {data}
cluster: {{nodes: 1, gpus_per_node: 1, gpu: cpu}}
logging: {{every: 10, metrics: {dir}/metrics.jsonl}}
checkpoint: {{dir: {dir}/ckpt, every: 10}}
"""
SYNTHETIC = "{format: synthetic}"


def job(d, arch="llama", layers=4, steps=20, hidden=32, ffn=64, vocab=97, seq=16, lr=1.0e-2, data=SYNTHETIC,
        scaling="current"):
    path = os.path.join(d, "job.yaml")
    with open(path, "w") as f:
        f.write(JOB.format(arch=arch, layers=layers, hidden=hidden, kv_heads=4 if arch == "gpt2" else 2, ffn=ffn,
                           vocab=vocab, seq=seq, steps=steps, lr=lr, data=data, dir=d, scaling=scaling,
                           moe=", moe: {experts: 4, top_k: 2}" if arch == "mixtral" else ""))
    return path


def run(path, *sets, nproc=1):
    args = [PTRAIN, "run", path, "--nproc", str(nproc)]
    for s in sets:
        args += ["--set", s]
    return subprocess.run(args, capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))


def losses(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f]


def relative(a, b):
    return [abs(x - y) / abs(y) for x, y in zip(a, b)]


def smoothed(curve, window=10):
    """The mean of each `window` consecutive losses: one step's loss is one batch's, noisy."""
    return [sum(curve[i:i + window]) / window for i in range(len(curve) - window + 1)]


class TracksBf16(unittest.TestCase):
    def check(self, tolerance, **shape):
        """fp8 under each scaling within `tolerance` of bf16 (the loss over any 10 steps), and neither bf16
        nor the other scaling: the quantisation is real, and so are the delayed scales."""
        curves = {}
        for precision in ["bf16", "current", "delayed"]:
            with tempfile.TemporaryDirectory() as d:
                sets = ["train.precision=bf16", "train.fp8=null"] if precision == "bf16" else []
                r = run(job(d, scaling="current" if precision == "bf16" else precision, **shape), *sets)
                self.assertEqual(r.returncode, 0, r.stderr)
                curves[precision] = losses(d)
        for scaling in ["current", "delayed"]:
            gaps = relative(smoothed(curves[scaling]), smoothed(curves["bf16"]))
            print(f"    {shape.get('arch')}: fp8 ({scaling}) against bf16 at most {max(gaps):.2e}, last {gaps[-1]:.2e}",
                  file=sys.stderr)
            self.assertLess(max(gaps), tolerance)
            self.assertGreater(max(relative(curves[scaling], curves["bf16"])), 1e-4)
        self.assertNotEqual(curves["current"], curves["delayed"])
        return curves

    def test_gpt2_llama_and_mixtral_on_synthetic_tokens(self):
        """At this test's learning rate (1e-2) on random tokens the curves part more than on text:
        GPT-2 under delayed scaling ran up to 2.2% below bf16 around step 20 and 1.0% at step 60
        (2026-12-07); the issue's 2% is held on the fortunes (the test below, ctest label long)."""
        for arch in ["gpt2", "llama", "mixtral"]:
            with self.subTest(arch=arch):
                self.check(0.03, arch=arch, steps=60)

    def test_gpt2_and_llama_on_the_fortunes_over_200_steps(self):
        if not FORTUNES:  # read when the test runs: main() sets it after the class is defined
            self.skipTest("the 200-step run on the fortunes data runs with --fortunes (ctest label long)")
        train = os.path.join(REPO, "data", "tiny", "train_*.bin")
        if not os.path.exists(os.path.join(REPO, "data", "tiny", "manifest.json")):
            self.fail("no data/tiny: run `bash scripts/prepare_tiny_data.sh` first")
        data = "{format: llmc, train: '" + train + "'}"
        for arch in ["gpt2", "llama"]:
            with self.subTest(arch=arch):
                self.check(0.02, arch=arch, layers=2, steps=200, hidden=64, ffn=256, vocab=50257, seq=64, lr=3e-3,
                           data=data)


class Layouts(unittest.TestCase):
    """Each layout's FP8 curve against one rank's. Amaxes are taken over the tensor one rank would hold
    (tests/model/block_linears_test.cpp checks that exactly); what is left is the bf16 noise of summing
    in another order, which FP8's coarser grid amplifies: at this learning rate at most 5e-4 over 20
    steps (2026-12-06), against the 2e-3 allowed. (On a model this small FP8's own effect on the curve
    is of the same size, so this checks that every layout runs FP8 and stays on the curve; that the
    scales are the one-rank ones is the unit test's to show.)"""
    TOLERANCE = 2e-3
    LR = 3e-3

    def test_every_axis_tracks_one_rank(self):
        layouts = {
            "llama": [
                dict(nproc=2, sets=["parallel.zero=1"]),
                dict(nproc=2, sets=["parallel.zero=3"]),
                dict(nproc=2, sets=["parallel.tp=2", "parallel.sequence_parallel=true"]),
                dict(nproc=4, sets=["parallel.tp=4"]),  # 2 kv heads: copies on two ranks each
                dict(nproc=2, sets=["parallel.cp=2", "parallel.cp_comm=allgather"]),
                dict(nproc=2, sets=["parallel.cp=2", "parallel.cp_comm=ring"]),
                dict(nproc=2, sets=["parallel.cp=2", "parallel.cp_comm=a2a"]),
                dict(nproc=2, sets=["parallel.pp=2"]),
                dict(nproc=2, sets=["parallel.pp=2", "schedule.kind=zb-h1"]),
                dict(nproc=2, sets=["parallel.pp=2", "schedule.kind=interleaved-1f1b", "schedule.virtual_stages=2"]),
                dict(nproc=1, sets=["train.recompute=full"]),
                dict(nproc=1, sets=["parallel.offload=optimizer"]),
            ],
            "gpt2": [dict(nproc=2, sets=["parallel.tp=2"])],  # biases, GELU fused into the GEMMs
            # The experts in FP8: each expert GEMM one microbatch's slots, amaxes over the tp ranks'
            # tokens (each dispatches its own) and the cp ranks' chunks; under ep > 1 one block of
            # rows per source rank, or (ep = tp) the tp group's whole tokens on the rank of the expert.
            "mixtral": [
                dict(nproc=2, sets=["parallel.tp=2", "parallel.sequence_parallel=true"]),
                dict(nproc=2, sets=["parallel.cp=2", "parallel.cp_comm=allgather"]),
                dict(nproc=2, sets=["parallel.pp=2"]),
                dict(nproc=2, sets=["parallel.zero=3"]),
                dict(nproc=2, sets=["parallel.ep=2"]),
                dict(nproc=2, sets=["parallel.tp=2", "parallel.sequence_parallel=true", "parallel.ep=2"]),
                dict(nproc=4, sets=["parallel.tp=2", "parallel.sequence_parallel=true", "parallel.ep=2",
                                    "parallel.order=tp-cp-dp-ep-pp"]),
                dict(nproc=4, sets=["parallel.cp=2", "parallel.cp_comm=allgather", "parallel.ep=2",
                                    "parallel.order=tp-cp-dp-ep-pp"]),
            ],
        }
        for scaling in ["current", "delayed"]:
            for arch, cases in layouts.items():
                with tempfile.TemporaryDirectory() as d:
                    r = run(job(d, arch=arch, lr=self.LR, scaling=scaling))
                    self.assertEqual(r.returncode, 0, r.stderr)
                    one_rank = losses(d)
                for case in cases:
                    with self.subTest(scaling=scaling, arch=arch, **case), tempfile.TemporaryDirectory() as d:
                        r = run(job(d, arch=arch, lr=self.LR, scaling=scaling), *case["sets"], nproc=case["nproc"])
                        self.assertEqual(r.returncode, 0, r.stderr)
                        got = losses(d)
                        self.assertEqual(len(got), 20)
                        gap = max(relative(got, one_rank))
                        print(f"    {scaling} {arch} {' '.join(case['sets'])}: {gap:.1e}", file=sys.stderr)
                        self.assertLess(gap, self.TOLERANCE)


def amax_histories(d, step=20):
    """The fp8/amax_history tensor of checkpoint step `step` in run directory d, as a flat list (read
    from the safetensors file the manifest names, not through ptrain)."""
    step_dir = os.path.join(d, "ckpt", f"step_{step}")
    with open(os.path.join(step_dir, "manifest.json")) as f:
        manifest = json.load(f)
    tensor = manifest["tensors"]["fp8/amax_history"]
    (piece,) = tensor["pieces"]
    with open(os.path.join(step_dir, piece["file"]), "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        entry = header[piece["key"]]
        begin, end = entry["data_offsets"]
        f.seek(8 + size + begin)
        data = f.read(end - begin)
    assert entry["dtype"] == "F32", entry
    return tensor["shape"], list(struct.unpack(f"<{len(data) // 4}f", data))


class DelayedScaling(unittest.TestCase):
    """train.fp8.scaling: delayed (model/fp8_history.h)."""

    def test_every_layout_keeps_the_one_rank_histories(self):
        """The saved histories after two steps -- per cast tensor the largest amax over each step's
        microbatches and shards, the first step's by current scaling, the second's recorded under the
        history's scales and reduced at the step's end -- are one rank's in every layout. dp runs each
        microbatch as one rank does: exactly equal. Under tp and cp the activations and gradients
        carry the bf16 noise of other summation orders, which FP8's grid amplifies (an E5M2 gradient
        moves 25% when a rounding tips): within 10%; the weights, the same on both sides but for the
        first update's sign flips, within 2% -- a layout that kept its shard's amax instead of the
        whole weight's would miss by more in some layer. Two steps: later, Adam's sign-like updates let
        the noise grow into different weights, and the histories with them."""
        layouts = [  # (nproc, sets, bound on every history entry)
            (2, ["parallel.zero=1"], 0.0),  # dp: each rank half the microbatches
            (2, ["parallel.pp=2"], 3e-2),   # each stage its layers; the same sums but for the loss's
            (2, ["parallel.tp=2"], 0.1),
            (2, ["parallel.cp=2", "parallel.cp_comm=ring"], 0.1),
        ]
        steps = ["train.steps=2", "checkpoint.every=2"]
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, lr=3e-3, scaling="delayed"), *steps)
            self.assertEqual(r.returncode, 0, r.stderr)
            shape, want = amax_histories(d, step=2)
        self.assertEqual(shape, [4, 7, 3, 16])
        for c in range(len(want) // 16):  # llama: every linear layer casts in both steps
            h = want[c * 16:(c + 1) * 16]
            self.assertTrue(all(v > 0 for v in h[:2]) and not any(h[2:]), (c, h))
        gap = lambda got, cast_filter: max(
            (abs(got[i] - want[i]) / want[i] for i in range(len(want)) if want[i] > 0 and cast_filter(i // 16 % 3)),
            default=0.0)
        for nproc, sets, bound in layouts:
            with self.subTest(sets=sets), tempfile.TemporaryDirectory() as d:
                r = run(job(d, lr=3e-3, scaling="delayed"), *steps, *sets, nproc=nproc)
                self.assertEqual(r.returncode, 0, r.stderr)
                got_shape, got = amax_histories(d, step=2)
                self.assertEqual(got_shape, shape)
                every, weights = gap(got, lambda operand: True), gap(got, lambda operand: operand == 2)
                print(f"    {' '.join(sets)}: histories within {every:.1e}, weights' within {weights:.1e}",
                      file=sys.stderr)
                self.assertLessEqual(every, bound)
                self.assertLessEqual(weights, min(bound, 2e-2))
                self.assertEqual([a > 0 for a in got], [b > 0 for b in want])

    def test_expert_parallel_layouts_keep_the_one_rank_histories(self):
        """Mixtral's histories ([layers, 4 + 3 x 4 experts, 3, 16]) after two steps under ep = 2: over
        dp each expert block is one source rank's microbatch, as on one rank (exactly equal); with
        the experts split over the tp group (ep = tp) each rank casts whole blocks of its own experts
        and reduces nothing over tp: within 20% (tp's bf16 noise, and a token's near-tied experts can
        swap), the weights' within 3% -- with a reduction over tp, which takes the other rank's
        experts' amaxes, they missed by 59% and 31% (2026-12-07)."""
        steps = ["train.steps=2", "checkpoint.every=2"]
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, arch="mixtral", lr=3e-3, scaling="delayed"), *steps)
            self.assertEqual(r.returncode, 0, r.stderr)
            shape, want = amax_histories(d, step=2)
        self.assertEqual(shape, [4, 16, 3, 16])
        for nproc, sets, bound, weight_bound in [
                (2, ["parallel.ep=2"], 0.0, 0.0),
                (2, ["parallel.tp=2", "parallel.sequence_parallel=true", "parallel.ep=2"], 0.2, 3e-2)]:
            with self.subTest(sets=sets), tempfile.TemporaryDirectory() as d:
                r = run(job(d, arch="mixtral", lr=3e-3, scaling="delayed"), *steps, *sets, nproc=nproc)
                self.assertEqual(r.returncode, 0, r.stderr)
                got_shape, got = amax_histories(d, step=2)
                self.assertEqual(got_shape, shape)
                gaps = [(abs(got[i] - want[i]) / want[i], i // 16 % 3) for i in range(len(want)) if want[i] > 0]
                every, weights = max(g for g, _ in gaps), max(g for g, operand in gaps if operand == 2)
                print(f"    {' '.join(sets)}: histories within {every:.1e}, weights' within {weights:.1e}",
                      file=sys.stderr)
                self.assertLessEqual(every, bound)
                self.assertLessEqual(weights, weight_bound)
                self.assertEqual([a > 0 for a in got], [b > 0 for b in want])

    def test_a_resume_is_exact_in_the_same_layout_and_tracks_in_another(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, scaling="delayed"))
            self.assertEqual(r.returncode, 0, r.stderr)
            straight = losses(d)
        for nproc, sets in [(1, []), (2, ["parallel.tp=2"])]:
            with self.subTest(sets=sets), tempfile.TemporaryDirectory() as d:
                path = job(d, scaling="delayed")
                r = subprocess.run([PTRAIN, "run", path, "--stop-after-steps", "10"], capture_output=True, text=True,
                                   timeout=600)
                self.assertEqual(r.returncode, 0, r.stderr)
                r = run(path, *sets, nproc=nproc)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertNotIn("holds no FP8 amax histories", r.stderr)
                resumed = losses(d)
                self.assertEqual(len(resumed), 20)
                if not sets:
                    self.assertEqual(resumed, straight)  # bitwise: the histories came back as saved
                else:
                    self.assertLess(max(relative(resumed, straight)), 2e-3)

    def test_a_checkpoint_without_histories_starts_them_afresh(self):
        with tempfile.TemporaryDirectory() as d:
            path = job(d, scaling="current")
            r = subprocess.run([PTRAIN, "run", path, "--stop-after-steps", "10"], capture_output=True, text=True,
                               timeout=600)
            self.assertEqual(r.returncode, 0, r.stderr)
            r = run(path, "train.fp8.scaling=delayed")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("holds no FP8 amax histories", r.stderr)
            self.assertEqual(amax_histories(d)[0], [4, 7, 3, 16])


class RefusedAtTheKey(unittest.TestCase):
    def test_refused_at_the_key_before_training(self):
        cases = [
            (["backend=auto"], "backend", 1),
            # ep groups over the cp group (the default order): an expert's chunks arrive as two blocks
            (["model.arch=mixtral", "model.moe={experts: 4, top_k: 2}", "parallel.cp=2", "parallel.ep=2"],
             "parallel.order", 2),
            (["train.grad_reduce=fp8"], "train.grad_reduce", 1),
            (["cluster.gpu=a100-80g"], "train.precision", 1),  # no FP8 tensor cores: no FP8 rate to time it
        ]
        for sets, key, nproc in cases:
            with self.subTest(key=key), tempfile.TemporaryDirectory() as d:
                r = run(job(d), *sets, nproc=nproc)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(key, r.stderr)
                self.assertFalse(os.path.exists(os.path.join(d, "metrics.jsonl")), "nothing trained")

    def test_on_cuda_it_waits_for_the_gpu_checks_unless_the_gpu_session_says_unchecked(self):
        # PTRAIN_DEBUG_FP8_CUDA=unchecked (config/engine_limits.h) lifts only the backend limit, and
        # only for that word: scripts/device_session.sh sets it once the CUDA FP8 op tests passed.
        limit = "train.precision: fp8 runs on the CPU backend only"
        with tempfile.TemporaryDirectory() as d:
            path = job(d)
            for value, refused in (("", True), ("unchecked", False), ("yes", True)):
                with self.subTest(value=value):
                    env = dict(os.environ, PTRAIN_DEBUG_FP8_CUDA=value)
                    r = subprocess.run([PTRAIN, "validate", path, "--set", "backend=cuda", "--set", "cluster.gpu=h100-sxm"],
                                       capture_output=True, text=True, timeout=120, env=env)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertEqual(limit in r.stdout + r.stderr, refused, r.stdout + r.stderr)
                    r = subprocess.run([PTRAIN, "run", path, "--set", "backend=cuda", "--set", "cluster.gpu=h100-sxm"],
                                       capture_output=True, text=True, timeout=120, env=env)
                    self.assertEqual(limit in r.stderr, refused, r.stderr)
                    if refused:  # unchecked, it trains on a GPU and stops at "no CUDA device" without one
                        self.assertEqual(r.returncode, 2, r.stderr)
                        self.assertFalse(os.path.exists(os.path.join(d, "metrics.jsonl")), "nothing trained")


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--ptrain" in args:
        i = args.index("--ptrain")
        PTRAIN = os.path.abspath(args[i + 1])
        del args[i:i + 2]
    if "--fortunes" in args:
        FORTUNES = True
        args.remove("--fortunes")
    unittest.main(argv=[sys.argv[0]] + args)
