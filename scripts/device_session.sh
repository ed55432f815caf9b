#!/usr/bin/env bash
# A GPU session's device checks in one call of the device tool (which returns at most 8 files from
# $OUT, 2 folders deep): correctness side by side first, then the timing runs alone.
#   1. side by side: the CUDA op tests; compute-sanitizer memcheck over the attention tests; `ptrain
#      run` under NCCL in every layout against one rank (tests/comm/test_nccl.py, --one-gpu on one
#      GPU); the CUDA backend's curves against the CPU's (tests/train/test_run.py CudaBackend; its
#      fp32 run's checkpoint is written asynchronously, the default: the page-locked copy's first run);
#      TensorBoard's own reader on ptrain's event files (tests/train/test_tensorboard.py); the FP8
#      GEMM path's op tests alone and under memcheck (logs/fp8-op-tests, sanitizer-fp8), then alone
#      its GEMM and cast timings at Llama 3 8B's shapes (logs/fp8-timing.log), then, where the FP8 op
#      tests passed, FP8 training's curves on the GPU against the CPU's (logs/fp8-curves.log);
#   f. alone, with --fp8: issue 41's FP8 goals on their job, bench/gpu_benchmark.sh --models
#      llama3-8b-slice (Llama 3 8B's layers, 10 of them): ptrain bf16 and fp8 timed, then 300 steps
#      of each on data/tiny's text (carry it) for the loss, into $OUT (its results file);
#   2. alone: a 3.6B-parameter Llama's start-up to its first step (bench/startup_time.py --size 3b
#      --backend cuda), then `ptrain profile --backend cuda` (on an H100/H200 with its FP8 GEMM
#      table too, gemm/fp8, which validate then times FP8 jobs from) and the step-time sweep against it
#      (bench/step_time_vs_validate.py --backend cuda --record-accuracy), the profile kept as
#      $OUT/profile-<gpu>.json (e.g. profile-nvidia-h100-80gb-hbm3.json: commit an H100 SXM's as
#      profiles/h100-sxm.json, the built-in one) with its results;
#   3. alone, with --bench: bench/gpu_benchmark.sh (ptrain against PyTorch compiled, and against
#      llm.c's defaults and its -r 0 -ge 2 when bench/out/llm.c/train_gpt2cu was carried: LLMC_DIR)
#      into $OUT, then ptrain alone with one change each, to time against it: attention on its own
#      kernels (PTRAIN_CUDNN_ATTENTION=off, both models, logs/cudnn-off), bias gradients by column
#      sums rather than the BGRADB epilogue (PTRAIN_CUDA_BGRAD=0, GPT-2, logs/bgrad-off), cuDNN's
#      deterministic backward (the Llama, logs/cudnn-deterministic), their results in logs.tgz; first,
#      a model whose ptrain row failed under the default attention mode (auto) again under fast;
#   4. alone, with --kernels: one step's GPU time kernel by kernel under Nsight Compute
#      (bench/kernel_profile.sh): ptrain's GPT-2 124M and Llama 1.25B, and GPT-2 again with bias
#      gradients by column sums (PTRAIN_CUDA_BGRAD=0), tables in logs/kernels*/. The profiled run is
#      a whole one-step run, so the first run's checks show up too: cuDNN's plans, and ptrain's own
#      attention kernels once per shape (cudnn_attention_check.h).
# Every step's log goes into $OUT/logs.tgz, packed again after each phase, so a call cut short by
# its time limit still returns what ran. Needs device-bundle/ (scripts/bundle_for_device.sh), carried;
# with --bench, also bench/out/llm.c/ (scripts/prepare_llmc.sh: llm.c's train_gpt2cu built here);
# with --fp8, data/tiny (scripts/prepare_tiny_data.sh).
#   bash scripts/device_session.sh [--no-checks] [--fp8] [--bench] [--no-sweep] [--startup] [--kernels]
#   # device tool: carry ["device-bundle"], plus "data/tiny" with --fp8, "bench/out/llm.c" with --bench
#   # (64 MiB in all: the bundle was 13.7 MiB at 62c0bbf, data/tiny 1.4 MiB; a carried path stays on
#   # the warm machine for later calls)
# FP8 on CUDA is refused until its GPU checks pass (config/engine_limits.h): this script lifts that
# (PTRAIN_DEBUG_FP8_CUDA=unchecked) for FP8's curves, --fp8 and --bench's FP8 rows when the FP8 op
# tests passed in this call or, with --no-checks, in an earlier call on this machine with the same
# bundle (bench/out/fp8-op-tests-passed holds its commit).
# A session's 15 device minutes, planned (issue 41): call 1 `--fp8 --no-sweep` (checks ~130 s, the
# FP8 curves ~40 s, the slice ~250 s by validate; its benchmark stops what would outlive the call,
# CALL_S, default 600), call 2 `--no-checks --no-sweep --bench` (the bf16 goals). Keep call 1's
# results file before call 2: both write <date>-<gpu>.json (a warm machine's second keeps the first's rows).
# --no-sweep leaves phase 2 out. All three phases took ~440 s on 2026-11-28 (99 + 145 + 193 s, llm.c
# carried), within one call of the device tool (at most 600 s). --startup (with --no-sweep) still runs phase 2's start-up, once, right
# after phase 1: the 3B shard's start-up without the profile and sweep. --no-checks leaves phase 1
# out (a second call of a session: e.g. --no-checks --no-sweep --kernels).
# Exit 0 when every correctness check passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
checks=1 bench=0 sweep=1 startup=0 kernels=0 fp8=0
for arg in "$@"; do
  case "$arg" in
    --no-checks) checks=0 ;;
    --fp8) fp8=1 ;;
    --bench) bench=1 ;;
    --no-sweep) sweep=0 ;;
    --startup) startup=1 ;;
    --kernels) kernels=1 ;;
    *) echo "error: unknown argument '$arg' (expected --no-checks, --fp8, --bench, --no-sweep, --startup, --kernels)" >&2
      exit 2 ;;
  esac
