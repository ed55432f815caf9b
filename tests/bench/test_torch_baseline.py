"""The GPU benchmark's like-for-like plumbing, on CPU: the token file every implementation reads
(bench/benchmark_tokens.py) decoded here from the formats' definitions and read by ptrain where the
baseline reads it; the PyTorch baseline (bench/torch_baseline.py) on a tiny Llama with its search
records, repetitions and token record; its FP8 linear layer's GEMM plumbing against nn.Linear; and
bench/gpu_benchmark.sh --dry-run end to end, its results file stamped as written. Needs Debian's
python3-torch (1.13: no compile, no SDPA, no float8 there), so CMake runs it with /usr/bin/python3.
    /usr/bin/python3 tests/bench/test_torch_baseline.py --ptrain build/ptrain [-v]"""
import argparse
import glob
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")
PTRAIN = ""
MASK = (1 << 64) - 1

try:
    import torch
except ImportError:
    torch = None


def read(path):
    with open(path, "rb") as f:
        return f.read()


def load(path):
    with open(path) as f:
        return json.load(f)


def splitmix64(seed, i):
    """The i-th output of splitmix64 from state `seed` (Steele, Lea, Flood 2014), written out."""
    z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def generate(out, vocab, count, seed=1234):
    r = subprocess.run([sys.executable, os.path.join(BENCH, "benchmark_tokens.py"), "--vocab", str(vocab),
                        "--count", str(count), "--seed", str(seed), "--out", out], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(r.stderr)
    return json.loads(r.stdout)


def decode_llmc(path):
    """llm.c's shard: 256 int32 (magic 20240520, version 1, n), then n uint16."""
    data = read(path)
    magic, version, n = struct.unpack_from("<3i", data)
    assert (magic, version, len(data)) == (20240520, 1, 1024 + 2 * n), (magic, version, n, len(data))
    return list(struct.unpack_from("<%dH" % n, data, 1024))


def decode_megatron(prefix):
    """Megatron's MMIDIDX index of one int32 sequence, and the .bin it points into."""
    idx = read(prefix + ".idx")
    magic, version, dtype, seqs, docs = idx[:9], *struct.unpack_from("<QBQQ", idx, 9)
    assert (magic, version, dtype, seqs, docs) == (b"MMIDIDX\x00\x00", 1, 4, 1, 2)
    size, pointer, doc0, doc1 = struct.unpack_from("<iqqq", idx, 34)
    assert (pointer, doc0, doc1, len(idx)) == (0, 0, 1, 34 + 4 + 8 + 16)
    data = read(prefix + ".bin")
    assert len(data) == 4 * size
    return list(struct.unpack("<%di" % size, data))


def tiny_job(d, arch_line, data_line):
    path = os.path.join(d, "job.yaml")
    with open(path, "w") as f:
        f.write("name: tokens\nbackend: cpu\nmodel: %s\n"
                "train: {steps: 2, global_batch: 4, micro_batch: 2, precision: fp32, seed: 3}\n"
                "optimizer: {lr: 1.0e-3, warmup_steps: 0}\ndata: %s\n"
                "cluster: {nodes: 1, gpus_per_node: 1, gpu: cpu}\nlogging: {every: 100}\n" % (arch_line, data_line))
    return path


GPT2 = "{arch: gpt2, layers: 1, hidden: 16, heads: 2, vocab: 512, seq_len: 16}"
LLAMA_WIDE = "{arch: llama, layers: 1, hidden: 16, heads: 2, kv_heads: 1, ffn_hidden: 32, vocab: 70000, seq_len: 16}"
T = 16


class TokenFile(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp(prefix="bench-tokens-")
        self.addCleanup(shutil.rmtree, self.d)

    def test_an_llmc_shard_of_uniform_ids_over_the_whole_vocabulary(self):
        desc = generate(os.path.join(self.d, "g.bin"), 50257, 5000)
        ids = decode_llmc(os.path.join(self.d, "g.bin"))
        self.assertEqual(ids, [splitmix64(1234, i) % 50257 for i in range(5000)])
        self.assertGreater(max(ids), 40000)  # not ptrain's synthetic 1,024-id alphabet
        self.assertEqual(desc["format"], "llmc")
        self.assertEqual(desc["sha256"]["g.bin"], hashlib.sha256(read(os.path.join(self.d, "g.bin"))).hexdigest())
        generate(os.path.join(self.d, "again.bin"), 50257, 5000)  # the same file every time
        self.assertEqual(read(os.path.join(self.d, "again.bin")), read(os.path.join(self.d, "g.bin")))

    def test_a_megatron_int32_dataset_past_uint16(self):
        desc = generate(os.path.join(self.d, "l"), 128256, 3000, seed=7)
        ids = decode_megatron(os.path.join(self.d, "l"))
        self.assertEqual(ids, [splitmix64(7, i) % 128256 for i in range(3000)])
        self.assertGreater(max(ids), 65535)
        self.assertEqual(desc["format"], "megatron")

    @unittest.skipIf(torch is None, "no torch here (the reader needs numpy, which Debian's torch brings)")
    def test_the_baseline_cuts_the_samples_ptrain_numbers(self):
        sys.path.insert(0, BENCH)
        import benchmark_tokens
        for path, vocab, decode in ((os.path.join(self.d, "g.bin"), 512, decode_llmc),
                                    (os.path.join(self.d, "l"), 70000, decode_megatron)):
            generate(path, vocab, 200)
            ids = decode(path)
            samples = benchmark_tokens.read_samples(path, T).tolist()
            self.assertEqual(len(samples), (200 - 1) // T)
            for i, sample in enumerate(samples):  # sample i = tokens [i*T, i*T + T]
                self.assertEqual(sample, ids[i * T:i * T + T + 1])

    def test_ptrain_reads_the_files_and_sample_0_where_the_baseline_does(self):
        for name, vocab, model, fmt, width in (("g.bin", 512, GPT2, "llmc", 2), ("l", 70000, LLAMA_WIDE, "megatron", 4)):
            with self.subTest(format=fmt):
                path = os.path.join(self.d, name)
                generate(path, vocab, 40 * T + 1)
                job = tiny_job(self.d, model, "{format: %s, train: %s, shuffle: false}" % (fmt, path))
                r = subprocess.run([PTRAIN, "run", job], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr[-2000:])
                # Token T is sample 0's last target for the baseline; set it out of the vocabulary
                # and ptrain's first step must stop on it, at its byte.
                data_file, offset = (path, 1024 + 2 * T) if fmt == "llmc" else (path + ".bin", 4 * T)
                with open(data_file, "r+b") as f:
                    f.seek(offset)
                    f.write(struct.pack("<H" if fmt == "llmc" else "<i", vocab))
                r = subprocess.run([PTRAIN, "run", job], capture_output=True, text=True)
                self.assertEqual(r.returncode, 2, r.stderr[-2000:])
                self.assertIn("found %d" % vocab, r.stderr)
                self.assertIn(str(offset), r.stderr)


def run_baseline(*flags):
    r = subprocess.run([sys.executable, os.path.join(BENCH, "torch_baseline.py"), "--device", "cpu", *flags],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError("torch_baseline.py %s exited %d:\n%s" % (" ".join(flags), r.returncode, r.stderr[-3000:]))
    return json.loads(r.stdout.strip().splitlines()[-1])


TINY_LLAMA = ["--model", "llama-1b", "--layers", "2", "--hidden", "32", "--heads", "4", "--kv-heads", "2",
              "--ffn", "64", "--vocab", "512", "--seq", "32", "--micro-batch", "2", "--grad-accum", "2"]


@unittest.skipIf(torch is None, "no torch in this python (CMake runs this file with /usr/bin/python3)")
class Baseline(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp(prefix="bench-baseline-")
        self.addCleanup(shutil.rmtree, self.d)
        self.tokens = os.path.join(self.d, "tokens.bin")
        generate(self.tokens, 512, 2000)

    def test_the_search_the_repetitions_and_the_tokens_are_recorded(self):
        out = run_baseline(*TINY_LLAMA, "--warmup", "1", "--steps", "2", "--repeats", "3", "--no-compile",
                           "--tokens", self.tokens)
        self.assertEqual(out["status"], "ok")
        search = out["search"]
        for part in ("attention", "compile", "optimizer"):
            self.assertIn("how", search[part])
        trials = search["attention"]["trials"]
        self.assertGreaterEqual(len(trials), 1)
        for trial in trials:
            self.assertEqual(trial["status"], "ok", trial)
            self.assertEqual(len(trial["step_ms"]), 3)  # --trial-steps
        fastest = min(trials, key=lambda t: t["step_ms_median"])
        self.assertEqual(search["attention"]["attention"], fastest["attention"])
        self.assertEqual(out["features"]["attention"], fastest["attention"])
        self.assertIsNone(search["compile"]["chosen"])  # --no-compile
        self.assertIn("--no-compile", search["compile"]["how"])
        self.assertTrue(search["optimizer"]["chosen"])

        self.assertEqual(len(out["repetitions"]), 3)
        medians = [w["step_ms_median"] for w in out["repetitions"]]
        spread = out["spread"]["step_ms"]
        self.assertEqual(spread["median"], sorted(medians)[1])
        self.assertEqual((spread["min"], spread["max"]), (min(medians), max(medians)))
        self.assertEqual(out["step_ms_median"], spread["median"])
        self.assertAlmostEqual(out["tokens_per_s"], 2 * 2 * 32 / (spread["median"] / 1000))
        self.assertTrue(all(len(w["step_ms"]) == 2 for w in out["repetitions"]))

        tokens = out["tokens"]
        self.assertEqual(tokens["source"], "file")
        self.assertEqual(tokens["first_ids"], decode_llmc(self.tokens)[:8])
        self.assertEqual(tokens["sha256"]["tokens.bin"], hashlib.sha256(read(self.tokens)).hexdigest())

        # The FP8 run repeats these choices: pinned by the flags the benchmark derives from this run.
        with open(os.path.join(self.d, "run.json"), "w") as f:
            json.dump(out, f)
        flags = subprocess.run([sys.executable, os.path.join(BENCH, "gpu_benchmark_report.py"), "pinned-flags",
                                "--run", os.path.join(self.d, "run.json")], capture_output=True, text=True).stdout.split()
        self.assertIn("--optimizer", flags)
        again = run_baseline(*TINY_LLAMA, "--steps", "1", "--repeats", "1", "--tokens", self.tokens, *flags)
        for part in ("compile", "optimizer"):
            self.assertEqual(again["search"][part]["chosen"], search[part]["chosen"], part)

    @unittest.skipIf(torch is not None and hasattr(torch, "float8_e4m3fn"), "this torch has float8: the GPU's test")
    def test_fp8_where_no_float8_path_is_unavailable_and_says_why(self):
        out = run_baseline(*TINY_LLAMA, "--steps", "1", "--repeats", "1", "--tokens", self.tokens, "--fp8")
        self.assertEqual(out["status"], "unavailable")
        self.assertEqual(out["impl"], "pytorch fp8")
        self.assertIn("torchao", out["reason"])
        self.assertIn("float8_e4m3fn", out["reason"])

    def test_fp8_linear_computes_linear_with_gemm_operands_laid_out_for_cublaslt(self):
        sys.path.insert(0, BENCH)
        import torch_fp8
        layouts = []

        def cast(x, scale, fmt):  # no rounding: the plumbing alone
            top = torch_fp8.E4M3_MAX if fmt == "e4m3" else torch_fp8.E5M2_MAX
            self.assertLessEqual(float((x.abs().max() * scale)), top * (1 + 1e-6))  # the amax maps to the top
            return x.float() * scale

        def mm(a, b, inv_a, inv_b, out_dtype, fast):
            layouts.append((a.is_contiguous(), b.t().is_contiguous(), fast))
            return ((a @ b) * inv_a * inv_b).to(out_dtype)

        torch.manual_seed(0)
        ref = torch.nn.Linear(32, 48)
        model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.Linear(48, 7))
        model[0].load_state_dict(ref.state_dict())
        self.assertEqual(torch_fp8.swap_linears(model, torch, {"cast": cast, "mm": mm}, torch.float32), 1)
        self.assertEqual(type(model[1]), torch.nn.Linear)  # 7 is no multiple of 16: kept
        x = torch.randn(3, 5, 32)
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        grad = torch.randn(3, 5, 48)
        model[0](x1).backward(grad)
        ref(x2).backward(grad)
        self.assertEqual(layouts, [(True, True, True), (True, True, False), (True, True, False)])
        for mine, theirs in ((x1.grad, x2.grad), (model[0].weight.grad, ref.weight.grad), (model[0].bias.grad, ref.bias.grad)):
            self.assertTrue(torch.allclose(mine, theirs, rtol=1e-5, atol=1e-5))


@unittest.skipIf(torch is None, "no torch in this python (CMake runs this file with /usr/bin/python3)")
class Search(unittest.TestCase):
    """torch_search.Session's compile and optimizer searches, with a stand-in for torch.compile
    (torch 1.13 has none): a mode whose first step outlasts the budget is recorded, not kept."""

    def test_a_compile_mode_past_its_budget_is_recorded_and_the_other_kept(self):
        sys.path.insert(0, BENCH)
        import torch_baseline as tb
        import torch_search
        from torch_models import Attention, build_model
        compiled = []

        def fake_compile(target, mode=None):
            compiled.append(mode)
            first = [True]

            def run(*a):
                if mode == "slow" and first[0]:
                    first[0] = False
                    time.sleep(60)  # the alarm (4 s) interrupts it
                return target(*a)
            return run

        class TorchWithCompile:
            compile = staticmethod(fake_compile)
            _dynamo = argparse.Namespace(reset=lambda: compiled.append("reset"))

            def __getattr__(self, name):
                return getattr(torch, name)

        sizes = argparse.Namespace(layers=1, hidden=16, heads=2, kv_heads=None, ffn=None, vocab=64, seq=8)
        cfg = tb.apply_overrides(tb.MODELS["gpt2-124m"], sizes)
        model = build_model(cfg, torch, Attention("manual"))
        data = tb.TokenBatches(torch, torch.device("cpu"), 2, 8, None, 64, 0, 8)
        groups = [{"params": list(model.parameters()), "weight_decay": 0.0}]
        args = argparse.Namespace(device="cpu", dtype="fp32", grad_accum=1, trial_warmup=0, trial_steps=2, warmup=1,
                                  no_compile=False, compile_budget_s=4)
        session = torch_search.Session(TorchWithCompile(), model, cfg, Attention("manual"), data, args, groups,
                                       {"lr": 1e-3})
        found = session.choose_compile(["default", "slow"], "")
        self.assertEqual([t["status"] for t in found["trials"]], ["ok", "budget exceeded"])
        self.assertIn("--compile-budget-s", found["trials"][1]["reason"])
        self.assertEqual(found["chosen"], "default")
        self.assertEqual(compiled, ["reset", "default", "reset", "slow", "reset", "default"])  # the winner again
        self.assertIn("recompiled", found["how"])

        found = session.choose_optimizer(None)
        self.assertEqual([t["option"] for t in found["trials"]], ["foreach AdamW", "foreach AdamW, clip + step compiled"])
        self.assertEqual(found["chosen"], min(found["trials"], key=lambda t: t["step_ms_median"])["option"])
        self.assertEqual(set(groups[0]), {"params", "weight_decay"})  # each optimizer got its own groups
        # --optimizer pins one (as gpu_benchmark_report.py pinned-flags does for the FP8 run).
        self.assertEqual(session.choose_optimizer("eager")["chosen"], "foreach AdamW")
        self.assertEqual(session.choose_optimizer("compiled")["chosen"], "foreach AdamW, clip + step compiled")


@unittest.skipIf(torch is None, "no torch in this python (CMake runs this file with /usr/bin/python3)")
class DryRun(unittest.TestCase):
    def test_the_benchmark_rehearses_every_row_and_stamps_its_results(self):
        d = tempfile.mkdtemp(prefix="bench-dry-")
        self.addCleanup(shutil.rmtree, d)
        env = dict(os.environ, PTRAIN=PTRAIN, PYTHON=sys.executable, TMPDIR=d)
        r = subprocess.run(["bash", os.path.join(BENCH, "gpu_benchmark.sh"), "--dry-run", "--models", "llama-1b",
                            "--repeats", "2", "--steps", "1", "--warmup", "1", "--results-dir", d],
                           capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        results = glob.glob(os.path.join(d, "*-cpu-dry-run.json"))
        self.assertEqual(len(results), 1)
        check = subprocess.run([sys.executable, os.path.join(BENCH, "results.py"), "--check", results[0]],
                               capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        doc = load(results[0])
        for name in ("gpt2_over_pytorch_best", "llama_over_pytorch_best", "gpt2_over_llmc_best", "llama_fp8_over_bf16"):
            self.assertLessEqual({"value", "goal"}, set(doc["goals"][name]), name)
        self.assertIn("llama-1b", doc["goals"]["pytorch_best"])
        rows = {row["impl"]: row for row in doc["runs"]}
        self.assertEqual(set(rows), {"ptrain", "pytorch", "ptrain fp8", "pytorch fp8"})
        for impl in ("ptrain", "pytorch"):
            self.assertEqual(rows[impl]["status"], "ok", rows[impl].get("reason"))
            self.assertEqual(len(rows[impl]["repetitions"]), 2)
            spread = rows[impl]["spread"]["tokens_per_s"]
            self.assertLessEqual(spread["min"], spread["median"])
            self.assertLessEqual(spread["median"], spread["max"])
        # One token file for both: ptrain's record is the file's description, the baseline hashed what it read.
        self.assertEqual(rows["ptrain"]["tokens"]["sha256"], rows["pytorch"]["tokens"]["sha256"])
        self.assertIn("data.format=llmc", rows["ptrain"]["overrides"])
        self.assertIsNotNone(doc["goals"]["llama_over_pytorch_best"]["value"])
        if rows["ptrain fp8"]["status"] != "ok":  # a ptrain without FP8: the goal is empty, and says why
            self.assertIsNone(doc["goals"]["llama_fp8_over_bf16"]["value"])
            self.assertIn("ptrain fp8", doc["goals"]["llama_fp8_over_bf16"]["reason"])
        self.assertIn("reason", doc["goals"]["gpt2_over_pytorch_best"])  # not asked for: says why it is empty

        doc["derived"]["later"] = 1.0  # a figure worked out afterwards: allowed there
        doc["runs"][0]["tokens_per_s"] = 1.0  # an edited measurement: not
        for edit, expected in (({"derived": doc["derived"]}, 0), ({"runs": doc["runs"]}, 1)):
            edited = load(results[0])
            edited.update(edit)
            path = os.path.join(d, "edited.json")
            with open(path, "w") as f:
                json.dump(edited, f)
            check = subprocess.run([sys.executable, os.path.join(BENCH, "results.py"), "--check", path],
                                   capture_output=True, text=True)
            self.assertEqual(check.returncode, expected, check.stdout)

    def test_the_fp8_goals_job_is_timed_and_trained_on_text_in_both_precisions(self):
        # The Llama 3 8B slice (tiny here): bf16 and fp8 timed, then the loss runs on one token file:
        # the dry run's own (the timed runs'), or llm.c shards named as the GPU run names data/tiny's
        # (ids below the dry run's vocabulary here); without text the loss rows say why.
        text = tempfile.mkdtemp(prefix="bench-text-")
        self.addCleanup(shutil.rmtree, text)
        sys.path.insert(0, BENCH)
        import benchmark_tokens
        for name, count, seed in (("train_000000.bin", 6 * 128 + 1, 1), ("train_000001.bin", 5 * 128 + 1, 2),
                                  ("val.bin", 300, 3)):
            benchmark_tokens.write(os.path.join(text, name), 512, count, seed)
        for loss_data, ran in ((None, True), (os.path.join(text, "train_*.bin"), True), ("/nonexistent/train_*.bin", False)):
            with self.subTest(loss_data=loss_data):
                d = tempfile.mkdtemp(prefix="bench-fp8-")
                self.addCleanup(shutil.rmtree, d)
                env = dict(os.environ, PTRAIN=PTRAIN, PYTHON=sys.executable, TMPDIR=d)
                if loss_data:
                    env.update(FP8_LOSS_DATA=loss_data, FP8_LOSS_VALID=os.path.join(text, "val.bin"))
                r = subprocess.run(["bash", os.path.join(BENCH, "gpu_benchmark.sh"), "--dry-run", "--models",
                                    "llama3-8b-slice", "--skip", "torch,llmc", "--repeats", "2", "--steps", "1",
                                    "--warmup", "1", "--results-dir", d], capture_output=True, text=True, env=env)
                self.assertEqual(r.returncode, 0, r.stderr[-3000:])
                doc = load(glob.glob(os.path.join(d, "*-cpu-dry-run.json"))[0])
                rows = {row["impl"]: row for row in doc["runs"]}
                self.assertEqual(set(rows), {"ptrain", "ptrain fp8", "ptrain text", "ptrain fp8 text"})
                speed = doc["goals"]["llama_fp8_over_bf16"]
                self.assertAlmostEqual(speed["value"], rows["ptrain fp8"]["tokens_per_s"] / rows["ptrain"]["tokens_per_s"])
                loss = doc["goals"]["llama_fp8_loss_vs_bf16"]
                if not ran:
                    for impl in ("ptrain text", "ptrain fp8 text"):
                        self.assertIn("no text for the loss runs", rows[impl]["reason"])
                    self.assertIsNone(loss["value"])
                    self.assertIn("no text for the loss runs", loss["reason"])
                    continue
                for impl in ("ptrain text", "ptrain fp8 text"):
                    self.assertEqual(len(rows[impl]["losses"]), 12)  # FP8_LOSS_STEPS in a dry run
                    self.assertEqual(len(rows[impl]["repetitions"]), 1)
                    self.assertEqual((rows[impl]["micro_batch"], rows[impl]["grad_accum"]), (1, 1))  # a sequence a step
                    self.assertIn("val_loss", rows[impl])  # at the last step
                self.assertIn("train.fp8.scaling=current", rows["ptrain fp8 text"]["overrides"])
                self.assertNotIn("train.fp8.scaling=current", rows["ptrain text"]["overrides"])
                means = [sum(rows[i]["losses"][-10:]) / 10 for i in ("ptrain fp8 text", "ptrain text")]
                self.assertAlmostEqual(loss["value"], means[0] / means[1] - 1)
                self.assertTrue(loss["curves_differ"])  # FP8's quantisation is real
                self.assertAlmostEqual(loss["validation"]["value"],
                                       rows["ptrain fp8 text"]["val_loss"] / rows["ptrain text"]["val_loss"] - 1)
                if loss_data:  # the shards hold 6 + 5 sequences of 128: an epoch is 11 of the 12 steps
                    self.assertIn("data.train=" + loss_data, rows["ptrain text"]["overrides"])
                    self.assertEqual([f["tokens"] for f in rows["ptrain text"]["tokens"]["files"]], [769, 641])
                    self.assertAlmostEqual(loss["epochs"], 12 / 11)
                    first = [sum(rows[i]["losses"][1:11]) / 10 for i in ("ptrain fp8 text", "ptrain text")]
                    self.assertAlmostEqual(loss["first_epoch_last_10"]["value"], first[0] / first[1] - 1)

    def test_past_its_deadline_a_run_is_recorded_as_not_run(self):
        d = tempfile.mkdtemp(prefix="bench-deadline-")
        self.addCleanup(shutil.rmtree, d)
        env = dict(os.environ, PTRAIN=PTRAIN, PYTHON=sys.executable, TMPDIR=d)
        r = subprocess.run(["bash", os.path.join(BENCH, "gpu_benchmark.sh"), "--dry-run", "--models", "llama-1b",
                            "--deadline-s", "1", "--results-dir", d], capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 1, r.stderr[-3000:])  # the PyTorch baseline asked for did not run
        rows = {row["impl"]: row for row in load(glob.glob(os.path.join(d, "*-cpu-dry-run.json"))[0])["runs"]}
        for impl in ("ptrain", "pytorch", "pytorch fp8"):
            self.assertIn("no time left (--deadline-s 1)", rows[impl]["reason"], impl)

    def test_bad_arguments_exit_2_before_anything_is_written(self):
        d = tempfile.mkdtemp(prefix="bench-args-")
        self.addCleanup(shutil.rmtree, d)
        for args in (["--repeats", "0"], ["--steps", "x"], ["--deadline-s", "-1"], ["--models", "gpt3"], ["--frobnicate"]):
            with self.subTest(args=args):
                r = subprocess.run(["bash", os.path.join(BENCH, "gpu_benchmark.sh"), "--dry-run", *args],
                                   capture_output=True, text=True, env=dict(os.environ, TMPDIR=d))
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("error:", r.stderr)
                self.assertEqual(os.listdir(d), [])


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.run(sys.modules[__name__])
