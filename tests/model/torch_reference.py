"""Independent check of ptrain's models against PyTorch (Debian's python3-torch 1.13, CPU, fp32).

The models here are written from the Hugging Face semantics of GPT-2 (Conv1D weights stored
[in, out], gelu_new, tied head, learned positions), Llama (RMSNorm, rotate-half RoPE, grouped
kv heads, SwiGLU, untied lm_head) and Mixtral (Llama with a sparse MoE block: softmax router, top-k
experts renormalised, SwiGLU experts), with ptrain's two MoE rules written out here from their
definitions: a per-sequence expert capacity (earliest positions first, the rest dropped) and HF's
load-balancing loss per sequence, averaged over the global batch. They load ptrain's HF export (model.safetensors + config.json)
and compare with what ptrain computed (a dump written by ptrain_reference_dump):
  - logits, loss and the gradient of every parameter for one batch;
  - the loss of every step of a short AdamW run (same data, lr, clipping, decay groups).
Tolerance: |a - b| <= atol + rtol * |b| elementwise.
"""
import argparse
import json
import math
import struct
import sys

import numpy as np
import torch

DTYPES = {"F32": np.float32, "I32": np.int32, "I64": np.int64, "F64": np.float64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    base = 8 + header_len
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        arr = np.frombuffer(data[base + begin:base + end], dtype=DTYPES[info["dtype"]])
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out


class Gpt2(torch.nn.Module):
    def __init__(self, cfg, weights):
        super().__init__()
        self.cfg = cfg
        self.p = torch.nn.ParameterDict()
        for name, w in weights.items():
            self.p[name.replace(".", "__")] = torch.nn.Parameter(w.clone().double())

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def forward(self, tokens):
        cfg = self.cfg
        B, T = tokens.shape
        C, H = cfg["n_embd"], cfg["n_head"]
        D = C // H
        x = self.w("wte.weight")[tokens] + self.w("wpe.weight")[:T][None]
        eps = cfg["layer_norm_epsilon"]
        for i in range(cfg["n_layer"]):
            p = f"h.{i}."
            h = torch.nn.functional.layer_norm(x, (C,), self.w(p + "ln_1.weight"), self.w(p + "ln_1.bias"), eps)
            qkv = h @ self.w(p + "attn.c_attn.weight") + self.w(p + "attn.c_attn.bias")  # Conv1D: [in, out]
            q, k, v = qkv.split(C, dim=-1)
            q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
            att = causal_attention(q, k, v)
            att = att.transpose(1, 2).reshape(B, T, C)
            x = x + att @ self.w(p + "attn.c_proj.weight") + self.w(p + "attn.c_proj.bias")
            h = torch.nn.functional.layer_norm(x, (C,), self.w(p + "ln_2.weight"), self.w(p + "ln_2.bias"), eps)
            h = gelu_new(h @ self.w(p + "mlp.c_fc.weight") + self.w(p + "mlp.c_fc.bias"))
            x = x + h @ self.w(p + "mlp.c_proj.weight") + self.w(p + "mlp.c_proj.bias")
        x = torch.nn.functional.layer_norm(x, (C,), self.w("ln_f.weight"), self.w("ln_f.bias"), eps)
        return x @ self.w("wte.weight").T  # tied head


class Llama(Gpt2):
    def forward(self, tokens):
        cfg = self.cfg
        B, T = tokens.shape
        C, H, G = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        D = C // H
        eps = cfg["rms_norm_eps"]
        x = self.w("model.embed_tokens.weight")[tokens]
        cos, sin = rope_tables(T, D, cfg["rope_theta"])
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            h = rms_norm(x, self.w(p + "input_layernorm.weight"), eps)
            q = (h @ self.w(p + "self_attn.q_proj.weight").T).view(B, T, H, D).transpose(1, 2)
            k = (h @ self.w(p + "self_attn.k_proj.weight").T).view(B, T, G, D).transpose(1, 2)
            v = (h @ self.w(p + "self_attn.v_proj.weight").T).view(B, T, G, D).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
            att = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
            x = x + att @ self.w(p + "self_attn.o_proj.weight").T
            h = rms_norm(x, self.w(p + "post_attention_layernorm.weight"), eps)
            x = x + self.mlp(p, h)
        x = rms_norm(x, self.w("model.norm.weight"), eps)
        head = "model.embed_tokens.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"
        return x @ self.w(head).T

    def mlp(self, p, h):
        gate = h @ self.w(p + "mlp.gate_proj.weight").T
        up = h @ self.w(p + "mlp.up_proj.weight").T
        return (torch.nn.functional.silu(gate) * up) @ self.w(p + "mlp.down_proj.weight").T


class Mixtral(Llama):
    """forward() also fills self.aux: each MoE layer's load-balancing loss per sequence, [B]."""

    def __init__(self, cfg, weights, capacity_factor):
        super().__init__(cfg, weights)
        self.capacity_factor = capacity_factor
        self.aux = []

    def forward(self, tokens):
        self.aux = []
        return super().forward(tokens)

    def mlp(self, p, h):
        B, T, _ = h.shape
        E, k = self.cfg["num_local_experts"], self.cfg["num_experts_per_tok"]
        probs = torch.softmax(h @ self.w(p + "block_sparse_moe.gate.weight").T, dim=-1)
        top_p, top_e = torch.topk(probs, k, dim=-1)
        weights = top_p / top_p.sum(-1, keepdim=True)
        # An expert keeps the first `capacity` of a sequence's (position, choice) pairs that chose it.
        capacity = min(T, math.ceil(self.capacity_factor * k * T / E))
        chose = torch.nn.functional.one_hot(top_e, E).reshape(B, T * k, E)
        order = chose.cumsum(dim=1) - 1  # the pair's index among its expert's, where it chose
        kept = ((order < capacity) & (chose == 1)).any(-1).reshape(B, T, k)
        out = torch.zeros_like(h)
        for e in range(E):
            x = f"{p}block_sparse_moe.experts.{e}."
            y = (torch.nn.functional.silu(h @ self.w(x + "w1.weight").T) * (h @ self.w(x + "w3.weight").T)) \
                @ self.w(x + "w2.weight").T
            share = (weights * ((top_e == e) & kept)).sum(-1, keepdim=True)
            out = out + share * y
        counts = chose.sum(dim=1).double()  # [B, E] pairs per expert, dropped ones included
        self.aux.append(E * (counts / T * probs.mean(dim=1)).sum(-1))
        return out


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(T, D, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[None, None], emb.sin()[None, None]


def causal_attention(q, k, v):
    T, D = q.shape[-2], q.shape[-1]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def hf_to_ptrain_layout(name, tensor, gpt2):
    """ptrain stores linear weights [out, in]; GPT-2's HF Conv1D weights are [in, out]."""
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    if gpt2 and name.endswith(conv1d):
        return tensor.T
    return tensor


def close(name, got, want, atol, rtol, failures):
    got, want = got.double(), want.double()
    if got.shape != want.shape:
        failures.append(f"{name}: shape {tuple(got.shape)} vs reference {tuple(want.shape)}")
        return
    err = (got - want).abs()
    bound = atol + rtol * want.abs()
    if not bool((err <= bound).all()):
        i = int(torch.argmax(err - bound))
        failures.append(f"{name}: max excess at flat {i}: ptrain {got.flatten()[i].item():.6g} vs torch "
                        f"{want.flatten()[i].item():.6g} (max abs err {err.max().item():.3g})")


def loss_of(model, tokens, targets, vocab):
    logits = model(tokens)[..., :vocab]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1).long(),
                                             ignore_index=-1, reduction="sum")


