"""The forms of one answer schema that each kind of backend can take.

The simulator builds one exact schema per tool (`simia.sim.engine.answer_schema`: a root `anyOf`, one
branch per outcome). Grammar-constrained decoders take it as it is, except llama.cpp's converter, which
reads only a subset of JSON Schema and falls back to unconstrained JSON on anything it cannot convert
(`grammar_form`). OpenAI's API and Anthropic's refuse a root `anyOf` (`object_rooted`). Validation always
uses the exact schema: a form only shapes what a model may write.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["ANY_VALUE", "grammar_form", "object_rooted"]

_JSON_TYPES = ("object", "array", "string", "number", "boolean", "null")
ANY_VALUE: dict[str, Any] = {"anyOf": [{"type": t} for t in _JSON_TYPES]}
"""Any JSON value, written so that llama.cpp's converter reads it so (it turns `{}` into "any object")."""

# The keywords llama.cpp's converter builds a grammar from; a schema with none of them is "any value" to JSON
# Schema (a `format` counts only where the converter knows it).
_CONVERTED = {"$ref", "oneOf", "anyOf", "allOf", "type", "const", "enum", "properties", "additionalProperties"}
_CONVERTED |= {"items", "prefixItems", "pattern"}
_FORMATS = {"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"}
_MAPS = ("properties", "patternProperties", "$defs", "definitions")  # name -> schema maps
_SUBSCHEMAS = ("items", "prefixItems", "additionalProperties", "anyOf", "oneOf", "not", "contains")


