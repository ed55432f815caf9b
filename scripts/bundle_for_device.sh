#!/usr/bin/env bash
# Packs a built ptrain, and the CUDA test binaries, for a machine that has CUDA but none of ptrain's
# Debian dependencies (the GPU device: CUDA 13, PyTorch, cmake/ninja, no yaml-cpp/gloo/openblas
# packages, no network).
#
#   bash scripts/bundle_for_device.sh [BINARY]        # default: ${BUILD_DIR:-build}/ptrain
#
# Writes device-bundle/ (git-ignored; carry it):
#   payload.tar.xz    bin/ptrain, its CUDA module libptrain_cuda.so (beside it, where ptrain opens it)
#                     and the test binaries next to it in the build (tests/kernels/
#                     cuda_op_tests, tests/comm/nccl_comm_tests; more with BUNDLE_EXTRA="paths"),
#                     debug info stripped (symbols kept for backtraces); lib/ every shared library
#                     they need that the device does not provide (from ldd); lib/compat/ libstdc++ /
#                     libgcc_s, used only when the device's own are too old. Compressed: the carry
#                     limit is 64 MiB and the binaries are mostly CUDA fat binaries, which xz shrinks
#                     several times.
#   env.sh            `source device-bundle/env.sh`: unpacks the payload into device-bundle/unpacked/
#                     once, sets LD_LIBRARY_PATH (bundle, then the device's CUDA toolkit and the
#                     nvidia-* pip wheels' lib dirs) and PTRAIN_BUNDLE_BIN (the unpacked bin/)
#   run-ptrain.sh     execs the bundled ptrain with that environment; `run-ptrain.sh --check` prints
#                     how every library resolves and the glibc the bundle needs
#   COMMIT            git commit (and "-dirty" when the tree has changes) the binaries were built from
#   MANIFEST          what was bundled, sizes, the glibc version required, CUDA yes/no
# Not bundled, the device has them (and they must match its driver): the glibc family (libc, libm,
# ld-linux, libpthread, libdl, librt), libcuda, libcudart, libcublas*, libcudnn*, libnccl* and the
# rest of the CUDA toolkit's libraries.
# Fails if the bundle exceeds ${BUNDLE_LIMIT_MIB:-60} MiB (the device carries at most 64 MiB in all).
#
# For the GPU session: build with CUDA here (cmake -S . -B build -G Ninja -DPTRAIN_CUDA=ON && cmake
# --build build), run this script, then on the device `bash scripts/cuda_check.sh` (op tests,
# sanitizer, end-to-end) and `bash bench/gpu_benchmark.sh`, each carrying ["device-bundle"].
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-${BUILD_DIR:-build}/ptrain}
dest=${BUNDLE_DIR:-device-bundle}
limit_mib=${BUNDLE_LIMIT_MIB:-60}

[[ -x "$bin" ]] || { echo "error: no ptrain binary at '$bin' (build it first, or pass its path)" >&2; exit 2; }
for tool in ldd objcopy objdump; do
  command -v "$tool" >/dev/null || { echo "error: '$tool' is needed (binutils / libc-bin)" >&2; exit 2; }
done
if ldd "$bin" | grep -q "not found"; then
  echo "error: $bin has unresolved libraries here:" >&2
  ldd "$bin" | grep "not found" >&2
  exit 2
fi

# Libraries the device provides (glibc family, driver, CUDA toolkit): never copied.
is_device_lib() {
  case "$1" in
    linux-vdso.so* | ld-linux*.so* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | \
      libresolv.so* | libutil.so* | libanl.so* | libmvec.so*) return 0 ;;
    libcuda.so* | libcudart.so* | libcublas*.so* | libcudnn*.so* | libnccl*.so* | libnvrtc*.so* | \
      libnvJitLink*.so* | libcufft*.so* | libcurand*.so* | libcusparse*.so* | libcusolver*.so* | \
      libnvToolsExt*.so* | libnvidia-*.so* | libcupti*.so* | libnvperf*.so*) return 0 ;;
  esac
  return 1
}
# The C++ runtime: bundled as a fallback only (the device's own is preferred when new enough).
is_compat_lib() {
  case "$1" in libstdc++.so* | libgcc_s.so*) return 0 ;; esac
  return 1
}

