"""PyTorch baselines for the GPU benchmark, at PyTorch's best: a nanoGPT GPT-2 and a TorchTitan Llama.

What it trains is what the nanoGPT / build-nanogpt loop trains on one GPU (bench/torch_models.py):
  - GPT-2 (nanoGPT): pre-LayerNorm blocks with biases, GELU (tanh approximation), learned position
    embeddings, LM head tied to the token embedding, vocabulary padded to 50304.
  - Llama (TorchTitan llama3): RMSNorm, rotate-half RoPE (theta 500000), SwiGLU MLP, grouped-query
    attention, untied output head.
  - fp32 parameters with bf16 autocast (nanoGPT's mixed precision; AdamW keeps fp32 states),
    F.scaled_dot_product_attention(is_causal=True), AdamW with nanoGPT's decay grouping (2-D tensors
    decayed), gradient clipping at 1.0, gradient accumulation over --grad-accum microbatches, TF32.
  - --fp8: TorchTitan's float8 recipe on the linear layers (bench/torch_fp8.py: torchao where it is
    installed, else torch._scaled_mm; where neither is, the JSON says so, status "unavailable").

How it runs at its best (bench/torch_search.py; every trial recorded under "search"): each SDPA
backend offered for the shape (flash, cuDNN, memory-efficient; GQA by SDPA's enable_gqa where the
backend takes it, else repeat_kv), torch.compile's default and max-autotune-no-cudagraphs modes,
fused AdamW against a compiled foreach step: the fastest of each kept. --sdpa, --compile-modes and
--optimizer pin a choice instead.

Tokens: --tokens FILE reads bench/benchmark_tokens.py's file (the ids ptrain and llm.c read), sample
i = tokens [i*T, i*T + T], in file order from sample 0 as ptrain reads it with data.shuffle: false;
without it, uniformly random ids below the real vocabulary.

Timing: after the search, from the first sample again, --warmup untimed steps, then --repeats
windows of --steps steps, each step timed with CUDA events and a synchronize; per window the
median, and the run's figure is the median of the windows' medians (spread: their min and max).

Prints one JSON object (also to --json-out): tokens/s, step ms, repetitions, the search, peak
memory, N, MFU by llm.c's and by TorchTitan's formula (see flops_per_token below) against
--peak-flops (989e12: H100 SXM dense bf16).

  python3 bench/torch_baseline.py --model gpt2-124m --micro-batch 32 --grad-accum 2 --tokens T.bin
  python3 bench/torch_baseline.py --model llama-1b --micro-batch 2 --grad-accum 4 --tokens T
  python3 bench/torch_baseline.py --model gpt2-124m --describe       # counts and FLOPs only, no torch

Runs on PyTorch 2.x on CUDA (the benchmark) and on Debian's PyTorch 1.13 on CPU (the plumbing dry
run: no torch.compile, no fused AdamW, no SDPA there -> manual causal attention, no float8; each
fallback is reported in the JSON, under "features" and "search").
"""
import argparse
import json
import os
import platform
import resource
import statistics
import sys

import benchmark_tokens
import torch_fp8
import torch_search
from torch_models import Attention, build_model

MODELS = {
    # GPT-2 small as nanoGPT / llm.c train it: 124,475,904 parameters with the padded vocabulary.
    "gpt2-124m": dict(arch="gpt2", layers=12, hidden=768, heads=12, kv_heads=12, ffn=3072,
                      vocab=50304, seq=1024, norm_eps=1e-5, rope_theta=0.0),
    # A Llama-3-style ~1.25B model: Llama 3.2 1B's width/depth/heads/GQA/vocabulary, with an untied
    # head and ffn 5632 (instead of 8192) so that N = 1.247e9 stays in the 1.0-1.3B range.
    "llama-1b": dict(arch="llama", layers=16, hidden=2048, heads=32, kv_heads=8, ffn=5632,
                     vocab=128256, seq=4096, norm_eps=1e-5, rope_theta=500000.0),
    # Llama 3 8B's layer, sequence and vocabulary with 10 of its 32 layers (bench/jobs/llama3-8b-slice-h100.yaml:
    # as many as fit one H100 under ptrain's bf16 and fp8): the FP8 goal's job.
    "llama3-8b-slice": dict(arch="llama", layers=10, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                            vocab=128256, seq=8192, norm_eps=1e-5, rope_theta=500000.0),
}
DATA_VOCAB = {"gpt2-124m": 50257}  # tokens are drawn below the real vocabulary (the rest is padding)
H100_SXM_BF16_PEAK = 989e12


