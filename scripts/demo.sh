#!/usr/bin/env bash
# The demo: validate every shipped job, draw one pipeline schedule, then measure this machine
# (`ptrain profile --quick`) and train the tiny GPT-2 of configs/tiny-cpu.yaml with that profile on
# real text (GPT-2 BPE tokens of Debian's fortunes, prepared on first use): scripts/demo_train.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
ptrain=${BUILD_DIR:-build}/ptrain

for job in configs/*.yaml; do
  echo "=== ptrain validate $job"
  "$ptrain" validate "$job" | sed -n '1,/^Model/p;/^Pipeline/p;/^Estimate/p;/expected error/p'
  echo
done

echo "=== ptrain schedule configs/llama3-70b.yaml (32 ranks, 8 microbatches)"
"$ptrain" schedule configs/llama3-70b.yaml --world 32 --set train.global_batch=8 \
  --svg "${BUILD_DIR:-build}/llama3-70b-schedule.svg"
echo

bash scripts/prepare_tiny_data.sh
rm -rf runs/tiny-cpu  # a fresh run each time (checkpoint.resume: auto would continue the last one)
bash scripts/demo_train.sh  # measures this machine, then trains with that profile
