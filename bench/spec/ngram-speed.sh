#!/usr/bin/env bash
# Speculative decoding with n-gram drafts, measured: `ember run` greedy on a prompt whose answer
# repeats it (a code file to rewrite), alternated with and without --spec-ngram, ROUNDS times.
# Compares the token ids of the two (the first position where they differ, if any), then prints
# each run's decode tok/s, the drafts kept, and the median ratio.
#   bench/spec/ngram-speed.sh MODEL [PROMPT_FILE] [N_TOKENS] [SPEC_TOKENS]
# Defaults: bench/spec/prompt-code.txt, 128 tokens, 4 drafts; ROUNDS (3), THREADS (2), EMBER
# (build/bin/ember), ARGS (more options for both runs, e.g. --batch-invariant: then the ids must
# be equal; without it the CPU's multi-row kernels sum in another order than one row's, so a
# near-tie can flip, as it can when requests are batched). DRAFT=PATH drafts with that model
# (--spec-draft-model, SPEC_TOKENS its tokens a step) instead of n-grams.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
model=${1:?usage: $0 MODEL [PROMPT_FILE] [N_TOKENS] [SPEC_TOKENS]}
prompt=${2:-$root/bench/spec/prompt-code.txt}
n=${3:-128}
k=${4:-4}
ember=${EMBER:-$root/build/bin/ember}
spec_opts=(--spec-ngram "$k")
[ -z "${DRAFT:-}" ] || spec_opts=(--spec-draft-model "$DRAFT" --spec-draft-tokens "$k")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rate() { sed -n 's/^decode: .*tokens, \([0-9.]*\) tok\/s.*/\1/p' "$1"; }
plain=() spec=()
for r in $(seq 1 "${ROUNDS:-3}"); do
  # shellcheck disable=SC2086  # (ARGS: several options)
  "$ember" run -m "$model" -t "${THREADS:-2}" -p "$(cat "$prompt")" -n "$n" --temp 0 --ids --no-special \
    ${ARGS:-} >"$work/plain.ids" 2>"$work/plain.log"
  # shellcheck disable=SC2086
  "$ember" run -m "$model" -t "${THREADS:-2}" -p "$(cat "$prompt")" -n "$n" --temp 0 --ids --no-special \
    "${spec_opts[@]}" ${ARGS:-} >"$work/spec.ids" 2>"$work/spec.log"
  same=$(python3 -c 'import sys; a, b = (open(f).read().strip().split(",") for f in sys.argv[1:]); d = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]; print("same ids" if a == b else f"ids differ from position {d[0] if d else min(len(a), len(b))}")' "$work/plain.ids" "$work/spec.ids")
  plain+=("$(rate "$work/plain.log")")
  spec+=("$(rate "$work/spec.log")")
  echo "round $r: plain ${plain[-1]} tok/s, ${spec_opts[*]} ${spec[-1]} tok/s, $same; $(grep '^speculative:' "$work/spec.log")"
done
python3 - "${plain[*]}" "${spec[*]}" <<'PY'
import statistics, sys
p = [float(x) for x in sys.argv[1].split()]
s = [float(x) for x in sys.argv[2].split()]
print(f"median decode: plain {statistics.median(p):.1f} tok/s, speculative {statistics.median(s):.1f} tok/s, "
      f"{statistics.median(s) / statistics.median(p):.2f}x")
PY
