#!/usr/bin/env python3
"""JSON documents judged by Python's json module, for ember's JSON-mode matcher
(tests/sample/test_json_constraint.cpp, sample/json_matcher.h).

tests/fixtures/json/cases.json: [{"text": str, "valid": bool}, ...]. Valid documents are random
objects that json.dumps wrote with random separators, indentation and ensure_ascii; the others
are those documents with one edit (a character deleted, inserted, replaced, the text cut or
extended). "valid" is Python's verdict: json.loads succeeds strictly (no NaN / Infinity, no
control characters in strings) and the value is an object. Every document keeps ember's
bounds (whitespace runs of at most 24 bytes, none at the end, nesting at most 64 deep), so the
verdicts compare.

Run: python3 tools/make_json_fixtures.py [out_file]   (standard library only)
"""
import json
import os
import random
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "json", "cases.json")

rng = random.Random(20261205)
WORD_CHARS = "abcxyz ABC019_-/\\\"\t\n\u00e9\u00fc\u4e2d\u6587\U0001F600'"


def rand_string():
    return "".join(rng.choice(WORD_CHARS) for _ in range(rng.randint(0, 8)))


def rand_number():
    k = rng.randint(0, 4)
    if k == 0:
        return rng.randint(-1000, 1000)
    if k == 1:
        return rng.choice([0, -0.0, 1e-7, 2.5e21, -3.75, 0.1])
    if k == 2:
        return rng.uniform(-1e6, 1e6)
    if k == 3:
        return rng.randint(-2**70, 2**70)
    return float(rng.randint(-5, 5))


def rand_value(depth):
    k = rng.randint(0, 7 if depth < 5 else 4)
    if k == 0:
        return rand_string()
    if k == 1:
        return rand_number()
    if k == 2:
        return rng.choice([True, False, None])
    if k in (3, 4):
        return rand_string() + str(rng.randint(0, 9))
    if k in (5, 6):
        return {rand_string(): rand_value(depth + 1) for _ in range(rng.randint(0, 4))}
    return [rand_value(depth + 1) for _ in range(rng.randint(0, 4))]


def dump(obj):
    indent = rng.choice([None, None, 0, 1, 2, "\t"])
    seps = rng.choice([(",", ":"), (", ", ": "), (" ,", " : "), (",\n", ":\t")]) if indent is None else None
    text = json.dumps(obj, indent=indent, separators=seps, ensure_ascii=rng.random() < 0.5)
    return rng.choice(["", " ", "\n"]) + text


def strictly_valid(text):
    def no_constants(name):
        raise ValueError(name)
    try:
        value = json.loads(text, parse_constant=no_constants)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict)


def within_bounds(text):
    run = longest = depth = deepest = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch in " \t\n\r":
            run += 1
            longest = max(longest, run)
            continue
        run = 0
        if ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "}]":
            depth -= 1
    return longest <= 24 and deepest <= 64 and text == text.rstrip(" \t\n\r")


EDIT_CHARS = list('{}[]:,"\\ 0123456789.-+eEtrufalsn\t\n') + ["\u0001", "\u00e9", "x", "'"]


def edit(text):
    if not text:
        return "{"
    i = rng.randrange(len(text))
    k = rng.randint(0, 4)
    if k == 0:
        return text[:i] + text[i + 1:]
    if k == 1:
        return text[:i] + rng.choice(EDIT_CHARS) + text[i:]
    if k == 2:
        return text[:i] + rng.choice(EDIT_CHARS) + text[i + 1:]
    if k == 3:
        return text[:i]
    return text + rng.choice(["}", "]", ",", "{}", " x", "0"])


def main():
    cases = []
    hand = ['{}', ' {"a": 1}', '{"a": [1, 2.5e-3, -0, true, false, null, "x"]}', '[]', '1', '"s"', '{"a": NaN}',
            '{"a": Infinity}', '{"a": 01}', '{"a": 1.}', '{"a": .5}', '{"a": +1}', '{"a": "\\u12G4"}',
            '{"a": "\\x"}', '{"a": "\t"}', '{a: 1}', "{'a': 1}", '{"a": 1,}', '{"a" 1}', '{"a": [1,]}',
            '{"a": 1}}', '{"a": tru}', '{"a": "\\ud83d\\ude00"}', '{"\u00e9": "\u4e2d"}', '{"a": 1e5, "b": 1E+5}',
            '{"a": 1e}', '{"a": -}', '{"a": [[[[[]]]]]}', '{"a": {"b": {}}}', '{} {}', '{}x']
    for t in hand:
        cases.append({"text": t, "valid": strictly_valid(t)})
    docs = []
    while len(docs) < 400:
        t = dump({rand_string(): rand_value(1) for _ in range(rng.randint(0, 5))})
        if within_bounds(t):
            docs.append(t)
    for t in docs:
        assert strictly_valid(t)
        cases.append({"text": t, "valid": True})
        for _ in range(3):
            e = edit(t)
            if within_bounds(e):
                cases.append({"text": e, "valid": strictly_valid(e)})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=True, indent=0)
        f.write("\n")
    n_valid = sum(c["valid"] for c in cases)
    print(f"wrote {len(cases)} cases ({n_valid} valid) to {OUT}")


if __name__ == "__main__":
    main()
