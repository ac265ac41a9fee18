#!/usr/bin/env bash
# Builds a peer binary for same-call A/B runs on the lent GPU: `ember` (and with BENCH=1 also
# `bench_cuda_kernels`) linked from this tree's CUDA build, except that the listed CUDA sources
# of src/backend/cuda are compiled as they are at git revision REV (their headers too: REV's
# src/ comes first on the include path).
#
#   bench/cuda/peer-build.sh REV OUT_DIR FILE.cu [FILE.cu ...]
#   e.g. bench/cuda/peer-build.sh HEAD /tmp/peer qgemv_staged.cu elementwise.cu
#
# Needs a configured and built CUDA tree in BUILD (default build-cuda) with
# -DCMAKE_EXPORT_COMPILE_COMMANDS=ON. Writes OUT_DIR/ember-peer (and OUT_DIR/bench-peer),
# stripped. Only files whose interfaces REV shares with the working tree can be swapped: the
# rest of the library is this tree's.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 REV OUT_DIR FILE.cu [FILE.cu ...]" >&2
  exit 2
fi
rev=$1 out=$2
shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${BUILD:-$root/build-cuda}" && pwd)
[ -f "$build/compile_commands.json" ] || { echo "no $build/compile_commands.json (configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)" >&2; exit 1; }
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$root" archive "$rev" src | tar -x -C "$work"
cp "$build/src/backend/cuda/libember_backend_cuda.a" "$work/libpeer.a"
objs=()
for f in "$@"; do
  [ -f "$work/src/backend/cuda/$f" ] || { echo "$f: not in $rev's src/backend/cuda" >&2; exit 1; }
  # This tree's compile command for the file, with REV's source, REV's src/ first on the include
  # path and the object in the work directory.
  cmd=$(python3 - "$build/compile_commands.json" "$root" "$work" "$f" <<'EOF'
import json, shlex, sys
db, root, work, name = sys.argv[1:]
entry = next(e for e in json.load(open(db)) if e["file"] == f"{root}/src/backend/cuda/{name}")
args = shlex.split(entry["command"])
args[args.index("-o") + 1] = f"{work}/{name}.o"
args = [f"{work}/src/backend/cuda/{name}" if a == entry["file"] else a for a in args]
i = args.index(f"-I{root}/src")
args[i:i] = [f"-I{work}/src"]
print(shlex.join(args))
EOF
)
  (cd "$build" && eval "$cmd")
  objs+=("$work/$f.o")
done
ar r "$work/libpeer.a" "${objs[@]}" 2>/dev/null
link() {  # target output
  local cmd
  cmd=$(ninja -C "$build" -t commands "$1" | tail -1)
  cmd=${cmd//src\/backend\/cuda\/libember_backend_cuda.a/$work\/libpeer.a}
  cmd=${cmd/-o $1 /-o $2 }
  (cd "$build" && eval "$cmd")
  strip "$2"
  echo "$2"
}
link bin/ember "$out/ember-peer"
if [ "${BENCH:-0}" = 1 ]; then link bench/cuda/bench_cuda_kernels "$out/bench-peer"; fi