done
[ -f device-bundle/payload.tar.xz ] || { echo "error: no device-bundle/ (run scripts/bundle_for_device.sh and carry it)" >&2; exit 2; }
out=${OUT:-$(mktemp -d)}
work=$(mktemp -d)
mkdir -p "$out" "$work/logs"
t0=$(date +%s)
say() { echo "[device_session $(($(date +%s) - t0)) s] $*"; }
pack() { tar czf "$out/logs.tgz" -C "$work" logs; }
# shellcheck disable=SC1091
source device-bundle/env.sh || exit 1
bin=$PTRAIN_BUNDLE_BIN
ptrain=$PWD/device-bundle/run-ptrain.sh
export BENCH_COMMIT=$(cat device-bundle/COMMIT)
nvidia-smi -L | tee "$work/logs/gpus.log"
"$ptrain" --version 2>&1 | tee "$work/logs/version.log"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
one_gpu=$([ "$(nvidia-smi -L | grep -c '^GPU ')" -ge 2 ] || echo --one-gpu)
check() {  # check NAME LIMIT_S COMMAND...: runs it into its log, then the log's last lines and exit
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" >"$work/logs/$name.log" 2>&1
  echo "exit $?" >>"$work/logs/$name.log"
}
passed() { [ "$(tail -n 1 "$work/logs/$1.log")" = "exit 0" ]; }  # passed NAME: check NAME exited 0
verdict() {  # verdict NAME: check NAME's exit; a failure fails the session and shows its log's end
  echo "== $1: $(tail -n 1 "$work/logs/$1.log")"
  passed "$1" || { failed=1; tail -n 8 "$work/logs/$1.log"; }
}

failed=0
fp8_env=()  # FP8 on CUDA allowed: after its op tests passed (here, or in an earlier call: --no-checks)
fp8_passed=bench/out/fp8-op-tests-passed
if [ "$checks" = 0 ] && [ "$(cat "$fp8_passed" 2>/dev/null)" = "$BENCH_COMMIT" ]; then
  fp8_env=(PTRAIN_DEBUG_FP8_CUDA=unchecked)