# ----------------------------------------------------------------------------- counts and FLOPs
def param_counts(cfg):
    """(all parameters, embedding-table parameters), counted like model.parameters() does (a tied
    weight once). Checked against the built model in main()."""
    C, L, V, T, F = cfg["hidden"], cfg["layers"], cfg["vocab"], cfg["seq"], cfg["ffn"]
    d = C // cfg["heads"]
    if cfg["arch"] == "gpt2":
        per_layer = (2 * C                      # ln_1 weight, bias
                     + C * 3 * C + 3 * C        # c_attn
                     + C * C + C                # attn c_proj
                     + 2 * C                    # ln_2
                     + C * F + F                # c_fc
                     + F * C + C)               # mlp c_proj
        embedding = V * C + T * C               # wte (tied with the head) + wpe
        total = embedding + L * per_layer + 2 * C
    else:
        per_layer = (C                                              # attention_norm
                     + C * cfg["heads"] * d + 2 * C * cfg["kv_heads"] * d + cfg["heads"] * d * C
                     + C                                            # ffn_norm
                     + 3 * C * F)                                   # w1, w2, w3
        embedding = V * C                                           # tok_embeddings
        total = embedding + L * per_layer + C + V * C               # + norm + output (untied)
    return total, embedding


def flops_per_token(cfg, seq=None):
    """Model FLOPs per trained token (forward + backward), two conventions:

    llm.c: karpathy/llm.c train_gpt2.cu, gpt2_estimate_mfu():
        size_t N = model->num_parameters;   // ALL parameters (padded wte, wpe, norms, biases)
        flops_per_token = 6 * N + 6 * L * C * T
      (the attention term 6*L*C*T counts the causal half of QK^T and AV.)
    TorchTitan: pytorch/torchtitan torchtitan/models/llama3/model/args.py get_nparams_and_flops()
      (now torchtitan/models/utils.py get_dense_model_nparams_and_flops()):
        nparams_embedding = params of the model's nn.Embedding children
        num_flops_per_token = 6 * (nparams - nparams_embedding) + 12 * l * h * q * t
      with h heads, q = dim // heads, t = seq_len (full, not causal-halved, attention).
      Here the embedding tables are the token embedding and, for GPT-2, the position embedding;
      GPT-2's tied head therefore drops out of TorchTitan's N (as it does in TorchTitan with
      enable_weight_tying), which makes its GPT-2 number the lower of the two.
    """
    T = seq or cfg["seq"]
    L, C, H = cfg["layers"], cfg["hidden"], cfg["heads"]
    q = C // H
    n_all, n_emb = param_counts(cfg)
    return {
        "n_params": n_all,
        "n_params_embedding": n_emb,
        "llmc": 6 * n_all + 6 * L * C * T,
        "torchtitan": 6 * (n_all - n_emb) + 12 * L * H * q * T,
    }


def apply_overrides(cfg, args):
    cfg = dict(cfg)
    for key in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq"):
        value = getattr(args, key, None)
        if value is not None:
            cfg[key] = value
    if cfg["arch"] == "gpt2":
        cfg["kv_heads"] = cfg["heads"]                      # GPT-2 has no GQA
        if args.hidden is not None and args.ffn is None:
            cfg["ffn"] = 4 * cfg["hidden"]                  # ptrain's gpt2 default as well
    if cfg["hidden"] % cfg["heads"] or cfg["heads"] % cfg["kv_heads"]:
        raise SystemExit("error: hidden must be divisible by heads and heads by kv_heads")
    return cfg



# ----------------------------------------------------------------------------- data
class TokenBatches:
    """Microbatches [micro_batch, T] of inputs and targets, sample after sample from position 0:
    the samples of the token file in file order (positions past the end wrap, as ptrain's epochs
    do), or random ones. Held in host memory (pinned on CUDA) and copied per microbatch."""

    def __init__(self, torch, device, micro_batch, seq, path, random_vocab, seed, samples_if_random):
        if path:
            self.samples = torch.from_numpy(benchmark_tokens.read_samples(path, seq))
        else:
            gen = torch.Generator().manual_seed(seed)
            self.samples = torch.randint(0, random_vocab, (samples_if_random, seq + 1), generator=gen)
        if device.type == "cuda":
            self.samples = self.samples.pin_memory()
        self.torch, self.device, self.micro_batch, self.position = torch, device, micro_batch, 0

    def rewind(self):
        self.position = 0

    def next(self):
        n, first = len(self.samples), self.position % len(self.samples)
        rows = (self.samples[first:first + self.micro_batch] if first + self.micro_batch <= n else
                self.samples[(first + self.torch.arange(self.micro_batch)) % n])
        self.position += self.micro_batch
        batch = rows.to(self.device, non_blocking=True)
        return batch[:, :-1].contiguous(), batch[:, 1:].contiguous()


