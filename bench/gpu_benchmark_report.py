"""bench/gpu_benchmark.sh's bookkeeping (no torch needed): one JSON per run from ptrain's and llm.c's
logs and metrics, the flags that pin the PyTorch FP8 run to the bf16 run's choices, and the results
file (runs, goals), stamped by bench/results.py so that what the script wrote can be told from what
was added afterwards (results.py --check).

Repetitions: ptrain and llm.c run once per repetition (a process each); the PyTorch baseline times
its repetitions as windows of one process (bench/torch_search.py). Every run's figure is the
median of its repetitions' medians; "spread" gives their min and max.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

import benchmark_tokens
import results
import torch_baseline as tb

BF16_ORDER = ["ptrain", "pytorch", "llm.c", "llm.c (-r 0 -ge 2)", "ptrain fp8", "pytorch fp8", "ptrain text",
              "ptrain fp8 text"]
MODELS = ["gpt2-124m", "llama-1b", "llama3-8b-slice"]
FP8_MODEL = "llama3-8b-slice"  # the FP8 goals' job: Llama 3 8B's layers, as many as fit one GPU
SPEED_GOAL, FP8_GOAL, MEMORY_BOUND, STEP_TIME_BOUND = 1.10, 1.35, 0.02, 0.10
LOSS_GOAL, LOSS_WINDOW = 0.01, 10  # fp8's loss within 1% of bf16's: the mean of the last 10 steps


def cfg_for(model, overrides):
    ns = argparse.Namespace(**{k: None for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq")})
    keys = {"model.layers": "layers", "model.hidden": "hidden", "model.heads": "heads", "model.kv_heads": "kv_heads",
            "model.ffn_hidden": "ffn", "model.vocab": "vocab", "model.seq_len": "seq"}
    for item in overrides.split():
        key, value = item.split("=", 1)
        if key in keys:
            setattr(ns, keys[key], int(value))
    return tb.apply_overrides(tb.MODELS[model], ns)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def reason_from(log_path, rc):
    lines = []
    try:
        with open(log_path, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        pass
    errors = [line for line in lines if line.lower().startswith("error")]
    tail = errors[-1] if errors else (lines[-1] if lines else "no output")
    return "exit %s: %s" % (rc, tail[:300])


def gpu_peak(paths):
    """The highest nvidia-smi sample (MiB) over the files, in bytes."""
    vals = []
    for path in paths:
        try:
            vals += [float(v) for v in open(path).read().split() if re.fullmatch(r"[0-9.]+", v)]
        except OSError:
            pass
    return int(max(vals) * 1048576) if vals else None


def add_mfu(run, cfg, peak):
    fpt = tb.flops_per_token(cfg)
    run.update(n_params=fpt["n_params"], n_params_embedding=fpt["n_params_embedding"],
               flops_per_token_llmc=fpt["llmc"], flops_per_token_torchtitan=fpt["torchtitan"], peak_flops=peak)
    tps = run.get("tokens_per_s")
    run["mfu_llmc"] = tps * fpt["llmc"] / peak if tps else None
    run["mfu_torchtitan"] = tps * fpt["torchtitan"] / peak if tps else None


def summarise(run, repetitions, tokens_per_step):
    """The run's figure from its repetitions (each {"step_ms_median", ...} or {"status": failed});
    the run is ok when one repetition is."""
    ok = [r for r in repetitions if "step_ms_median" in r]
    for r in ok:
        r["tokens_per_s"] = tokens_per_step / (r["step_ms_median"] / 1000)
    run["repetitions"] = repetitions
    run["repetitions_are"] = "separate processes"
    if not ok:
        return False
    medians = [r["step_ms_median"] for r in ok]
    med = statistics.median(medians)
    run.update(status="ok", step_ms_median=med, tokens_per_step=tokens_per_step, tokens_per_s=tokens_per_step / (med / 1000),
               spread={"step_ms": {"median": med, "min": min(medians), "max": max(medians)},
                       "tokens_per_s": {"median": tokens_per_step / (med / 1000),
                                        "min": min(r["tokens_per_s"] for r in ok),
                                        "max": max(r["tokens_per_s"] for r in ok)}})
    if len(ok) < len(repetitions):
        run["warning"] = "%d of %d repetitions ran" % (len(ok), len(repetitions))
    return True


def cmd_ptrain(a):
    cfg = cfg_for(a.model, a.overrides)
    run = {"impl": a.impl, "model": a.model, "config": cfg, "job": a.job, "overrides": a.overrides.split(),
           "micro_batch": a.micro_batch, "grad_accum": a.grad_accum, "warmup_steps": a.warmup, "timed_steps": a.steps,
           "tokens": load(a.tokens) if a.tokens else None, "validate": a.validate or None}
    if a.reason:  # no binary, or validate refused the job: nothing ran
        run.update(status="unavailable", reason=a.reason)
        add_mfu(run, cfg, a.peak)
        json.dump(run, open(a.out, "w"), indent=1)
        return
    repetitions, peaks, sources, losses, val_losses = [], [], set(), [], []
    for rc, metrics, log in zip(a.rc, a.metrics, a.log):
        rows = []
        try:
            with open(metrics) as f:
                rows = [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError):
            pass
        timed = [r for r in rows if r.get("step", 0) > a.warmup and "step_s" in r]
        if rc != 0 or not timed:
            repetitions.append({"status": "failed", "reason": reason_from(log, rc)})
            continue
        ms = [1000 * r["step_s"] for r in timed]
        repetitions.append({"step_ms_median": statistics.median(ms), "step_ms_min": min(ms), "step_ms_max": max(ms),
                            "mfu_reported_by_ptrain": statistics.median(r.get("mfu", 0) for r in timed)})
        losses.append([r.get("loss") for r in rows if "loss" in r])
        val_losses.append([r["val_loss"] for r in rows if "val_loss" in r])
        # The device's own count (CUDA: memory in use beyond the runtime context) when ptrain
        # measured it, else what the engine allocated, else the console's "mem 12.34 GiB".
        key = next((k for k in ("device_memory_peak_bytes", "memory_bytes") if any(k in r for r in rows)), None)
        mem = [r[key] for r in rows if key in r] if key else []
        source = "metrics JSONL: %s" % key
        if not mem:
            units = {"GiB": 1073741824, "MiB": 1048576, "KiB": 1024, "B": 1}
            try:
                text = open(log, errors="replace").read()
            except OSError:
                text = ""
            mem = [float(v) * units[u] for v, u in re.findall(r"\bmem ([0-9.]+) (GiB|MiB|KiB|B)\b", text)]
            source = "ptrain's console 'mem' (2 decimals)"
        if mem:
            peaks.append(int(max(mem)))
            sources.add(source)
    tokens_per_step = a.micro_batch * a.grad_accum * cfg["seq"]
    if summarise(run, repetitions, tokens_per_step):
        run["final_loss"] = losses[-1][-1] if losses[-1] else None
        run["losses"] = losses[-1]  # every step's, of the last repetition that ran
        if len(losses[-1]) >= LOSS_WINDOW:
            run["loss_last_%d_mean" % LOSS_WINDOW] = statistics.fmean(losses[-1][-LOSS_WINDOW:])
        if val_losses[-1]:
            run["val_loss"] = val_losses[-1][-1]  # at the last step
        run["peak_memory_bytes"] = max(peaks) if peaks else None
        run["peak_memory_source"] = (", ".join(sorted(sources)) + " (highest repetition)") if peaks else "not reported by ptrain"
    else:
        run.update(status="unavailable", reason=repetitions[0]["reason"] if repetitions else "not run")
    add_mfu(run, cfg, a.peak)
    json.dump(run, open(a.out, "w"), indent=1)


def cmd_llmc(a):
    cfg = cfg_for(a.model, "")
    run = {"impl": a.impl, "model": a.model, "config": cfg, "micro_batch": a.micro_batch, "grad_accum": a.grad_accum,
           "warmup_steps": a.warmup, "timed_steps": a.steps, "run_flags": a.flags.split(),
           "tokens": load(a.tokens) if a.tokens else None}
    if a.reason:
        run.update(status="skipped", reason=a.reason)
        json.dump(run, open(a.out, "w"), indent=1)
        return
    repetitions = []
    for rc, log in zip(a.rc, a.log):
        try:
            text = open(log, errors="replace").read()
        except OSError:
            text = ""
        # "step   12/25 | loss ... | lr 6.00e-04 | 101.23 ms | 45.1% bf16 MFU | 646000 tok/s" (train_gpt2.cu),
        # or the older "step 12/25: train loss 4.1 (acc 4.1) (101.2 ms, 646000 tok/s)".
        steps = [(int(s), float(ms)) for s, ms in re.findall(r"^step\s+(\d+)/\d+ \|.*?\| ([0-9.]+) ms \|", text, re.M)]
        steps += [(int(s), float(ms)) for s, ms in re.findall(r"^step\s+(\d+)/\d+: train loss .*?\(([0-9.]+) ms", text, re.M)]
        timed = [ms for s, ms in steps if s > a.warmup]
        if rc == 0 and timed:
            repetitions.append({"step_ms_median": statistics.median(timed), "step_ms_min": min(timed), "step_ms_max": max(timed)})
        else:
            repetitions.append({"status": "failed", "reason": reason_from(log, rc)})
    if summarise(run, repetitions, a.micro_batch * a.grad_accum * cfg["seq"]):
        run.update(build=a.overrides, peak_memory_bytes=None,
                   peak_memory_source="llm.c does not report it; see gpu_memory_used_peak_bytes")
        add_mfu(run, cfg, a.peak)
    else:
        run.update(status="failed", reason=repetitions[0]["reason"])
    json.dump(run, open(a.out, "w"), indent=1)


def cmd_pinned(a):
    """torch_baseline.py flags that repeat the bf16 run's choices (the FP8 run searches nothing)."""
    run = load(a.run) or {}
    search = run.get("search") or {}
    backend = (search.get("attention") or {}).get("chosen")
    mode = (search.get("compile") or {}).get("chosen")
    optimizer = (search.get("optimizer") or {}).get("chosen") or ""
    flags = []  # none when the bf16 run did not finish: the FP8 run searches for itself
    if run.get("status") == "ok":
        flags = ["--sdpa", backend if backend in ("flash", "cudnn", "efficient") else "auto"]
        flags += ["--compile-modes", mode] if mode else ["--no-compile"]
        flags += ["--optimizer", "compiled" if optimizer.endswith("compiled") else "eager"]
    print(" ".join(flags))


