#!/usr/bin/env python3
"""JSON documents judged against JSON schemas by the `jsonschema` package (Draft 2020-12), for
ember's schema-constrained JSON mode (tests/sample/test_json_schema.cpp, sample/json_schema.h).

tests/fixtures/json/schema_cases.json: [{"schema": {...}, "cases": [{"text": str, "valid": bool}]}].
Valid documents are drawn from each schema and written by json.dumps with random layout; the
others are drawn documents with one change to the value (a required key dropped, a key added,
a value of another type, an enum value changed, an item added or removed), written the same
way. "valid" is jsonschema's verdict. The documents keep to what ember also demands beyond the
schema (integers written without a fraction, enum strings as nlohmann::json writes them,
whitespace runs of at most 24 bytes, nothing after the object), so the verdicts compare.

Run: python3 tools/make_json_schema_fixtures.py [out_file]   (needs `jsonschema`)
"""
import copy
import json
import os
import random
import sys

import jsonschema

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "json", "schema_cases.json")

rng = random.Random(20261205)

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {
        "id": {"type": "integer"}, "score": {"type": "number"}, "ok": {"type": "boolean"},
        "note": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3}},
     "required": ["id", "tags"]},
    {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                         "required": ["x", "y"], "additionalProperties": False}},
     "type": "object", "properties": {
         "start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"},
         "via": {"type": "array", "items": {"$ref": "#/$defs/point"}, "maxItems": 2},
         "kind": {"const": "line"}},
     "required": ["start", "end", "kind"], "additionalProperties": False},
    {"type": "object", "properties": {"level": {"enum": [1, 2, 3, "max", None, True]},
                                      "meta": {"type": "object", "additionalProperties": {"type": "integer"}}},
     "additionalProperties": {"type": "string"}},
    {"definitions": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/definitions/node"}, "maxItems": 2}},
        "required": ["v"], "additionalProperties": False}},
     "$ref": "#/definitions/node"},
    {"$defs": {"Pet": {"title": "Pet", "type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}},
                       "required": ["kind"]}},
     "title": "Owner", "type": "object", "properties": {
         "age": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
         "pet": {"oneOf": [{"$ref": "#/$defs/Pet"}, {"type": "null"}, {"type": "string"}]},
         "ids": {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]}}},
     "required": ["pet"], "additionalProperties": False},
]

WORDS = ["a", "bc", "x y", "Tom", "caf\u00e9", "q\"t", "back\\slash", "line\nbreak", ""]


def resolve(schema, root):
    while "$ref" in schema:
        _, group, name = schema["$ref"].split("/")
        schema = root[group][name]
    return schema


def draw(schema, root, depth=0):
    schema = resolve(schema, root)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return draw(rng.choice(schema[key]), root, depth)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    types = schema.get("type", ["object", "array", "string", "number", "integer", "boolean", "null"])
    types = [types] if isinstance(types, str) else types
    if depth > 3:
        types = [t for t in types if t not in ("object", "array")] or types
    t = rng.choice(types)
    if t == "object":
        props = schema.get("properties", {})
        out = {}
        for k in schema.get("required", []):
            out[k] = draw(props.get(k, {}), root, depth + 1)
        for k, sub in props.items():
            if k not in out and rng.random() < 0.5:
                out[k] = draw(sub, root, depth + 1)
        extra = schema.get("additionalProperties", True)
        if extra is not False and rng.random() < 0.3:
            k = rng.choice(["zz", "extra", "k9"])
            if k not in props:
                out[k] = draw(extra if isinstance(extra, dict) else {}, root, depth + 1)
        return out
    if t == "array":
        lo, hi = schema.get("minItems", 0), min(schema.get("maxItems", 3), 3)
        return [draw(schema.get("items", {}), root, depth + 1) for _ in range(rng.randint(lo, max(lo, hi)))]
    if t == "string":
        return rng.choice(WORDS)
    if t == "integer":
        return rng.randint(-500, 500)
    if t == "number":
        return rng.choice([rng.randint(-50, 50), rng.randint(-5000, 5000) + 0.25, 1.5e-3])
    if t == "boolean":
        return rng.random() < 0.5
    return None


def mutate(value, schema, root):
    """One change somewhere in value (an object's key dropped or added, a value replaced by one
    of another kind, an array item added or removed)."""
    value = copy.deepcopy(value)
    spots = []

    def walk(v):
        if isinstance(v, dict):
            spots.append(v)
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            spots.append(v)
            for x in v:
                walk(x)
    walk(value)
    target = rng.choice(spots)
    k = rng.randint(0, 2)
    others = [0, -7, 2.5, "s", "red", "max", True, None, [], {}, [1], {"v": 1}]
    if isinstance(target, dict):
        if k == 0 and target:
            del target[rng.choice(list(target))]
        elif k == 1 or not target:
            target[rng.choice(["zz", "name", "tags", "v", "x"])] = rng.choice(others)
        else:
            target[rng.choice(list(target))] = rng.choice(others)
    else:
        if k == 0 and target:
            target.pop(rng.randrange(len(target)))
        elif k == 1 or not target:
            target.append(rng.choice(others + ["green"]))
        else:
            target[rng.randrange(len(target))] = rng.choice(others)
    return value


def dump(v):
    indent = rng.choice([None, None, 1, 2])
    seps = rng.choice([(",", ":"), (", ", ": ")]) if indent is None else None
    return rng.choice(["", " "]) + json.dumps(v, indent=indent, separators=seps, ensure_ascii=rng.random() < 0.5)


def comparable(text):
    # ember's bounds beyond the schema: whitespace runs and no integer-valued float like 2.0.
    run = 0
    for ch in text:
        run = run + 1 if ch in " \t\n\r" else 0
        if run > 24:
            return False
    return ".0," not in text and ".0}" not in text and ".0]" not in text and ".0\n" not in text


def main():
    out = []
    for schema in SCHEMAS:
        jsonschema.Draft202012Validator.check_schema(schema)
        validator = jsonschema.Draft202012Validator(schema)
        cases = []
        while len(cases) < 160:
            v = draw(schema, schema)
            if rng.random() < 0.5:
                v = mutate(v, schema, schema)
            if not isinstance(v, dict):
                continue
            text = dump(v)
            if comparable(text):
                cases.append({"text": text, "valid": validator.is_valid(v)})
        out.append({"schema": schema, "cases": cases})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=True, indent=0)
        f.write("\n")
    n = sum(len(s["cases"]) for s in out)
    print(f"wrote {len(out)} schemas, {n} cases ({sum(c['valid'] for s in out for c in s['cases'])} valid) to {OUT}")


if __name__ == "__main__":
    main()
