#!/usr/bin/env bash
# Builds llm.c's GPT-2 trainer (train_gpt2cu, bf16, cuDNN attention) here for the H100 (sm_90) and
# leaves only the binary in bench/out/llm.c/ (git-ignored), for bench/gpu_benchmark.sh's llm.c rows
# on the device, which has no network and where a build would cost minutes of its time.
#
#   bash scripts/prepare_llmc.sh LLMC_SRC CUDNN_FRONTEND_SRC [DEST]     # DEST: bench/out/llm.c
#
# LLMC_SRC: a karpathy/llm.c tree (train_gpt2.cu, llmc/, Makefile); CUDNN_FRONTEND_SRC: an
# NVIDIA/cudnn-frontend tree (only its include/ is used). Fetches nothing: bring both trees, e.g.
# `git --git-dir=<mirror> archive HEAD | tar x -C DIR`. LLMC_COMMIT / CUDNN_FRONTEND_COMMIT name the
# commits in DEST/BUILD_INFO when the trees are not git checkouts.
# Steps: copy what `make train_gpt2cu` reads into DEST; with CUDA >= 13, pass cudaMemAdvise a
# cudaMemLocation (CUDA 13 dropped the int-device form; llm.c's llmc/cuda_utils.cuh still uses it);
# make train_gpt2cu NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=1 PRECISION=BF16 GPU_COMPUTE_CAPABILITY=90
# (nice'd; the cuDNN frontend's templates take minutes); then delete everything but train_gpt2cu and
# BUILD_INFO (--no-prune keeps the tree). llm.c's Makefile links -lnvidia-ml, which only the driver
# provides; it is left out when CUDA has no nvml.h (llm.c then compiles its NVML code out).
# cudnn-frontend: v1.18.0 is the newest that needs no NVRTC; from v1.19 its experimental engines
# call NVRTC, so -lnvrtc is added and the binary then needs libnvrtc.so.13 on the device too.
# Environment: CUDA_HOME (/usr/local/cuda), GPU_COMPUTE_CAPABILITY (90).
# The device runs it with the CUDA libraries of device-bundle/env.sh's LD_LIBRARY_PATH (libcudart,
# libcublas, libcublasLt .so.13, libcudnn .so.9): scripts/device_session.sh --bench sets LLMC_DIR.
set -euo pipefail
prune=1
args=()
for arg in "$@"; do
  case "$arg" in
    --no-prune) prune=0 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$arg") ;;
  esac
