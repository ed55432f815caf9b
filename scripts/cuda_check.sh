#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build the CUDA backend, run the `cuda`-labelled tests, then run the
# CUDA op tests again under compute-sanitizer memcheck. Exits non-zero on a build failure, a failing
# or skipped test (no GPU visible is an error here), or any sanitizer finding.
#   bash scripts/cuda_check.sh
# Environment: BUILD_DIR (default build-cuda), CUDA_ARCHS (default native: the GPU present),
#              JOBS (default nproc), PTRAIN_SANITIZE_ALL=1 also runs racecheck and synccheck
#              (shared-memory hazards and barrier misuse in the block reductions).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${BUILD_DIR:-build-cuda}"
archs="${CUDA_ARCHS:-native}"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "cuda_check: no NVIDIA GPU visible (nvidia-smi -L failed)" >&2
  exit 1
fi

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTRAIN_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$archs"
cmake --build "$build_dir" --target cuda_op_tests -j "${JOBS:-$(nproc)}"

tests_bin="$build_dir/tests/kernels/cuda_op_tests"

# ctest counts a skipped test (exit 77) as passed: a quick run of the [contract] cases makes a skip fail.
status=0
"$tests_bin" "[contract]" >/dev/null || status=$?
if [ "$status" -eq 77 ]; then
  echo "cuda_check: cuda_op_tests skipped itself (no CUDA device visible to the runtime)" >&2
  exit 1
fi
ctest --test-dir "$build_dir" -L cuda --output-on-failure

sanitizer="$(command -v compute-sanitizer || true)"
if [ -z "$sanitizer" ]; then
  for candidate in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    if [ -x "$candidate" ]; then
      sanitizer="$candidate"
      break
    fi
  done
fi
if [ -z "$sanitizer" ]; then
  echo "cuda_check: compute-sanitizer not found (PATH, /usr/local/cuda)" >&2
  exit 1
fi

tools=(memcheck)
[ "${PTRAIN_SANITIZE_ALL:-0}" = 1 ] && tools+=(racecheck synccheck)
for tool in "${tools[@]}"; do
  echo "cuda_check: compute-sanitizer --tool $tool"
  # No leak check: cuda_ops() keeps its stream, cuBLASLt workspace and pool for the process lifetime.
  "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 20 "$tests_bin"
done
echo "cuda_check: all CUDA checks passed"
