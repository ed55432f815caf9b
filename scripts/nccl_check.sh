#!/usr/bin/env bash
# The NCCL matrix in one command, on a node with GPUs:
#   1. tests/comm/nccl_comm_tests: the Comm's collectives and channels, ranks as threads (2+ GPUs);
#   2. tests/comm/test_nccl.py: `ptrain run` with NCCL, one GPU per rank: dp 2 (ZeRO 1, 3), tp 2 + SP,
#      pp 2 (1f1b, interleaved), ep 2 reproduce one rank (fp32, 1e-4); a stalled rank ends the job at
#      the timeout through ncclCommAbort, with its collective log.
# With --one-gpu (a machine with one GPU), step 2 only, two ranks on GPU 0 with their own NCCL_HOSTID
# (NCCL sees two hosts and connects them over loopback sockets; see test_nccl.py).
# It uses device-bundle/ when present (scripts/bundle_for_device.sh), else $BUILD_DIR (default build).
# Logs under ${OUT:-a temp dir}/nccl-check/. Exit 0 only when every step passed (skips count as
# failures here: this script is for machines that have the GPUs).
#   bash scripts/nccl_check.sh [--one-gpu]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
one_gpu=""
case "${1:-}" in
  "") ;;
  --one-gpu) one_gpu="--one-gpu" ;;
  *) echo "error: unknown argument '$1' (expected --one-gpu or nothing)" >&2; exit 2 ;;
esac
logs="${OUT:-$(mktemp -d)}/nccl-check"
mkdir -p "$logs"
if [ -f device-bundle/payload.tar.xz ]; then
  # shellcheck disable=SC1091
  source device-bundle/env.sh || exit 1
  bin_dir="$PTRAIN_BUNDLE_BIN"
  ptrain="$PWD/device-bundle/run-ptrain.sh"
else
  build_dir="${BUILD_DIR:-build}"
  bin_dir="$build_dir/tests/comm"
  ptrain="$PWD/$build_dir/ptrain"
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
echo "nccl_check: $gpus GPU(s) visible"
failed=0
if [ -z "$one_gpu" ]; then
  if [ "$gpus" -lt 2 ]; then
    echo "error: the NCCL matrix needs two GPUs or more ($gpus visible); on one GPU use --one-gpu" >&2
    exit 1
  fi
  "$bin_dir/nccl_comm_tests" >"$logs/nccl-comm-tests.log" 2>&1 || failed=1
  tail -n 5 "$logs/nccl-comm-tests.log"
fi
"${PYTHON:-python3}" tests/comm/test_nccl.py --ptrain "$ptrain" $one_gpu -v >"$logs/test-nccl.log" 2>&1 || failed=1
tail -n 25 "$logs/test-nccl.log"
if grep -q "skipped" "$logs/test-nccl.log"; then
  echo "nccl_check: tests skipped themselves (see $logs/test-nccl.log)" >&2
  failed=1
fi
[ "$failed" -eq 0 ] && echo "nccl_check: passed (logs: $logs)" || echo "nccl_check: FAILED (logs: $logs)" >&2
exit "$failed"
