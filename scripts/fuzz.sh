#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/, seeds a corpus from
# the committed format fixtures, and runs each target for SECONDS (default 30).
# Exits non-zero if a target finds a crash; reproducers land in build-fuzz/fuzz-artifacts/.
# Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail

seconds="${1:-30}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"
jobs="${EMBER_JOBS:-2}"

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DEMBER_FUZZ=ON -DEMBER_TESTS=OFF -DEMBER_BENCH=OFF >/dev/null
ninja -C "$build" -j "$jobs" fuzz_gguf fuzz_safetensors

fixtures="$root/tests/fixtures/formats"
corpus="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
mkdir -p "$corpus/gguf" "$corpus/safetensors" "$artifacts"
find "$fixtures" -name '*.gguf' -exec cp -f {} "$corpus/gguf/" \;
find "$fixtures" -name '*.safetensors' | while read -r f; do
  cp -f "$f" "$corpus/safetensors/$(basename "$(dirname "$f")")_$(basename "$f")"
done

status=0
for target in gguf safetensors; do
  echo "== fuzz_$target for ${seconds}s"
  if ! "$build/fuzz/loader/fuzz_$target" "$corpus/$target" -max_total_time="$seconds" \
      -max_len=16384 -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/$target-"; then
    echo "fuzz_$target: FAILED (see $artifacts)" >&2
    status=1
  fi
done
exit "$status"
