#!/usr/bin/env bash
# Set-up on a fresh Debian machine, idempotent: installs the Debian packages that are missing,
# then configures and builds ptrain into build/. Safe to run again; it only does what is left.
#   bash scripts/setup.sh            # packages + build
# Environment: BUILD_DIR (default build), PTRAIN_CUDA (AUTO|ON|OFF, default AUTO),
#              PTRAIN_WERROR (default ON: warnings are errors).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev catch2
  libspdlog-dev   # logs (engine/log)
  libgloo-dev libopenblas-dev
  libprotobuf-dev protobuf-compiler   # TensorBoard event files (logging.tensorboard)
  python3-protobuf   # their test decodes them with protobuf's own parser
  chromium   # ptrain report's test renders the page in a real headless browser
  clang libclang-rt-14-dev   # libFuzzer target (tests/fuzz)
  python3-torch python3-numpy   # reference checks (tests/ckpt/check_hf_export.py)
  slurmctld slurmd slurm-client munge openmpi-bin   # launcher tests (tests/launch/slurm_cluster.sh)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPTRAIN_CUDA="${PTRAIN_CUDA:-AUTO}" \
  -DPTRAIN_WERROR="${PTRAIN_WERROR:-ON}"
cmake --build "$build_dir" -j "$(nproc)"
echo "setup: built $build_dir/ptrain"
