"""Checks `ptrain convert --to-hf` from the outside, for GPT-2 and Llama tiny models.

For each model: a fresh initialised checkpoint (`convert --init --to`), exported to HF (`convert
--from CKPT --to-hf`), is read with a small pure-Python safetensors parser (json + numpy; torch 1.13
has no safetensors) and every tensor name, shape and dtype is checked against config.json as
transformers would lay the model out. Then HF -> checkpoint -> HF must reproduce the file's values
exactly, and an HF directory whose config.json disagrees with the job must be refused (exit 2).

Run by ctest with Debian's /usr/bin/python3 (python3-torch, python3-numpy; scripts/setup.sh).
"""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover - environment problem, reported clearly
    sys.exit(f"check_hf_export.py needs numpy and torch in {sys.executable} ({e}); "
             "install python3-torch python3-numpy (scripts/setup.sh does)")

PTRAIN = ""

JOBS = {
    "gpt2": """\
name: hf-gpt2
backend: cpu
model: {arch: gpt2, layers: 2, hidden: 32, heads: 4, vocab: 100, seq_len: 16}
parallel: {tp: 1, pp: 1}
train: {steps: 1, global_batch: 2, micro_batch: 1, precision: fp32, seed: 7}
data: {format: synthetic}
cluster: {nodes: 1, gpus_per_node: 1, gpu: cpu}
""",
    # tp 2 pads the vocabulary to 100 rows; the export must drop the padding row.
    "llama": """\
name: hf-llama
backend: cpu
model: {arch: llama, layers: 2, hidden: 32, heads: 4, kv_heads: 2, ffn_hidden: 64, vocab: 99, seq_len: 16}
parallel: {tp: 2, pp: 1}
train: {steps: 1, global_batch: 2, micro_batch: 1, precision: fp32, seed: 7}
data: {format: synthetic}
cluster: {nodes: 1, gpus_per_node: 2, gpu: cpu}
""",
    "llama-tied": """\
name: hf-llama-tied
backend: cpu
model: {arch: llama, layers: 1, hidden: 32, heads: 4, ffn_hidden: 48, vocab: 64, seq_len: 16,
        tie_embeddings: true}
parallel: {tp: 1, pp: 1}
train: {steps: 1, global_batch: 2, micro_batch: 1, precision: fp32, seed: 7}
data: {format: synthetic}
cluster: {nodes: 1, gpus_per_node: 1, gpu: cpu}
""",
}

NUMPY_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
                "U8": "u1", "BOOL": "?"}


def read_safetensors(path):
    """name -> (dtype string, numpy array); metadata. Checks the layout the format demands."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert 8 + n <= len(raw), "header runs past the end"
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    assert (8 + n) % 8 == 0, "data section is not 8-byte aligned"
    metadata = header.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors, end = {}, 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, stop = info["data_offsets"]
        assert begin == end, f"{name}: hole or overlap at {begin}"
        end = stop
        dtype = info["dtype"]
        if dtype == "BF16":
            words = np.frombuffer(data[begin:stop], dtype="<u2").astype(np.uint32) << 16
            array = words.view(np.float32)
        else:
            array = np.frombuffer(data[begin:stop], dtype=NUMPY_DTYPES[dtype])
        tensors[name] = (dtype, array.reshape(info["shape"]))
    assert end == len(data), "bytes after the last tensor"
    return tensors, metadata


def expected_shapes(cfg):
    """The state dict transformers' GPT2LMHeadModel / LlamaForCausalLM would load, name -> shape."""
    shapes = {}
    if cfg["model_type"] == "gpt2":
        h, f, v = cfg["n_embd"], cfg.get("n_inner") or 4 * cfg["n_embd"], cfg["vocab_size"]
        shapes["wte.weight"] = [v, h]
        shapes["wpe.weight"] = [cfg["n_positions"], h]
        for i in range(cfg["n_layer"]):
            p = f"h.{i}."
            shapes.update({p + "ln_1.weight": [h], p + "ln_1.bias": [h],
                           p + "attn.c_attn.weight": [h, 3 * h], p + "attn.c_attn.bias": [3 * h],
                           p + "attn.c_proj.weight": [h, h], p + "attn.c_proj.bias": [h],
                           p + "ln_2.weight": [h], p + "ln_2.bias": [h],
                           p + "mlp.c_fc.weight": [h, f], p + "mlp.c_fc.bias": [f],
                           p + "mlp.c_proj.weight": [f, h], p + "mlp.c_proj.bias": [h]})
        shapes["ln_f.weight"] = [h]
        shapes["ln_f.bias"] = [h]
        return shapes
    assert cfg["model_type"] == "llama", cfg["model_type"]
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = h // heads
    shapes["model.embed_tokens.weight"] = [v, h]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
                       p + "self_attn.q_proj.weight": [heads * d, h], p + "self_attn.k_proj.weight": [kv * d, h],
                       p + "self_attn.v_proj.weight": [kv * d, h], p + "self_attn.o_proj.weight": [h, heads * d],
                       p + "mlp.gate_proj.weight": [f, h], p + "mlp.up_proj.weight": [f, h],
                       p + "mlp.down_proj.weight": [h, f]})
    shapes["model.norm.weight"] = [h]
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = [v, h]
    return shapes


