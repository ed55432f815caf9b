#!/usr/bin/env bash
# The GPU benchmark, as one command on one GPU: ptrain vs PyTorch (nanoGPT-style, compiled) on GPT-2
# 124M (T=1024, bf16, micro-batch 32 x 2) and on a Llama-style 1.25B model (T=4096, GQA, SwiGLU,
# micro-batch 2 x 4), then llm.c on the GPT-2 job twice: its defaults and its fastest flags
# (-r 0 -ge 2); gpt2_ptrain_over_llmc is against the faster of the two. For every run: tokens/s
# (median over the timed steps), MFU by llm.c's formula (6N + 6LCT, N = all parameters) and by
# TorchTitan's (6N' + 12LHQT, N' = without embedding tables), peak 989 TFLOP/s, peak memory, and
# for the same job `ptrain validate`'s predicted memory and the measured/predicted ratio. Writes
# bench/results/<date>-<gpu>.json (date, gpu, commit, runs, goals) and copies it, with the logs,
# to $OUT when that is set (the device machine returns what is under $OUT).
#
#   bash bench/gpu_benchmark.sh                 # on the GPU machine
#   bash bench/gpu_benchmark.sh --dry-run       # here, on CPU: tiny shapes, checks the plumbing,
#                                               # writes its results file to a temp dir
# Options: --models gpt2-124m,llama-1b   --skip ptrain,torch,llmc   --warmup N --steps N (all runs)
#          --no-build (never try a CUDA build on the device)   --results-dir DIR
# Environment: PYTHON (with torch; default: python3 if it imports torch, else /usr/bin/python3),
#   PTRAIN_BACKEND (cuda; cpu in --dry-run, where cuda rehearses the "ptrain unavailable" path),
#   PTRAIN (a ptrain binary or wrapper; default device-bundle/run-ptrain.sh, else build/ptrain,
#   else a fresh CUDA build in build-device/), LLMC_DIR (llm.c to run: its prebuilt train_gpt2cu, as
#   scripts/prepare_llmc.sh leaves in bench/out/llm.c, else a checkout make builds; none is
#   vendored), GPT2_MICRO_BATCH/GPT2_GRAD_ACCUM (32/2), LLAMA_MICRO_BATCH/LLAMA_GRAD_ACCUM (2/4),
#   PEAK_FLOPS (989e12), RUN_TIMEOUT_S (per run, 300), BENCH_COMMIT (the commit to record when the
#   tree has no .git, as on the device; default git rev-parse HEAD, else device-bundle/COMMIT).
#   LLMC_CUDNN=1 builds llm.c with cuDNN attention (needs cudnn-frontend headers next to it; the
#   prebuilt binary has it).
#
# On the device (no network, no Debian packages: ptrain cannot be configured there, it needs
# yaml-cpp, gloo, openblas, CLI11 from Debian), carry a build made here:
#   1. here:  cmake -S . -B build -G Ninja -DPTRAIN_CUDA=ON && cmake --build build
#             bash scripts/bundle_for_device.sh          # -> device-bundle/ (< 60 MiB)
#   2. run tool: command "bash bench/gpu_benchmark.sh", carry ["device-bundle"], timeout_s 600
#      (device-bundle/ must be in .gitignore; untracked-but-not-ignored files travel anyway); for
#      llm.c's rows also carry "bench/out/llm.c" (scripts/prepare_llmc.sh) and set
#      LLMC_DIR=$PWD/bench/out/llm.c (scripts/device_session.sh --bench does).
# Without a bundle it tries a CUDA build on the device (fails at configure without the packages)
# and records ptrain as "unavailable: <reason>"; the baselines still run. A ptrain without CUDA
# (`ptrain run` exits 2: "this ptrain was built without CUDA") is recorded the same way.
#
# Exit status: 0 when every PyTorch baseline that was asked for ran (ptrain or llm.c being
# unavailable is recorded, not an error); 1 when a baseline failed; 2 for bad arguments.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2

dry_run=0 no_build=0 models="gpt2-124m,llama-1b" skip="" warmup="" steps="" results_dir=""
while (($#)); do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --no-build) no_build=1 ;;
    --models) models=$2; shift ;;
    --skip) skip=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --steps) steps=$2; shift ;;
    --results-dir) results_dir=$2; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
