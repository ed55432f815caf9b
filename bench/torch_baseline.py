"""PyTorch baselines for the GPU benchmark: a nanoGPT-style GPT-2 and a TorchTitan-style Llama.

What it measures is what the nanoGPT / build-nanogpt training loop does on one GPU:
  - GPT-2 (nanoGPT): pre-LayerNorm blocks with biases, GELU (tanh approximation), learned position
    embeddings, LM head tied to the token embedding, vocabulary padded to 50304.
  - Llama (TorchTitan llama3): RMSNorm, rotate-half RoPE (theta 500000), SwiGLU MLP, grouped-query
    attention (K/V repeated to the query heads, as TorchTitan's repeat_kv), untied output head.
  - fp32 parameters with bf16 autocast (nanoGPT's mixed precision; AdamW keeps fp32 states),
    torch.compile on the model, F.scaled_dot_product_attention(is_causal=True) restricted to the
    flash backend (falls back to PyTorch's own choice, and says so, if flash cannot run the shape),
    torch.optim.AdamW(fused=True) with nanoGPT's decay grouping (2-D tensors decayed), gradient
    clipping at 1.0, gradient accumulation over --grad-accum microbatches, TF32 allowed.
  - synthetic uniformly random tokens (no dataset): throughput does not depend on the data.
  - --warmup steps (compilation, autotuning, allocator warm-up) then --steps timed steps, each timed
    with CUDA events and a synchronize; reports the median.

Prints one JSON object (also to --json-out): tokens/s, step ms, peak memory, N, MFU by llm.c's and by
TorchTitan's formula (see flops_per_token below) against --peak-flops (989e12: H100 SXM dense bf16).

  python3 bench/torch_baseline.py --model gpt2-124m --micro-batch 32 --grad-accum 2
  python3 bench/torch_baseline.py --model llama-1b --micro-batch 2 --grad-accum 4
  python3 bench/torch_baseline.py --model gpt2-124m --describe       # counts and FLOPs only, no torch

Runs on PyTorch 2.x on CUDA (the benchmark) and on Debian's PyTorch 1.13 on CPU (the plumbing dry
run: no torch.compile, no fused AdamW, no SDPA there -> manual causal attention; each fallback is
reported in the JSON under "features").
"""
import argparse
import inspect
import json
import math
import platform
import resource
import statistics
import sys
import time

