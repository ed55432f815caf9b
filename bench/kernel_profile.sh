#!/usr/bin/env bash
# Where a training step's GPU time goes, kernel by kernel: one step of a bench job under Nsight
# Compute (one metric, gpu__time_duration, clocks and caches left as they run), tabled by
# bench/kernel_table.py. For ptrain the profiled step is a whole run of one optimizer step of one
# microbatch (the one-time set-up kernels show up too, small); for PyTorch it is the last of four
# compiled steps (bench/torch_baseline.py --profile-last-step brackets it with cudaProfilerStart/Stop).
#
#   bash bench/kernel_profile.sh [--model gpt2-124m|llama-1b] [--impl ptrain|pytorch] [--out DIR]
#
# Writes DIR/<impl>-<model>.csv (raw), .txt (the table) and .json; DIR defaults to $OUT when set
# (the device tool), else bench/out/profile. Environment: PTRAIN (as bench/gpu_benchmark.sh),
# NCU (default: ncu on PATH, else /usr/local/cuda/bin/ncu), PYTHON, GPT2_MICRO_BATCH (32),
# LLAMA_MICRO_BATCH (2), PTRAIN_CUDNN_ATTENTION (ptrain's attention; auto is profiled as fast: see below).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
model=gpt2-124m impl=ptrain out=${OUT:-bench/out/profile}
while (($#)); do
  case "$1" in
    --model) model=$2; shift ;;
    --impl) impl=$2; shift ;;
    --out) out=$2; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$model" in
  gpt2-124m) job=bench/jobs/gpt2-124m-h100.yaml micro=${GPT2_MICRO_BATCH:-32} ;;
  llama-1b) job=bench/jobs/llama-1b-h100.yaml micro=${LLAMA_MICRO_BATCH:-2} ;;
  *) echo "error: unknown model '$model' (gpt2-124m, llama-1b)" >&2; exit 2 ;;
esac
ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
[[ -x "$ncu" ]] || { echo "error: Nsight Compute not found ('$ncu'; set NCU)" >&2; exit 2; }
python=${PYTHON:-python3}
mkdir -p "$out"
base="$out/$impl-$model"
ncu_args=(--metrics gpu__time_duration.sum --csv --page raw --clock-control none --cache-control none
  --target-processes all --log-file "$base.csv")
case "$impl" in
  ptrain)
    # auto times ptrain's kernels against cuDNN's at each shape's first call; under the profiler's
    # kernel replay those timings are not the run's (2026-11-28: the Llama backward went to ours,
    # 15.7 against 23.6 ms, where the unprofiled run takes cuDNN's), so profile cuDNN's kernels, as
    # the benchmark jobs run them; PTRAIN_CUDNN_ATTENTION=off profiles ours.
    if [[ -z "${PTRAIN_CUDNN_ATTENTION:-}" || "$PTRAIN_CUDNN_ATTENTION" == auto ]]; then
      export PTRAIN_CUDNN_ATTENTION=fast
      echo "kernel_profile: PTRAIN_CUDNN_ATTENTION=fast (auto's timing does not hold under the profiler)" >&2
    fi
    ptrain=${PTRAIN:-$([[ -x device-bundle/run-ptrain.sh ]] && echo device-bundle/run-ptrain.sh || echo build/ptrain)}
    "$ncu" "${ncu_args[@]}" "$ptrain" run "$job" --nproc 1 --set train.steps=1 --set "train.micro_batch=$micro" \
      --set "train.global_batch=$micro" --set logging.metrics="$base.jsonl" >"$base.log" 2>&1 ;;
  pytorch)
    "$ncu" "${ncu_args[@]}" --profile-from-start off "$python" bench/torch_baseline.py --model "$model" \
      --micro-batch "$micro" --warmup 3 --steps 1 --profile-last-step >"$base.log" 2>&1 ;;
  *) echo "error: unknown impl '$impl' (ptrain, pytorch)" >&2; exit 2 ;;
esac
"$python" bench/kernel_table.py "$base.csv" --json "$base.json" | tee "$base.txt"
