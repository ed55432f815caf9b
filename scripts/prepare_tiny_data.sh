#!/usr/bin/env bash
# The demo's data (configs/tiny-cpu.yaml): GPT-2 BPE tokens of the fortunes that Debian's
# `fortunes` and `fortunes-min` packages install, as llm.c shards in data/tiny/
# (train_000000.bin, ... and val.bin, 5% of the fortunes, plus manifest.json).
# Idempotent: does nothing if data/tiny is complete (manifest present, every shard verified);
# otherwise installs what is missing (fortunes; node and npm only if absent; the npm packages of
# scripts/package.json) and tokenises.
#   bash scripts/prepare_tiny_data.sh
# Environment: TINY_DATA_DIR (default data/tiny), TINY_SHARD_TOKENS (default 400000).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${TINY_DATA_DIR:-data/tiny}
shard_tokens=${TINY_SHARD_TOKENS:-400000}
tokenizer=(node scripts/prepare_data.mjs)

if [ -f "$out/manifest.json" ] && command -v node >/dev/null 2>&1 &&
  "${tokenizer[@]}" --vocab-check --out "$out" --quiet >/dev/null 2>&1; then
  echo "prepare_tiny_data: $out is complete, nothing to do"
  exit 0
fi

# Debian packages, only those missing (as scripts/setup.sh does).
packages=(fortunes fortunes-min)
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "prepare_tiny_data: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The tokenizer (pinned by scripts/package-lock.json); nothing is fetched after this step.
if [ ! -f scripts/node_modules/gpt-tokenizer/package.json ]; then
  echo "prepare_tiny_data: npm ci --prefix scripts"
  npm ci --prefix scripts --no-audit --no-fund --loglevel=error
fi

# Exactly the fortune files of the two packages (not other fortune packages that may share the
# directory), without the binary .dat indexes and the .u8 alias links.
mapfile -t inputs < <(dpkg -L fortunes fortunes-min |
  grep -E '^/usr/share/games/fortunes/[^/]+$' | grep -vE '\.(dat|u8)$' | sort -u |
  while read -r f; do [ -f "$f" ] && echo "$f"; done)
if ((${#inputs[@]} == 0)); then
  echo "prepare_tiny_data: no fortune files found under /usr/share/games/fortunes" >&2
  exit 1
fi

echo "prepare_tiny_data: tokenising ${#inputs[@]} fortune files into $out"
"${tokenizer[@]}" --input "${inputs[@]}" --out "$out" --val-fraction 0.05 \
  --shard-tokens "$shard_tokens" --vocab-check --quiet
