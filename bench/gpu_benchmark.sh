#!/usr/bin/env bash
# The GPU benchmark, as one command on one GPU: ptrain against PyTorch at its best on GPT-2 124M
# (T=1024, bf16, micro-batch 32 x 2) and on a Llama-style 1.25B model (T=4096, GQA, SwiGLU,
# micro-batch 2 x 4), then llm.c on the GPT-2 job twice: its defaults and its fastest flags
# (-r 0 -ge 2), then FP8 on the Llama: ptrain's (train.precision: fp8, train.fp8.scaling: current,
# where this ptrain runs it) and PyTorch's (TorchTitan's float8 recipe, bench/torch_fp8.py). With
# --models llama3-8b-slice, the FP8 goal's job (bench/jobs/llama3-8b-slice-h100.yaml: Llama 3 8B's
# layers, 10 of them): ptrain bf16 and fp8 timed, then each trained FP8_LOSS_STEPS (300) steps on the
# same real text (FP8_LOSS_DATA, default data/tiny/train_*.bin: carry data/tiny) for the loss.
#   Like for like: every implementation reads the same token file (bench/benchmark_tokens.py:
# uniform ids over the whole vocabulary, from sample 0 in file order); PyTorch runs at its best
# (bench/torch_search.py: every SDPA backend, torch.compile's default and max-autotune-no-cudagraphs,
# fused AdamW against a compiled step; each trial recorded); each configuration runs --repeats times
# in this one call (ptrain and llm.c a process per repetition, PyTorch windows of one process after
# its search), the median of the repetitions' medians kept with their min and max.
#   For every run: tokens/s, MFU by llm.c's formula (6N + 6LCT, N = all parameters) and by
# TorchTitan's (6N' + 12LHQT, N' = without embedding tables), peak 989 TFLOP/s, peak memory, and
# for the same job `ptrain validate`'s predicted memory and step time against the measured. Writes
# bench/results/<date>-<gpu>.json (runs; goals: gpt2_over_pytorch_best, llama_over_pytorch_best,
# gpt2_over_llmc_best, llama_fp8_over_bf16 (the 8B slice; llama_1b_fp8_over_bf16 beside it),
# llama_fp8_loss_vs_bf16, the PyTorch choices that won, memory and step time
# against validate), stamped so that `python3 bench/results.py --check FILE` tells it unedited
# (figures worked out later go under its "derived"); with $OUT set, copies it there with the logs
# packed in gpu-benchmark-logs.tgz (the device machine returns what is under $OUT).
#
#   bash bench/gpu_benchmark.sh                 # on the GPU machine
#   bash bench/gpu_benchmark.sh --dry-run       # here, on CPU: tiny shapes, checks the plumbing,
#                                               # writes its results file to a temp dir
# Options: --models gpt2-124m,llama-1b[,llama3-8b-slice]   --skip ptrain,torch,llmc,fp8   --warmup N --steps N (timed runs)
#          --repeats N (3)   --no-build (never try a CUDA build on the device)   --results-dir DIR
#          --deadline-s N (no run outlives N s from the start: what is left is recorded as not run)
# A second call on the same machine and commit with other --models adds its runs to the first's
# (bench/out/<date>-<gpu>/ keeps them): the benchmark split over two calls of the device tool.
# Environment: PYTHON (with torch; default: python3 if it imports torch, else /usr/bin/python3),
#   PTRAIN_BACKEND (cuda; cpu in --dry-run, where cuda rehearses the "ptrain unavailable" path),
#   PTRAIN (a ptrain binary or wrapper; default device-bundle/run-ptrain.sh, else build/ptrain,
#   else a fresh CUDA build in build-device/), LLMC_DIR (llm.c to run: its prebuilt train_gpt2cu, as
#   scripts/prepare_llmc.sh leaves in bench/out/llm.c, else a checkout make builds; none is
#   vendored), GPT2_MICRO_BATCH/GPT2_GRAD_ACCUM (32/2), LLAMA_MICRO_BATCH/LLAMA_GRAD_ACCUM (2/4),
#   FP8_MODELS (llama-1b,llama3-8b-slice: those of --models get FP8 rows), FP8_LOSS_STEPS (300),
#   FP8_LOSS_DATA, FP8_LOSS_VALID (llm.c shards of real text for the slice's loss runs and the
#   validation loss at their end: data/tiny/train_*.bin, data/tiny/val.bin; in a dry run the timed
#   runs' token file), PEAK_FLOPS (989e12), RUN_TIMEOUT_S (per ptrain or llm.c process, 300),
#   TORCH_TIMEOUT_S (per PyTorch run, search included, 480), COMPILE_BUDGET_S (per torch.compile
#   trial's first step, 150), TORCH_COMPILE_MODES (default,max-autotune-no-cudagraphs), BENCH_COMMIT (the commit to record when the tree has no .git, as on
#   the device; default git rev-parse HEAD, else device-bundle/COMMIT). LLMC_CUDNN=1 builds llm.c
#   with cuDNN attention (needs cudnn-frontend headers next to it; the prebuilt binary has it).
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
# Exit status: 0 when every bf16 PyTorch baseline that was asked for ran (ptrain, llm.c or an FP8
# row being unavailable or failing is recorded, not an error); 1 when one failed; 2 for bad arguments.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2