build_dir=$(dirname "$bin")
read -r -a extra <<<"${BUNDLE_EXTRA:-}"
for t in libptrain_cuda.so tests/kernels/cuda_op_tests tests/comm/nccl_comm_tests; do
  if [[ -f "$build_dir/$t" ]]; then
    extra+=("$build_dir/$t")
  elif [[ -e "$build_dir/libptrain_cuda.so" ]]; then  # a CUDA build: the device session runs them
    echo "error: $build_dir/$t is missing: build it (ninja -C $build_dir $(basename "$t"))" >&2
    exit 2
  fi
done
for b in "${extra[@]}"; do
  if ldd "$b" | grep -q "not found"; then
    echo "error: $b has unresolved libraries here" >&2
    exit 2
  fi
done

rm -rf "$dest"
stage="$dest/unpacked"
mkdir -p "$stage/bin" "$stage/lib/compat"
for b in "$bin" "${extra[@]}"; do
  objcopy --strip-debug "$b" "$stage/bin/$(basename "$b")"
  chmod 755 "$stage/bin/$(basename "$b")"
done

bundled=() skipped=()
while read -r name path; do
  if is_device_lib "$name"; then
    skipped+=("$name")
  elif is_compat_lib "$name"; then
    cp -L "$path" "$stage/lib/compat/$name"
    bundled+=("compat/$name")
  else
    cp -L "$path" "$stage/lib/$name"
    objcopy --strip-debug "$stage/lib/$name" 2>/dev/null || true
    bundled+=("$name")
  fi
done < <(for b in "$bin" "${extra[@]}"; do ldd "$b"; done |
  awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 } $1 ~ /^\// { n = $1; sub(".*/", "", n); print n, $1 }' | sort -u)