fi
if [ "$checks" = 1 ]; then
  say "1: correctness, side by side"
  # cuDNN's warnings and errors (a declined attention graph says why there) into their own log.
  check op-tests 300 env CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$work/logs/cudnn-op-tests.log" "$bin/cuda_op_tests" &
  check sanitizer-attention 300 "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 20 "$bin/cuda_op_tests" "[attention]~[cudnn]" &
  check nccl-training 300 python3 tests/comm/test_nccl.py --ptrain "$ptrain" $one_gpu -v &
  check cuda-backend 300 python3 tests/train/test_run.py --ptrain "$ptrain" CudaBackend -v &
  check tensorboard 120 python3 tests/train/test_tensorboard.py --ptrain "$ptrain" -v &
  # The FP8 GEMM path (issue 41): its op tests alone in their own log (they run in op-tests too),
  # the cast's tiles under memcheck.
  check fp8-op-tests 120 "$bin/cuda_op_tests" "[fp8]" --durations yes &
  check sanitizer-fp8 300 "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 20 "$bin/cuda_op_tests" "[fp8]" &
  wait
  for name in op-tests sanitizer-attention nccl-training cuda-backend tensorboard fp8-op-tests sanitizer-fp8; do
    verdict "$name"
  done
  pack
  say "1b: FP8 GEMM and cast timings at Llama 3 8B's shapes, alone (docs/fp8.md: What the GPU run must show)"
  check fp8-timing 120 "$bin/cuda_op_tests" "[fp8-timing]" -r compact
  grep "TFLOP" "$work/logs/fp8-timing.log"
  pack
  if passed fp8-op-tests; then
    fp8_env=(PTRAIN_DEBUG_FP8_CUDA=unchecked)
    mkdir -p "$(dirname "$fp8_passed")" && echo "$BENCH_COMMIT" >"$fp8_passed"
    say "1c: FP8 training on the GPU against the CPU's curves (the FP8 op tests passed)"
    check fp8-curves 240 env "${fp8_env[@]}" python3 tests/train/test_run.py --ptrain "$ptrain" \
      CudaBackend.test_fp8_loss_curve_matches_the_cpu_backend -v
    verdict fp8-curves
    pack
  else
    say "the FP8 op tests failed: no FP8 training on the GPU in this call"
  fi
fi

