"""PyTorch at its best, found by trial: the training session of bench/torch_baseline.py and its three
searches, each timing a few steps of every option and keeping the fastest:

  attention  every SDPA backend PyTorch offers for the shape (flash, cuDNN, memory-efficient), in
             eager steps (torch.compile calls the same kernel for SDPA, so the ranking carries
             over, and one compile per backend would cost minutes); a model with grouped-query
             attention through SDPA's own enable_gqa where the backend takes it, else repeat_kv;
  compile    torch.compile's "default" and "max-autotune-no-cudagraphs" modes, each compiled
             afresh (torch._dynamo.reset()) within a time budget;
  optimizer  fused AdamW stepped eagerly, and a foreach AdamW whose step (with the gradient
             clipping) is one torch.compile'd function.

Every trial is recorded, failures with their reason. Then measure() times the repetitions.
"""
import contextlib
import inspect
import math
import signal
import statistics
import sys
import time


class CompileBudgetExceeded(Exception):
    pass


def budget_message(seconds):
    return "not compiled within %s s (--compile-budget-s)" % seconds


def median_or_none(values):
    return statistics.median(values) if values else None


def short(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:240]


SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}


def sdpa_takes_enable_gqa(torch):
    """Whether this torch's SDPA has enable_gqa (2.5+), asked of the function itself."""
    q = torch.zeros(1, 2, 2, 4)
    try:
        torch.nn.functional.scaled_dot_product_attention(q, q[:, :1], q[:, :1], enable_gqa=True)
    except TypeError:
        return False
    return True


def attention_candidates(torch, cuda, grouped, sdpa):
    """What choose_attention tries: [(name, context factory, kind, gqa modes)] and a note. sdpa is
    --sdpa: "best" (every backend), one backend's name, or "auto" (PyTorch's own choice)."""
    F = torch.nn.functional
    if not hasattr(F, "scaled_dot_product_attention"):
        modes = ["repeat_kv", "grouped"] if grouped else ["repeat_kv"]
        return ([("manual causal softmax", contextlib.nullcontext, "manual", [mode]) for mode in modes],
                "no SDPA in torch %s: an explicit causal softmax" % torch.__version__)
    gqa = (["enable_gqa", "repeat_kv"] if sdpa_takes_enable_gqa(torch) else ["repeat_kv"]) if grouped else ["repeat_kv"]
    note = "" if not grouped or gqa[0] == "enable_gqa" else "no enable_gqa in torch %s: repeat_kv" % torch.__version__
    auto = ("auto", contextlib.nullcontext, "sdpa", gqa)
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return [auto], "torch %s has no torch.nn.attention.sdpa_kernel: PyTorch's own choice" % torch.__version__
    if not cuda or sdpa == "auto":
        return [auto], note or "PyTorch's own choice of SDPA backend"
    backends = [(name, getattr(SDPBackend, attr)) for name, attr in SDPA_BACKENDS.items() if hasattr(SDPBackend, attr)]
    if sdpa != "best":
        backends = [b for b in backends if b[0] == sdpa]
    candidates = [(name, lambda b=backend: sdpa_kernel([b]), "sdpa", gqa) for name, backend in backends]
    if sdpa != "best":  # pinned: PyTorch's own choice if that backend cannot run the shape
        candidates.append(auto)
    return candidates, note


