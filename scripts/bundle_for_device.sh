#!/usr/bin/env bash
# Packs a built ptrain for a machine that has CUDA but none of ptrain's Debian dependencies (the GPU
# device: CUDA 13, PyTorch, cmake/ninja, no yaml-cpp/gloo/openblas/spdlog packages, no network).
#
#   bash scripts/bundle_for_device.sh [BINARY]        # default: ${BUILD_DIR:-build}/ptrain
#
# Writes device-bundle/ (keep it out of git: add `/device-bundle/` to .gitignore, then carry it):
#   bin/ptrain        the binary, debug info stripped (symbols kept for backtraces)
#   lib/              every shared library it needs that the device does not provide (from ldd)
#   lib/compat/       libstdc++ / libgcc_s, used only when the device's own are too old
#   run-ptrain.sh     wrapper: sets LD_LIBRARY_PATH (bundle, then the device's CUDA toolkit and the
#                     nvidia-* pip wheels' lib dirs) and execs bin/ptrain; `run-ptrain.sh --check`
#                     prints how every library resolves and the glibc the bundle needs
#   COMMIT            git commit (and "-dirty" when the tree has changes) the binary was built from
#   MANIFEST          what was bundled, sizes, the glibc version required, CUDA yes/no
# Not bundled, the device has them (and they must match its driver): the glibc family (libc, libm,
# ld-linux, libpthread, libdl, librt), libcuda, libcudart, libcublas*, libcudnn*, libnccl* and the
# rest of the CUDA toolkit's libraries.
# Fails if the bundle exceeds ${BUNDLE_LIMIT_MIB:-60} MiB (the device carries at most 64 MiB in all).
#
# For the GPU benchmark: build with CUDA here (cmake -S . -B build -G Ninja -DPTRAIN_CUDA=ON && cmake
# --build build), run this script, then the device command in bench/gpu_benchmark.sh's header.
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

rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib/compat"
objcopy --strip-debug "$bin" "$dest/bin/ptrain"
chmod 755 "$dest/bin/ptrain"

bundled=() skipped=()
while read -r name path; do
  if is_device_lib "$name"; then
    skipped+=("$name")
  elif is_compat_lib "$name"; then
    cp -L "$path" "$dest/lib/compat/$name"
    bundled+=("compat/$name")
  else
    cp -L "$path" "$dest/lib/$name"
    objcopy --strip-debug "$dest/lib/$name" 2>/dev/null || true
    bundled+=("$name")
  fi
done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 } $1 ~ /^\// { n = $1; sub(".*/", "", n); print n, $1 }')

# The newest GLIBC_x.y any bundled object (not the compat C++ runtime) needs from the device.
glibc_needed=$( { objdump -T "$dest/bin/ptrain"; for f in "$dest"/lib/*.so*; do [[ -f "$f" ]] && objdump -T "$f"; done; } \
  2>/dev/null | awk '/\*UND\*/' | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
glibc_compat=$(objdump -T "$dest"/lib/compat/* 2>/dev/null | awk '/\*UND\*/' | grep -o 'GLIBC_[0-9][0-9.]*' |
  sed 's/GLIBC_//' | sort -uV | tail -1 || true)
glibcxx_needed=$(objdump -T "$dest/bin/ptrain" "$dest"/lib/*.so* 2>/dev/null | awk '/\*UND\*/' |
  grep -o 'GLIBCXX_[0-9][0-9.]*' | sed 's/GLIBCXX_//' | sort -uV | tail -1 || true)
if LC_ALL=C grep -qa '\.nv_fatbin' "$dest/bin/ptrain"; then cuda=yes; else cuda=no; fi

commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [[ "$commit" != unknown ]] && [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  commit="$commit-dirty"
fi
echo "$commit" >"$dest/COMMIT"

cat >"$dest/run-ptrain.sh" <<'WRAPPER'
#!/usr/bin/env bash
# ptrain from device-bundle/: bundled libraries first, then the device's CUDA libraries.
#   run-ptrain.sh ARGS...     exactly like `ptrain ARGS...`
#   run-ptrain.sh --check     how every library resolves here, and the glibc check
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
glibc_needed=$(sed -n 's/^glibc_needed: //p' "$here/MANIFEST")
cuda_dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d "$d" ]] && cuda_dirs="$cuda_dirs:$d"
done
# nvidia-* pip wheels (cuBLAS, cuDNN, NCCL, cudart shipped with PyTorch), when python can list them.
py=${PYTHON:-python3}
if command -v "$py" >/dev/null 2>&1; then
  for d in $("$py" -c 'import glob, os, nvidia
for p in nvidia.__path__:
    for lib in sorted(glob.glob(os.path.join(p, "*", "lib")) + glob.glob(os.path.join(p, "*", "*", "lib"))):
        print(lib)' 2>/dev/null); do
    cuda_dirs="$cuda_dirs:$d"
  done
fi
base="$here/lib$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The device's own libstdc++/libgcc_s when they are new enough, else the bundled ones.
if LD_LIBRARY_PATH="$base" "$here/bin/ptrain" --version >/dev/null 2>&1; then
  libpath="$base"
else
  libpath="$here/lib:$here/lib/compat$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
too_old=""
if [[ -n "$have" && -n "$glibc_needed" ]] &&
   [[ "$(printf '%s\n%s\n' "$glibc_needed" "$have" | sort -V | head -1)" != "$glibc_needed" ]]; then
  too_old="yes"
fi
if [[ "${1:-}" == "--check" ]]; then
  echo "bundle:  $here (commit $(cat "$here/COMMIT"))"
  echo "glibc:   this machine $have, the bundle needs >= $glibc_needed${too_old:+  -> TOO OLD}"
  echo "LD_LIBRARY_PATH=$libpath"
  LD_LIBRARY_PATH="$libpath" ldd "$here/bin/ptrain"
  LD_LIBRARY_PATH="$libpath" "$here/bin/ptrain" --version
  exit $?
fi
if [[ -n "$too_old" ]]; then
  echo "error: device-bundle needs glibc >= $glibc_needed, this machine has $have: build ptrain on an older distribution" >&2
  exit 1
fi
export LD_LIBRARY_PATH="$libpath"
exec "$here/bin/ptrain" "$@"
WRAPPER
chmod 755 "$dest/run-ptrain.sh"

size_bytes=$(du -sb "$dest" | awk '{ print $1 }')
size_mib=$(awk -v b="$size_bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
{
  echo "commit: $commit"
  echo "built_from: $bin"
  echo "cuda: $cuda"
  echo "glibc_needed: $glibc_needed"
  echo "glibc_needed_by_compat: ${glibc_compat:-none}"
  echo "glibcxx_needed: ${glibcxx_needed:-none}"
  echo "bundled: ${bundled[*]:-none}"
  echo "left_to_the_device: ${skipped[*]:-none}"
  echo "size_bytes: $size_bytes"
} >"$dest/MANIFEST"

# Smoke test: the wrapper starts the binary here.
if ! "$dest/run-ptrain.sh" --version >/dev/null; then
  echo "error: $dest/run-ptrain.sh --version failed" >&2
  exit 1
fi

echo "device bundle: $dest ($size_mib MiB, limit $limit_mib MiB), commit $commit, CUDA $cuda, needs glibc >= $glibc_needed"
echo "  bin/ptrain $(du -h "$dest/bin/ptrain" | cut -f1); libraries: ${bundled[*]:-none}"
echo "  left to the device: ${skipped[*]:-none}"
if ((size_bytes > limit_mib * 1048576)); then
  echo "error: the bundle is $size_mib MiB, over the $limit_mib MiB limit" >&2
  exit 1
fi