def aux_loss(model, global_batch):
    """The load-balancing term of the last forward's objective (0 for dense models)."""
    if not isinstance(model, Mixtral):
        return 0.0
    return model.cfg["router_aux_loss_coef"] * sum(a.sum() for a in model.aux) / global_batch


def make_model(cfg, weights, meta):
    if cfg["model_type"] == "gpt2":
        return Gpt2(cfg, weights)
    if cfg["model_type"] == "mixtral":
        return Mixtral(cfg, weights, meta["capacity_factor"])
    return Llama(cfg, weights)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", required=True, help="ptrain's HF export of the initial weights")
    ap.add_argument("--dump", required=True, help="ptrain_reference_dump output (safetensors)")
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--rtol", type=float, default=1e-4)
    args = ap.parse_args()

    with open(args.hf + "/config.json") as f:
        cfg = json.load(f)
    gpt2 = cfg["model_type"] == "gpt2"
    weights = read_safetensors(args.hf + "/model.safetensors")
    dump = read_safetensors(args.dump)
    meta = json.loads(open(args.dump + ".json").read())
    vocab = cfg["vocab_size"]
    torch.set_default_dtype(torch.float64)
    model = make_model(cfg, weights, meta)
    failures = []

    # One batch: logits, loss, gradients (reference in float64: it is the exact answer).
    tokens, targets = dump["batch.tokens"].long(), dump["batch.targets"].long()
    logits = model(tokens)[..., :vocab]
    close("logits", dump["batch.logits"].reshape(logits.shape[0], logits.shape[1], -1)[..., :vocab], logits.detach(),
          args.atol, args.rtol, failures)
    total = loss_of(model, tokens, targets, vocab)
    count = int((targets >= 0).sum())
    mean_loss = total / count
    close("loss", dump["batch.loss"], mean_loss.detach().reshape(1), args.atol, args.rtol, failures)
    (mean_loss + aux_loss(model, meta["global_batch"])).backward()
    for name in weights:
        key = "grad." + name
        if key not in dump:
            failures.append(f"{name}: no gradient in the ptrain dump")
            continue
        ref = hf_to_ptrain_layout(name, model.w(name).grad, gpt2)
        close("grad " + name, dump[key][:ref.shape[0]] if ref.dim() else dump[key], ref, args.atol, args.rtol,
              failures)

    # A short AdamW run from the same start: per-step losses.
    model = make_model(cfg, weights, meta)
    opt_cfg = meta["optimizer"]
    decay = [p for n, p in model.p.items() if p.dim() >= 2]
    no_decay = [p for n, p in model.p.items() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": opt_cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=opt_cfg["lr"], betas=tuple(opt_cfg["betas"]), eps=opt_cfg["eps"])
    steps = meta["steps"]
    ptrain_losses = dump["train.losses"]
    lrs = dump["train.lrs"]
    micro = meta["microbatches"]
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = float(lrs[step])
        opt.zero_grad()
        total_tokens = 0
        total_loss = 0.0
        for mb in range(micro):
            t = dump["train.tokens"][step, mb].long()
            y = dump["train.targets"][step, mb].long()
            total_tokens += int((y >= 0).sum())
        for mb in range(micro):
            t = dump["train.tokens"][step, mb].long()
            y = dump["train.targets"][step, mb].long()
            loss = loss_of(model, t, y, vocab) / total_tokens
            (loss + aux_loss(model, meta["global_batch"])).backward()
            total_loss += loss.item()
        if meta["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), meta["grad_clip"])
        opt.step()
        close(f"train loss step {step}", ptrain_losses[step:step + 1], torch.tensor([total_loss]),
              args.atol * 10, args.rtol * 10, failures)

    for f in failures:
        print("MISMATCH", f)
    print(f"{cfg['model_type']}: {len(weights)} tensors, {steps} AdamW steps: "
          f"{'OK' if not failures else str(len(failures)) + ' mismatches'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
