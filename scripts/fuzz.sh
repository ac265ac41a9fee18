#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/, seeds each corpus from
# committed fixtures, and runs each target for SECONDS (default 30): the GGUF and safetensors
# parsers, the tokenizer, the chat-template interpreter and (when built) the server's request parser.
# Exits non-zero if a target finds a crash; reproducers land in build-fuzz/fuzz-artifacts/.
# Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail

seconds="${1:-30}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"
jobs="${EMBER_JOBS:-2}"

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DEMBER_FUZZ=ON -DEMBER_TESTS=OFF -DEMBER_BENCH=OFF >/dev/null
targets=(fuzz_gguf fuzz_safetensors fuzz_tokenizer fuzz_chat_template)
[ -f "$root/fuzz/server/CMakeLists.txt" ] && targets+=(fuzz_server_request)
ninja -C "$build" -j "$jobs" "${targets[@]}"

fixtures="$root/tests/fixtures/formats"
corpus="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
mkdir -p "$corpus/gguf" "$corpus/safetensors" "$artifacts"
find "$fixtures" -name '*.gguf' -exec cp -f {} "$corpus/gguf/" \;
find "$fixtures" -name '*.safetensors' | while read -r f; do
  cp -f "$f" "$corpus/safetensors/$(basename "$(dirname "$f")")_$(basename "$f")"
done

mkdir -p "$corpus/tokenizer" "$corpus/chat" "$corpus/server"
# Tokenizer seeds: each hard string of the committed corpus as one file.
python3 - "$root/tests/fixtures/tokenizer/hard_strings.json" "$corpus/tokenizer" <<'PY'
import json, sys, pathlib
data = json.load(open(sys.argv[1]))
items = data if isinstance(data, list) else data.get("strings", [])
for i, s in enumerate(items):
    raw = bytes.fromhex(s["hex"]) if isinstance(s, dict) and "hex" in s else str(s).encode()
    pathlib.Path(sys.argv[2], f"s{i}").write_bytes(raw)
PY
cp -f "$root"/tests/fixtures/chat/templates/*.jinja "$corpus/chat/" 2>/dev/null || true
[ -d "$root/tests/fixtures/server" ] && find "$root/tests/fixtures/server" -name '*.json' -exec cp -f {} "$corpus/server/" \;

run_target() {  # run_target NAME BINARY CORPUS [extra libFuzzer args]
  local name=$1 bin=$2 dir=$3
  shift 3
  echo "== $name for ${seconds}s"
  if ! "$bin" "$dir" -max_total_time="$seconds" -max_len=16384 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$artifacts/$name-" "$@"; then
    echo "$name: FAILED (see $artifacts)" >&2
    status=1
  fi
}

status=0
run_target fuzz_gguf "$build/fuzz/loader/fuzz_gguf" "$corpus/gguf"
run_target fuzz_safetensors "$build/fuzz/loader/fuzz_safetensors" "$corpus/safetensors"
run_target fuzz_tokenizer "$build/fuzz/tokenizer/fuzz_tokenizer" "$corpus/tokenizer"
run_target fuzz_chat_template "$build/fuzz/chat/fuzz_chat_template" "$corpus/chat" -dict="$root/fuzz/chat/jinja.dict"
if [ -x "$build/fuzz/server/fuzz_server_request" ]; then
  run_target fuzz_server_request "$build/fuzz/server/fuzz_server_request" "$corpus/server"
fi
exit "$status"