def token_record(path, data_vocab, batches):
    if not path:
        return {"source": "random", "ids_uniform_below": data_vocab, "first_ids": batches.samples[0, :8].tolist()}
    files = [path] if os.path.exists(path) and not os.path.exists(path + ".idx") else [path + ".idx", path + ".bin"]
    return {"source": "file", "path": path, "sha256": {os.path.basename(f): benchmark_tokens.file_sha256(f) for f in files},
            "samples": len(batches.samples), "first_ids": batches.samples[0, :8].tolist(),
            "order": "file order from sample 0 (ptrain's with data.shuffle: false)"}


# ----------------------------------------------------------------------------- training
def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="gpt2-124m")
    ap.add_argument("--micro-batch", type=int, default=None, help="sequences per microbatch")
    ap.add_argument("--grad-accum", type=int, default=1, help="microbatches per optimizer step")
    ap.add_argument("--seq", type=int, default=None, help="sequence length (default: the model's)")
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps per repetition")
    ap.add_argument("--repeats", type=int, default=3, help="repetitions (windows of --steps timed steps)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps before a compile trial's timing "
                    "(its first compiles) and before the repetitions")
    ap.add_argument("--trial-steps", type=int, default=3, help="timed steps per search trial")
    ap.add_argument("--trial-warmup", type=int, default=1, help="untimed steps before an eager trial's timing")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--compile-modes", default="default,max-autotune-no-cudagraphs",
                    help="torch.compile modes to try, comma-separated (the fastest kept)")
    ap.add_argument("--compile-budget-s", type=int, default=150,
                    help="a compile trial whose first step takes longer is abandoned (recorded)")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="bf16 = autocast over fp32 params")
    ap.add_argument("--sdpa", choices=["best", "flash", "cudnn", "efficient", "auto"], default="best",
                    help="best: every backend tried, the fastest kept; a name: that backend only (PyTorch's own "
                    "choice, reported, if it cannot run the shape); auto: PyTorch's own choice")
    ap.add_argument("--optimizer", choices=["best", "eager", "compiled"], default="best",
                    help="eager: fused AdamW (foreach where fused is missing); compiled: foreach AdamW with "
                    "clipping and step in one torch.compile; best: the faster")
    ap.add_argument("--tokens", default=None, help="bench/benchmark_tokens.py's file (llm.c shard or Megatron prefix)")
    ap.add_argument("--fp8", action="store_true", help="the linear layers in FP8 (TorchTitan's tensorwise recipe)")
    ap.add_argument("--peak-flops", type=float, default=H100_SXM_BF16_PEAK)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json-out", default=None, help="also write the JSON result here")
    ap.add_argument("--describe", action="store_true", help="print N and FLOPs per token, do not train")
    ap.add_argument("--profile-last-step", action="store_true",
                    help="bracket the last step with cudaProfilerStart/Stop (bench/kernel_profile.sh)")
    for key in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab"):
        ap.add_argument("--" + key.replace("_", "-"), type=int, default=None, help="override (dry runs)")
    args = ap.parse_args()
    if min(args.steps, args.repeats, args.trial_steps) < 1 or min(args.warmup, args.trial_warmup) < 0:
        ap.error("--steps, --repeats and --trial-steps must be >= 1, --warmup and --trial-warmup >= 0")
    if args.tokens and not (os.path.exists(args.tokens) or os.path.exists(args.tokens + ".idx")):
        ap.error("--tokens %s: no such file (nor %s.idx); bench/benchmark_tokens.py writes it" % (args.tokens, args.tokens))
    return args


def emit(result, args):
    text = json.dumps(result)
    print(text)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text + "\n")