done
((${#args[@]} == 2 || ${#args[@]} == 3)) || { echo "usage: $0 LLMC_SRC CUDNN_FRONTEND_SRC [DEST] [--no-prune]" >&2; exit 2; }
src=$(cd "${args[0]}" && pwd)
fe=$(cd "${args[1]}" && pwd)
cd "$(dirname "$0")/.."
dest=${args[2]:-bench/out/llm.c}
cuda=${CUDA_HOME:-/usr/local/cuda}
cc=${GPU_COMPUTE_CAPABILITY:-90}

for f in train_gpt2.cu Makefile llmc/cuda_utils.cuh llmc/cudnn_att.cpp; do
  [[ -f "$src/$f" ]] || { echo "error: $src is not an llm.c tree (no $f)" >&2; exit 2; }
done
[[ -f "$fe/include/cudnn_frontend.h" ]] || { echo "error: $fe has no include/cudnn_frontend.h" >&2; exit 2; }
[[ -x "$cuda/bin/nvcc" ]] || { echo "error: no nvcc at $cuda/bin/nvcc (set CUDA_HOME)" >&2; exit 2; }
export PATH="$cuda/bin:$PATH"  # llm.c's Makefile finds nvcc on PATH
commit_of() { [[ -e "$1/.git" ]] && git -C "$1" rev-parse HEAD 2>/dev/null || echo unknown; }
llmc_commit=${LLMC_COMMIT:-$(commit_of "$src")}
fe_commit=${CUDNN_FRONTEND_COMMIT:-$(commit_of "$fe")}

rm -rf "$dest"
mkdir -p "$dest/cudnn-frontend"
cp -r "$src/Makefile" "$src/train_gpt2.cu" "$src/llmc" "$dest/"
cp -r "$fe/include" "$dest/cudnn-frontend/"  # the Makefile looks in ./cudnn-frontend/include

cuda_major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
fix=""
if ((cuda_major >= 13)) && grep -q 'cudaMemAdvise(.*cudaCpuDeviceId)' "$dest/llmc/cuda_utils.cuh"; then
  # Idempotent: matches only the old call (a tree that no longer has it is left as it is).
  sed -i 's/cudaMemAdvise(\*out, bytes, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdvise(*out, bytes, cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
    "$dest/llmc/cuda_utils.cuh"
  ! grep -q 'cudaMemAdvise(.*cudaCpuDeviceId)' "$dest/llmc/cuda_utils.cuh" ||
    { echo "error: the cudaMemAdvise call in llmc/cuda_utils.cuh is not the one this script fixes" >&2; exit 1; }
  fix="llmc/cuda_utils.cuh: cudaMemAdvise(..., cudaCpuDeviceId) -> cudaMemLocation{cudaMemLocationTypeHost, 0} (CUDA 13)"
fi

ldflags="-lcublas -lcublasLt -lcudnn"
[[ -f "$cuda/include/nvml.h" ]] && ldflags="$ldflags -lnvidia-ml"
grep -rqs '#include <nvrtc.h>' "$fe/include" && ldflags="$ldflags -lnvrtc"  # cudnn-frontend >= 1.19
make_args=(train_gpt2cu NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=1 PRECISION=BF16 GPU_COMPUTE_CAPABILITY="$cc"
  "NVCC_LDFLAGS=$ldflags")
echo "prepare_llmc: building in $dest: make ${make_args[*]}" >&2
start=$(date +%s)
(cd "$dest" && nice -n 10 make "${make_args[@]}") >"$dest/build.log" 2>&1 ||
  { tail -n 30 "$dest/build.log" >&2; echo "error: the llm.c build failed (log: $dest/build.log)" >&2; exit 1; }
build_s=$(($(date +%s) - start))
if ldd "$dest/train_gpt2cu" | grep -q 'not found'; then
  ldd "$dest/train_gpt2cu" | grep 'not found' >&2
  echo "error: train_gpt2cu has unresolved libraries here" >&2
  exit 1
fi

{
  echo "llm.c train_gpt2cu, built by scripts/prepare_llmc.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ) in ${build_s} s"
  echo "llm.c commit: $llmc_commit"
  echo "cudnn-frontend: $fe_commit ($(sed -n 's/#define CUDNN_FRONTEND_\(MAJOR\|MINOR\|PATCH\)_VERSION \([0-9]*\)/\2/p' \
    "$fe/include/cudnn_frontend_version.h" 2>/dev/null | paste -sd.))"
  echo "nvcc: $(nvcc --version | tail -n 2 | head -n 1); host compiler: $(g++ --version | head -n 1)"
  echo "make ${make_args[*]}"
  echo "patch: ${fix:-none}"
  echo "needs: $(ldd "$dest/train_gpt2cu" | awk '{ print $1 }' | grep -v linux-vdso | paste -sd' ')"
  echo "glibc symbols: $(objdump -T "$dest/train_gpt2cu" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1);" \
    "libstdc++ symbols: $(objdump -T "$dest/train_gpt2cu" | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -n 1)"
  echo "sha256: $(sha256sum "$dest/train_gpt2cu" | cut -d' ' -f1)"
} >"$dest/BUILD_INFO"
if ((prune)); then
  find "$dest" -mindepth 1 -maxdepth 1 ! -name train_gpt2cu ! -name BUILD_INFO -exec rm -rf {} +
fi
cat "$dest/BUILD_INFO"
du -sh "$dest"