def grammar_form(schema: Any, max_chars: int = 64, max_items: int = 6, *, patterns: bool = True) -> Any:
    """`schema` as llama.cpp's JSON-Schema-to-grammar converter (llama-cpp-python 0.3) reads it faithfully.

    The converter reads `anyOf`/`oneOf`, `const`, `enum`, `required`, `additionalProperties` (absent: no
    other members), local `$ref`s, anchored patterns and a few formats, and writes members in their declared
    order; where it cannot read a schema it gives up on the whole grammar. So:

    - a schema without any keyword it reads (`{}`, a bare `description`) becomes `ANY_VALUE` (it would make
      `{}` "any object" and fail on a bare `description`);
    - a list of types becomes an `anyOf` of one branch per type keeping the other keywords, keywords beside
      an `anyOf` / `oneOf` move into each branch, and `allOf` parts are merged (it would drop them);
    - required members missing from `properties` are added to it (it would let them be left out);
    - a `pattern` must be anchored (`^...$`): an unanchored one is widened to `^.*(...).*$`;
      `patterns=False` drops them (for a pattern whose syntax the converter cannot read);
    - unbounded strings and arrays get caps (`max_chars`, `max_items`), and so do a pattern's unbounded
      repetitions (`*` and `+` repeat at most `max_chars` times): a 135M model under a grammar tends to ramble
      until `max_tokens` and cut its JSON short (in a JSON Pointer, `/mocap/mocap/...`).

    Keywords the converter ignores (`minimum`, `not`, ...) stay: the grammar is then looser than the schema
    there, and the simulator's check (with its retry) still applies.
    """

    def again(inner: Any) -> Any:
        return grammar_form(inner, max_chars, max_items, patterns=patterns)

    if isinstance(schema, list):
        return [again(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if not _CONVERTED & set(schema) and schema.get("format") not in _FORMATS:
        return again(ANY_VALUE)
    kinds = schema.get("type")
    if isinstance(kinds, list):
        rest = {k: v for k, v in schema.items() if k != "type"}
        return again(
            {"anyOf": [{**rest, "type": kind} for kind in kinds]} if len(kinds) != 1 else {**rest, "type": kinds[0]}
        )
    if isinstance(schema.get("allOf"), list):
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            merged = _joined(merged, part) if isinstance(part, dict) else merged
        return again(merged)
    union = "anyOf" if "anyOf" in schema else "oneOf" if "oneOf" in schema else None
    rest = {k: v for k, v in schema.items() if k not in {union, "$defs", "definitions"}}
    if union is not None and isinstance(schema[union], list) and rest:  # the converter reads only the branches
        kept = {k: schema[k] for k in ("$defs", "definitions") if k in schema}
        return again({union: [_joined(rest, branch) for branch in schema[union]], **kept})
    out: dict[str, Any] = {
        k: ({n: again(s) for n, s in v.items()} if isinstance(v, dict) else v)
        if k in _MAPS
        else again(v)
        if k in _SUBSCHEMAS
        else v
        for k, v in schema.items()
    }
    kind = out.get("type")
    missing = [n for n in out.get("required", []) if n not in out.get("properties", {})]
    if kind in (None, "object") and missing:
        out["properties"] = {**out.get("properties", {}), **{n: again(ANY_VALUE) for n in missing}}
    if isinstance(out.get("pattern"), str):
        if patterns:
            out["pattern"] = _capped(_anchored(out["pattern"]), max_chars)
        else:
            del out["pattern"]
    if kind == "string" and "maxLength" not in out and not {"enum", "const", "pattern", "format"} & set(out):
        out["maxLength"] = max(max_chars, out.get("minLength", 0))
    if kind == "array" and "items" in out and "maxItems" not in out:  # without items: the converter's any-array
        out["maxItems"] = max(max_items, out.get("minItems", 0))
    return out


def _joined(rest: dict[str, Any], branch: Any) -> Any:
    """`branch` with the keywords `rest` held beside it (both must hold: `required` lists and `properties`
    maps are joined)."""
    if not isinstance(branch, dict):
        return branch
    joined = {**rest, **branch}
    if "required" in rest and "required" in branch:
        joined["required"] = list(dict.fromkeys([*rest["required"], *branch["required"]]))
    if isinstance(rest.get("properties"), dict) and isinstance(branch.get("properties"), dict):
        joined["properties"] = {**rest["properties"], **branch["properties"]}
    return joined


def _anchored(pattern: str) -> str:
    """A JSON Schema pattern (a search: it may match anywhere) as the anchored regex the converter needs, whose
    wildcards (`.`, `[^...]`) exclude `"` and `\\` (the converter lets them write a raw quote, which ends the
    JSON string early)."""
    starts = pattern.startswith("^")
    ends = pattern.endswith("$") and not pattern.endswith("\\$")
    body = pattern[1 if starts else 0 : -1 if ends else None]
    anchored = ("^" if starts else "^.*") + (body if starts and ends else f"({body})") + ("$" if ends else ".*$")
    out = []
    for token, outside in _tokens(anchored):
        if token in ("[", "[^"):
            out.append('[^"\\\\' if token == "[^" else "[")
        else:
            out.append('[^"\\\\]' if token == "." and outside else token)
    return "".join(out)


def _capped(pattern: str, times: int) -> str:
    """`pattern` with each unbounded repetition (`*`, `+` outside a character class) repeating at most `times`."""
    caps = {"*": f"{{0,{times}}}", "+": f"{{1,{times}}}"}
    return "".join(caps.get(token, token) if outside else token for token, outside in _tokens(pattern))


def _tokens(pattern: str) -> Iterator[tuple[str, bool]]:
    """A regex's tokens (an escape pair, a class's opening `[` or `[^`, or one character), each with whether it is
    outside a character class (a class's opening counts as outside, its other characters and `]` as inside)."""
    i, in_class = 0, False
    while i < len(pattern):
        if pattern[i] == "\\":
            token = pattern[i : i + 2]
        elif pattern[i] == "[" and not in_class:
            token = "[^" if pattern.startswith("[^", i) else "["
        else:
            token = pattern[i]
        yield token, not in_class
        in_class = token in ("[", "[^") or (in_class and token != "]")
        i += len(token)


def object_rooted(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with an object at its root, for APIs that refuse a root `anyOf` / `oneOf` (OpenAI's structured
    outputs, Anthropic's tool `input_schema`): object branches are merged into one object whose members
    accept what any branch accepts there (`required`: the members every branch requires). Looser than the
    exact schema (a member's choice no longer follows another's); any other schema comes back as it is."""
    union = schema.get("anyOf") or schema.get("oneOf")
    if not isinstance(union, list) or not all(
        isinstance(b, dict) and b.get("type") == "object" and isinstance(b.get("properties"), dict) for b in union
    ):
        return schema
    members: dict[str, list[Any]] = {}
    for branch in union:
        for name, member in branch["properties"].items():
            seen = members.setdefault(name, [])
            if member not in seen:
                seen.append(member)
    required = [n for n in members if all(n in b.get("required", []) for b in union)]
    merged: dict[str, Any] = {
        "type": "object",
        "properties": {n: ms[0] if len(ms) == 1 else {"anyOf": ms} for n, ms in members.items()},
        "required": required,
    }
    if all(b.get("additionalProperties") is False for b in union):
        merged["additionalProperties"] = False
    return {**merged, **{k: v for k, v in schema.items() if k in ("$defs", "definitions")}}