def ratio_record(x, y, goal, what):
    """x's tokens/s over y's with the range their repetitions allow, against goal (>=)."""
    value = x["tokens_per_s"] / y["tokens_per_s"] if x and y and x.get("tokens_per_s") and y.get("tokens_per_s") else None
    rec = {"value": value, "goal": ">= %.2f" % goal, "met": None if value is None else value >= goal, "what": what}
    if value is not None and x.get("spread") and y.get("spread"):
        xs, ys = x["spread"]["tokens_per_s"], y["spread"]["tokens_per_s"]
        rec["range_over_repetitions"] = [xs["min"] / ys["max"], xs["max"] / ys["min"]]
    return rec


def missing_reason(*rows_and_names):
    return "; ".join("%s: %s" % (name, (row or {}).get("reason") or (row or {}).get("status") or "not run")
                     for row, name in rows_and_names if not row or row.get("status") != "ok")


def epoch_steps(run):
    """Steps of one epoch of the run's text (one sequence a step): each llm.c shard of n tokens gives
    (n - 1) // seq sequences; None where the run's token description does not say."""
    text, seq = run.get("tokens") or {}, run["config"]["seq"]
    files = text.get("files") or []
    if files and all(isinstance(f, dict) for f in files):
        samples = sum((f["tokens"] - 1) // seq for f in files)
    elif len(files) == 1 and text.get("tokens"):  # one benchmark token file (the dry run's)
        samples = (text["tokens"] - 1) // seq
    else:
        return None
    return samples // max(1, run["micro_batch"] * run["grad_accum"])


def loss_record(f8, b16):
    """fp8's loss against bf16's after the same steps on the same text: the relative difference of the
    mean loss over the last LOSS_WINDOW steps; beside it the same over the first epoch's last
    LOSS_WINDOW steps and the validation loss at the end (text neither run trained on)."""
    key = "loss_last_%d_mean" % LOSS_WINDOW
    rec = {"goal": "|fp8 / bf16 - 1| <= %.2f, the mean loss of the last %d steps, %s" % (LOSS_GOAL, LOSS_WINDOW, FP8_MODEL),
           "value": None, "met": None}
    if f8 and b16 and f8.get(key) is not None and b16.get(key) is not None:
        rec.update(value=f8[key] / b16[key] - 1, steps=len(f8["losses"]), fp8=f8[key], bf16=b16[key])
        rec["met"] = abs(rec["value"]) <= LOSS_GOAL
        rec["curves_differ"] = f8["losses"] != b16["losses"]  # the quantisation is real
        epoch = epoch_steps(f8)
        if epoch:
            rec["epochs"] = rec["steps"] / epoch
        if epoch and LOSS_WINDOW <= epoch < rec["steps"]:
            first = [statistics.fmean(r["losses"][epoch - LOSS_WINDOW:epoch]) for r in (f8, b16)]
            rec["first_epoch_last_%d" % LOSS_WINDOW] = {"fp8": first[0], "bf16": first[1], "value": first[0] / first[1] - 1}
        if f8.get("val_loss") and b16.get("val_loss"):
            rec["validation"] = {"fp8": f8["val_loss"], "bf16": b16["val_loss"], "value": f8["val_loss"] / b16["val_loss"] - 1}
    elif b16 and b16.get(key) is not None and f8 and "non-finite" in str(f8.get("reason")):
        rec.update(met=False, reason="fp8 diverged: %s" % f8["reason"])  # bf16 trained, fp8 did not
    else:
        rec["reason"] = missing_reason((f8, "ptrain fp8 text"), (b16, "ptrain text"))
    return rec


def goals_of(runs):
    def get(impl, model):
        return next((r for r in runs if r["impl"] == impl and r["model"] == model), None)

    def ok(row):
        return row if row and row.get("status") == "ok" else None

    goals = {}
    for model, key in (("gpt2-124m", "gpt2_over_pytorch_best"), ("llama-1b", "llama_over_pytorch_best")):
        p, t = get("ptrain", model), get("pytorch", model)
        goals[key] = ratio_record(ok(p), ok(t), SPEED_GOAL, "ptrain / PyTorch at its best, %s, tokens/s" % model)
        if goals[key]["value"] is None:
            goals[key]["reason"] = missing_reason((p, "ptrain"), (t, "pytorch"))
    pg = ok(get("ptrain", "gpt2-124m"))
    llmc_rows = [r for r in runs if r["impl"].startswith("llm.c") and r["model"] == "gpt2-124m" and r.get("status") == "ok"]
    fastest = max(llmc_rows, key=lambda r: r["tokens_per_s"], default=None)
    goals["gpt2_over_llmc_best"] = ratio_record(pg, fastest, SPEED_GOAL, "ptrain / llm.c's fastest row, gpt2-124m")
    goals["gpt2_over_llmc_best"].update(llmc_impl=fastest and fastest["impl"],
                                        value_per_llmc_run={r["impl"]: pg["tokens_per_s"] / r["tokens_per_s"]
                                                            for r in llmc_rows} if pg else {})
    if fastest is None:
        goals["gpt2_over_llmc_best"]["reason"] = "; ".join(
            "%s: %s" % (r["impl"], r.get("reason")) for r in runs if r["impl"].startswith("llm.c")) or "llm.c not run"
    for model, key in ((FP8_MODEL, "llama_fp8_over_bf16"), ("llama-1b", "llama_1b_fp8_over_bf16")):
        f8, b16 = get("ptrain fp8", model), get("ptrain", model)
        goals[key] = ratio_record(ok(f8), ok(b16), FP8_GOAL, "ptrain fp8 / ptrain bf16, %s, tokens/s" % model)
        if goals[key]["value"] is None:
            goals[key]["reason"] = missing_reason((f8, "ptrain fp8"), (b16, "ptrain bf16"))
    goals["llama_fp8_loss_vs_bf16"] = loss_record(get("ptrain fp8 text", FP8_MODEL), get("ptrain text", FP8_MODEL))
    goals["pytorch_best"] = {
        r["model"]: {"sdpa_backend": r["search"]["attention"]["chosen"], "attention": r["search"]["attention"]["attention"],
                     "compile_mode": r["search"]["compile"]["chosen"], "optimizer": r["search"]["optimizer"]["chosen"]}
        for r in runs if r["impl"] == "pytorch" and r.get("status") == "ok" and r.get("search")}
    mem = {r["impl"] + " " + r["model"]: r.get("memory_measured_over_predicted")
           for r in runs if r["impl"].startswith("ptrain") and r.get("status") == "ok"}
    goals["ptrain_memory_within_2pct_of_validate"] = {
        "goal": "|measured/predicted - 1| <= %.2f" % MEMORY_BOUND, "value": mem,
        "met": None if not any(mem.values()) else all(abs(x - 1) <= MEMORY_BOUND for x in mem.values() if x)}
    times = {r["impl"] + " " + r["model"]: r.get("step_time_measured_over_predicted")
             for r in runs if r["impl"].startswith("ptrain") and r.get("status") == "ok"}
    goals["ptrain_step_time_within_10pct_of_validate"] = {
        "goal": "|measured/predicted - 1| <= %.2f (validate predicts the jobs' cluster.gpu)" % STEP_TIME_BOUND,
        "value": times,
        "met": None if not any(times.values()) else all(abs(x - 1) <= STEP_TIME_BOUND for x in times.values() if x)}
    return goals


def attach_validate(run, work):
    name = run.get("validate") or "validate-%s%s.json" % (run["model"], "-fp8" if run["impl"].endswith("fp8") else "")
    v = load(os.path.join(work, "runs", name))
    if v is None or (run.get("status") != "ok" and not run["impl"].startswith("ptrain")):
        return  # nothing measured to compare with
    if not v.get("valid"):
        run["predicted_memory_bytes"] = None
        run["predicted_memory_source"] = "validate failed: %s" % str(v.get("error", ""))[:300]
        return
    predicted = v["memory"]["total_bytes"]
    run["predicted_memory_bytes"] = predicted
    run["predicted_memory_source"] = "ptrain validate --json (same job): memory.total_bytes"
    if v.get("tokens_per_step") and run.get("tokens_per_s"):
        fpt = v["flops_per_step"] / v["tokens_per_step"]
        run["flops_per_token_ptrain"] = fpt
        run["mfu_ptrain_formula"] = run["tokens_per_s"] * fpt / run["peak_flops"]
    if run.get("peak_memory_bytes") and "RSS" not in run.get("peak_memory_source", ""):
        run["memory_measured_over_predicted"] = run["peak_memory_bytes"] / predicted
    if run["impl"].startswith("ptrain") and run.get("step_ms_median") and v.get("step_time_s"):
        run["predicted_step_s"] = v["step_time_s"]
        run["step_time_measured_over_predicted"] = run["step_ms_median"] / 1000 / v["step_time_s"]
    if run["impl"].startswith("ptrain") and v.get("params_total") != run.get("n_params"):
        run["warning"] = "ptrain counts %s parameters, the formulas use %s" % (v.get("params_total"), run.get("n_params"))


def cmd_report(a):
    runs = []
    for path in sorted(glob.glob(os.path.join(a.work, "runs", "*.json"))):
        base = os.path.basename(path)[:-5]
        run = None if base.startswith("validate-") else load(path)
        if not run:
            continue
        peak = gpu_peak(glob.glob(os.path.join(a.work, "runs", base + "*.gpumem")))
        if peak is not None:
            run["gpu_memory_used_peak_bytes"] = peak  # nvidia-smi, whole GPU incl. CUDA context
        attach_validate(run, a.work)
        runs.append(run)
    runs.sort(key=lambda r: (MODELS.index(r["model"]) if r["model"] in MODELS else 9,
                             BF16_ORDER.index(r["impl"]) if r["impl"] in BF16_ORDER else 9))
    goals = goals_of(runs)
    doc = {
        "date": a.date, "gpu": a.gpu, "commit": a.commit, "ptrain_build_commit": a.build_commit or None,
        "dry_run": bool(a.dry_run), "peak_flops": a.peak, "python": a.python,
        "torch": next((r.get("torch") for r in runs if r.get("torch")), None),
        "mfu_formulas": {
            "llmc": "6*N + 6*L*C*T per token, N = all parameters (karpathy/llm.c train_gpt2.cu gpt2_estimate_mfu)",
            "torchtitan": "6*(N - embedding tables) + 12*L*H*Q*T per token (pytorch/torchtitan get_nparams_and_flops)",
            "ptrain": "validate's flops_per_step / tokens_per_step: 6*N_gemm + 6*L*s*a*d (docs/validate.md, 'FLOPs')",
        },
        "runs": runs, "goals": goals, "notes": a.note,
    }
    results.write_as_measured(a.results, doc, "bench/gpu_benchmark.sh")
    if a.print:
        print_table(runs, goals)


def print_table(runs, goals):
    def gib(b):
        if not b:
            return "-"
        return "%.2f GiB" % (b / 1073741824) if b >= 1073741824 else "%.1f MiB" % (b / 1048576)

    def pct(x):
        return "%.1f%%" % (100 * x) if x is not None else "-"

    print("%-15s %-18s %-11s %12s %17s %9s %9s %11s %11s" % ("model", "impl", "status", "tokens/s", "step ms (min-max)",
          "MFU llmc", "MFU titan", "peak mem", "predicted"))
    for r in runs:
        ok = r.get("status") == "ok"
        spread = r.get("spread", {}).get("step_ms", {})
        print("%-15s %-18s %-11s %12s %17s %9s %9s %11s %11s" % (
            r["model"], r["impl"], r.get("status"), "%.0f" % r["tokens_per_s"] if ok else "-",
            "%.1f (%.1f-%.1f)" % (r["step_ms_median"], spread.get("min", 0), spread.get("max", 0)) if ok else "-",
            pct(r.get("mfu_llmc")), pct(r.get("mfu_torchtitan")),
            gib(r.get("peak_memory_bytes")), gib(r.get("predicted_memory_bytes"))))
        if not ok:
            print("                %s: %s" % (r.get("status"), r.get("reason")))
    for name, g in goals.items():
        if "met" in g:
            print("goal %-42s %-6s value %s" % (name, {True: "MET", False: "MISSED", None: "n/a"}[g["met"]], g["value"]))
    for model, best in goals["pytorch_best"].items():
        print("pytorch at its best, %s: %s" % (model, best))


def cmd_describe_text(a):
    """The loss runs' text: its llm.c shards and validation file, their token counts and sha256
    (exit 1: no shard matches, or no validation file)."""
    files = sorted(glob.glob(a.glob))
    if not files or not os.path.isfile(a.valid):
        return 1

    def shard(f):
        return {"path": f, "tokens": benchmark_tokens.token_count(f), "sha256": benchmark_tokens.file_sha256(f)}
    json.dump({"format": "llmc", "glob": a.glob, "files": [shard(f) for f in files], "valid": shard(a.valid)},
              open(a.out, "w"), indent=1)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("ptrain", "llmc"):
        s = sub.add_parser(name)
        for k in ("model", "out", "impl"):
            s.add_argument("--" + k, required=True)
        for k in ("job", "overrides", "reason", "flags", "tokens", "validate"):
            s.add_argument("--" + k, default="")
        for k in ("metrics", "log"):
            s.add_argument("--" + k, action="append", default=[], help="one per repetition")
        s.add_argument("--rc", type=int, action="append", default=[], help="one per repetition")
        for k in ("warmup", "steps", "micro-batch", "grad-accum"):
            s.add_argument("--" + k, type=int, default=0)
        s.add_argument("--peak", type=float, required=True)
    s = sub.add_parser("describe-text")
    for k in ("glob", "valid", "out"):
        s.add_argument("--" + k, required=True)
    s = sub.add_parser("pinned-flags")
    s.add_argument("--run", required=True)
    s = sub.add_parser("report")
    for k in ("work", "results", "date", "gpu", "commit", "build-commit", "python"):
        s.add_argument("--" + k, default="")
    s.add_argument("--peak", type=float, default=0.0)
    s.add_argument("--dry-run", type=int, default=0)
    s.add_argument("--note", action="append", default=[])
    s.add_argument("--print", action="store_true")
    a = p.parse_args()
    return {"ptrain": cmd_ptrain, "llmc": cmd_llmc, "pinned-flags": cmd_pinned, "report": cmd_report,
            "describe-text": cmd_describe_text}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
