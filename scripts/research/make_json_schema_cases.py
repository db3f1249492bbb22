#!/usr/bin/python3
"""Writes data/json-schema/cases.jsonl: schemas over canvas's JSON Schema subset, each with a short prompt,
small enough for the shipped byte-level models (128-byte context). Deterministic (seeded)."""
import json, random, sys

rng = random.Random(18)
PROMPTS = ["And God said", "Record: ", "The LORD spake", "Data: ", "And it came to pass", "Answer: ", "In the beginning",
           "JSON: "]
BOOKS = ["Gen", "Exod", "Lev", "Ruth", "Ps", "Prov", "Isa", "Matt", "Mark", "John", "Acts", "Rev"]
WORDS = ["light", "water", "bread", "stone", "sheep", "gold", "wine", "fire"]


def person():
    return {"type": "object", "properties": {"name": {"type": "string", "maxLength": rng.randint(3, 8)},
            "age": {"type": "integer", "minimum": 0, "maximum": rng.choice([99, 120, 150, 969])}},
            "required": ["name", "age"]}


def flags():
    return {"type": "object", "properties": {"ok": {"type": "boolean"}, "note": {"type": "null"},
            "count": {"type": "integer", "minimum": rng.randint(-10, 0), "maximum": rng.randint(1, 50)}},
            "required": ["ok"] + (["count"] if rng.random() < 0.5 else [])}


def color():
    return {"type": "object", "properties": {"thing": {"enum": rng.sample(WORDS, rng.randint(2, 5))},
            "n": {"type": "integer", "exclusiveMinimum": -rng.randint(1, 9), "exclusiveMaximum": rng.randint(2, 99)}},
            "required": ["thing", "n"]}


def code():
    letters = rng.randint(1, 3)
    return {"type": "object", "properties": {"code": {"type": "string",
            "pattern": "^[A-Z]{%d}-[0-9]{2,%d}$" % (letters, rng.randint(2, 4))}}, "required": ["code"]}


def point():
    lo = rng.randint(-20, 0)
    return {"type": "object", "properties": {"x": {"type": "number", "minimum": lo, "maximum": lo + rng.randint(1, 40)},
            "y": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": rng.randint(1, 5)}},
            "required": ["x", "y"]}


def tags():
    lo = rng.randint(0, 2)
    return {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string",
            "maxLength": rng.randint(2, 5)}, "minItems": lo, "maxItems": lo + rng.randint(1, 2)}}, "required": ["tags"]}


def nested():
    return {"type": "object", "properties": {"verse": {"type": "object", "properties": {
        "chapter": {"type": "integer", "minimum": 1, "maximum": 150},
        "verse": {"type": "integer", "minimum": 1, "maximum": 176}}, "required": ["chapter", "verse"]},
        "book": {"enum": rng.sample(BOOKS, rng.randint(2, 6))}}, "required": ["book", "verse"]}


def any_of():
    return {"type": "object", "properties": {"v": {"anyOf": [
        {"type": "integer", "minimum": 0, "maximum": rng.randint(9, 999)},
        {"type": "string", "maxLength": rng.randint(2, 6)}, {"type": "null"}]}}, "required": ["v"]}


def optional_only():
    return {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": rng.randint(3, 30)},
            "b": {"type": "boolean"}, "c": {"type": "string", "maxLength": rng.randint(1, 4)}}}


def fixed_array():
    k = rng.randint(2, 4)
    return {"type": "array", "items": {"type": "integer", "minimum": -rng.randint(1, 9), "maximum": rng.randint(1, 99)},
            "minItems": k, "maxItems": k}


def word():
    return {"type": "object", "properties": {"w": {"type": "string", "minLength": 2, "maxLength": rng.randint(3, 6),
            "pattern": "^[a-z]+$"}, "n": {"type": ["integer", "null"], "minimum": 1, "maximum": rng.randint(2, 12)}},
            "required": ["w", "n"]}


def date():
    return {"type": "object", "properties": {"date": {"type": "string", "pattern": "^[0-9]{4}-[0-1][0-9]-[0-3][0-9]$"},
            "done": {"type": "boolean"}}, "required": ["date", "done"]}


def mixed_enum():
    return {"type": "object", "properties": {"k": {"const": rng.choice(WORDS)}, "e": {"enum": [1, "two", None, True]}},
            "required": ["k", "e"]}


def items_of_objects():
    return {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["id"]}, "maxItems": rng.randint(1, 2)}},
        "required": ["items"]}


TEMPLATES = [person, flags, color, code, point, tags, nested, any_of, optional_only, fixed_array, word, date,
             mixed_enum, items_of_objects]
cases = []
for variant in range(8):
    for t in TEMPLATES:
        cases.append({"id": "%s-%d" % (t.__name__, variant), "schema": t(), "prompt": rng.choice(PROMPTS)})
out = sys.argv[1] if len(sys.argv) > 1 else "data/json-schema/cases.jsonl"
with open(out, "w") as f:
    for c in cases:
        f.write(json.dumps(c) + "\n")
print("wrote %d cases to %s" % (len(cases), out))