MODELS = {
    # GPT-2 small as nanoGPT / llm.c train it: 124,475,904 parameters with the padded vocabulary.
    "gpt2-124m": dict(arch="gpt2", layers=12, hidden=768, heads=12, kv_heads=12, ffn=3072,
                      vocab=50304, seq=1024, norm_eps=1e-5, rope_theta=0.0),
    # A Llama-3-style ~1.25B model: Llama 3.2 1B's width/depth/heads/GQA/vocabulary, with an untied
    # head and ffn 5632 (instead of 8192) so that N = 1.247e9 stays in the 1.0-1.3B range.
    "llama-1b": dict(arch="llama", layers=16, hidden=2048, heads=32, kv_heads=8, ffn=5632,
                     vocab=128256, seq=4096, norm_eps=1e-5, rope_theta=500000.0),
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


# ----------------------------------------------------------------------------- models
def build_model(cfg, torch, use_sdpa):
    nn = torch.nn
    F = torch.nn.functional
    C, H, KV = cfg["hidden"], cfg["heads"], cfg["kv_heads"]
    d = C // H

    def attention(q, k, v):  # q,k,v: [B, heads, T, d]
        if use_sdpa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        T = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        att = torch.softmax(att.masked_fill(mask, float("-inf")).float(), dim=-1).to(v.dtype)
        return att @ v

    class GPT2Block(nn.Module):  # nanoGPT Block
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C, eps=cfg["norm_eps"])
            self.c_attn = nn.Linear(C, 3 * C)
            self.attn_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C, eps=cfg["norm_eps"])
            self.c_fc = nn.Linear(C, cfg["ffn"])
            self.mlp_proj = nn.Linear(cfg["ffn"], C)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, H, d).transpose(1, 2) for t in (q, k, v))
            y = attention(q, k, v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.attn_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            # Embeddings are direct children so that TorchTitan's rule (nn.Embedding children of
            # the model) finds them, as param_counts() assumes.
            self.tok_embeddings = nn.Embedding(cfg["vocab"], C)  # wte
            self.pos_embeddings = nn.Embedding(cfg["seq"], C)    # wpe
            self.layers = nn.ModuleList(GPT2Block() for _ in range(cfg["layers"]))
            self.norm = nn.LayerNorm(C, eps=cfg["norm_eps"])
            self.output = nn.Linear(C, cfg["vocab"], bias=False)
            self.output.weight = self.tok_embeddings.weight      # weight tying
            for name, p in self.named_parameters():               # nanoGPT's init
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                elif p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * cfg["layers"]) if name.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, mean=0.0, std=std)

        def forward(self, idx, targets):
            T = idx.shape[1]
            pos = torch.arange(T, device=idx.device)
            x = self.tok_embeddings(idx) + self.pos_embeddings(pos)
            for layer in self.layers:
                x = layer(x)
            logits = self.output(self.norm(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.eps = cfg["norm_eps"]
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    class LlamaBlock(nn.Module):  # TorchTitan llama3 TransformerBlock
        def __init__(self):
            super().__init__()
            self.attention_norm = RMSNorm()
            self.wq = nn.Linear(C, H * d, bias=False)
            self.wk = nn.Linear(C, KV * d, bias=False)
            self.wv = nn.Linear(C, KV * d, bias=False)
            self.wo = nn.Linear(H * d, C, bias=False)
            self.ffn_norm = RMSNorm()
            self.w1 = nn.Linear(C, cfg["ffn"], bias=False)
            self.w3 = nn.Linear(C, cfg["ffn"], bias=False)
            self.w2 = nn.Linear(cfg["ffn"], C, bias=False)

        def forward(self, x, cos, sin):
            B, T, _ = x.shape
            h = self.attention_norm(x)
            q = self.wq(h).view(B, T, H, d).transpose(1, 2)
            k = self.wk(h).view(B, T, KV, d).transpose(1, 2)
            v = self.wv(h).view(B, T, KV, d).transpose(1, 2)
            q = (q * cos + rotate_half(q) * sin).to(v.dtype)
            k = (k * cos + rotate_half(k) * sin).to(v.dtype)
            if KV != H:  # repeat_kv
                k = k[:, :, None].expand(B, KV, H // KV, T, d).reshape(B, H, T, d)
                v = v[:, :, None].expand(B, KV, H // KV, T, d).reshape(B, H, T, d)
            y = attention(q, k, v).transpose(1, 2).contiguous().view(B, T, H * d)
            x = x + self.wo(y)
            h = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(cfg["vocab"], C)
            self.layers = nn.ModuleList(LlamaBlock() for _ in range(cfg["layers"]))
            self.norm = RMSNorm()
            self.output = nn.Linear(C, cfg["vocab"], bias=False)
            inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
            freqs = torch.outer(torch.arange(cfg["seq"], dtype=torch.float32), inv)
            emb = torch.cat((freqs, freqs), dim=-1)                # rotate-half layout
            self.register_buffer("cos", emb.cos(), persistent=False)
            self.register_buffer("sin", emb.sin(), persistent=False)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, mean=0.0, std=0.02)

        def forward(self, idx, targets):
            T = idx.shape[1]
            cos, sin = self.cos[:T], self.sin[:T]
            x = self.tok_embeddings(idx)
            for layer in self.layers:
                x = layer(x, cos, sin)
            logits = self.output(self.norm(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))

    return GPT2() if cfg["arch"] == "gpt2" else Llama()


# ----------------------------------------------------------------------------- training
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="gpt2-124m")
    ap.add_argument("--micro-batch", type=int, default=None, help="sequences per microbatch")
    ap.add_argument("--grad-accum", type=int, default=1, help="microbatches per optimizer step")
    ap.add_argument("--seq", type=int, default=None, help="sequence length (default: the model's)")
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="bf16 = autocast over fp32 params")
    ap.add_argument("--sdpa", choices=["flash", "auto"], default="flash",
                    help="flash: only the flash SDPA backend (falls back to auto, reported, if it cannot run)")
    ap.add_argument("--peak-flops", type=float, default=H100_SXM_BF16_PEAK)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json-out", default=None, help="also write the JSON result here")
    ap.add_argument("--describe", action="store_true", help="print N and FLOPs per token, do not train")
    ap.add_argument("--profile-last-step", action="store_true",
                    help="bracket the last step with cudaProfilerStart/Stop (bench/kernel_profile.sh)")
    for key in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab"):
        ap.add_argument("--" + key.replace("_", "-"), type=int, default=None, help="override (dry runs)")
    args = ap.parse_args()

    cfg = apply_overrides(MODELS[args.model], args)
    fpt = flops_per_token(cfg)
    if args.describe:
        print(json.dumps({"model": args.model, "config": cfg, **fpt}))
        return 0

    import torch

    micro_batch = args.micro_batch or (32 if cfg["arch"] == "gpt2" else 2)
    device = torch.device(args.device)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but torch.cuda.is_available() is False")
    torch.manual_seed(args.seed)
    features = {}
    if args.device == "cuda":
        torch.set_float32_matmul_precision("high")  # TF32 for fp32 matmuls, as nanoGPT

    F = torch.nn.functional
    use_sdpa = hasattr(F, "scaled_dot_product_attention")
    features["attention"] = "sdpa" if use_sdpa else "manual causal softmax (no SDPA in torch %s)" % torch.__version__

    def restrict_sdpa_to_flash(flash_only):
        if not (use_sdpa and args.device == "cuda"):
            return
        b = torch.backends.cuda
        for name in ("enable_mem_efficient_sdp", "enable_math_sdp", "enable_cudnn_sdp"):
            if hasattr(b, name):
                getattr(b, name)(not flash_only)
        b.enable_flash_sdp(True)

    flash_only = use_sdpa and args.device == "cuda" and args.sdpa == "flash"
    restrict_sdpa_to_flash(flash_only)
    if use_sdpa and args.device == "cuda":
        features["sdpa_backend"] = "flash only" if flash_only else "auto"

    model = build_model(cfg, torch, use_sdpa).to(device)
    n_built = sum(p.numel() for p in model.parameters())
    n_emb_built = sum(p.numel() for m in model.children() if isinstance(m, torch.nn.Embedding)
                      for p in m.parameters())
    if (n_built, n_emb_built) != (fpt["n_params"], fpt["n_params_embedding"]):
        raise SystemExit("error: parameter count %d/%d differs from the formula's %d/%d"
                         % (n_built, n_emb_built, fpt["n_params"], fpt["n_params_embedding"]))

    # nanoGPT's configure_optimizers: decay 2-D tensors, not biases and norms; fused when available.
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt_kwargs = dict(lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    fused_ok = "fused" in inspect.signature(torch.optim.AdamW).parameters and args.device == "cuda"
    if fused_ok:
        opt_kwargs["fused"] = True
    optimizer = torch.optim.AdamW(groups, **opt_kwargs)
    features["adamw"] = "fused" if fused_ok else "foreach/for-loop (fused unavailable here)"

    compiled = not args.no_compile and hasattr(torch, "compile")
    features["compile"] = "torch.compile" if compiled else (
        "off (--no-compile)" if args.no_compile else "off (no torch.compile in %s)" % torch.__version__)
    step_model = torch.compile(model) if compiled else model

    amp_dtype = torch.bfloat16 if args.dtype == "bf16" else None
    features["precision"] = "fp32 params, bf16 autocast" if amp_dtype else "fp32"

    data_vocab = min(DATA_VOCAB.get(args.model, cfg["vocab"]), cfg["vocab"])
    T = cfg["seq"]
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    batches = []
    for _ in range(min(4, args.grad_accum * 2)):
        tokens = torch.randint(0, data_vocab, (micro_batch, T + 1), generator=gen)
        batches.append((tokens[:, :-1].contiguous().to(device), tokens[:, 1:].contiguous().to(device)))

    def train_step(step):
        for micro in range(args.grad_accum):
            x, y = batches[(step * args.grad_accum + micro) % len(batches)]
            if amp_dtype is not None:
                with torch.autocast(device_type=args.device, dtype=amp_dtype):
                    loss = step_model(x, y)
            else:
                loss = step_model(x, y)
            (loss / args.grad_accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    step_ms, losses = [], []
    t_start = time.perf_counter()
    compile_s = None
    for step in range(args.warmup + args.steps):
        if cuda:
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ev0.record()
        t0 = time.perf_counter()
        profiled = cuda and args.profile_last_step and step == args.warmup + args.steps - 1
        if profiled:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
        try:
            loss = train_step(step)
        except RuntimeError as e:  # flash-only failed (e.g. "No available kernel"): fall back, say so
            if step == 0 and flash_only and "out of memory" not in str(e):
                print("flash-only SDPA failed, retrying with PyTorch's default SDPA choice: %s" % e,
                      file=sys.stderr, flush=True)
                flash_only = False
                restrict_sdpa_to_flash(False)
                features["sdpa_backend"] = "auto (flash only failed: %s)" % str(e).splitlines()[0][:200]
                optimizer.zero_grad(set_to_none=True)
                if compiled:
                    torch._dynamo.reset()
                    step_model = torch.compile(model)
                if cuda:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                loss = train_step(step)
            else:
                raise
        if cuda:
            ev1.record()
            torch.cuda.synchronize()
            ms = ev0.elapsed_time(ev1)
            if profiled:
                torch.cuda.profiler.stop()
        else:
            ms = (time.perf_counter() - t0) * 1000.0
        loss_value = float(loss.item())
        if not math.isfinite(loss_value):
            raise SystemExit("error: non-finite loss at step %d" % (step + 1))
        if step == 0:
            compile_s = time.perf_counter() - t_start
        if step >= args.warmup:
            step_ms.append(ms)
        losses.append(loss_value)
        print("step %d/%d loss %.4f %.1f ms" % (step + 1, args.warmup + args.steps, loss_value, ms),
              file=sys.stderr, flush=True)

    tokens_per_step = micro_batch * args.grad_accum * T
    med_ms = statistics.median(step_ms)
    tok_s = tokens_per_step / (med_ms / 1000.0)
    if cuda:
        peak = torch.cuda.max_memory_allocated()
        peak_reserved = torch.cuda.max_memory_reserved()
        memory_source = "torch.cuda.max_memory_allocated"
        gpu = torch.cuda.get_device_name()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        peak_reserved = None
        memory_source = "peak RSS of the process (CPU dry run)"
        gpu = "cpu (%s)" % platform.machine()
    result = {
        "impl": "pytorch",
        "model": args.model,
        "config": cfg,
        "torch": torch.__version__,
        "device": gpu,
        "features": features,
        "micro_batch": micro_batch,
        "grad_accum": args.grad_accum,
        "seq_len": T,
        "tokens_per_step": tokens_per_step,
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "first_step_s": round(compile_s, 3) if compile_s is not None else None,
        "step_ms_median": med_ms,
        "step_ms_min": min(step_ms),
        "step_ms_max": max(step_ms),
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
        "final_loss": losses[-1],
    }
    text = json.dumps(result)
    print(text)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
