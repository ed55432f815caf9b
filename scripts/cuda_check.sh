#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, every device check of the CUDA backend, in one command:
#   1. the CUDA op tests (every op against the CPU implementation);
#   2. the NCCL Comm tests (need two GPUs: with one they report themselves skipped, noted here),
#      then `ptrain run` under NCCL in every layout against one rank (on one GPU: two ranks as two
#      NCCL hosts, tests/comm/test_nccl.py --one-gpu);
#   3. end to end: `backend: cuda` trains the CPU backend's curve (fp32 within 1e-4, bf16 within
#      2%), and two ranks sharing the GPU match one rank (tests/train/test_run.py CudaBackend);
#   4. compute-sanitizer memcheck over the op tests (PTRAIN_SANITIZE_ALL=1: racecheck, synccheck).
# It uses the binaries of device-bundle/ when it exists (scripts/bundle_for_device.sh, carried to a
# device that cannot build ptrain), else builds them in $BUILD_DIR. Exits non-zero on a build
# failure, a failing test, an op test that skipped itself (no GPU visible is an error here), or any
# sanitizer finding. With $OUT set (the device tool), each step's log is written there as it ends.
#   bash scripts/cuda_check.sh
# Environment: BUILD_DIR (default build-cuda), CUDA_ARCHS (default native: the GPU present),
#              JOBS (default nproc), PYTHON (default python3), PTRAIN_SANITIZE_ALL.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

logs="${OUT:-$(mktemp -d)}/cuda-check"
mkdir -p "$logs"
failed=()
step() {  # step NAME COMMAND...: runs it, logs it, records a failure
  local name=$1
  shift
  echo "cuda_check: $name"
  "$@" >"$logs/$name.log" 2>&1
  local status=$?
  tail -n 15 "$logs/$name.log"
  if [ "$status" -ne 0 ]; then
    failed+=("$name (exit $status)")
  fi
  return "$status"
}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "cuda_check: no NVIDIA GPU visible (nvidia-smi -L failed)" >&2
  exit 1
fi
nvidia-smi -L | tee "$logs/gpus.log"

if [ -f device-bundle/payload.tar.xz ]; then
  # shellcheck disable=SC1091
  source device-bundle/env.sh || exit 1
  bin_dir="$PTRAIN_BUNDLE_BIN"
  ptrain="$PWD/device-bundle/run-ptrain.sh"
  echo "cuda_check: binaries of device-bundle/ (commit $(cat device-bundle/COMMIT))"
else
  build_dir="${BUILD_DIR:-build-cuda}"
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTRAIN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-native}" || exit 1
  cmake --build "$build_dir" --target ptrain cuda_op_tests nccl_comm_tests -j "${JOBS:-$(nproc)}" || exit 1
  bin_dir="$logs/bin"
  mkdir -p "$bin_dir"
  ln -sf "$PWD/$build_dir/tests/kernels/cuda_op_tests" "$PWD/$build_dir/tests/comm/nccl_comm_tests" "$bin_dir/"
  ptrain="$PWD/$build_dir/ptrain"
fi

# 1. Op tests. A test binary exits 77 when it finds no device: an error here.
step op-tests "$bin_dir/cuda_op_tests"
if [ "$?" -eq 77 ]; then
  echo "cuda_check: cuda_op_tests skipped itself (no CUDA device visible to the runtime)" >&2
  exit 1
fi

# 2. NCCL: two GPUs or more; with fewer the binary exits 77, which is recorded, not failed.
echo "cuda_check: nccl-tests"
"$bin_dir/nccl_comm_tests" >"$logs/nccl-tests.log" 2>&1
status=$?
tail -n 15 "$logs/nccl-tests.log"
if [ "$status" -eq 77 ]; then
  echo "cuda_check: nccl_comm_tests skipped (needs two GPUs)"
elif [ "$status" -ne 0 ]; then
  failed+=("nccl-tests (exit $status)")
fi
# 2b. NCCL end to end: every layout against one rank and a stalled rank's abort; on one GPU two
# ranks share it as two NCCL hosts (tests/comm/test_nccl.py --one-gpu).
if [ "$(nvidia-smi -L | grep -c '^GPU ')" -ge 2 ]; then
  step nccl-training "${PYTHON:-python3}" tests/comm/test_nccl.py --ptrain "$ptrain" -v
else
  step nccl-training "${PYTHON:-python3}" tests/comm/test_nccl.py --ptrain "$ptrain" --one-gpu -v
fi

# 3. End to end against the CPU backend.
step end-to-end "${PYTHON:-python3}" tests/train/test_run.py --ptrain "$ptrain" CudaBackend -v

# 4. Sanitizer.
sanitizer="$(command -v compute-sanitizer || true)"
for candidate in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [ -z "$sanitizer" ] && [ -x "$candidate" ] && sanitizer="$candidate"
done
if [ -z "$sanitizer" ]; then
  failed+=("compute-sanitizer not found (PATH, /usr/local/cuda)")
else
  tools=(memcheck)
  [ "${PTRAIN_SANITIZE_ALL:-0}" = 1 ] && tools+=(racecheck synccheck)
  for tool in "${tools[@]}"; do
    # No leak check: cuda_ops() keeps its stream, cuBLASLt workspace and pool for the process lifetime.
    step "sanitizer-$tool" "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 20 "$bin_dir/cuda_op_tests"
  done
fi

if [ "${#failed[@]}" -gt 0 ]; then
  printf 'cuda_check: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "cuda_check: all CUDA checks passed (logs: $logs)"
