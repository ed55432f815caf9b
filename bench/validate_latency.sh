#!/usr/bin/env bash
# How long `ptrain validate` takes on the largest shipped job (Llama 3.1 405B on 16,384 GPUs).
# Goal: under 50 ms wall for the whole process. Prints min/median/max over N runs.
#   bash bench/validate_latency.sh [runs] [job]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-50}
job=${2:-configs/llama3-405b.yaml}
ptrain=${BUILD_DIR:-build}/ptrain

for mode in "" "--json"; do
  times=()
  for ((i = 0; i < runs; i++)); do
    start=$(date +%s%N)
    "$ptrain" validate "$job" $mode >/dev/null 2>&1
    end=$(date +%s%N)
    times+=($(((end - start) / 1000)))
  done
  sorted=($(printf '%s\n' "${times[@]}" | sort -n))
  n=${#sorted[@]}
  awk -v job="$job" -v mode="${mode:-human}" -v n="$n" -v lo="${sorted[0]}" -v med="${sorted[$((n / 2))]}" \
    -v hi="${sorted[$((n - 1))]}" 'BEGIN { printf "validate %s %-6s runs %d: min %.1f ms, median %.1f ms, max %.1f ms\n",
      job, mode, n, lo / 1000, med / 1000, hi / 1000 }'
done
