#!/usr/bin/env bash
# Set-up, then the whole test suite: every ctest test but those labelled `long`, then a bounded
# fuzz run over the readers of untrusted files (scripts/fuzz.sh). CI (.ci/run) runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" -LE long
bash scripts/fuzz.sh "${PTRAIN_FUZZ_SECONDS:-30}"
