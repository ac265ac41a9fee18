#!/usr/bin/env bash
# ember vs llama.cpp (built by build-llamacpp.sh) on the same GGUF files: pp512 / tg128 tok/s with
# llama-bench and perplexity with llama-perplexity over the same text and context, same threads.
#
#   bench/peer/compare.sh gemma3-270m-q4_k_m qwen2.5-coder-0.5b-instruct-q4_0 ...
#   bench/peer/compare.sh --quick gemma3-270m-q4_k_m        # 8 KB text, ctx 128, 1 repetition
#   bench/peer/compare.sh --threads 2 --ctx 512 --text FILE --out results.json MODEL...
#
# MODEL is a scripts/get-models.sh name or a .gguf path. ember's side: see ember_side() in
# compare.py (the hook to fill in once `ember bench` / `ember perplexity` exist).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec python3 "$HERE/compare.py" "$@"
