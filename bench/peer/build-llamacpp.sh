#!/usr/bin/env bash
# Builds llama.cpp (the CPU peer) from the llama-cpp-python source distribution on PyPI, whose
# vendor/llama.cpp is a pinned llama.cpp checkout. Nothing of llama.cpp is committed here: the
# sdist is downloaded, extracted and built into a cache directory, and reused when present.
#
#   bench/peer/build-llamacpp.sh            # build (or reuse) and print the bin directory
#   bench/peer/build-llamacpp.sh --print    # print the bin directory if built, fail otherwise
#
# Environment:
#   EMBER_CACHE        cache root (default ~/.cache/ember)
#   LLAMACPP_PY_VER    llama-cpp-python version (default pinned below)
#   JOBS               parallel build jobs (default 2)
#   GGML_NATIVE        ON (default: tuned to this CPU, fine for a peer) or OFF
# Output (stdout, last line): the directory holding llama-bench, llama-perplexity, ...
set -euo pipefail

LLAMACPP_PY_VER="${LLAMACPP_PY_VER:-0.3.36}"
# sha256 of llama_cpp_python-0.3.36.tar.gz as downloaded and built here (checked when the version
# is the pinned one).
SDIST_SHA256_0_3_36="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
CACHE="${EMBER_CACHE:-$HOME/.cache/ember}"
ROOT="$CACHE/llama.cpp-$LLAMACPP_PY_VER"
BUILD="$ROOT/build"
BIN="$BUILD/bin"
JOBS="${JOBS:-2}"
NATIVE="${GGML_NATIVE:-ON}"
TOOLS=(llama-cli llama-completion llama-bench llama-perplexity llama-server llama-quantize
       llama-tokenize)

log() { echo "[build-llamacpp] $*" >&2; }

have_all() {
  local t
  for t in llama-bench llama-perplexity llama-quantize llama-tokenize; do
    [[ -x "$BIN/$t" ]] || return 1
  done
  [[ -f "$ROOT/.built" ]]
}

if [[ "${1:-}" == "--print" ]]; then
  have_all || { log "not built: run bench/peer/build-llamacpp.sh"; exit 1; }
  echo "$BIN"; exit 0
fi

if have_all; then
  log "reusing $BIN"
  echo "$BIN"; exit 0
fi

mkdir -p "$ROOT"
SRC="$ROOT/src"
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
  PY="${PYTHON:-python3}"
  DL="$ROOT/sdist"
  mkdir -p "$DL"
  if ! ls "$DL"/llama_cpp_python-"$LLAMACPP_PY_VER".tar.gz >/dev/null 2>&1; then
    log "downloading llama-cpp-python==$LLAMACPP_PY_VER sdist from PyPI"
    "$PY" -m pip download --quiet --no-deps --no-binary :all: \
      -d "$DL" "llama-cpp-python==$LLAMACPP_PY_VER" >&2
  fi
  TGZ=$(ls "$DL"/llama_cpp_python-"$LLAMACPP_PY_VER".tar.gz)
  if [[ "$LLAMACPP_PY_VER" == "0.3.36" ]]; then
    got=$(sha256sum "$TGZ" | cut -d' ' -f1)
    if [[ "$got" != "$SDIST_SHA256_0_3_36" ]]; then
      log "sha256 mismatch for $TGZ: $got (expected $SDIST_SHA256_0_3_36)"; rm -f "$TGZ"; exit 1
    fi
  fi
  log "extracting vendored llama.cpp from $(basename "$TGZ")"
  TMP="$ROOT/extract.tmp"
  rm -rf "$TMP"; mkdir -p "$TMP"
  tar -xzf "$TGZ" -C "$TMP" "llama_cpp_python-$LLAMACPP_PY_VER/vendor/llama.cpp"
  rm -rf "$SRC"
  mv "$TMP/llama_cpp_python-$LLAMACPP_PY_VER/vendor/llama.cpp" "$SRC"
  rm -rf "$TMP"
fi

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
log "configuring (Release, CPU only, GGML_NATIVE=$NATIVE)"
cmake -S "$SRC" -B "$BUILD" "${GEN[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE="$NATIVE" \
  -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=ON \
  -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON >&2

# Only the targets that exist in this llama.cpp version.
HELP=$(cmake --build "$BUILD" --target help 2>/dev/null || true)
TARGETS=()
for t in "${TOOLS[@]}"; do
  if grep -qE "^(\.\.\. )?$t(: |$)" <<<"$HELP"; then TARGETS+=("$t"); fi
done
log "building ${TARGETS[*]} with -j$JOBS (this takes many minutes on 2 cores)"
nice -n 19 cmake --build "$BUILD" -j"$JOBS" --target "${TARGETS[@]}" >&2

# (second line: the build flags compare.py records beside the results)
{ echo "llama-cpp-python $LLAMACPP_PY_VER"; echo "GGML_NATIVE=$NATIVE"; "$BIN/llama-bench" --version 2>&1 | head -3 || true; } \
  > "$ROOT/.built"
log "built: $BIN"
echo "$BIN"