dry_run=0 no_build=0 models="gpt2-124m,llama-1b" skip="" warmup="" steps="" repeats=3 results_dir="" deadline=0
while (($#)); do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --no-build) no_build=1 ;;
    --models) models=$2; shift ;;
    --skip) skip=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --steps) steps=$2; shift ;;
    --repeats) repeats=$2; shift ;;
    --deadline-s) deadline=$2; shift ;;
    --results-dir) results_dir=$2; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for n in "$repeats" "$deadline" ${warmup:+"$warmup"} ${steps:+"$steps"}; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "error: --repeats, --deadline-s, --warmup and --steps take a number, not '$n'" >&2; exit 2; }
done
((repeats >= 1 && ${steps:-1} >= 1)) || { echo "error: --repeats and --steps must be at least 1" >&2; exit 2; }
skipped() { [[ ",$skip," == *",$1,"* ]]; }
log() { printf '[gpu-bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ------------------------------------------------------------------ what runs, at which size
# Per model: micro-batch, gradient accumulation, warm-up and timed steps; in a dry run, tiny shapes
# (the same overrides go to ptrain as --set and to the torch baseline as flags).
declare -A MB GA WU ST JOB PT_SET TB_ARGS
MB[gpt2-124m]=${GPT2_MICRO_BATCH:-32}; GA[gpt2-124m]=${GPT2_GRAD_ACCUM:-2}
MB[llama-1b]=${LLAMA_MICRO_BATCH:-2}; GA[llama-1b]=${LLAMA_GRAD_ACCUM:-4}
MB[llama3-8b-slice]=1; GA[llama3-8b-slice]=4
WU[gpt2-124m]=5; ST[gpt2-124m]=20
WU[llama-1b]=3; ST[llama-1b]=10
WU[llama3-8b-slice]=2; ST[llama3-8b-slice]=8
JOB[gpt2-124m]=bench/jobs/gpt2-124m-h100.yaml
JOB[llama-1b]=bench/jobs/llama-1b-h100.yaml
JOB[llama3-8b-slice]=bench/jobs/llama3-8b-slice-h100.yaml
PT_SET[gpt2-124m]="" PT_SET[llama-1b]="" PT_SET[llama3-8b-slice]=""
TB_ARGS[gpt2-124m]="--device cuda" TB_ARGS[llama-1b]="--device cuda" TB_ARGS[llama3-8b-slice]="--device cuda"
loss_steps=${FP8_LOSS_STEPS:-300} loss_data=${FP8_LOSS_DATA:-$root/data/tiny/train_*.bin}
loss_valid=${FP8_LOSS_VALID:-$root/data/tiny/val.bin}
if ((dry_run)); then
  MB[gpt2-124m]=2; GA[gpt2-124m]=2; MB[llama-1b]=2; GA[llama-1b]=2; GA[llama3-8b-slice]=2
  WU[gpt2-124m]=1; ST[gpt2-124m]=3; WU[llama-1b]=1; ST[llama-1b]=3; WU[llama3-8b-slice]=1; ST[llama3-8b-slice]=3
  PT_SET[gpt2-124m]="cluster.gpu=cpu model.layers=2 model.hidden=64 model.heads=4 model.vocab=512 model.seq_len=64"
  PT_SET[llama-1b]="cluster.gpu=cpu model.layers=2 model.hidden=64 model.heads=4 model.kv_heads=2 model.ffn_hidden=176 model.vocab=512 model.seq_len=128"
  PT_SET[llama3-8b-slice]=${PT_SET[llama-1b]}
  TB_ARGS[gpt2-124m]="--device cpu --no-compile --layers 2 --hidden 64 --heads 4 --vocab 512 --seq 64"
  TB_ARGS[llama-1b]="--device cpu --no-compile --layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 176 --vocab 512 --seq 128"
  TB_ARGS[llama3-8b-slice]=${TB_ARGS[llama-1b]}
  loss_steps=${FP8_LOSS_STEPS:-12} loss_data=${FP8_LOSS_DATA:-}  # empty: the timed runs' token file
fi
[[ -n "$warmup" ]] && for m in "${!WU[@]}"; do WU[$m]=$warmup; done
[[ -n "$steps" ]] && for m in "${!ST[@]}"; do ST[$m]=$steps; done
[[ "$loss_steps" =~ ^[0-9]+$ ]] && ((loss_steps > 10)) ||
  { echo "error: FP8_LOSS_STEPS takes a number above 10 (the loss is the mean of the last 10), not '$loss_steps'" >&2; exit 2; }
IFS=, read -r -a model_list <<<"$models"
IFS=, read -r -a fp8_models <<<"${FP8_MODELS:-llama-1b,llama3-8b-slice}"
for m in "${model_list[@]}" "${fp8_models[@]}"; do
  [[ -n "${JOB[$m]:-}" ]] || { echo "error: unknown model '$m' (gpt2-124m, llama-1b, llama3-8b-slice)" >&2; exit 2; }
done

# ------------------------------------------------------------------ python, commit, date, gpu, work dir
if [[ -z "${PYTHON:-}" ]]; then
  if python3 -c 'import torch' >/dev/null 2>&1; then PYTHON=python3; else PYTHON=/usr/bin/python3; fi
fi
commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || true)
if [[ -n "$commit" ]] && [[ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  commit="$commit-dirty"
fi
build_commit=""
[[ -f device-bundle/COMMIT ]] && build_commit=$(cat device-bundle/COMMIT)
commit=${BENCH_COMMIT:-${commit:-${build_commit:-unknown}}}
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
  # Another commit's runs go; this commit's other models stay (a benchmark split over two calls).
  [[ "$(cat "$work/COMMIT" 2>/dev/null)" == "$commit" ]] || rm -rf "$work"
  results_dir=${results_dir:-$root/bench/results}
fi
mkdir -p "$work/runs" "$work/tokens" "$results_dir"
echo "$commit" >"$work/COMMIT"
results="$results_dir/$date_tag-$gpu_slug.json"
log "gpu: $gpu; work dir: $work; results: $results; python: $PYTHON"

run_timeout=${RUN_TIMEOUT_S:-300}
torch_timeout=${TORCH_TIMEOUT_S:-480}
# With --deadline-s, no run outlives the call's deadline: each gets what is left, at most its own
# timeout, and one that would get less than a minute is recorded as not run ("no time left").
limit_for() {
  local left=$((deadline ? deadline - SECONDS : $1))
  echo $((left < $1 ? left : $1))
}
# ptrain trains with this backend (the jobs say cuda); the dry run uses cpu, and PTRAIN_BACKEND=cuda
# with --dry-run rehearses the "ptrain unavailable" path here.
if ((dry_run)); then ptrain_backend=${PTRAIN_BACKEND:-cpu}; else ptrain_backend=${PTRAIN_BACKEND:-cuda}; fi
peak_flops=${PEAK_FLOPS:-989e12}
helper=("$PYTHON" "$root/bench/gpu_benchmark_report.py")
for m in "${model_list[@]}"; do rm -f "$work/runs/"*"-$m"*; done  # this call's models run afresh
notes=()

# ------------------------------------------------------------------ the tokens every implementation reads
# Per model, enough for PyTorch's warm-up and repetitions without wrapping: its shape and real
# vocabulary from torch_baseline.py --describe, the file from bench/benchmark_tokens.py, its
# description (format, sha256) in tokens/<model>.json, and ptrain's --set for it.
declare -A TOKENS TOKEN_SETS
for m in "${model_list[@]}"; do
  # shellcheck disable=SC2086  # TB_ARGS holds several flags
  shape=$("$PYTHON" bench/torch_baseline.py --model "$m" ${TB_ARGS[$m]} --describe | "$PYTHON" -c \
    'import json,sys; d=json.load(sys.stdin); print(d["config"]["seq"], d["data_vocab"])') ||
    { echo "error: torch_baseline.py --describe failed for $m" >&2; exit 1; }
  read -r seq vocab <<<"$shape"
  count=$(((WU[$m] + repeats * ST[$m]) * MB[$m] * GA[$m] * seq + 1))
  "$PYTHON" bench/benchmark_tokens.py --vocab "$vocab" --count "$count" --out "$work/tokens/$m" \
    >"$work/tokens/$m.json" || { echo "error: bench/benchmark_tokens.py failed for $m" >&2; exit 1; }
  TOKENS[$m]=$work/tokens/$m
  format=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["format"])' "$work/tokens/$m.json")
  TOKEN_SETS[$m]="data.format=$format data.train=$work/tokens/$m data.shuffle=false"
  log "tokens $m: $count ids below $vocab ($format, $work/tokens/$m)"
done

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
  "${helper[@]}" "${args[@]}" "$@" || { log "writing the results file failed"; report_failed=1; }
  if [[ -n "${OUT:-}" && -d "${OUT:-}" ]] && ((!dry_run)); then  # two files back, whatever ran
    cp "$results" "$OUT/" 2>/dev/null
    tar czf "$OUT/gpu-benchmark-logs.tgz" -C "$work" --exclude tokens . 2>/dev/null
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

# run_ptrain TAG IMPL MODEL [KEY=VALUE ...]: ptrain validate, then --repeats processes of the job
# with those keys set. An FP8 row whose job validate refuses (a ptrain without train.precision:
# fp8) is "unavailable", with validate's reason. RUN_GA, RUN_WARMUP, RUN_STEPS, RUN_REPEATS, RUN_DATA
# (--set keys) and RUN_TOKENS (its description), when set, replace the model's gradient
# accumulation, steps, --repeats and token file (the loss runs'); RUN_REASON, why it cannot run.
run_ptrain() {
  local tag=$1 impl=$2 m=$3
  shift 3
  local ga=${RUN_GA:-${GA[$m]}} wu=${RUN_WARMUP:-${WU[$m]}} st=${RUN_STEPS:-${ST[$m]}} reps=${RUN_REPEATS:-$repeats}
  local data=${RUN_DATA:-${TOKEN_SETS[$m]}} tokens=${RUN_TOKENS:-$work/tokens/$m.json}
  local sets=() kv r rc limit reason=${RUN_REASON:-$ptrain_problem} suffix=${tag#ptrain} rep_args=()
  suffix=${suffix:+-$suffix}  # validate-<model>-fp8.json beside validate-<model>.json
  for kv in "train.micro_batch=${MB[$m]}" "train.global_batch=$((MB[$m] * ga))" "train.steps=$((wu + st))" \
    logging.every=1 backend=$ptrain_backend ${PT_SET[$m]} $data "$@"; do sets+=(--set "$kv"); done
  local vfile="$work/runs/validate-$m$suffix.json" vlog="$work/validate-$m$suffix.log"
  if [[ -z "$reason" ]]; then  # the predicted memory and step time (no GPU needed)
    "$ptrain" validate "${JOB[$m]}" --json "${sets[@]}" >"$vfile" 2>"$vlog"
    rc=$?
    if ((rc != 0)); then
      printf '{"valid": false, "error": %s}\n' "$("$PYTHON" -c 'import json,sys; print(json.dumps(sys.stdin.read()[-300:]))' \
        <"$vlog")" >"$vfile"
      [[ "$impl" == *fp8* ]] && reason="validate exits $rc: $( (grep -i -m1 error "$vlog" || tail -1 "$vlog") | cut -c1-250)"
    fi
  fi
  for ((r = 1; r <= reps; r++)); do
    [[ -n "$reason" ]] && break
    rep_args+=(--metrics "$work/runs/$tag-$m-r$r.jsonl" --log "$work/$tag-$m-r$r.log")
    limit=$(limit_for "$run_timeout")
    if ((limit < 60)); then
      echo "error: no time left (--deadline-s $deadline)" >"$work/$tag-$m-r$r.log"
      rep_args+=(--rc 124)
      continue
    fi
    log "$impl $m, repetition $r/$reps: ${MB[$m]} x $ga sequences/step, $wu warm-up + $st timed steps"
    start_sampler "$work/runs/$tag-$m-r$r.gpumem"
    timeout "$limit" "$ptrain" run "${JOB[$m]}" --nproc 1 "${sets[@]}" \
      --set "logging.metrics=$work/runs/$tag-$m-r$r.jsonl" >"$work/$tag-$m-r$r.log" 2>&1
    rc=$?
    stop_sampler
    ((rc == 124)) && echo "error: timed out after ${limit}s" >>"$work/$tag-$m-r$r.log"
    rep_args+=(--rc "$rc")
  done
  "${helper[@]}" ptrain --impl "$impl" --model "$m" --out "$work/runs/$tag-$m.json" --job "${JOB[$m]}" \
    --overrides "backend=$ptrain_backend ${PT_SET[$m]} $data $*" --reason "$reason" "${rep_args[@]}" \
    --tokens "$tokens" --warmup "$wu" --steps "$st" --micro-batch "${MB[$m]}" \
    --grad-accum "$ga" --validate "$(basename "$vfile")" --peak "$peak_flops"
  report
}

# failed_torch_row TAG MODEL REASON: the PyTorch run's row when it did not finish.
failed_torch_row() {
  "$PYTHON" -c 'import json,sys; json.dump({"impl": sys.argv[1], "model": sys.argv[2], "status": "failed",
    "reason": sys.argv[3]}, open(sys.argv[4], "w"))' "$([[ $1 == *fp8 ]] && echo 'pytorch fp8' || echo pytorch)" \
    "$2" "$3" "$work/runs/$1-$2.json"
  log "$1 $2 FAILED: $3"
}

