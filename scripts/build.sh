#!/usr/bin/env bash
# Configures and builds ember (Release) into build/ (or $EMBER_BUILD_DIR). Extra arguments go
# to cmake, e.g. scripts/build.sh -DEMBER_CUDA=ON.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${EMBER_BUILD_DIR:-$root/build}
jobs=${EMBER_JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$build" -j "$jobs"