# The newest GLIBC_x.y any bundled object (not the compat C++ runtime) needs from the device.
glibc_needed=$( { for f in "$stage"/bin/* "$stage"/lib/*.so*; do [[ -f "$f" ]] && objdump -T "$f"; done; } \
  2>/dev/null | awk '/\*UND\*/' | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
glibc_compat=$(objdump -T "$stage"/lib/compat/* 2>/dev/null | awk '/\*UND\*/' | grep -o 'GLIBC_[0-9][0-9.]*' |
  sed 's/GLIBC_//' | sort -uV | tail -1 || true)
glibcxx_needed=$(objdump -T "$stage"/bin/* "$stage"/lib/*.so* 2>/dev/null | awk '/\*UND\*/' |
  grep -o 'GLIBCXX_[0-9][0-9.]*' | sed 's/GLIBCXX_//' | sort -uV | tail -1 || true)
if [[ -f "$stage/bin/libptrain_cuda.so" ]]; then cuda=yes; else cuda=no; fi

commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [[ "$commit" != unknown ]] && [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  commit="$commit-dirty"
fi
echo "$commit" >"$dest/COMMIT"

cat >"$dest/env.sh" <<'ENV'
# Sourced: `source device-bundle/env.sh`. Unpacks the payload once, then exports LD_LIBRARY_PATH
# (bundled libraries first, then the device's CUDA libraries) and PTRAIN_BUNDLE_BIN.
PTRAIN_BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ ! -f "$PTRAIN_BUNDLE/unpacked/.complete" ]]; then
  rm -rf "$PTRAIN_BUNDLE/unpacked" && mkdir -p "$PTRAIN_BUNDLE/unpacked" &&
    tar -C "$PTRAIN_BUNDLE/unpacked" -xJf "$PTRAIN_BUNDLE/payload.tar.xz" &&
    touch "$PTRAIN_BUNDLE/unpacked/.complete" ||
    { echo "error: cannot unpack $PTRAIN_BUNDLE/payload.tar.xz" >&2; return 1 2>/dev/null || exit 1; }
fi
export PTRAIN_BUNDLE_BIN="$PTRAIN_BUNDLE/unpacked/bin"
ptrain_cuda_dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d "$d" ]] && ptrain_cuda_dirs="$ptrain_cuda_dirs:$d"
done
# nvidia-* pip wheels (cuBLAS, cuDNN, NCCL, cudart shipped with PyTorch), when python can list them.
if command -v "${PYTHON:-python3}" >/dev/null 2>&1; then
  for d in $("${PYTHON:-python3}" -c 'import glob, os, nvidia
for p in nvidia.__path__:
    for lib in sorted(glob.glob(os.path.join(p, "*", "lib")) + glob.glob(os.path.join(p, "*", "*", "lib"))):
        print(lib)' 2>/dev/null); do
    ptrain_cuda_dirs="$ptrain_cuda_dirs:$d"
  done
fi
ptrain_libs="$PTRAIN_BUNDLE/unpacked/lib$ptrain_cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The device's own libstdc++/libgcc_s when they are new enough, else the bundled ones.
if ! LD_LIBRARY_PATH="$ptrain_libs" "$PTRAIN_BUNDLE_BIN/ptrain" --version >/dev/null 2>&1; then
  ptrain_libs="$PTRAIN_BUNDLE/unpacked/lib:$PTRAIN_BUNDLE/unpacked/lib/compat$ptrain_cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export LD_LIBRARY_PATH="$ptrain_libs"
ENV

cat >"$dest/run-ptrain.sh" <<'WRAPPER'
#!/usr/bin/env bash
# ptrain from device-bundle/ (see env.sh).
#   run-ptrain.sh ARGS...     exactly like `ptrain ARGS...`
#   run-ptrain.sh --check     how every library resolves here, and the glibc check
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/env.sh" || exit 1
glibc_needed=$(sed -n 's/^glibc_needed: //p' "$here/MANIFEST")
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
too_old=""
if [[ -n "$have" && -n "$glibc_needed" ]] &&
   [[ "$(printf '%s\n%s\n' "$glibc_needed" "$have" | sort -V | head -1)" != "$glibc_needed" ]]; then
  too_old="yes"
fi
if [[ "${1:-}" == "--check" ]]; then
  echo "bundle:  $here (commit $(cat "$here/COMMIT"))"
  echo "glibc:   this machine $have, the bundle needs >= $glibc_needed${too_old:+  -> TOO OLD}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$PTRAIN_BUNDLE_BIN/ptrain"
  [[ -f "$PTRAIN_BUNDLE_BIN/libptrain_cuda.so" ]] && ldd "$PTRAIN_BUNDLE_BIN/libptrain_cuda.so"
  "$PTRAIN_BUNDLE_BIN/ptrain" --version
  exit $?
fi
if [[ -n "$too_old" ]]; then
  echo "error: device-bundle needs glibc >= $glibc_needed, this machine has $have: build ptrain on an older distribution" >&2
  exit 1
fi
exec "$PTRAIN_BUNDLE_BIN/ptrain" "$@"
WRAPPER
chmod 755 "$dest/run-ptrain.sh"

bin_sizes=$(cd "$stage/bin" && du -h -- * | awk '{ printf "%s %s; ", $2, $1 }')
tar -C "$stage" -cf - . | xz -T0 -6 >"$dest/payload.tar.xz"
rm -rf "$stage"
size_bytes=$(du -sb "$dest" | awk '{ print $1 }')
size_mib=$(awk -v b="$size_bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
{
  echo "commit: $commit"
  echo "built_from: $bin ${extra[*]}"
  echo "binaries: $bin_sizes"
  echo "cuda: $cuda"
  echo "glibc_needed: $glibc_needed"
  echo "glibc_needed_by_compat: ${glibc_compat:-none}"
  echo "glibcxx_needed: ${glibcxx_needed:-none}"
  echo "bundled: ${bundled[*]:-none}"
  echo "left_to_the_device: ${skipped[*]:-none}"
  echo "size_bytes: $size_bytes"
} >"$dest/MANIFEST"

# Smoke test: the wrapper unpacks and starts the binary here; the unpacked copy is not carried.
if ! "$dest/run-ptrain.sh" --version >/dev/null; then
  echo "error: $dest/run-ptrain.sh --version failed" >&2
  exit 1
fi
rm -rf "$dest/unpacked"

echo "device bundle: $dest ($size_mib MiB, limit $limit_mib MiB), commit $commit, CUDA $cuda, needs glibc >= $glibc_needed"
echo "  binaries (unpacked): $bin_sizes"
echo "  libraries: ${bundled[*]:-none}"
echo "  left to the device: ${skipped[*]:-none}"
if ((size_bytes > limit_mib * 1048576)); then
  echo "error: the bundle is $size_mib MiB, over the $limit_mib MiB limit" >&2
  exit 1
fi