# run_torch TAG MODEL [torch_baseline.py flags ...]: one process, its search and --repeats windows.
# Returns 1 when it failed (recorded as a failed row).
run_torch() {
  local tag=$1 m=$2 rc why limit
  shift 2
  limit=$(limit_for "$torch_timeout")
  if ((limit < 60)); then
    failed_torch_row "$tag" "$m" "not run: no time left (--deadline-s $deadline)"
    report
    return 1
  fi
  log "$tag $m: ${MB[$m]} x ${GA[$m]} sequences/step, search, ${WU[$m]} warm-up + $repeats x ${ST[$m]} timed steps $*"
  start_sampler "$work/runs/$tag-$m.gpumem"
  # shellcheck disable=SC2086  # TB_ARGS holds several flags
  timeout "$limit" "$PYTHON" bench/torch_baseline.py --model "$m" ${TB_ARGS[$m]} --micro-batch "${MB[$m]}" \
    --grad-accum "${GA[$m]}" --warmup "${WU[$m]}" --steps "${ST[$m]}" --repeats "$repeats" --peak-flops "$peak_flops" \
    --compile-budget-s "${COMPILE_BUDGET_S:-150}" --compile-modes "${TORCH_COMPILE_MODES:-default,max-autotune-no-cudagraphs}" \
    --tokens "${TOKENS[$m]}" "$@" \
    --json-out "$work/runs/$tag-$m.json" >"$work/$tag-$m.out" 2>"$work/$tag-$m.log"
  rc=$?
  stop_sampler
  if ((rc != 0)); then
    why=$(grep -Ev '(^| )step [0-9]+/[0-9]+ loss ' "$work/$tag-$m.log" | tail -1 | cut -c1-300)
    ((rc == 124)) && why="timed out after ${limit}s"
    failed_torch_row "$tag" "$m" "exit $rc: $why"
  fi
  report
  return $((rc != 0))
}

