#!/usr/bin/env bash
# The house rules of the engine's layout (docs/architecture.md, "Layout"), checked mechanically.
# Prints each breach and exits 1 if there is any; 0 when the tree keeps them all.
#   bash scripts/check_architecture.sh
set -uo pipefail
cd "$(dirname "$0")/.."
breaches=0
breach() { echo "breach: $*"; breaches=$((breaches + 1)); }

# Every engine folder is a room with one library; a room includes only the rooms below it. Each
# room's line names what it may include (besides itself and kernels/); a folder without a line is a
# breach, so a new room says where it stands. The distributed runtime is three rooms: launch (no
# store, no collectives), then the rendezvous store, then the collectives; ZeRO (zero/) works on the
# model's flat parameters, so it sits above the model while tp/cp/ep (parallel/) sit below it.
declare -A may_include=(
  # Pure code: validate and plan never touch devices, threads or the network.
  [io]=""
  [grid]=""
  [config]="grid io"
  [pipeline]="config grid"
  [plan]="config grid model pipeline"
  # The rest, from the bottom up.
  [log]="io"
  [runtime]="io"
  [launch]="config io log"
  [rendezvous]="launch log"
  [comm]="config grid io launch log rendezvous"
  [data]="config io log runtime"
  [optim]="config runtime"                  # flat shards: nothing of ranks, checkpoints or the model
  [parallel]="comm config log runtime"      # hands out views; the checkpoint code reads them
  [model]="config log parallel runtime"     # asks parallel/ for its collectives (below)
  [zero]="comm config log model optim parallel runtime"
  [ckpt]="config io log model runtime"
  [train]="ckpt comm config data io log model optim parallel pipeline plan runtime zero"
)
for dir in engine/*/; do
  room=$(basename "$dir")
  if [ -z "${may_include[$room]+set}" ]; then
    breach "engine/$room has no line in this script's table of rooms (say which rooms it may include)"
    continue
  fi
  while IFS= read -r hit; do
    included=$(sed -E 's|.*#include\s*"engine/([a-z_0-9]+)/.*|\1|' <<<"$hit")
    [ "$included" = "$room" ] && continue
    case " ${may_include[$room]} " in *" $included "*) continue ;; esac
    breach "engine/$room includes engine/$included, which is not below it: $hit"
  done < <(grep -nE '#include\s*"engine/[a-z_0-9]+/' "$dir"*.h "$dir"*.cpp 2>/dev/null)
done

# The model asks parallel/ for every collective; it never calls the communicator itself.
while IFS= read -r hit; do
  breach "engine/model calls a collective itself (ask engine/parallel/ for it): $hit"
done < <(grep -nE '\b(comm[_a-z]*|Comm)\s*(\.|->)\s*(all_reduce|reduce_scatter|all_gather|all_to_allv?|isend|send|recv|broadcast)\b' engine/model/*.cpp)

# Small files with one job each: at most 600 lines in every source file of the engine, the app and
# the kernels, whatever the folder's depth.
while IFS= read -r f; do
  lines=$(wc -l < "$f")
  [ "$lines" -le 600 ] || breach "$f has $lines lines (at most 600: cut it along a seam)"
done < <(find engine app kernels -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)

if [ "$breaches" -gt 0 ]; then
  echo "$breaches breach(es)"
  exit 1
fi
echo "architecture: all rules kept"
