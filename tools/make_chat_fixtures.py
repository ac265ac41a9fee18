#!/usr/bin/env python3
"""Writes tests/fixtures/chat/expected.json: the renderings of our own chat templates
(tests/fixtures/chat/templates/*.jinja) by jinja2, configured exactly as Hugging Face
transformers configures it for apply_chat_template, over a set of conversations.
The fixtures are written with transformers' own renderer; `--check --replica` verifies
them with a replica of its jinja2 setup, for Pythons that only have jinja2.

The C++ test (tests/chat/chat_fixture_test.cpp) renders the same cases with ember and
compares the text exactly. Run with a Python that has transformers and jinja2:

    python tools/make_chat_fixtures.py [--check]

--check compares with the committed file instead of writing it (exit 1 on a change).
"""
import argparse
import datetime as dt
import json
import pathlib
import sys

import jinja2

try:  # the reference: transformers' own renderer
    from transformers.utils import chat_template_utils as ctu
except ImportError:  # test venvs without transformers use the replica below
    ctu = None

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "chat"

# strftime_now() reads datetime.now(); pin it so renderings are reproducible. Noon UTC
# keeps the calendar date the same in every time zone from UTC-11 to UTC+11.
NOW = 1735732800  # 2025-01-01 12:00:00 UTC


class FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return dt.datetime.fromtimestamp(NOW, tz)


if ctu is not None:
    ctu.datetime = FixedDatetime


def replica_environment():
    """jinja2 configured the way transformers' _compile_jinja_template configures it, for
    Pythons without transformers: sandboxed and immutable, trim_blocks, lstrip_blocks,
    loop controls, a {% generation %} tag, json.dumps-based tojson, raise_exception,
    strftime_now, and namespaces that refuse underscore-prefixed attributes."""
    import json as _json

    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import Namespace

    class GenerationTag(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

        def _render_body(self, caller):
            return caller()

    def check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                "Please rename the attribute.")

    class CheckedNamespace(Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                check_name(name)
            Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            check_name(name)
            Namespace.__setitem__(self, name, value)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return _json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: FixedDatetime.now().strftime(fmt)
    env.globals["dict"] = dict
    env.globals["namespace"] = CheckedNamespace
    return env


def replica_messages(messages):
    """transformers' message preparation: drop None values, alias the reasoning field."""
    out = []
    for message in messages:
        message = {k: v for k, v in message.items() if v is not None}
        reasoning = next((message[k] for k in ("reasoning_content", "thinking", "reasoning")
                          if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city — in °C.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "days": {"type": "integer", "minimum": 1, "default": 1},
                },
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "noop", "description": "", "parameters": {}}},
]

TOOL_CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}

MESSAGE_SETS = {
    "single_user": [{"role": "user", "content": "Hello!"}],
    "system_user": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hello there"},
    ],
    "multi_turn": [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ],
    "no_system_multi": [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": "four"},
    ],
    "empty_content": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "   "},
    ],
    "unicode": [
        {"role": "system", "content": "Réponds en français 🇫🇷"},
        {"role": "user", "content": "日本語 and emoji 🎉🙂, quotes ' \" and \\ backslash,\ttab\nnewline\u200bzwsp"},
    ],
    "whitespace_edges": [
        {"role": "user", "content": "\n\n  leading and trailing  \n"},
        {"role": "assistant", "content": "\n<think>\nponder\n</think>\n\nanswer  "},
        {"role": "user", "content": "again\n"},
    ],
    "content_parts": [
        {"role": "user", "content": [
            {"type": "text", "text": "Describe "},
            {"type": "image"},
            {"type": "text", "text": " please"},
        ]},
    ],
    "tool_round_trip": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "name": "get_weather", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
        {"role": "tool", "name": "get_weather", "content": "second result"},
        {"role": "assistant", "content": "It is 21.5 °C and clear."},
    ],
    "reasoning": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "simple sum"},
        {"role": "user", "content": "and 3+3?"},
    ],
    "roles_not_alternating": [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "second"},
    ],
}

DEFAULT_TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}

