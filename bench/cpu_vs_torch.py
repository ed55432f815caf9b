"""One training step of a small GPT-2 and Llama, ptrain vs PyTorch 1.13 on CPU.

Same shapes, fp32, same number of threads, same work per step (forward, backward over
`microbatches` microbatches, global-norm clipping, AdamW). ptrain is timed by its own per-step
wall time (metrics JSONL, `step_s`), PyTorch by wall time around the same step; both report the
median of the steps after a warm-up. Prints a table and writes bench/results/cpu-<date>.json.

  /usr/bin/python3 bench/cpu_vs_torch.py --ptrain build/ptrain [--threads 2] [--steps 12]
"""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import tempfile
import time

import torch

SHAPES = {
    "gpt2": dict(arch="gpt2", layers=4, hidden=256, heads=4, kv_heads=4, ffn_hidden=1024, vocab=8192, seq_len=256),
    "llama": dict(arch="llama", layers=4, hidden=256, heads=8, kv_heads=2, ffn_hidden=688, vocab=8192, seq_len=256),
}
MICRO_BATCH, MICROBATCHES = 4, 2


class Block(torch.nn.Module):
    def __init__(self, s):
        super().__init__()
        h, self.heads, self.kv, self.gpt2 = s["hidden"], s["heads"], s["kv_heads"], s["arch"] == "gpt2"
        d = h // self.heads
        bias = self.gpt2
        self.n1 = torch.nn.LayerNorm(h) if self.gpt2 else RMSNorm(h)
        self.n2 = torch.nn.LayerNorm(h) if self.gpt2 else RMSNorm(h)
        self.q = torch.nn.Linear(h, self.heads * d, bias=bias)
        self.k = torch.nn.Linear(h, self.kv * d, bias=bias)
        self.v = torch.nn.Linear(h, self.kv * d, bias=bias)
        self.o = torch.nn.Linear(h, h, bias=bias)
        self.up = torch.nn.Linear(h, s["ffn_hidden"], bias=bias)
        self.gate = None if self.gpt2 else torch.nn.Linear(h, s["ffn_hidden"], bias=False)
        self.down = torch.nn.Linear(s["ffn_hidden"], h, bias=bias)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        d = C // self.heads
        h = self.n1(x)
        q = self.q(h).view(B, T, self.heads, d).transpose(1, 2)
        k = self.k(h).view(B, T, self.kv, d).transpose(1, 2)
        v = self.v(h).view(B, T, self.kv, d).transpose(1, 2)
        if not self.gpt2:
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k = k.repeat_interleave(self.heads // self.kv, dim=1)
            v = v.repeat_interleave(self.heads // self.kv, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1) @ v
        x = x + self.o(att.transpose(1, 2).reshape(B, T, C))
        h = self.n2(x)
        if self.gpt2:
            h = torch.nn.functional.gelu(self.up(h), approximate="tanh")
        else:
            h = torch.nn.functional.silu(self.gate(h)) * self.up(h)
        return x + self.down(h)


class RMSNorm(torch.nn.Module):
    def __init__(self, h):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(h))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Model(torch.nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s
        self.wte = torch.nn.Embedding(s["vocab"], s["hidden"])
        self.wpe = torch.nn.Embedding(s["seq_len"], s["hidden"]) if s["arch"] == "gpt2" else None
        self.blocks = torch.nn.ModuleList(Block(s) for _ in range(s["layers"]))
        self.norm = torch.nn.LayerNorm(s["hidden"]) if s["arch"] == "gpt2" else RMSNorm(s["hidden"])
        self.head = None if s["arch"] == "gpt2" else torch.nn.Linear(s["hidden"], s["vocab"], bias=False)
        T, d = s["seq_len"], s["hidden"] // s["heads"]
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        emb = torch.cat([torch.outer(torch.arange(T).float(), inv)] * 2, dim=-1)
        self.cos, self.sin = emb.cos()[None, None], emb.sin()[None, None]
        self.mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)

    def forward(self, tokens, targets):
        x = self.wte(tokens)
        if self.wpe is not None:
            x = x + self.wpe.weight[None, : tokens.shape[1]]
        for b in self.blocks:
            x = b(x, self.cos, self.sin, self.mask)
        x = self.norm(x)
        logits = x @ self.wte.weight.T if self.head is None else self.head(x)
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def torch_step_seconds(s, steps, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Model(s)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), foreach=True)
    times = []
    for _ in range(steps):
        batches = [(torch.randint(0, s["vocab"], (MICRO_BATCH, s["seq_len"])),
                    torch.randint(0, s["vocab"], (MICRO_BATCH, s["seq_len"]))) for _ in range(MICROBATCHES)]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for x, y in batches:
            (model(x, y) / MICROBATCHES).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[2:])


def ptrain_step_seconds(ptrain, s, steps, threads, precision="fp32", fp8_scaling="delayed"):
    with tempfile.TemporaryDirectory() as d:
        job = os.path.join(d, "job.yaml")
        fp8 = f", fp8: {{scaling: {fp8_scaling}}}" if precision == "fp8" else ""  # older binaries know no train.fp8
        with open(job, "w") as f:
            f.write(f"""name: bench-{s['arch']}
backend: cpu
model: {{arch: {s['arch']}, layers: {s['layers']}, hidden: {s['hidden']}, heads: {s['heads']},
        kv_heads: {s['kv_heads']}, ffn_hidden: {s['ffn_hidden']}, vocab: {s['vocab']}, seq_len: {s['seq_len']}}}
train: {{steps: {steps}, global_batch: {MICRO_BATCH * MICROBATCHES}, micro_batch: {MICRO_BATCH}, precision: {precision}{fp8}}}
optimizer: {{lr: 1.0e-3}}
data: {{format: synthetic}}
cluster: {{nodes: 1, gpus_per_node: 1, gpu: cpu}}
logging: {{every: 1000, metrics: {d}/metrics.jsonl}}
""")
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        subprocess.run([ptrain, "run", job], check=True, env=env, capture_output=True)
        with open(os.path.join(d, "metrics.jsonl")) as f:
            times = [json.loads(line)["step_s"] for line in f]
    return statistics.median(times[2:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptrain", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for name, s in SHAPES.items():
        pt = ptrain_step_seconds(args.ptrain, s, args.steps, args.threads)
        th = torch_step_seconds(s, args.steps, args.threads)
        tokens = MICRO_BATCH * MICROBATCHES * s["seq_len"]
        rows.append({"model": name, "shape": s, "tokens_per_step": tokens, "ptrain_step_s": pt, "torch_step_s": th,
                     "speedup": th / pt})
        print(f"{name:6s} ptrain {pt * 1e3:8.1f} ms/step ({tokens / pt:8.0f} tok/s)   torch {torch.__version__} "
              f"{th * 1e3:8.1f} ms/step ({tokens / th:8.0f} tok/s)   ptrain is {th / pt:.2f}x", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {"date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
              "cpus": os.cpu_count(), "threads": args.threads, "torch": torch.__version__, "commit": commit,
              "rows": rows}
    out = args.out or os.path.join(os.path.dirname(__file__), "results",
                                   f"{result['date']}-cpu-vs-torch.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print("wrote", out)


if __name__ == "__main__":
    main()
