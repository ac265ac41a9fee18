#!/usr/bin/env python3
"""Parity check of ember's chat templates against jinja2 on real models' templates.

For every GGUF file under the model cache (default $EMBER_MODELS or ~/.cache/ember/models,
as installed by scripts/get-models.sh) or given on the command line, reads
tokenizer.chat_template and the bos/eos tokens with the `gguf` package, renders the
standard conversations of tools/make_chat_fixtures.py with jinja2 exactly as transformers
does (with transformers when it is installed, else with the replica of its jinja2 setup in
tools/make_chat_fixtures.py), renders the same cases with ember (tests/chat/render_template),
and compares.

Templates are read from the model files at run time and never copied into the repo.

    python tests/chat/check_real_templates.py [--render-bin PATH] [--allow-missing] [GGUF ...]

Exit status: 0 when every case matches, 1 on any mismatch, 2 when no model was found
(0 with --allow-missing).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import jinja2  # noqa: E402
import make_chat_fixtures as fx  # noqa: E402  (also pins strftime_now's clock)
from gguf import GGUFReader  # noqa: E402


def field_string(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    return bytes(f.parts[f.data[0]]).decode("utf-8")


def field_int(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    return int(f.parts[f.data[0]][0])


def token_text(reader, token_id):
    f = reader.fields.get("tokenizer.ggml.tokens")
    if f is None or token_id is None or token_id >= len(f.data):
        return None
    return bytes(f.parts[f.data[token_id]]).decode("utf-8", errors="replace")


def find_models(paths, models_dir):
    if paths:
        return [pathlib.Path(p) for p in paths]
    if not models_dir.is_dir():
        return []
    return sorted(p for p in models_dir.rglob("*.gguf") if p.is_file())


def default_render_bin():
    for build in sorted(ROOT.glob("build*")):
        candidate = build / "tests" / "chat" / "render_template"
        if candidate.is_file():
            return str(candidate)
    return None


def cases_for(bos, eos):
    cases = []
    contexts = [("plain", {}), ("tools", {"tools": fx.TOOLS}), ("no_thinking", {"enable_thinking": False})]
    for set_name, messages in fx.MESSAGE_SETS.items():
        for ctx_name, extra in contexts:
            for agp in (True, False):
                case = {"name": f"{set_name}/{ctx_name}/{'gen' if agp else 'nogen'}", "messages": messages,
                        "add_generation_prompt": agp, "extra_context": extra, "now": fx.NOW}
                if bos:
                    case["bos_token"] = bos
                if eos:
                    case["eos_token"] = eos
                cases.append(case)
    return cases


def jinja_result(source, case):
    try:
        return {"ok": True, "text": fx.render(source, case)}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            return {"ok": False, "raised": str(e)}
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
    except Exception as e:  # noqa: BLE001  (Python errors raised inside the template)
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def compare(want, got):
    """Returns None when ember agrees with jinja2, else a description."""
    if want["ok"]:
        if not got["ok"]:
            return f"jinja2 rendered, ember failed: {got['error']}"
        if got["text"] != want["text"]:
            a, b = want["text"], got["text"]
            i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
            return f"text differs at char {i}: jinja2 {a[max(0, i - 40):i + 40]!r} vs ember {b[max(0, i - 40):i + 40]!r}"
        return None
    if got["ok"]:
        return f"jinja2 failed ({want.get('raised') or want.get('error')}), ember rendered text"
    if "raised" in want and got["error"] != want["raised"]:
        return f"raise_exception message differs: {want['raised']!r} vs {got['error']!r}"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gguf", nargs="*", help="GGUF files (default: every *.gguf under --models-dir)")
    parser.add_argument("--models-dir", default=os.environ.get("EMBER_MODELS", str(pathlib.Path.home() / ".cache/ember/models")))
    parser.add_argument("--render-bin", default=None, help="ember's render_template (default: build*/tests/chat/)")
    parser.add_argument("--allow-missing", action="store_true", help="exit 0 when no model is found")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()

    render_bin = args.render_bin or default_render_bin()
    if not render_bin or not os.path.isfile(render_bin):
        print("render_template binary not found; build it (ninja render_template) or pass --render-bin", file=sys.stderr)
        return 2
    models = find_models(args.gguf, pathlib.Path(args.models_dir))
    if not models:
        print(f"no GGUF models found under {args.models_dir} (install them with scripts/get-models.sh)", file=sys.stderr)
        return 0 if args.allow_missing else 2

    print(f"reference: {'transformers' if fx.ctu is not None else 'replica of transformers jinja2 setup (no transformers)'}; "
          f"jinja2 {jinja2.__version__}")
    n_cases = n_bad = n_templates = 0
    for path in models:
        reader = GGUFReader(str(path))
        source = field_string(reader, "tokenizer.chat_template")
        if source is None:
            print(f"{path.name}: no tokenizer.chat_template, skipped")
            continue
        n_templates += 1
        bos = token_text(reader, field_int(reader, "tokenizer.ggml.bos_token_id"))
        eos = token_text(reader, field_int(reader, "tokenizer.ggml.eos_token_id"))
        cases = cases_for(bos, eos)
        with tempfile.TemporaryDirectory() as tmp:
            tmpl_file = pathlib.Path(tmp) / "template.jinja"
            tmpl_file.write_text(source, encoding="utf-8")
            cases_file = pathlib.Path(tmp) / "cases.json"
            cases_file.write_text(json.dumps(cases, ensure_ascii=False), encoding="utf-8")
            run = subprocess.run([render_bin, str(tmpl_file), str(cases_file)], capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{path.name}: render_template failed (exit {run.returncode}): {run.stderr.strip()}")
            n_bad += len(cases)
            continue
        results = json.loads(run.stdout)
        bad = 0
        n_rendered = 0
        for case, got in zip(cases, results):
            want = jinja_result(source, case)
            n_rendered += want["ok"]
            problem = compare(want, got)
            if problem:
                bad += 1
                print(f"  MISMATCH {path.name} {case['name']}: {problem}")
            elif args.verbose:
                print(f"  ok {case['name']}")
        n_cases += len(cases)
        n_bad += bad
        print(f"{path.name}: {len(cases) - bad}/{len(cases)} cases match "
              f"({n_rendered} rendered by jinja2, {len(cases) - n_rendered} raised; template {len(source)} chars, "
              f"bos={bos!r} eos={eos!r})")
    if n_templates == 0:
        print("no model carried a chat template", file=sys.stderr)
        return 0 if args.allow_missing else 2
    print(f"{n_cases - n_bad} passed, {n_bad} failed")
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
