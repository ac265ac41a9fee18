#!/usr/bin/env python3
"""Writes tests/fixtures/chat/expected.json: the renderings of our own chat templates
(tests/fixtures/chat/templates/*.jinja) by jinja2, configured exactly as Hugging Face
transformers configures it for apply_chat_template, over a set of conversations.

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
from transformers.utils import chat_template_utils as ctu

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "chat"

# strftime_now() reads datetime.now(); pin it so renderings are reproducible. Noon UTC
# keeps the calendar date the same in every time zone from UTC-11 to UTC+11.
NOW = 1735732800  # 2025-01-01 12:00:00 UTC


class FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return dt.datetime.fromtimestamp(NOW, tz)


ctu.datetime = FixedDatetime

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


def render(source, case):
    messages = ctu._normalize_chat_messages(case["messages"])
    kwargs = dict(case.get("extra_context", {}))
    tools = kwargs.pop("tools", None)
    documents = kwargs.pop("documents", None)
    for key in ("bos_token", "eos_token"):
        if case.get(key):
            kwargs[key] = case[key]
    rendered, _ = ctu.render_jinja_template(
        conversations=[messages],
        tools=tools,
        documents=documents,
        chat_template=source,
        add_generation_prompt=case["add_generation_prompt"],
        **kwargs,
    )
    return rendered[0]


def build_cases():
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
                            case["expected"] = {"ok": True, "text": render(source, case)}
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
    args = parser.parse_args()
    cases = build_cases()
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
