#!/usr/bin/env bash
# Fuzz the job-spec loader (engine/config), the safetensors reader (engine/ckpt), the hardware
# profile reader (engine/plan) and report's trace reader (app/report_timeline) with libFuzzer +
# ASan + UBSan, each for the given time.
#   scripts/fuzz.sh [seconds]      (default 60)
# Builds only the fuzz target in build-fuzz/ with clang, seeds tests/fuzz/corpus-work/ (kept between
# runs, git-ignored) from the config corpora and configs/*.yaml, and writes any crashing input to
# build-fuzz/fuzz-artifacts/. Turn a crash into a regression case under tests/config/bad/.
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"
corpus="$root/tests/fuzz/corpus-work"
artifacts="$build/fuzz-artifacts"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPTRAIN_FUZZ=ON -DPTRAIN_CUDA=OFF -DPTRAIN_TESTS=ON
cmake --build "$build" --target fuzz_config fuzz_safetensors fuzz_profile fuzz_trace

mkdir -p "$corpus" "$artifacts"
shopt -s nullglob  # configs/ may still be empty
for seed in "$root"/tests/config/{bad,warn,good}/*.yaml "$root"/configs/*.yaml; do
  cp "$seed" "$corpus/seed-$(basename "$(dirname "$seed")")-$(basename "$seed")"
done

"$build/tests/fuzz/fuzz_config" -max_total_time="$seconds" -max_len=65536 -timeout=5 \
  -rss_limit_mb=4096 -print_final_stats=1 -dict="$root/tests/fuzz/config.dict" \
  -artifact_prefix="$artifacts/" "$corpus"

# The other readers: their corpora live in the build tree, seeded from files in the repository.
run_reader() {  # target, max input length, dictionary, seed folder
  local corpus="$build/corpus-${1#fuzz_}"
  mkdir -p "$corpus"
  "$build/tests/fuzz/$1" -max_total_time="$seconds" -max_len="$2" -timeout=5 -rss_limit_mb=4096 \
    -print_final_stats=1 -dict="$3" -artifact_prefix="$artifacts/" "$corpus" "$4"
}
run_reader fuzz_safetensors 4096 "$root/tests/fuzz/safetensors.dict" "$root/tests/fuzz/safetensors-seeds"
run_reader fuzz_profile 32768 "$root/tests/fuzz/json.dict" "$root/profiles"
run_reader fuzz_trace 8192 "$root/tests/fuzz/json.dict" "$root/tests/fuzz/trace-seeds"
