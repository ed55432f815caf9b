#!/usr/bin/env bash
# The demo's training (the end of scripts/demo.sh): `ptrain profile --quick --nproc 2` measures this
# machine first (its kernels, a reference step and two ranks' collectives; under a minute on 2
# cores), then configs/tiny-cpu.yaml trains with that profile, and the run's closing table sets each
# part of its step against a prediction of this machine. Without a profile a CPU job is timed at 60%
# of a nominal 400 GFLOP/s a rank, which two cores do not give: the demo's step measured 3.2-6.3x
# that (docs/validate.md, "Expected error"). Arguments go to `ptrain run`.
# Environment: BUILD_DIR (default build), PROFILE (the profile's file, default
# runs/tiny-cpu-profile.json: measured again each time, as the machine's load changes).
set -euo pipefail
cd "$(dirname "$0")/.."
ptrain=${BUILD_DIR:-build}/ptrain
profile=${PROFILE:-runs/tiny-cpu-profile.json}

mkdir -p "$(dirname "$profile")"
echo "=== ptrain profile --quick --nproc 2 (this machine's kernels and collectives, for the prediction)"
"$ptrain" profile --quick --nproc 2 --out "$profile"
echo "=== ptrain run configs/tiny-cpu.yaml --set cluster.profile=$profile (2 ranks: data parallel 2, ZeRO-1)"
"$ptrain" run configs/tiny-cpu.yaml --set cluster.profile="$profile" "$@"
