#!/usr/bin/env bash
# Offline throughput with temperature / top-p sampling (the host path: full logits downloaded
# and sampled on the CPU) at 256 concurrent requests, Llama-3-8B shapes with random weights,
# one host sampling thread against the default pool (--sampler-threads), in one call.
# Prebuilt binaries as in docs/CUDA_NOTES.md "Running on the lent GPU" (SETUP=1 unpacks
# .devdeps first). BIN_DIR (default .devdeps/bin), LOG_DIR (default $OUT), MODEL_DIR
# (default /tmp/ember-llama3-8b), OUTPUT_LEN (200), THREADS ("auto 1"). Host top-p sampling of
# 256 x 128256 logits costs ~0.43 s per step on one thread (bench/sampling), so keep runs short.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [[ -n ${SETUP:-} ]]; then
  for f in "$root"/.devdeps/*.deb; do case $f in *icu-dev*|*brotli*|*libssl*) ;; *) dpkg -x "$f" / ;; esac; done
  ldconfig -p | grep -q libbrotlienc.so.1 || dpkg -x "$root"/.devdeps/libbrotli1_*.deb /
  ldconfig -p | grep -q libssl.so.3 || dpkg -x "$root"/.devdeps/libssl3_*.deb /
  ldconfig
  mkdir -p "$root/.devdeps/bin" && tar -xJf "$root/.devdeps/bin.tar.xz" -C "$root/.devdeps/bin"
fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bin=${BIN_DIR:-$root/.devdeps/bin}
logs=${LOG_DIR:-${OUT:-/tmp/sampling-logs}}
model=${MODEL_DIR:-/tmp/ember-llama3-8b}
mkdir -p "$logs"
[[ -d $model ]] || python3 "$root/tools/make_cuda_bench_weights.py" "$model" >"$logs/weights.log" 2>&1
for t in ${THREADS:-auto 1}; do
  extra=(); [[ $t != auto ]] && extra=(--sampler-threads "$t")
  "$bin/ember" bench throughput -m "$model" --device cuda --num-requests 256 --concurrency 256 \
    --input-len 1000 --output-len "${OUTPUT_LEN:-200}" --temperature 0.8 --top-p 0.9 "${extra[@]}" \
    --json "$logs/sampling_$t.json" >"$logs/sampling_$t.log" 2>&1
  echo "== sampler threads $t: rc=$? $(grep -E 'output_tokens_per_s|mean_itl_ms' "$logs/sampling_$t.log" | tr -s ' ' | tr '\n' ' ')"
done
