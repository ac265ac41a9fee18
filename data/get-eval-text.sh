#!/usr/bin/env bash
# Extracts ember's evaluation texts from the King James Version of the Bible (1611, public
# domain; Debian package bible-kjv-text, read through the `bible` program of bible-kjv) and
# checks them against the committed copies:
#
#   data/eval/kjv-ruth-8k.txt        ~8 KB  (Ruth 1:1 onward, whole verses) : default tests
#   data/eval/kjv-1samuel-100k.txt   ~100 KB (1 Samuel 1:1 onward, whole verses): perplexity bench
#
# Format: one paragraph per chapter (verse numbers removed, verses joined by one space),
# paragraphs separated by a blank line, no headings, a final newline; cut after the last whole
# verse that fits in the byte budget.
#
#   data/get-eval-text.sh            # verify the committed files (regenerate when missing)
#   data/get-eval-text.sh --write    # (re)write them from the Debian package
#   data/get-eval-text.sh --print    # print NAME<TAB>PATH for each text
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="$HERE/eval"
# name  book-spec  byte-budget  sha256 (of the committed file)
TEXTS=(
  "kjv-ruth-8k|Ruth1:1-4:22|8192|1e334d288fc63291b1c7b88aab7933b12f6dbfbeff272a9b21b767f0a16a6028"
  "kjv-1samuel-100k|1Samuel1:1-31:13|102400|177ceea2a705b9136759cbc22420e99a329a8b665685fa6f3acd11c309c5d30f"
)
mode="${1:-verify}"

if [[ "$mode" == "--print" ]]; then
  for t in "${TEXTS[@]}"; do IFS='|' read -r name _ _ _ <<<"$t"; echo -e "$name\t$OUT/$name.txt"; done
  exit 0
fi

extract() {  # spec budget -> stdout
  if ! command -v bible >/dev/null; then
    if [[ $(id -u) == 0 ]]; then
      echo "[get-eval-text] installing bible-kjv (Debian) ..." >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bible-kjv bible-kjv-text >&2 || {
        apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bible-kjv bible-kjv-text >&2; }
    else
      echo "[get-eval-text] need the Debian packages bible-kjv and bible-kjv-text" >&2; exit 1
    fi
  fi
  bible -l100000 "$1" | python3 -c '
import re, sys
budget = int(sys.argv[1])
chapters, cur = [], None
for line in sys.stdin.read().splitlines():
    m = re.match(r"^\s+(\d+) (.*)$", line)
    if m:
        cur.append(m.group(2).strip())
    elif line.strip():          # a chapter heading such as "Ruth 1"
        cur = []
        chapters.append(cur)
out, size = [], 0
for ch in chapters:
    para = []
    for v in ch:
        add = len((v + " ").encode()) + (2 if not para else 0)
        if size + add > budget:
            break
        para.append(v); size += add
    else:
        out.append(" ".join(para)); continue
    if para: out.append(" ".join(para))
    break
sys.stdout.write("\n\n".join(out) + "\n")
' "$2"
}

mkdir -p "$OUT"
status=0
for t in "${TEXTS[@]}"; do
  IFS='|' read -r name spec budget sha <<<"$t"
  f="$OUT/$name.txt"
  if [[ "$mode" == "--write" || ! -f "$f" ]]; then
    extract "$spec" "$budget" > "$f.tmp" && mv "$f.tmp" "$f"
  fi
  got=$(sha256sum "$f" | cut -d' ' -f1)
  if [[ "$got" != "$sha" ]]; then
    echo "[get-eval-text] $f: sha256 $got, expected $sha" >&2; status=1
  fi
  echo -e "$name\t$f"
done
exit $status