if [ "$fp8" = 1 ]; then
  say "f: FP8's goals on the Llama 3 8B slice, alone"
  left=$((${CALL_S:-600} - 15 - ($(date +%s) - t0)))  # what the device call leaves, less packing
  if [ ${#fp8_env[@]} = 0 ]; then
    say "skipped: the FP8 op tests did not pass (in this call, or with --no-checks in an earlier one)"
  elif [ "$left" -lt 120 ]; then
    say "skipped: ${left} s left of the call (CALL_S ${CALL_S:-600})"
  else
    check fp8-goals "$left" env "${fp8_env[@]}" bash bench/gpu_benchmark.sh --models llama3-8b-slice \
      --skip torch,llmc --deadline-s $((left - 10)) --results-dir "$out"
    tail -n 12 "$work/logs/fp8-goals.log"
  fi
  pack
fi

startup_runs=$([ "$sweep" = 1 ] && echo 3 || echo 1)
if [ "$sweep" = 1 ] || [ "$startup" = 1 ]; then
say "2: start-up of a 3B shard ($startup_runs run(s)), alone"
check startup 150 python3 bench/startup_time.py --ptrain "$ptrain" --size 3b --backend cuda --runs "$startup_runs"
tail -n 3 "$work/logs/startup.log"
find bench/results -name '*-startup-time-3b-cuda.json' -newer "$work/logs/gpus.log" -exec cp {} "$out/" \;
pack
fi

if [ "$sweep" = 1 ]; then
say "2: the profile and the step-time sweep, alone"
profile=$out/profile-$(python3 bench/results.py --gpu-slug "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)").json
check step-time 420 python3 bench/step_time_vs_validate.py --ptrain "$ptrain" --backend cuda --steps 10 \
  --profile-out "$profile" --record-accuracy
tail -n 12 "$work/logs/step-time.log"
find bench/results -name '*-step-time-vs-validate-*.json' -newer "$work/logs/gpus.log" -exec cp {} "$out/" \;
[ -s "$profile" ] || rm -f "$profile"  # a profile that did not finish
pack
fi

if [ "$bench" = 1 ]; then
  say "3: the GPU benchmark, alone"
  # llm.c's binary when it was carried (the ablations below skip llm.c).
  llmc_env=()
  [ -f bench/out/llm.c/train_gpt2cu ] && llmc_env=(LLMC_DIR="$PWD/bench/out/llm.c" LLMC_CUDNN=1)
  say "llm.c: ${llmc_env[*]:-not carried (bench/out/llm.c/train_gpt2cu)}"
  check gpu-benchmark 540 env "${llmc_env[@]}" "${fp8_env[@]}" bash bench/gpu_benchmark.sh --results-dir "$out"
  tail -n 12 "$work/logs/gpu-benchmark.log"
  pack
  # The default attention mode, auto, times cuDNN against ptrain's kernels per shape; where a model's
  # ptrain row failed under it, that model runs first again under fast (cuDNN wherever it has a
  # plan, the mode of 2026-11-27's measurements), so the call still times ptrain against the rows above.
  auto_failed=$(python3 -c 'import glob, json, sys
docs = [json.load(open(f)) for f in glob.glob(sys.argv[1] + "/*.json")]
rows = [r for d in docs if isinstance(d, dict) for r in d.get("runs") or [] if isinstance(r, dict)]
print(",".join(sorted({r.get("model") for r in rows if r.get("impl") == "ptrain" and r.get("status") != "ok"})))' "$out" 2>/dev/null)
  [ -n "$auto_failed" ] && say "ptrain failed under auto for $auto_failed: again under PTRAIN_CUDNN_ATTENTION=fast"
  # ptrain alone, one change each, against the default above, most telling first (each packed as it
  # ends, so a call cut short keeps what ran): attention on ptrain's own kernels instead of cuDNN's
  # (kernels/cuda/cudnn_attention.h); bias gradients by column sums instead of the BGRADB epilogue;
  # cuDNN's deterministic backward.
  for run in ${auto_failed:+cudnn-fast:PTRAIN_CUDNN_ATTENTION=fast:$auto_failed} \
    cudnn-off:PTRAIN_CUDNN_ATTENTION=off:gpt2-124m,llama-1b bgrad-off:PTRAIN_CUDA_BGRAD=0:gpt2-124m \
    cudnn-deterministic:PTRAIN_CUDNN_ATTENTION=deterministic:llama-1b; do
    IFS=: read -r name setting models <<<"$run"
    mkdir -p "$work/logs/$name"  # its results travel in logs.tgz
    # Without OUT: the benchmark copies its results and logs to $OUT, over the default run's.
    check "gpu-benchmark-$name" 240 env -u OUT "$setting" bash bench/gpu_benchmark.sh --models "$models" \
      --skip torch,llmc --results-dir "$work/logs/$name"
    tail -n 4 "$work/logs/gpu-benchmark-$name.log"
    pack
  done
fi
if [ "$kernels" = 1 ]; then
  say "4: kernel profiles, alone"
  for run in kernels:gpt2-124m kernels:llama-1b kernels-bgrad-off:gpt2-124m; do
    IFS=: read -r dir model <<<"$run"
    setting=$([ "$dir" = kernels-bgrad-off ] && echo PTRAIN_CUDA_BGRAD=0 || echo PTRAIN_CUDA_BGRAD=1)
    check "$dir-$model" 240 env PTRAIN="$ptrain" "$setting" bash bench/kernel_profile.sh --impl ptrain \
      --model "$model" --out "$work/logs/$dir"
    tail -n 6 "$work/logs/$dir-$model.log"
    pack
  done
fi
say "done (files in $out: $(ls "$out" | tr '\n' ' '))"
exit "$failed"
