"""The PyTorch baseline's models: a nanoGPT GPT-2 and a TorchTitan llama3, as bench/torch_baseline.py
describes them, with the attention's implementation chosen at run time (bench/torch_search.py tries
each): the Attention object's kind and gqa are read on every forward, so a trial switches them
without rebuilding the model (torch.compile traces them as constants: set them before compiling)."""
import math


class Attention:
    """How a block attends. kind: "sdpa" (F.scaled_dot_product_attention under whichever backend
    is enabled around the call) or "manual" (an explicit causal softmax, for torch without SDPA).
    gqa, for a model with fewer kv heads than heads: "enable_gqa" (SDPA's own, torch >= 2.5),
    "repeat_kv" (K/V expanded to every query head, TorchTitan's repeat_kv), or "grouped" (the
    manual path's broadcast over groups of query heads, no copy)."""

    def __init__(self, kind, gqa="repeat_kv"):
        self.kind, self.gqa = kind, gqa


def build_model(cfg, torch, choice):
    """The model of cfg (MODELS' fields), attending as `choice` (an Attention) says."""
    nn = torch.nn
    F = torch.nn.functional
    C, H, KV = cfg["hidden"], cfg["heads"], cfg["kv_heads"]
    d = C // H

    def attention(q, k, v):  # q: [B, heads, T, d]; k, v: [B, kv heads, T, d]
        groups = q.shape[1] // k.shape[1]
        if groups > 1 and choice.gqa == "repeat_kv":
            B, _, T, d = k.shape
            k, v = (t[:, :, None].expand(B, KV, groups, T, d).reshape(B, H, T, d) for t in (k, v))
            groups = 1
        if choice.kind == "sdpa":
            if groups > 1:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        B, _, T, d = q.shape
        q = q.view(B, k.shape[1], groups, T, d)        # query heads grouped by their kv head
        k, v = k[:, :, None], v[:, :, None]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        att = torch.softmax(att.masked_fill(mask, float("-inf")).float(), dim=-1).to(v.dtype)
        return (att @ v).view(B, H, T, d)

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
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

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
            return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))

    return GPT2() if cfg["arch"] == "gpt2" else Llama()