# ------------------------------------------------------------------ bf16: ptrain, PyTorch
baseline_failed=0 report_failed=0
for m in "${model_list[@]}"; do
  skipped ptrain || run_ptrain ptrain ptrain "$m"
  skipped torch || run_torch pytorch "$m" || baseline_failed=1
done

# ------------------------------------------------------------------ llm.c (GPT-2 only)
# Two rows: llm.c's defaults ("llm.c": recompute 1, GELU fusion 0 at its HEAD) and its fastest
# setting ("llm.c (-r 0 -ge 2)": no recompute, GELU fused into cuBLASLt's matmuls forward and
# backward), each --repeats processes, on the GPT-2 token file (llm.c's loader takes its B*T chunks
# in an order of its own, the ids are the same). After the bf16 runs, so a call cut
# short keeps the ptrain and PyTorch rows. The binary: $LLMC_DIR/train_gpt2cu as built
# (scripts/prepare_llmc.sh: sm_90, bf16, cuDNN, carried as bench/out/llm.c) when
# $LLMC_DIR/train_gpt2.cu is absent or not newer, else make builds it there.
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
  for variant in "llm.c||llm.c" "llm.c (-r 0 -ge 2)|-r 0 -ge 2|llm.c-fast"; do
    IFS='|' read -r impl flags tag <<<"$variant"  # runs/$tag-$m.json, ${tag//./}-$m-r<N>.log
    rep_args=()
    for ((r = 1; r <= repeats; r++)); do
      [[ -n "$reason" ]] && break
      limit=$(limit_for "$run_timeout")
      if ((limit < 60)); then
        echo "error: no time left (--deadline-s $deadline)" >"$work/${tag//./}-$m-r$r.log"
        rep_args+=(--rc 124 --log "$work/${tag//./}-$m-r$r.log")
        continue
      fi
      log "$impl $m, repetition $r/$repeats: ${MB[$m]} x ${GA[$m]} sequences/step, ${WU[$m]} warm-up + ${ST[$m]} timed steps"
      start_sampler "$work/runs/$tag-$m-r$r.gpumem"
      # shellcheck disable=SC2086  # flags holds several
      (cd "$LLMC_DIR" && timeout "$limit" ./train_gpt2cu -i "${TOKENS[$m]}" -j "${TOKENS[$m]}" -e d12 \
        -b "${MB[$m]}" -t 1024 -d $((MB[$m] * GA[$m] * 1024)) -x $((WU[$m] + ST[$m])) -v 100000 -m 1 -s 0 -n 0 \
        -o "$work/${tag//./}-out" -l 6e-4 -u 0 -c 0.1 $flags) >"$work/${tag//./}-$m-r$r.log" 2>&1
      rc=$?
      stop_sampler
      rep_args+=(--rc "$rc" --log "$work/${tag//./}-$m-r$r.log")
    done
    "${helper[@]}" llmc --model "$m" --impl "$impl" --flags "$flags" --out "$work/runs/$tag-$m.json" \
      --reason "$reason" --overrides "$llmc_build" --tokens "$work/tokens/$m.json" "${rep_args[@]}" \
      --warmup "${WU[$m]}" --steps "${ST[$m]}" --micro-batch "${MB[$m]}" --grad-accum "${GA[$m]}" --peak "$peak_flops"
    report
  done