def main():
    args = parse_args()
    cfg = apply_overrides(MODELS[args.model], args)
    fpt = flops_per_token(cfg)
    if args.describe:
        data_vocab = min(DATA_VOCAB.get(args.model, cfg["vocab"]), cfg["vocab"])
        print(json.dumps({"model": args.model, "config": cfg, "data_vocab": data_vocab, **fpt}))
        return 0

    import torch

    micro_batch = args.micro_batch or (32 if cfg["arch"] == "gpt2" else 2)
    device = torch.device(args.device)
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but torch.cuda.is_available() is False")
    torch.manual_seed(args.seed)
    if cuda:
        torch.set_float32_matmul_precision("high")  # TF32 for fp32 matmuls, as nanoGPT
    result = {"impl": "pytorch fp8" if args.fp8 else "pytorch", "model": args.model, "config": cfg,
              "torch": torch.__version__}

    choice = Attention("manual")
    model = build_model(cfg, torch, choice).to(device)
    n_built = sum(p.numel() for p in model.parameters())
    n_emb_built = sum(p.numel() for m in model.children() if isinstance(m, torch.nn.Embedding)
                      for p in m.parameters())
    if (n_built, n_emb_built) != (fpt["n_params"], fpt["n_params_embedding"]):
        raise SystemExit("error: parameter count %d/%d differs from the formula's %d/%d"
                         % (n_built, n_emb_built, fpt["n_params"], fpt["n_params_embedding"]))
    features = {"precision": "fp32 params, bf16 autocast" if args.dtype == "bf16" else "fp32"}
    if args.fp8:
        try:
            features["fp8"] = torch_fp8.convert(model, torch, torch.bfloat16 if args.dtype == "bf16" else torch.float32)
        except torch_fp8.FP8Unavailable as e:
            emit({**result, "status": "unavailable", "reason": str(e)}, args)
            return 0

    # nanoGPT's configure_optimizers: decay 2-D tensors, not biases and norms.
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    data_vocab = min(DATA_VOCAB.get(args.model, cfg["vocab"]), cfg["vocab"])
    batches = TokenBatches(torch, device, micro_batch, cfg["seq"], args.tokens, data_vocab, args.seed,
                           micro_batch * max(4, 2 * args.grad_accum))
    session = torch_search.Session(torch, model, cfg, choice, batches, args, groups,
                                   dict(lr=6e-4, betas=(0.9, 0.95), eps=1e-8))

    grouped = cfg["kv_heads"] != cfg["heads"]
    candidates, attention_note = torch_search.attention_candidates(torch, cuda, grouped, args.sdpa)
    search = {"attention": session.choose_attention(candidates, pick_first=args.sdpa != "best")}
    if attention_note:
        search["attention"]["note"] = attention_note
    can_compile = hasattr(torch, "compile") and not args.no_compile
    modes = [m for m in args.compile_modes.split(",") if m] if can_compile else []
    search["compile"] = session.choose_compile(
        modes, "--no-compile" if args.no_compile else "no torch.compile in torch %s" % torch.__version__)
    search["optimizer"] = session.choose_optimizer(None if args.optimizer == "best" else args.optimizer)
    features.update(attention=search["attention"]["attention"], sdpa_backend=search["attention"]["chosen"],
                    compile=search["compile"]["chosen"] or search["compile"]["how"],
                    adamw=search["optimizer"]["chosen"])

    windows, final_loss = session.measure(args.warmup, args.steps, args.repeats, args.profile_last_step)
    medians = [w["step_ms_median"] for w in windows]
    tokens_per_step = micro_batch * args.grad_accum * cfg["seq"]
    med_ms = statistics.median(medians)
    tok_s = tokens_per_step / (med_ms / 1000.0)
    for w in windows:
        w["tokens_per_s"] = tokens_per_step / (w["step_ms_median"] / 1000.0)
    if cuda:
        peak, peak_reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
        memory_source, gpu = "torch.cuda.max_memory_allocated (the repetitions)", torch.cuda.get_device_name()
    else:
        peak, peak_reserved = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, None
        memory_source, gpu = "peak RSS of the process (CPU dry run)", "cpu (%s)" % platform.machine()
    all_steps = [ms for w in windows for ms in w["step_ms"]]
    result.update({
        "status": "ok",
        "device": gpu,
        "features": features,
        "search": search,
        "tokens": token_record(args.tokens, data_vocab, batches),
        "micro_batch": micro_batch,
        "grad_accum": args.grad_accum,
        "seq_len": cfg["seq"],
        "tokens_per_step": tokens_per_step,
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "repeats": args.repeats,
        "repetitions_are": "windows of --steps steps in this one process, after its search and --warmup steps",
        "repetitions": windows,
        "spread": {"step_ms": {"median": med_ms, "min": min(medians), "max": max(medians)},
                   "tokens_per_s": {"median": tok_s, "min": min(w["tokens_per_s"] for w in windows),
                                    "max": max(w["tokens_per_s"] for w in windows)}},
        "step_ms_median": med_ms,
        "step_ms_min": min(all_steps),
        "step_ms_max": max(all_steps),
        "tokens_per_s": tok_s,
        "n_params": fpt["n_params"],
        "n_params_embedding": fpt["n_params_embedding"],
        "flops_per_token_llmc": fpt["llmc"],
        "flops_per_token_torchtitan": fpt["torchtitan"],
        "peak_flops": args.peak_flops,
        "mfu_llmc": tok_s * fpt["llmc"] / args.peak_flops,
        "mfu_torchtitan": tok_s * fpt["torchtitan"] / args.peak_flops,
        "peak_memory_bytes": peak,
        "peak_memory_reserved_bytes": peak_reserved,
        "peak_memory_source": memory_source,
        "final_loss": final_loss,
    })
    emit(result, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