def ptrain(*args):
    return subprocess.run([PTRAIN, *args], capture_output=True, text=True, timeout=120)


class HfExport(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ptrain-hf-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def convert(self, job, *args, expect=0):
        r = ptrain("convert", job, *args)
        self.assertEqual(r.returncode, expect, f"ptrain convert {' '.join(args)}:\n{r.stdout}\n{r.stderr}")
        return r

    def export(self, arch):
        job = self.path(arch + ".yaml")
        with open(job, "w") as f:
            f.write(JOBS[arch])
        self.convert(job, "--init", "--to", self.path("ckpt"))
        self.assertTrue(os.path.isfile(self.path("ckpt", "step_0", "manifest.json")))
        r = self.convert(job, "--from", self.path("ckpt"), "--to-hf", self.path("hf"))
        self.assertIn("model.safetensors", r.stdout)
        return job

    def check_layout(self, arch):
        job = self.export(arch)
        with open(self.path("hf", "config.json")) as f:
            cfg = json.load(f)
        tensors, metadata = read_safetensors(self.path("hf", "model.safetensors"))
        self.assertEqual(metadata.get("format"), "pt")  # transformers refuses files without it
        want = expected_shapes(cfg)
        self.assertEqual(sorted(tensors), sorted(want))
        for name, (dtype, array) in tensors.items():
            self.assertEqual(dtype, "F32", name)
            self.assertEqual(list(array.shape), want[name], name)
            self.assertTrue(np.isfinite(array).all(), name)
            t = torch.from_numpy(array.copy())
            self.assertEqual(list(t.shape), want[name])
            if name.endswith("norm.weight") or name.endswith("ln_1.weight") or name.endswith("ln_f.weight"):
                self.assertTrue(torch.all(t == 1.0), name)
            if name.endswith(".bias"):
                self.assertTrue(torch.all(t == 0.0), name)
            if array.ndim == 2:
                self.assertGreater(float(t.std()), 0.0, name)  # initialised, not zero-filled
        return job, cfg, tensors

    def round_trip(self, job, tensors):
        self.convert(job, "--from-hf", self.path("hf"), "--to", self.path("ckpt2"))
        self.convert(job, "--from", self.path("ckpt2", "step_0"), "--to-hf", self.path("hf2"))
        again, _ = read_safetensors(self.path("hf2", "model.safetensors"))
        self.assertEqual(sorted(again), sorted(tensors))
        for name in tensors:
            self.assertTrue(np.array_equal(tensors[name][1], again[name][1]), name)

    def test_gpt2(self):
        job, cfg, tensors = self.check_layout("gpt2")
        self.assertEqual(cfg["architectures"], ["GPT2LMHeadModel"])
        self.assertEqual(cfg["activation_function"], "gelu_new")
        self.assertTrue(cfg["tie_word_embeddings"])
        self.assertEqual(cfg["n_ctx"], cfg["n_positions"])
        self.round_trip(job, tensors)

    def test_llama(self):
        job, cfg, tensors = self.check_layout("llama")
        self.assertEqual(cfg["architectures"], ["LlamaForCausalLM"])
        self.assertEqual(cfg["vocab_size"], 99)  # the tp padding row is not exported
        self.assertEqual(cfg["hidden_act"], "silu")
        self.assertFalse(cfg["tie_word_embeddings"])
        self.round_trip(job, tensors)

    def test_llama_tied(self):
        _, cfg, tensors = self.check_layout("llama-tied")
        self.assertTrue(cfg["tie_word_embeddings"])
        self.assertNotIn("lm_head.weight", tensors)

    def test_config_mismatch_is_bad_input(self):
        job = self.export("gpt2")
        cfg_path = self.path("hf", "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["n_embd"] = 64
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        r = self.convert(job, "--from-hf", self.path("hf"), "--to", self.path("bad"), expect=2)
        self.assertIn("n_embd is 64", r.stderr)
        self.assertIn("model.hidden is 32", r.stderr)

    def test_non_finite_weights_are_bad_input(self):
        # A NaN in the HF file is refused at import, naming the tensor, by convert and by a run's
        # checkpoint.load_hf alike (it would end the run at its first step with a non-finite loss).
        job = self.export("gpt2")
        path = self.path("hf", "model.safetensors")
        with open(path, "rb") as f:
            raw = bytearray(f.read())
        (n,) = struct.unpack("<Q", raw[:8])
        at = 8 + n + json.loads(raw[8:8 + n].decode("utf-8"))["ln_f.weight"]["data_offsets"][0] + 4 * 3
        raw[at:at + 4] = struct.pack("<f", float("nan"))
        with open(path, "wb") as f:
            f.write(raw)
        r = self.convert(job, "--from-hf", self.path("hf"), "--to", self.path("nan"), expect=2)
        self.assertIn(path + ": tensor ln_f.weight holds NaN at element 3", r.stderr)
        r = ptrain("run", job, "--set", "checkpoint.load_hf=" + self.path("hf"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(path + ": tensor ln_f.weight holds NaN at element 3", r.stderr)

    def test_an_unwritable_hf_output_is_bad_input(self):
        job = self.export("gpt2")
        a_file = self.path("a-file")
        with open(a_file, "w") as f:
            f.write("x")
        cases = [(a_file, "--to-hf is not a directory"), (os.path.join(a_file, "hf"), "cannot create")]
        if os.geteuid() != 0:  # root writes into read-only directories
            os.mkdir(self.path("read-only"), 0o555)
            cases.append((self.path("read-only"), "--to-hf is not writable"))
        for target, message in cases:
            with self.subTest(target=target):
                r = self.convert(job, "--from", self.path("ckpt"), "--to-hf", target, expect=2)
                self.assertIn(target, r.stderr)
                self.assertIn(message, r.stderr)

    def test_corrupt_checkpoint_is_bad_input(self):
        job = self.export("gpt2")
        rank_file = self.path("ckpt", "step_0", "rank_0.safetensors")
        with open(rank_file, "r+b") as f:
            f.seek(-10, os.SEEK_END)
            byte = f.read(1)
            f.seek(-10, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0xFF]))
        r = self.convert(job, "--from", self.path("ckpt"), "--to-hf", self.path("hf3"), expect=2)
        self.assertIn("rank_0.safetensors", r.stderr)
        self.assertIn("checksum", r.stderr)


    def test_an_export_never_mixes_with_another_into_the_same_directory(self):
        # A 130 MB export and, 0.2 s later, a small one into the same new directory both said "wrote",
        # exit 0: the slower replaced the other's files without --force (the check that the directory
        # held no export ran at the start only). The export is now written aside and moved in at the end,
        # where the check is made again: the big one, held (SIGSTOP) past its start while the small one
        # runs to completion, is refused then, naming the directory, and leaves nothing behind; with
        # --force it replaces the small one's files. Into a directory that already exists alike.
        small = self.path("gpt2.yaml")
        with open(small, "w") as f:
            f.write(JOBS["gpt2"])
        big = self.path("big.yaml")  # 32M parameters: 128 MB of fp32
        with open(big, "w") as f:
            f.write(JOBS["gpt2"].replace("layers: 2, hidden: 32, heads: 4, vocab: 100", "layers: 2, hidden: 512, "
                                         "heads: 4, vocab: 50257"))
        for force, existing in ((False, False), (False, True), (True, False)):
            with self.subTest(force=force, existing=existing):
                out = self.path("out")
                shutil.rmtree(out, ignore_errors=True)
                hf = os.path.join(out, "hf")
                os.makedirs(hf if existing else out)
                watched = hf if existing else out  # where the big export's first file or folder appears
                p = subprocess.Popen([PTRAIN, "convert", big, "--init", "--to-hf", hf] + (["--force"] if force else []),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                try:
                    deadline = time.time() + 60
                    while p.poll() is None and time.time() < deadline and not os.listdir(watched):
                        time.sleep(0.002)
                    p.send_signal(signal.SIGSTOP)
                    if p.poll() is not None or os.path.exists(os.path.join(hf, "model.safetensors")):
                        self.skipTest("the big export finished before it could be held")
                    self.convert(small, "--init", "--to-hf", hf)
                    written = {name: read_bytes(os.path.join(hf, name)) for name in ("model.safetensors", "config.json")}
                    p.send_signal(signal.SIGCONT)
                    _, err = p.communicate(timeout=120)
                finally:
                    p.kill()
                    p.wait()
                self.assertEqual(sorted(os.listdir(out)), ["hf"])  # no temporary folder left
                self.assertEqual(sorted(os.listdir(hf)), ["config.json", "model.safetensors"])
                with open(os.path.join(hf, "config.json")) as f:
                    n_embd = json.load(f)["n_embd"]
                if force:
                    self.assertEqual(p.returncode, 0, err)
                    self.assertEqual(n_embd, 512)
                    continue
                self.assertEqual(p.returncode, 2, err)
                refused = os.path.join(hf, "model.safetensors") if existing else hf
                self.assertIn(refused + ": appeared while this export was written", err)
                self.assertIn("--force", err)
                self.assertEqual(n_embd, 32)
                for name, data in written.items():
                    self.assertEqual(read_bytes(os.path.join(hf, name)), data, name)

    def test_a_failed_export_leaves_nothing_behind(self):
        # A convert that fails after its start (here: a checkpoint that is not there) left the new --to-hf
        # directory it had made.
        job = self.path("gpt2.yaml")
        with open(job, "w") as f:
            f.write(JOBS["gpt2"])
        os.mkdir(self.path("out"))
        os.mkdir(self.path("out", "existing"))
        for target in (self.path("out", "new", "hf"), self.path("out", "existing")):
            with self.subTest(target=target):
                self.convert(job, "--from", self.path("no-checkpoint"), "--to-hf", target, expect=2)
        self.assertEqual(os.listdir(self.path("out")), ["existing"])
        self.assertEqual(os.listdir(self.path("out", "existing")), [])


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.run(sys.modules[__name__])