# Extra template variables to try per template, beyond the plain run.
EXTRA_CONTEXTS = {
    "chatml_tools": [{"tools": TOOLS}],
    "llama3_dates": [
        {"tools": TOOLS},
        {"date_string": "05 Mar 2025"},
        {"tools": TOOLS, "tools_in_user_message": False},
    ],
    "reasoning_thinking": [{"enable_thinking": False}, {"enable_thinking": True}],
    "constructs_loops": [],
}

# Conversations rendered without bos/eos tokens too (the variables stay undefined).
NO_TOKEN_SETS = ("single_user", "multi_turn")


def render(source, case, use_transformers=None):
    """Renders one case as transformers' apply_chat_template would (without tokenizing)."""
    if use_transformers is None:
        use_transformers = ctu is not None
    kwargs = dict(case.get("extra_context", {}))
    tools = kwargs.pop("tools", None)
    documents = kwargs.pop("documents", None)
    for key in ("bos_token", "eos_token"):
        if case.get(key):
            kwargs[key] = case[key]
    if not use_transformers:
        template = replica_environment().from_string(source)
        return template.render(messages=replica_messages(case["messages"]), tools=tools, documents=documents,
                               add_generation_prompt=case["add_generation_prompt"], **kwargs)
    messages = ctu._normalize_chat_messages(case["messages"])
    rendered, _ = ctu.render_jinja_template(
        conversations=[messages],
        tools=tools,
        documents=documents,
        chat_template=source,
        add_generation_prompt=case["add_generation_prompt"],
        **kwargs,
    )
    return rendered[0]


def build_cases(use_transformers=None):
    cases = []
    for path in sorted((FIXTURES / "templates").glob("*.jinja")):
        name = path.stem
        source = path.read_text(encoding="utf-8")
        contexts = [{}] + EXTRA_CONTEXTS.get(name, [])
        for set_name, messages in MESSAGE_SETS.items():
            for ctx_index, extra in enumerate(contexts):
                token_sets = [DEFAULT_TOKENS] + ([{}] if set_name in NO_TOKEN_SETS and ctx_index == 0 else [])
                for tokens in token_sets:
                    for agp in (True, False):
                        case = {
                            "name": f"{name}__{set_name}__ctx{ctx_index}__{'tok' if tokens else 'notok'}__{'gen' if agp else 'nogen'}",
                            "template": path.name,
                            "messages": messages,
                            "add_generation_prompt": agp,
                            "extra_context": extra,
                            "now": NOW,
                            **tokens,
                        }
                        try:
                            case["expected"] = {"ok": True, "text": render(source, case, use_transformers)}
                        except jinja2.exceptions.TemplateError as e:
                            if type(e) is jinja2.exceptions.TemplateError:
                                # raise_exception(): ember must report the same message.
                                case["expected"] = {"ok": False, "raised": str(e)}
                            else:
                                case["expected"] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                        except Exception as e:  # Python errors inside the template (TypeError, ...)
                            case["expected"] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                        cases.append(case)
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed expected.json")
    parser.add_argument("--replica", action="store_true",
                        help="render with the built-in replica of transformers' jinja2 setup even when transformers is installed")
    args = parser.parse_args()
    if ctu is None and not args.check:
        print("transformers is not installed: the committed fixtures must come from transformers itself",
              file=sys.stderr)
        return 2
    use_transformers = ctu is not None and not args.replica
    print(f"reference: {'transformers' if use_transformers else 'replica of transformers jinja2 setup'}")
    cases = build_cases(use_transformers)
    text = json.dumps(
        {"generator": "tools/make_chat_fixtures.py", "jinja2": jinja2.__version__, "cases": cases},
        ensure_ascii=False, indent=1) + "\n"
    out = FIXTURES / "expected.json"
    if args.check:
        if out.read_text(encoding="utf-8") != text:
            print(f"{out} is out of date; rerun tools/make_chat_fixtures.py", file=sys.stderr)
            return 1
        print(f"{out}: up to date ({len(cases)} cases)")
        return 0
    out.write_text(text, encoding="utf-8")
    n_ok = sum(c["expected"]["ok"] for c in cases)
    print(f"wrote {out}: {len(cases)} cases ({n_ok} render, {len(cases) - n_ok} raise or fail)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
