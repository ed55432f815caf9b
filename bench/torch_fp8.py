"""The PyTorch FP8 baseline's linear layers: TorchTitan's float8 recipe (tensorwise dynamic scaling).

What TorchTitan does (its float8 converter over torchao): every nn.Linear but the output head, and
only those whose dimensions are multiples of 16, runs its three GEMMs in FP8 with one scale per
tensor taken from this step's amax: input and weight in E4M3 for the forward and reused by the
backward, the output gradient in E5M2; FP32 accumulation, the forward GEMM with cuBLAS's fast
accumulation (torchao's default for the output, not for the two gradients).

convert(model, torch, out_dtype) applies it by the first path the installed PyTorch offers:
  1. torchao.float8.convert_to_float8_training with the "tensorwise" recipe (what TorchTitan calls);
  2. torch._scaled_mm (PyTorch >= 2.1 on sm_89/sm_90): the same recipe in Float8Linear below;
  3. neither: FP8Unavailable, whose message says why.
"""
E4M3_MAX, E5M2_MAX = 448.0, 57344.0


class FP8Unavailable(RuntimeError):
    pass


def keeps_fp8(name, module):
    """TorchTitan's filter: not the output head, both dimensions multiples of 16."""
    return name != "output" and module.in_features % 16 == 0 and module.out_features % 16 == 0


def convert(model, torch, out_dtype):
    """Swaps model's linear layers for FP8 ones in place (GEMM outputs in out_dtype where the
    path is ours); returns a description of the path."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as e:
        torchao_missing = str(e)
    else:
        config = (Float8LinearConfig.from_recipe_name("tensorwise")
                  if hasattr(Float8LinearConfig, "from_recipe_name") else Float8LinearConfig())
        convert_to_float8_training(model, config=config,
                                   module_filter_fn=lambda m, fqn: keeps_fp8(fqn.split(".")[-1], m))
        import torchao
        return "torchao %s convert_to_float8_training, tensorwise recipe" % getattr(torchao, "__version__", "?")
    missing = [name for name in ("float8_e4m3fn", "float8_e5m2", "_scaled_mm") if not hasattr(torch, name)]
    if missing:
        raise FP8Unavailable("no float8 training path in torch %s: torchao is not installed (%s) and torch "
                             "has no %s" % (torch.__version__, torchao_missing, ", ".join(missing)))
    count = swap_linears(model, torch, scaled_mm_ops(torch), out_dtype)
    return ("torch._scaled_mm (torchao absent: %s): %d linear layers, tensorwise recipe in "
            "bench/torch_fp8.py" % (torchao_missing, count))


def swap_linears(model, torch, ops, out_dtype):
    """Replaces every nn.Linear that keeps_fp8 with a Float8Linear using `ops`; returns the count."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear and keeps_fp8(name, child):
                setattr(parent, name, float8_linear(child, torch, ops, out_dtype))
                swapped += 1
    return swapped


def scaled_mm_ops(torch):
    """The GPU's casts and GEMM: saturating casts to torch's float8 dtypes, torch._scaled_mm."""

    def cast(x, scale, fmt):
        dtype, top = (torch.float8_e4m3fn, E4M3_MAX) if fmt == "e4m3" else (torch.float8_e5m2, E5M2_MAX)
        return (x.float() * scale).clamp(-top, top).to(dtype)

    def mm(a, b, inv_a, inv_b, out_dtype, fast):
        out = torch._scaled_mm(a, b, scale_a=inv_a, scale_b=inv_b, out_dtype=out_dtype,
                               use_fast_accum=fast)
        return out[0] if isinstance(out, tuple) else out  # torch < 2.5 returned (out, amax)

    return {"cast": cast, "mm": mm}


def float8_linear(linear, torch, ops, out_dtype):
    """A module with linear's parameters whose forward and backward GEMMs run through ops, the
    GEMMs writing out_dtype (the activations' dtype: bf16 under the benchmark's autocast):
    ops["cast"](x, scale, "e4m3"|"e5m2") -> the FP8 tensor of x * scale (saturated);
    ops["mm"](a, b, 1/scale_a, 1/scale_b, out_dtype, fast_accum) -> a @ b dequantised, with a
    row-major and b column-major (what cuBLASLt's FP8 GEMM takes)."""

    def scale_of(x, top):
        return top / x.detach().abs().max().float().clamp(min=1e-12)

    class Float8Matmul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x2d, weight, out_dtype):
            sx, sw = scale_of(x2d, E4M3_MAX), scale_of(weight, E4M3_MAX)
            x8, w8 = ops["cast"](x2d, sx, "e4m3"), ops["cast"](weight, sw, "e4m3")
            ctx.save_for_backward(x8, w8, sx, sw)
            ctx.dtypes = (x2d.dtype, weight.dtype, out_dtype)
            # y = x @ W^T: W^T of a row-major W is column-major as it stands.
            return ops["mm"](x8, w8.t(), 1 / sx, 1 / sw, out_dtype, True)

        @staticmethod
        def backward(ctx, grad_out):
            x8, w8, sx, sw = ctx.saved_tensors
            x_dtype, w_dtype, out_dtype = ctx.dtypes
            sg = scale_of(grad_out, E5M2_MAX)
            g8 = ops["cast"](grad_out, sg, "e5m2")
            # dX = dY @ W: W column-major is W^T made row-major, transposed back.
            grad_x = ops["mm"](g8, w8.t().contiguous().t(), 1 / sg, 1 / sw, out_dtype, False)
            # dW = dY^T @ X: dY^T row-major, X column-major.
            grad_w = ops["mm"](g8.t().contiguous(), x8.t().contiguous().t(), 1 / sg, 1 / sx, out_dtype, False)
            return grad_x.to(x_dtype), grad_w.to(w_dtype), None

    class Float8Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.in_features, self.out_features = linear.in_features, linear.out_features
            self.weight = linear.weight
            self.bias = linear.bias

        def forward(self, x):
            y = Float8Matmul.apply(x.reshape(-1, x.shape[-1]), self.weight, out_dtype)
            y = y.reshape(*x.shape[:-1], self.out_features)
            return y if self.bias is None else y + self.bias.to(y.dtype)

    return Float8Linear()