skipped() { [[ ",$skip," == *",$1,"* ]]; }
log() { printf '[gpu-bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ------------------------------------------------------------------ python, date, gpu, work dir
if [[ -z "${PYTHON:-}" ]]; then
  if python3 -c 'import torch' >/dev/null 2>&1; then PYTHON=python3; else PYTHON=/usr/bin/python3; fi
fi
date_tag=$(date +%Y-%m-%d)
if ((dry_run)); then
  gpu="cpu dry run ($(uname -m))"
  gpu_slug="cpu-dry-run"
  work=$(mktemp -d "${TMPDIR:-/tmp}/ptrain-gpu-bench.XXXXXX")
  results_dir=${results_dir:-$work}
else
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  [[ -n "$gpu" ]] || gpu="unknown-gpu"
  gpu_slug=$("$PYTHON" "$root/bench/results.py" --gpu-slug "$gpu")
  work="$root/bench/out/$date_tag-$gpu_slug"
  rm -rf "$work"
  mkdir -p "$work"
  results_dir=${results_dir:-$root/bench/results}
fi
mkdir -p "$work/runs" "$results_dir"
results="$results_dir/$date_tag-$gpu_slug.json"
log "gpu: $gpu; work dir: $work; results: $results; python: $PYTHON"

# ------------------------------------------------------------------ what runs, at which size
# Per model: micro-batch, gradient accumulation, warm-up and timed steps; in a dry run, tiny shapes
# (the same overrides go to ptrain as --set and to the torch baseline as flags).
declare -A MB GA WU ST JOB PT_SET TB_ARGS
MB[gpt2-124m]=${GPT2_MICRO_BATCH:-32}; GA[gpt2-124m]=${GPT2_GRAD_ACCUM:-2}
MB[llama-1b]=${LLAMA_MICRO_BATCH:-2}; GA[llama-1b]=${LLAMA_GRAD_ACCUM:-4}
WU[gpt2-124m]=5; ST[gpt2-124m]=20
WU[llama-1b]=3; ST[llama-1b]=10
JOB[gpt2-124m]=bench/jobs/gpt2-124m-h100.yaml
JOB[llama-1b]=bench/jobs/llama-1b-h100.yaml
PT_SET[gpt2-124m]="" PT_SET[llama-1b]=""
TB_ARGS[gpt2-124m]="--device cuda" TB_ARGS[llama-1b]="--device cuda"
if ((dry_run)); then
  MB[gpt2-124m]=2; GA[gpt2-124m]=2; MB[llama-1b]=2; GA[llama-1b]=2
  WU[gpt2-124m]=1; ST[gpt2-124m]=3; WU[llama-1b]=1; ST[llama-1b]=3
  PT_SET[gpt2-124m]="cluster.gpu=cpu model.layers=2 model.hidden=64 model.heads=4 model.vocab=512 model.seq_len=64"
  PT_SET[llama-1b]="cluster.gpu=cpu model.layers=2 model.hidden=64 model.heads=4 model.kv_heads=2 model.ffn_hidden=176 model.vocab=512 model.seq_len=128"
  TB_ARGS[gpt2-124m]="--device cpu --no-compile --layers 2 --hidden 64 --heads 4 --vocab 512 --seq 64"
  TB_ARGS[llama-1b]="--device cpu --no-compile --layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 176 --vocab 512 --seq 128"
fi
[[ -n "$warmup" ]] && for m in gpt2-124m llama-1b; do WU[$m]=$warmup; done
[[ -n "$steps" ]] && for m in gpt2-124m llama-1b; do ST[$m]=$steps; done
IFS=, read -r -a model_list <<<"$models"
for m in "${model_list[@]}"; do
  [[ -n "${JOB[$m]:-}" ]] || { echo "error: unknown model '$m' (gpt2-124m, llama-1b)" >&2; exit 2; }
done
run_timeout=${RUN_TIMEOUT_S:-300}
# ptrain trains with this backend (the jobs say cuda); the dry run uses cpu, and PTRAIN_BACKEND=cuda
# with --dry-run rehearses the "ptrain unavailable" path here.
if ((dry_run)); then ptrain_backend=${PTRAIN_BACKEND:-cpu}; else ptrain_backend=${PTRAIN_BACKEND:-cuda}; fi
peak_flops=${PEAK_FLOPS:-989e12}

# The helper that turns logs into per-run JSON and writes the results file (no torch needed).
helper="$work/bench_helper.py"
cat >"$helper" <<'PY'
import argparse, glob, json, os, re, statistics, sys
sys.path.insert(0, os.environ["BENCH_DIR"])
import torch_baseline as tb

def cfg_for(model, overrides):
    ns = argparse.Namespace(**{k: None for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq")})
    for item in overrides.split():
        key, value = item.split("=", 1)
        key = {"model.layers": "layers", "model.hidden": "hidden", "model.heads": "heads", "model.kv_heads": "kv_heads",
               "model.ffn_hidden": "ffn", "model.vocab": "vocab", "model.seq_len": "seq"}.get(key)
        if key:
            setattr(ns, key, int(value))
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
            lines = [l.strip() for l in f if l.strip()]
    except OSError:
        pass
    errors = [l for l in lines if l.lower().startswith("error")]
    tail = errors[-1] if errors else (lines[-1] if lines else "no output")
    return "exit %s: %s" % (rc, tail[:300])

def gpu_peak(path):
    try:
        vals = [float(v) for v in open(path).read().split() if re.fullmatch(r"[0-9.]+", v)]
    except OSError:
        return None
    return int(max(vals) * 1048576) if vals else None

def add_mfu(run, cfg, peak):
    fpt = tb.flops_per_token(cfg)
    run.update(n_params=fpt["n_params"], n_params_embedding=fpt["n_params_embedding"],
               flops_per_token_llmc=fpt["llmc"], flops_per_token_torchtitan=fpt["torchtitan"], peak_flops=peak)
    tps = run.get("tokens_per_s")
    run["mfu_llmc"] = tps * fpt["llmc"] / peak if tps else None
    run["mfu_torchtitan"] = tps * fpt["torchtitan"] / peak if tps else None

def cmd_ptrain(a):
    cfg = cfg_for(a.model, a.overrides)
    run = {"impl": "ptrain", "model": a.model, "config": cfg, "job": a.job, "overrides": a.overrides.split(),
           "micro_batch": a.micro_batch, "grad_accum": a.grad_accum, "warmup_steps": a.warmup, "timed_steps": a.steps}
    rows = []
    try:
        with open(a.metrics) as f:
            rows = [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError):
        pass
    timed = [r for r in rows if r.get("step", 0) > a.warmup]
    if a.rc == 0 and timed:
        run["status"] = "ok"
        run["tokens_per_s"] = statistics.median(r["tokens_per_s"] for r in timed)
        run["step_ms_median"] = 1000 * statistics.median(r["step_s"] for r in timed)
        run["tokens_per_step"] = a.micro_batch * a.grad_accum * cfg["seq"]
        run["mfu_reported_by_ptrain"] = statistics.median(r.get("mfu", 0) for r in timed)
        run["final_loss"] = rows[-1].get("loss")
        # The device's own count (CUDA: memory in use beyond the runtime context) when ptrain
        # measured it, else what the engine allocated.
        key = next((k for k in ("device_memory_peak_bytes", "memory_bytes") if any(k in r for r in rows)), None)
        mem = [r[key] for r in rows if key in r] if key else []
        source = "metrics JSONL: %s" % key
        if not mem:  # the console line: "... | mem 12.34 GiB | ..."
            units = {"GiB": 1073741824, "MiB": 1048576, "KiB": 1024, "B": 1}
            try:
                text = open(a.log, errors="replace").read()
            except OSError:
                text = ""
            mem = [float(v) * units[u] for v, u in re.findall(r"\bmem ([0-9.]+) (GiB|MiB|KiB|B)\b", text)]
            source = "ptrain's console 'mem' (2 decimals)"
        run["peak_memory_bytes"] = int(max(mem)) if mem else None
        run["peak_memory_source"] = source if mem else "not reported by ptrain"
    else:
        run["status"] = "unavailable"
        run["reason"] = a.reason or reason_from(a.log, a.rc)
    add_mfu(run, cfg, a.peak)
    json.dump(run, open(a.out, "w"), indent=1)

def cmd_llmc(a):
    cfg = cfg_for(a.model, "")
    run = {"impl": a.impl or "llm.c", "model": a.model, "config": cfg, "micro_batch": a.micro_batch, "grad_accum": a.grad_accum,
           "warmup_steps": a.warmup, "timed_steps": a.steps, "run_flags": a.flags.split()}
    if a.reason:
        run.update(status="skipped", reason=a.reason)
    else:
        try:
            text = open(a.log, errors="replace").read()
        except OSError:
            text = ""
        # "step   12/25 | loss ... | lr 6.00e-04 | 101.23 ms | 45.1% bf16 MFU | 646000 tok/s" (train_gpt2.cu),
        # or the older "step 12/25: train loss 4.1 (acc 4.1) (101.2 ms, 646000 tok/s)".
        steps = [(int(s), float(ms)) for s, ms in re.findall(r"^step\s+(\d+)/\d+ \|.*?\| ([0-9.]+) ms \|", text, re.M)]
        steps += [(int(s), float(ms)) for s, ms in re.findall(r"^step\s+(\d+)/\d+: train loss .*?\(([0-9.]+) ms", text, re.M)]
        timed = [ms for s, ms in steps if s > a.warmup]
        if a.rc == 0 and timed:
            tokens = a.micro_batch * a.grad_accum * cfg["seq"]
            med = statistics.median(timed)
            run.update(status="ok", step_ms_median=med, tokens_per_step=tokens, tokens_per_s=tokens / (med / 1000),
                       build=a.overrides)
            run["peak_memory_bytes"] = None
            run["peak_memory_source"] = "llm.c does not report it; see gpu_memory_used_peak_bytes"
        else:
            run.update(status="failed", reason=reason_from(a.log, a.rc))
    if run["status"] == "ok":
        add_mfu(run, cfg, a.peak)
    json.dump(run, open(a.out, "w"), indent=1)

def cmd_report(a):
    runs = []
    for path in sorted(glob.glob(os.path.join(a.work, "runs", "*.json"))):
        if os.path.basename(path).startswith("validate-"):
            continue
        run = load(path)
        if not run:
            continue
        base = os.path.basename(path)[:-5]
        peak = gpu_peak(os.path.join(a.work, "runs", base + ".gpumem"))
        if peak is not None:
            run["gpu_memory_used_peak_bytes"] = peak  # nvidia-smi, whole GPU incl. CUDA context
        v = load(os.path.join(a.work, "runs", "validate-%s.json" % run["model"]))
        if run.get("status") != "ok" and run.get("impl") != "ptrain":
            v = None  # nothing measured to compare with
        if v and v.get("valid"):
            predicted = v["memory"]["total_bytes"]
            run["predicted_memory_bytes"] = predicted
            run["predicted_memory_source"] = "ptrain validate --json (same job): memory.total_bytes"
            if v.get("tokens_per_step") and run.get("tokens_per_s"):
                fpt = v["flops_per_step"] / v["tokens_per_step"]
                run["flops_per_token_ptrain"] = fpt
                run["mfu_ptrain_formula"] = run["tokens_per_s"] * fpt / run["peak_flops"]
            if run.get("peak_memory_bytes") and "RSS" not in run.get("peak_memory_source", ""):
                run["memory_measured_over_predicted"] = run["peak_memory_bytes"] / predicted
            if run["impl"] == "ptrain" and v.get("params_total") != run.get("n_params"):
                run["warning"] = "ptrain counts %s parameters, the formulas use %s" % (v.get("params_total"), run.get("n_params"))
        elif v is not None:
            run["predicted_memory_bytes"] = None
            run["predicted_memory_source"] = "validate failed: %s" % v.get("error", "")[:300]
        runs.append(run)
    order = {"ptrain": 0, "pytorch": 1, "llm.c": 2, "llm.c (-r 0 -ge 2)": 3}
    models = ["gpt2-124m", "llama-1b"]
    runs.sort(key=lambda r: (models.index(r["model"]) if r["model"] in models else 9, order.get(r["impl"], 9)))
    get = lambda impl, model: next((r for r in runs if r["impl"] == impl and r["model"] == model and r.get("status") == "ok"), None)
    def ratio(x, y, key):
        return x[key] / y[key] if x and y and x.get(key) and y.get(key) else None
    pg, tg, pl = get("ptrain", "gpt2-124m"), get("pytorch", "gpt2-124m"), get("ptrain", "llama-1b")
    tl = get("pytorch", "llama-1b")
    # llm.c's rows (its defaults, its fastest flags): ptrain against the faster one.
    llmc_rows = [r for r in runs if r["impl"].startswith("llm.c") and r["model"] == "gpt2-124m" and r.get("status") == "ok"]
    lg = max(llmc_rows, key=lambda r: r.get("tokens_per_s") or 0, default=None)
    speed_torch = ratio(pg, tg, "tokens_per_s")
    speed_llmc = ratio(pg, lg, "tokens_per_s")
    speed_torch_llama = ratio(pl, tl, "tokens_per_s")
    mem = {m: (get("ptrain", m) or {}).get("memory_measured_over_predicted") for m in models}
    # Issue 21's goals, on the same GPU in the same call.
    goals = {
        "gpt2_ptrain_over_pytorch_compiled": {"target": ">= 1.10", "value": speed_torch,
                                              "met": None if speed_torch is None else speed_torch >= 1.10},
        "gpt2_ptrain_over_llmc": {"target": ">= 1.10 (against the faster llm.c row)", "value": speed_llmc,
                                  "llmc_impl": lg and lg["impl"],
                                  "value_per_llmc_run": {r["impl"]: ratio(pg, r, "tokens_per_s") for r in llmc_rows},
                                  "met": None if speed_llmc is None else speed_llmc >= 1.10},
        "llama1b_ptrain_over_pytorch_compiled": {"target": ">= 1.10", "value": speed_torch_llama,
                                                 "met": None if speed_torch_llama is None else speed_torch_llama >= 1.10},
        "llama1b_ptrain_mfu": {"target": ">= 0.52 (TorchTitan formula; llm.c formula alongside)",
                               "value": pl and pl.get("mfu_torchtitan"), "value_llmc_formula": pl and pl.get("mfu_llmc"),
                               "met": None if not pl else pl["mfu_torchtitan"] >= 0.52},
        "ptrain_memory_within_2pct_of_validate": {
            "target": "|measured/predicted - 1| <= 0.02",
            "value": mem, "met": None if not any(mem.values()) else all(abs(x - 1) <= 0.02 for x in mem.values() if x)},
    }
    result = {
        "date": a.date, "gpu": a.gpu, "commit": a.commit, "ptrain_build_commit": a.build_commit or None,
        "dry_run": bool(a.dry_run), "peak_flops": a.peak, "python": a.python,
        "torch": next((r.get("torch") for r in runs if r.get("torch")), None),
        "mfu_formulas": {
            "llmc": "6*N + 6*L*C*T per token, N = all parameters (karpathy/llm.c train_gpt2.cu gpt2_estimate_mfu)",
            "torchtitan": "6*(N - embedding tables) + 12*L*H*Q*T per token (pytorch/torchtitan get_nparams_and_flops)",
            "ptrain": "validate's flops_per_step / tokens_per_step: 6*N_gemm + 6*L*s*a*d (README 'How validate estimates')",
        },
        "runs": runs, "goals": goals, "notes": a.note,
    }
    tmp = a.results + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    os.replace(tmp, a.results)
    if a.print:
        def gib(b):
            if not b:
                return "-"
            return "%.2f GiB" % (b / 1073741824) if b >= 1073741824 else "%.1f MiB" % (b / 1048576)
        pct = lambda x: "%.1f%%" % (100 * x) if x is not None else "-"
        print("%-10s %-18s %-11s %12s %10s %9s %9s %11s %11s %7s" % ("model", "impl", "status", "tokens/s", "step ms",
              "MFU llmc", "MFU titan", "peak mem", "predicted", "ratio"))
        for r in runs:
            ok = r.get("status") == "ok"
            print("%-10s %-18s %-11s %12s %10s %9s %9s %11s %11s %7s" % (
                r["model"], r["impl"], r.get("status"), "%.0f" % r["tokens_per_s"] if ok else "-",
                "%.1f" % r["step_ms_median"] if ok else "-", pct(r.get("mfu_llmc")), pct(r.get("mfu_torchtitan")),
                gib(r.get("peak_memory_bytes")), gib(r.get("predicted_memory_bytes")),
                "%.3f" % r["memory_measured_over_predicted"] if r.get("memory_measured_over_predicted") else "-"))
            if not ok:
                print("           %s: %s" % (r.get("status"), r.get("reason")))
        for name, g in goals.items():
            print("goal %-40s %-6s value %s" % (name, {True: "MET", False: "MISSED", None: "n/a"}[g["met"]], g["value"]))

p = argparse.ArgumentParser()
sub = p.add_subparsers(dest="cmd", required=True)
for name in ("ptrain", "llmc"):
    s = sub.add_parser(name)
    for k in ("model", "out", "log"):
        s.add_argument("--" + k, required=True)
    s.add_argument("--metrics", default="")
    s.add_argument("--job", default="")
    s.add_argument("--overrides", default="")
    s.add_argument("--reason", default="")
    s.add_argument("--impl", default="")
    s.add_argument("--flags", default="")
    for k in ("rc", "warmup", "steps", "micro-batch", "grad-accum"):
        s.add_argument("--" + k, type=int, default=0)
    s.add_argument("--peak", type=float, required=True)
s = sub.add_parser("report")
for k in ("work", "results", "date", "gpu", "commit", "build-commit", "python", "peak"):
    s.add_argument("--" + k, default="")
s.add_argument("--dry-run", type=int, default=0)
s.add_argument("--note", action="append", default=[])
s.add_argument("--print", action="store_true")
a = p.parse_args()
if hasattr(a, "peak"):
    a.peak = float(a.peak)
{"ptrain": cmd_ptrain, "llmc": cmd_llmc, "report": cmd_report}[a.cmd](a)
PY
export BENCH_DIR="$root/bench"

# ------------------------------------------------------------------ commit
commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || true)
if [[ -n "$commit" ]] && [[ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  commit="$commit-dirty"
fi
build_commit=""
[[ -f device-bundle/COMMIT ]] && build_commit=$(cat device-bundle/COMMIT)
commit=${BENCH_COMMIT:-${commit:-${build_commit:-unknown}}}
notes=()

# ------------------------------------------------------------------ the ptrain binary
ptrain="${PTRAIN:-}" ptrain_bin="" ptrain_problem=""
# CUDA kernels in the binary, or in the CUDA module it opens from beside it (libptrain_cuda.so).
has_cuda() { LC_ALL=C grep -qa '\.nv_fatbin' "$1" "$(dirname "$1")/libptrain_cuda.so" 2>/dev/null; }
if [[ -z "$ptrain" ]]; then
  if [[ -x device-bundle/run-ptrain.sh ]]; then
    ptrain="$root/device-bundle/run-ptrain.sh"
  elif [[ -x build/ptrain ]]; then
    ptrain="$root/build/ptrain" ptrain_bin="$ptrain"
  fi
else
  ptrain_bin="$ptrain"
fi
if [[ "$ptrain" == *run-ptrain.sh ]]; then  # the first start unpacks the bundle's payload
  "$ptrain" --version >/dev/null 2>&1
  ptrain_bin="$(dirname "$ptrain")/unpacked/bin/ptrain"
fi
if ((dry_run)); then
  notes+=("dry run: CPU, tiny shapes, ptrain with backend=cpu, PyTorch without compile; numbers are not benchmarks")
elif ! skipped ptrain && ((!no_build)) && { [[ -z "$ptrain_bin" ]] || ! has_cuda "$ptrain_bin"; }; then
  log "ptrain: ${ptrain_bin:-no binary}${ptrain_bin:+ has no CUDA kernels}; trying a CUDA build in build-device/ (log: $work/build.log)"
  if timeout 420 cmake -S . -B build-device -G Ninja -DPTRAIN_CUDA=ON -DPTRAIN_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
    >"$work/build.log" 2>&1 && timeout 420 cmake --build build-device --target ptrain >>"$work/build.log" 2>&1; then
    ptrain="$root/build-device/ptrain" ptrain_bin="$ptrain" build_commit="$commit (built on the device)"
  else
    why=$(grep -m1 -E 'CMake Error|error:|Could not find|not found' "$work/build.log" | cut -c1-200)
    notes+=("CUDA build on the device failed: ${why:-see build.log}; carry device-bundle/ (scripts/bundle_for_device.sh)")
    [[ -z "$ptrain_bin" ]] && ptrain_problem="no ptrain binary: not carried (device-bundle/) and the device build failed: ${why:-see build.log}"
  fi
fi
if [[ -z "$ptrain_problem" && -n "$ptrain" ]] && ! "$ptrain" --version >"$work/ptrain-version.log" 2>&1; then
  ptrain_problem="ptrain does not start here: $(tail -1 "$work/ptrain-version.log" | cut -c1-250)"
fi
[[ -z "$ptrain" && -z "$ptrain_problem" ]] && ptrain_problem="no ptrain binary (no device-bundle/, no build/ptrain)"
log "ptrain: ${ptrain:-none}${ptrain_problem:+ ($ptrain_problem)}"

report() {
  local args=(report --work "$work" --results "$results" --date "$date_tag" --gpu "$gpu" --commit "$commit"
    --build-commit "$build_commit" --python "$PYTHON" --peak "$peak_flops" --dry-run "$dry_run")
  local n
  for n in "${notes[@]}"; do args+=(--note "$n"); done
  "$PYTHON" "$helper" "${args[@]}" "$@" || { log "writing the results file failed"; report_failed=1; }
  if [[ -n "${OUT:-}" && -d "${OUT:-}" ]] && ((!dry_run)); then
    cp "$results" "$OUT/" 2>/dev/null
    mkdir -p "$OUT/logs" && cp -r "$work"/*.log "$work/runs" "$OUT/logs/" 2>/dev/null
  fi
  return 0
}

# GPU memory sampler (whole device, MiB) around one run; no-op without nvidia-smi.
sampler_pid=""
start_sampler() {
  sampler_pid=""
  ((dry_run)) && return 0
  command -v nvidia-smi >/dev/null || return 0
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$1" 2>/dev/null &
  sampler_pid=$!
}
stop_sampler() {
  if [[ -n "$sampler_pid" ]]; then
    kill "$sampler_pid" 2>/dev/null
    wait "$sampler_pid" 2>/dev/null
  fi
  sampler_pid=""
}

# ------------------------------------------------------------------ runs
baseline_failed=0 report_failed=0
for m in "${model_list[@]}"; do
  tokens=$((MB[$m] * GA[$m]))
  sets=(--set "train.micro_batch=${MB[$m]}" --set "train.global_batch=$tokens" --set "train.steps=$((WU[$m] + ST[$m]))"
    --set "logging.every=1" --set "logging.metrics=$work/runs/ptrain-$m.jsonl")
  for kv in backend=$ptrain_backend ${PT_SET[$m]}; do sets+=(--set "$kv"); done

  # ptrain validate: the predicted peak memory (needs no GPU, works with a CPU-only binary).
  if [[ -n "$ptrain" && -z "$ptrain_problem" ]]; then
    "$ptrain" validate "${JOB[$m]}" --json "${sets[@]}" >"$work/runs/validate-$m.json" 2>"$work/validate-$m.log" ||
      printf '{"valid": false, "error": %s}\n' "$("$PYTHON" -c 'import json,sys; print(json.dumps(sys.stdin.read()[-300:]))' <"$work/validate-$m.log")" \
        >"$work/runs/validate-$m.json"
  fi

  # ptrain
  if ! skipped ptrain; then
    reason="$ptrain_problem" rc=0
    if [[ -z "$reason" ]]; then
      log "ptrain $m: ${MB[$m]} x ${GA[$m]} sequences/step, ${WU[$m]} warm-up + ${ST[$m]} timed steps"
      start_sampler "$work/runs/ptrain-$m.gpumem"
      timeout "$run_timeout" "$ptrain" run "${JOB[$m]}" --nproc 1 "${sets[@]}" >"$work/ptrain-$m.log" 2>&1
      rc=$?
      stop_sampler
      ((rc == 124)) && reason="timed out after ${run_timeout}s"
    fi
    "$PYTHON" "$helper" ptrain --model "$m" --out "$work/runs/ptrain-$m.json" --log "$work/ptrain-$m.log" \
      --metrics "$work/runs/ptrain-$m.jsonl" --job "${JOB[$m]}" --overrides "backend=$ptrain_backend ${PT_SET[$m]}" --reason "$reason" \
      --rc "$rc" --warmup "${WU[$m]}" --steps "${ST[$m]}" --micro-batch "${MB[$m]}" --grad-accum "${GA[$m]}" --peak "$peak_flops"
    report
  fi

  # PyTorch baseline
  if ! skipped torch; then
    log "pytorch $m: ${MB[$m]} x ${GA[$m]} sequences/step, ${WU[$m]} warm-up + ${ST[$m]} timed steps"
    start_sampler "$work/runs/pytorch-$m.gpumem"
    # shellcheck disable=SC2086  # TB_ARGS holds several flags
    timeout "$run_timeout" "$PYTHON" bench/torch_baseline.py --model "$m" ${TB_ARGS[$m]} --micro-batch "${MB[$m]}" \
      --grad-accum "${GA[$m]}" --warmup "${WU[$m]}" --steps "${ST[$m]}" --peak-flops "$peak_flops" \
      --json-out "$work/runs/pytorch-$m.json" >"$work/pytorch-$m.out" 2>"$work/pytorch-$m.log"
    rc=$?
    stop_sampler
    if ((rc != 0)); then
      baseline_failed=1
      why=$(grep -v '^step ' "$work/pytorch-$m.log" | tail -1 | cut -c1-300)
      ((rc == 124)) && why="timed out after ${run_timeout}s"
      "$PYTHON" -c 'import json,sys; json.dump({"impl": "pytorch", "model": sys.argv[1], "status": "failed",
        "reason": "exit %s: %s" % (sys.argv[2], sys.argv[3])}, open(sys.argv[4], "w"))' "$m" "$rc" "$why" "$work/runs/pytorch-$m.json"
      log "pytorch $m FAILED: $why"
    else
      "$PYTHON" -c 'import json,sys; p=sys.argv[1]; r=json.load(open(p)); r["status"]="ok"; json.dump(r, open(p,"w"), indent=1)' \
        "$work/runs/pytorch-$m.json"
    fi
    report
  fi

done

# ------------------------------------------------------------------ llm.c (GPT-2 only, last)
# Two rows: llm.c's defaults ("llm.c": recompute 1, GELU fusion 0 at its HEAD) and its fastest
# setting ("llm.c (-r 0 -ge 2)": no recompute, GELU fused into cuBLASLt's matmuls forward and
# backward). After every other run, so a call cut short keeps the ptrain and PyTorch rows. The
# binary: $LLMC_DIR/train_gpt2cu as built (scripts/prepare_llmc.sh: sm_90, bf16, cuDNN, carried as
# bench/out/llm.c) when $LLMC_DIR/train_gpt2.cu is absent or not newer, else make builds it there.
if [[ ",$models," == *",gpt2-124m,"* ]] && ! skipped llmc; then
  m=gpt2-124m reason="" llmc_build=""
  if ((dry_run)); then
    reason="dry run: llm.c needs a GPU"
  elif [[ -z "${LLMC_DIR:-}" ]]; then
    reason="no LLMC_DIR: llm.c not brought to the device (no network; ptrain vendors nothing; scripts/prepare_llmc.sh)"
  elif [[ -f "$LLMC_DIR/train_gpt2cu" && ! "$LLMC_DIR/train_gpt2.cu" -nt "$LLMC_DIR/train_gpt2cu" ]]; then
    [[ -x "$LLMC_DIR/train_gpt2cu" ]] || chmod +x "$LLMC_DIR/train_gpt2cu"
    llmc_build="prebuilt $LLMC_DIR/train_gpt2cu"
    [[ -f "$LLMC_DIR/BUILD_INFO" ]] && llmc_build="$llmc_build: $(grep -E '^(llm.c commit|cudnn-frontend|nvcc|make|patch):' "$LLMC_DIR/BUILD_INFO" | paste -sd';')"
    log "llm.c: $llmc_build"
  elif [[ -f "$LLMC_DIR/train_gpt2.cu" ]]; then
    # USE_CUDNN=1 (llm.c's fast attention) needs cudnn-frontend headers in $HOME/cudnn-frontend or
    # $LLMC_DIR/cudnn-frontend: bring them along with llm.c and set LLMC_CUDNN=1. llm.c's Makefile
    # does not find the GPU's compute capability itself: it is passed.
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
    llmc_flags="NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=${LLMC_CUDNN:-0} PRECISION=BF16${cap:+ GPU_COMPUTE_CAPABILITY=$cap}"
    log "llm.c: building train_gpt2cu in $LLMC_DIR ($llmc_flags)"
    # shellcheck disable=SC2086
    if (cd "$LLMC_DIR" && timeout 400 make train_gpt2cu $llmc_flags) >"$work/llmc-build.log" 2>&1; then
      llmc_build="make train_gpt2cu $llmc_flags (on the device)"
    else
      reason="llm.c build failed: $(grep -m1 -iE 'error' "$work/llmc-build.log" | cut -c1-200)"
    fi
  else
    reason="neither $LLMC_DIR/train_gpt2cu nor $LLMC_DIR/train_gpt2.cu"
  fi
  if [[ -z "$reason" ]]; then
    # Synthetic tokens in llm.c's data format: 256 int32 header (magic 20240520, version 1, count), uint16 tokens.
    "$PYTHON" -c 'import array,random,sys
n=1<<22; r=random.Random(1234); h=array.array("i",[0]*256); h[0]=20240520; h[1]=1; h[2]=n
t=array.array("H",(r.randrange(50257) for _ in range(n)))
for p in sys.argv[1:]:
    f=open(p,"wb"); h.tofile(f); t.tofile(f); f.close()' "$work/llmc_train.bin" "$work/llmc_val.bin"
  fi
  for variant in "llm.c||llm.c" "llm.c (-r 0 -ge 2)|-r 0 -ge 2|llm.c-fast"; do
    IFS='|' read -r impl flags tag <<<"$variant"  # runs/$tag-$m.json, ${tag//./}-$m.log
    rc=0
    if [[ -z "$reason" ]]; then
      log "$impl $m: ${MB[$m]} x ${GA[$m]} sequences/step, ${WU[$m]} warm-up + ${ST[$m]} timed steps"
      start_sampler "$work/runs/$tag-$m.gpumem"
      # shellcheck disable=SC2086  # flags holds several
      (cd "$LLMC_DIR" && timeout "$run_timeout" ./train_gpt2cu -i "$work/llmc_train.bin" -j "$work/llmc_val.bin" -e d12 \
        -b "${MB[$m]}" -t 1024 -d $((MB[$m] * GA[$m] * 1024)) -x $((WU[$m] + ST[$m])) -v 100000 -m 1 -s 0 -n 0 \
        -o "$work/${tag//./}-out" -l 6e-4 -u 0 -c 0.1 $flags) >"$work/${tag//./}-$m.log" 2>&1
      rc=$?
      stop_sampler
    fi
    "$PYTHON" "$helper" llmc --model "$m" --impl "$impl" --flags "$flags" --out "$work/runs/$tag-$m.json" \
      --log "$work/${tag//./}-$m.log" --reason "$reason" --overrides "$llmc_build" \
      --rc "$rc" --warmup "${WU[$m]}" --steps "${ST[$m]}" --micro-batch "${MB[$m]}" --grad-accum "${GA[$m]}" --peak "$peak_flops"
    report
  done
fi

report --print
log "results: $results"
if ((report_failed)); then
  exit 1
fi
if ((baseline_failed)); then
  log "a PyTorch baseline failed (see $work/pytorch-*.log)"
  exit 1
fi
exit 0