fi

# ------------------------------------------------------------------ FP8 (last)
# ptrain with train.precision: fp8 (scaling current, TorchTitan's tensorwise), and PyTorch's FP8
# baseline with the bf16 run's SDPA backend, compile mode and optimizer (no search of its own).
if ! skipped fp8; then
  for m in "${fp8_models[@]}"; do
    [[ ",$models," == *",$m,"* ]] || continue
    skipped ptrain || run_ptrain ptrainfp8 "ptrain fp8" "$m" train.precision=fp8 train.fp8.scaling=current
    if ! skipped torch; then
      read -r -a pinned <<<"$("${helper[@]}" pinned-flags --run "$work/runs/pytorch-$m.json")"
      run_torch pytorchfp8 "$m" --fp8 "${pinned[@]}"
    fi
  done
fi

# ------------------------------------------------------------------ FP8's loss on the goal's job
# The Llama 3 8B slice, bf16 then fp8 (current scaling), FP8_LOSS_STEPS steps each on the same real
# text in the same order: one microbatch a step, 30 warm-up steps of the learning rate and a cosine
# decay, one process each, the validation loss at the end. The goal compares the mean loss of the
# last 10 steps; data/tiny's 80 sequences of 8,192 make 300 steps 3.75 epochs, so the record also
# holds the last 10 steps of the first epoch and the validation loss, on text the runs never trained on.
m=llama3-8b-slice
if [[ ",$models," == *",$m,"* ]] && ! skipped fp8 && ! skipped ptrain; then
  text_sets="data.format=llmc data.train=$loss_data data.valid=$loss_valid data.eval_every=$loss_steps"
  text_tokens=$work/tokens/text.json text_reason=""
  if [[ -z "$loss_data" ]]; then  # the dry run: the timed runs' tokens stand in for text
    text_sets="${TOKEN_SETS[$m]} data.valid=$work/tokens/$m data.eval_every=$loss_steps"
    text_tokens=$work/tokens/$m.json
  elif ! "${helper[@]}" describe-text --glob "$loss_data" --valid "$loss_valid" --out "$text_tokens"; then
    text_reason="no text for the loss runs: nothing matches $loss_data, or no $loss_valid (run scripts/prepare_tiny_data.sh and carry data/tiny, or set FP8_LOSS_DATA and FP8_LOSS_VALID)"
  fi
  for run in "ptraintext|ptrain text|train.precision=bf16" \
    "ptrainfp8text|ptrain fp8 text|train.precision=fp8 train.fp8.scaling=current"; do
    IFS='|' read -r tag impl precision <<<"$run"
    # shellcheck disable=SC2086  # precision holds one or two keys
    RUN_GA=1 RUN_WARMUP=10 RUN_STEPS=$((loss_steps - 10)) RUN_REPEATS=1 RUN_DATA="$text_sets" RUN_TOKENS="$text_tokens" \
      RUN_REASON="$text_reason" run_ptrain "$tag" "$impl" "$m" $precision optimizer.warmup_steps=30 \
      optimizer.decay=cosine optimizer.min_lr=3.0e-5
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