class Session:
    """One model training on one device: microbatches from `data`, bf16 autocast or fp32, the
    gradient clipped at 1.0, AdamW; what steps it (eager or compiled model, which optimizer and
    update) is what the searches change."""

    def __init__(self, torch, model, cfg, choice, data, args, param_groups, opt_kwargs):
        self.torch, self.model, self.choice, self.data, self.args = torch, model, choice, data, args
        self.grouped = cfg["kv_heads"] != cfg["heads"]
        self.cuda = args.device == "cuda"
        self.amp_dtype = torch.bfloat16 if args.dtype == "bf16" else None
        self.param_groups, self.opt_kwargs = param_groups, opt_kwargs
        self.step_model = model
        self.attention_context = contextlib.ExitStack()
        self.optimizer = self.update = None
        self.optimizer_name = None
        self.budget_expired = False
        self.set_optimizer(self.optimizer_variants()[0])

    # ------------------------------------------------------------------ one step
    def train_step(self):
        torch, args = self.torch, self.args
        for _ in range(args.grad_accum):
            x, y = self.data.next()
            with (torch.autocast(device_type=args.device, dtype=self.amp_dtype) if self.amp_dtype
                  else contextlib.nullcontext()):
                loss = self.step_model(x, y)
            (loss / args.grad_accum).backward()
        self.update()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    def timed_step(self, profiled=False):
        """(loss, milliseconds) of one optimizer step; CUDA events around it on the GPU."""
        torch = self.torch
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if profiled:
                torch.cuda.synchronize()
                torch.cuda.profiler.start()
            start.record()
        t0 = time.perf_counter()
        loss = self.train_step()
        if self.cuda:
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end)
            if profiled:
                torch.cuda.profiler.stop()
        else:
            ms = (time.perf_counter() - t0) * 1000.0
        value = float(loss.item())
        if not math.isfinite(value):
            raise SystemExit("error: non-finite loss (%s)" % value)
        return value, ms

    def run_steps(self, untimed, timed, label, budget_s=None):
        """Runs untimed + timed steps, returning (timed milliseconds, seconds the first step took,
        last loss); the first step raises CompileBudgetExceeded past budget_s."""
        first_s, losses, times = None, [], []
        for i in range(untimed + timed):
            t0 = time.perf_counter()
            with self.budget(budget_s if i == 0 else None):
                loss, ms = self.timed_step()
            if i == 0:
                first_s = time.perf_counter() - t0
            if i >= untimed:
                times.append(ms)
            losses.append(loss)
            print("%s step %d/%d loss %.4f %.1f ms" % (label, i + 1, untimed + timed, loss, ms),
                  file=sys.stderr, flush=True)
        return times, first_s, losses[-1] if losses else None

    @contextlib.contextmanager
    def budget(self, seconds):
        if not seconds or not hasattr(signal, "SIGALRM"):
            yield
            return

        def expire(signum, frame):
            self.budget_expired = True  # whatever wraps the exception on its way out
            raise CompileBudgetExceeded(budget_message(seconds))

        previous = signal.signal(signal.SIGALRM, expire)
        signal.alarm(int(seconds))
        try:
            yield
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)

    def recover(self):
        """After a failed trial step: no half-accumulated gradients, the failed kernels' memory back."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()

    def trial(self, record, untimed, timed, budget_s=None):
        """Times one option into `record` (status, step_ms_median, step_ms, first_step_s); False
        if it failed (its reason recorded)."""
        self.budget_expired = False
        try:
            times, first_s, _ = self.run_steps(untimed, timed, record["option"], budget_s)
        except Exception as e:  # whatever failed is recorded, and the search goes on
            expired = self.budget_expired
            record.update(status="budget exceeded" if expired else "failed",
                          reason=budget_message(budget_s) if expired else short(e))
            print("%s: %s" % (record["option"], record["reason"]), file=sys.stderr, flush=True)
            self.recover()
            return False
        record.update(status="ok", step_ms_median=median_or_none(times), step_ms=times,
                      first_step_s=round(first_s, 3))
        return True

    @staticmethod
    def fastest(records):
        ok = [r for r in records if r.get("status") == "ok"]
        return min(ok, key=lambda r: r["step_ms_median"]) if ok else None

    # ------------------------------------------------------------------ attention
    def choose_attention(self, candidates, pick_first):
        """candidates: [(name, context factory, kind, [gqa modes in order of preference])]. Each
        candidate's modes are tried until one runs; then the fastest candidate (or, pinned by
        --sdpa, the first that runs) is entered for the rest of the session."""
        records = []
        for name, context, kind, gqa_modes in candidates:
            for gqa in gqa_modes:
                self.choice.kind, self.choice.gqa = kind, gqa
                attention = name + (" + " + gqa if self.grouped else "")
                record = {"option": "attention " + attention, "backend": name, "attention": attention,
                          "gqa": gqa if self.grouped else None}
                with context():
                    ok = self.trial(record, self.args.trial_warmup, self.args.trial_steps)
                records.append(record)
                if ok:
                    break
            if pick_first and records[-1]["status"] == "ok":
                break
        best = self.fastest(records)
        if best is None:
            raise SystemExit("error: no attention implementation ran: %s"
                             % "; ".join("%s: %s" % (r["attention"], r.get("reason")) for r in records))
        _, context, kind, _ = next(c for c in candidates if c[0] == best["backend"])
        self.choice.kind, self.choice.gqa = kind, best["gqa"] or "repeat_kv"
        self.attention_context.enter_context(context())
        return {"trials": records, "chosen": best["backend"], "attention": best["attention"],
                "how": ("the first that runs of --sdpa's choice" if pick_first else
                        "fastest median of --trial-steps eager steps after --trial-warmup")}

    # ------------------------------------------------------------------ torch.compile
    def choose_compile(self, modes, why_none):
        torch = self.torch
        if not modes:
            return {"trials": [], "chosen": None, "how": "not compiled (%s)" % why_none}
        records = []
        for mode in modes:
            torch._dynamo.reset()
            self.step_model = torch.compile(self.model, mode=mode)
            record = {"option": "compile " + mode, "mode": mode}
            self.trial(record, self.args.warmup, self.args.trial_steps, self.args.compile_budget_s)
            records.append(record)
        best = self.fastest(records)
        if best is None:
            torch._dynamo.reset()
            self.step_model = self.model
            return {"trials": records, "chosen": None, "how": "no mode compiled: eager"}
        how = "fastest median of --trial-steps steps after --warmup (the first compiles)"
        if best is not records[-1]:  # the winner compiled again; inductor's caches make it quick
            torch._dynamo.reset()
            self.step_model = torch.compile(self.model, mode=best["mode"])
            how += "; recompiled after the other mode's trial"
        self.compiled = True
        return {"trials": records, "chosen": best["mode"], "how": how}

    # ------------------------------------------------------------------ optimizer
    def optimizer_variants(self):
        torch = self.torch
        takes = inspect.signature(torch.optim.AdamW).parameters
        fused = self.cuda and "fused" in takes
        variants = ["fused AdamW" if fused else "foreach AdamW" if "foreach" in takes else "for-loop AdamW"]
        if hasattr(torch, "compile") and not self.args.no_compile:
            variants.append("foreach AdamW, clip + step compiled")
        return variants

    def set_optimizer(self, name):
        torch = self.torch
        self.optimizer = self.update = None  # the old state's memory goes first
        if self.cuda:
            torch.cuda.empty_cache()
        kwargs = dict(self.opt_kwargs)
        if name.startswith("fused"):
            kwargs["fused"] = True
        elif name.startswith("foreach"):
            kwargs["foreach"] = True
        # Fresh groups: an optimizer writes its defaults (fused, foreach, ...) into the dicts it is given.
        optimizer = torch.optim.AdamW([{**g, "params": list(g["params"])} for g in self.param_groups], **kwargs)
        params = [p for group in self.param_groups for p in group["params"]]

        def update():
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()

        self.optimizer, self.optimizer_name = optimizer, name
        self.update = torch.compile(update) if name.endswith("compiled") else update

    def choose_optimizer(self, pinned):
        variants = self.optimizer_variants()
        if pinned:  # "eager": the first variant; "compiled": the compiled step, where there is one
            chosen = variants[0] if pinned == "eager" else next((v for v in variants if v.endswith(pinned)), None)
            if chosen is None:
                raise SystemExit("error: --optimizer %s is not available here (%s)" % (pinned, ", ".join(variants)))
            self.set_optimizer(chosen)
            return {"trials": [], "chosen": chosen, "how": "--optimizer"}
        records = []
        for name in variants:
            self.set_optimizer(name)
            record = {"option": name}
            self.trial(record, self.args.trial_warmup + 1, self.args.trial_steps, self.args.compile_budget_s)
            records.append(record)
        best = self.fastest(records) or {"option": variants[0]}
        if best["option"] != self.optimizer_name:
            self.set_optimizer(best["option"])
        return {"trials": records, "chosen": best["option"],
                "how": "fastest median of --trial-steps steps (the first step of each untimed: it compiles)"}

    # ------------------------------------------------------------------ the measurement
    def measure(self, warmup, steps, repeats, profile_last):
        """From the data's first sample again: warmup untimed steps, then `repeats` windows of
        `steps` timed steps each; per window its median, min and max."""
        torch = self.torch
        self.data.rewind()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.run_steps(warmup, 0, "warm-up")
        windows, loss = [], None
        for r in range(repeats):
            times = []
            for i in range(steps):
                loss, ms = self.timed_step(profiled=profile_last and r == repeats - 1 and i == steps - 1)
                times.append(ms)
                print("repetition %d/%d step %d/%d loss %.4f %.1f ms" % (r + 1, repeats, i + 1, steps, loss, ms),
                      file=sys.stderr, flush=True)
            windows.append({"step_ms_median": statistics.median(times), "step_ms_min": min(times),
                            "step_ms_max": max(times), "step_ms": times})
        return windows, loss
