#!/usr/bin/env bash
# How long `ptrain plan` takes on the shipped jobs (wall time of the whole process, best of N runs),
# with the search's counts (layouts, how many were estimated in full).
#   bash bench/plan_latency.sh [runs]      BUILD_DIR=build-cpu to time another build
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
ptrain=${BUILD_DIR:-build}/ptrain
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for job_gpus in gpt2-124m:8 llama3-8b:64 llama3-70b:512 mixtral-8x7b:64 llama3-405b:16384; do
  job=configs/${job_gpus%%:*}.yaml
  gpus=${job_gpus##*:}
  best=
  for ((i = 0; i < runs; i++)); do
    start=$(date +%s%N)
    "$ptrain" plan "$job" --gpus "$gpus" --top 10 --out "$out/plan.yaml" >"$out/stdout" 2>/dev/null
    ms=$((($(date +%s%N) - start) / 1000000))
    if [[ -z $best || $ms -lt $best ]]; then best=$ms; fi
  done
  counts=$(head -1 "$out/stdout" | sed 's/.*: \([0-9]* layouts\)/\1/')
  printf 'plan %-26s --gpus %-6s best of %d: %6d ms  (%s)\n' "$job" "$gpus" "$runs" "$best" "$counts"
done
