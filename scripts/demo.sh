#!/usr/bin/env bash
# The demo: validate every shipped job and draw one pipeline schedule.
set -euo pipefail
cd "$(dirname "$0")/.."
ptrain=${BUILD_DIR:-build}/ptrain

for job in configs/*.yaml; do
  echo "=== ptrain validate $job"
  "$ptrain" validate "$job"
  echo
done
echo "=== ptrain schedule configs/llama3-70b.yaml --set parallel.dp=1 --world 32 --set train.global_batch=8"
"$ptrain" schedule configs/llama3-70b.yaml --world 32 --set train.global_batch=8 --svg build/llama3-70b-schedule.svg
