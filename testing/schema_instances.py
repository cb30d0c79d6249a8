"""A schema-valid instance of any JSON Schema, the same for the same seed: what the fake provider's `schema`
mode answers (`FakeProvider(schema_answer(seed))`), so an imported world can be served and called offline.

It fills the required members only (an optional one just where `minProperties` asks), takes the first
branch of an `anyOf` (and of a `oneOf`, the first whose instance fits that branch alone), a `const`, a
seeded choice of an `enum`, numbers within `minimum`/`maximum` (exclusive bounds and `multipleOf`
too), strings within `minLength`/`maxLength`, a few `format`s and the patterns that Python's regex parser
reads (literals, classes, repeats, groups, alternatives), and arrays of `minItems` items. Local `$ref`s are
followed. A schema it cannot satisfy (an unsupported pattern, `not`) may get an invalid instance:
`schema_instance` says so with a `ValueError` when asked to check.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import string
from collections.abc import Callable
from re import _parser as sre_parse  # type: ignore[attr-defined]  # Python's own regex parser (3.11+)
from typing import Any

from simia.sim.schema import validate_instance

__all__ = ["request_schema", "schema_answer", "schema_instance"]

_MAX_DEPTH = 24  # deeper than this (a recursive $ref), objects and arrays stay empty
_WORDS = ("alpha", "bravo", "delta", "echo", "kilo", "lima", "nova", "sierra", "tango", "zulu")


def schema_instance(schema: dict[str, Any], seed: int | str = 0, *, check: bool = True) -> Any:
    """A schema-valid instance of `schema`, the same for the same `seed`.

    Raises:
        ValueError: `check` is set and the instance breaks the schema (what the generator cannot satisfy).
    """
    value = _Generator(schema, random.Random(str(seed))).value(schema, "value", 0)
    problems = validate_instance(schema, value) if check else []
    if problems:
        raise ValueError(f"could not build an instance of the schema: {'; '.join(problems[:3])}")
    return value


def schema_answer(seed: int = 0) -> Callable[[dict[str, Any]], Any]:
    """A fake provider's answer function: an instance of each request's JSON schema (the chat-completions
    `response_format`, or the tool an Anthropic request forces), seeded by `seed` and the request's own
    messages and seed, so one request always gets one answer. A request without a schema gets `{}`
    (a native tool-calling turn: a final message with no tool calls)."""

    def answer(body: dict[str, Any]) -> Any:
        schema = request_schema(body)
        if schema is None:
            return {"message": "", "tool_calls": []} if body.get("tools") else {}
        text = json.dumps([seed, body.get("seed"), body.get("messages")], sort_keys=True, default=str)
        return schema_instance(schema, hashlib.sha256(text.encode()).hexdigest(), check=False)

    return answer


def request_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a chat-completions (`response_format`) or Anthropic (the forced tool's) request asks for;
    None when it asks for none."""
    spec = (body.get("response_format") or {}).get("json_schema") or {}
    if isinstance(spec.get("schema"), dict):
        return dict(spec["schema"])
    forced = (body.get("tool_choice") or {}).get("name") if isinstance(body.get("tool_choice"), dict) else None
    for tool in body.get("tools") or []:
        if forced is not None and tool.get("name") == forced and isinstance(tool.get("input_schema"), dict):
            return dict(tool["input_schema"])
    return None


class _Generator:
    def __init__(self, root: dict[str, Any], rng: random.Random) -> None:
        self.root = root
        self.rng = rng

    def value(self, schema: Any, name: str, depth: int) -> Any:
        if not isinstance(schema, dict):
            return None if schema is False else {}
        if "$ref" in schema:
            return self.value({**self._resolve(schema["$ref"]), **_without(schema, "$ref")}, name, depth + 1)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.rng.choice(schema["enum"])
        if isinstance(schema.get("allOf"), list):
            merged = _without(schema, "allOf")
            for part in schema["allOf"]:
                merged = _merged(merged, self._resolve(part["$ref"]) if "$ref" in part else part)
            return self.value(merged, name, depth)
        for union in ("anyOf", "oneOf"):
            if isinstance(schema.get(union), list) and schema[union]:
                return self._branch(schema, union, name, depth)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = kind[0] if kind else None
        if kind is None:
            kind = _implied_type(schema)
        return getattr(self, f"_{kind}", self._object)(schema, name, depth)

    def _branch(self, schema: dict[str, Any], union: str, name: str, depth: int) -> Any:
        rest = _without(schema, union)
        branches = [_merged(rest, b) if isinstance(b, dict) else b for b in schema[union]]
        first = self.value(branches[0], name, depth)
        if union == "anyOf":
            return first
        for branch in branches:
            candidate = self.value(branch, name, depth)
            fits = [b for b in branches if isinstance(b, dict) and not validate_instance(self._rooted(b), candidate)]
            if len(fits) == 1:
                return candidate
        return first

    def _rooted(self, schema: dict[str, Any]) -> dict[str, Any]:
        """`schema` with the root's definitions beside it, so its local `$ref`s resolve when validated alone."""
        return {**{k: self.root[k] for k in ("$defs", "definitions") if k in self.root}, **schema}

    def _resolve(self, ref: str) -> dict[str, Any]:
        node: Any = self.root
        if not ref.startswith("#"):
            return {}  # a remote reference: nothing to follow offline
        for token in [t for t in ref[1:].split("/") if t]:
            token = token.replace("~1", "/").replace("~0", "~")
            node = node[int(token)] if isinstance(node, list) else node.get(token, {}) if isinstance(node, dict) else {}
        return node if isinstance(node, dict) else {}

    def _object(self, schema: dict[str, Any], name: str, depth: int) -> dict[str, Any]:
        properties: dict[str, Any] = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
        wanted = [n for n in schema.get("required", []) if isinstance(n, str)]
        optional = [n for n in properties if n not in wanted]
        wanted += optional[: max(0, int(schema.get("minProperties", 0)) - len(wanted))]
        if depth > _MAX_DEPTH:
            return {}
        return {n: self.value(properties.get(n, {}), n, depth + 1) for n in wanted}

    def _array(self, schema: dict[str, Any], name: str, depth: int) -> list[Any]:
        prefix: list[Any] = schema["prefixItems"] if isinstance(schema.get("prefixItems"), list) else []
        count = 0 if depth > _MAX_DEPTH else int(schema.get("minItems", 0))
        return [
            self.value(prefix[i] if i < len(prefix) else schema.get("items", {}), name, depth + 1) for i in range(count)
        ]

    def _string(self, schema: dict[str, Any], name: str, depth: int) -> str:
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        text = _formatted(schema.get("format"), self.rng)
        if text is None and isinstance(schema.get("pattern"), str):
            text = _from_pattern(schema["pattern"], self.rng)
        if text is None:
            text = f"{name if name.isidentifier() else 'value'}-{self.rng.choice(_WORDS)}-{self.rng.randrange(100)}"
            text = text.ljust(low, "x")
            text = text[: int(high)] if high is not None else text
        return text

    def _integer(self, schema: dict[str, Any], name: str, depth: int) -> int:
        return int(self._number({**schema, "multipleOf": schema.get("multipleOf", 1)}, name, depth))

    def _number(self, schema: dict[str, Any], name: str, depth: int) -> float | int:
        step = schema.get("multipleOf")
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0 if "maximum" not in schema else None))
        high = schema.get("maximum", schema.get("exclusiveMaximum"))
        low = low if low is not None else (high - 100 if high is not None else 0)
        high = high if high is not None else low + 100
        if step:
            first, last = -(-low // step), high // step  # the multiples of step within [low, high]
            first += "exclusiveMinimum" in schema and first * step <= schema["exclusiveMinimum"]
            last -= "exclusiveMaximum" in schema and last * step >= schema["exclusiveMaximum"]
            multiple: float | int = self.rng.randint(int(first), int(max(first, last))) * step
            return multiple
        value: float | int = self.rng.randint(int(low) + 1, int(high) - 1) if high - low > 2 else (low + high) / 2
        return value

    def _boolean(self, schema: dict[str, Any], name: str, depth: int) -> bool:
        return self.rng.random() < 0.5

    def _null(self, schema: dict[str, Any], name: str, depth: int) -> None:
        return None


def _implied_type(schema: dict[str, Any]) -> str:
    keys = set(schema)
    if keys & {"properties", "required", "additionalProperties", "minProperties"}:
        return "object"
    if keys & {"items", "prefixItems", "minItems", "maxItems"}:
        return "array"
    if keys & {"minLength", "maxLength", "pattern", "format"}:
        return "string"
    if keys & {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}:
        return "number"
    return "object" if not keys - {"description", "title", "default", "examples"} else "null"


def _without(schema: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != key}


def _merged(base: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    merged = {**base, **part}
    if "required" in base and "required" in part:
        merged["required"] = list(dict.fromkeys([*base["required"], *part["required"]]))
    if isinstance(base.get("properties"), dict) and isinstance(part.get("properties"), dict):
        merged["properties"] = {**base["properties"], **part["properties"]}
    return merged


def _formatted(kind: Any, rng: random.Random) -> str | None:
    n = rng.randrange(1, 28)
    return (
        {
            "date-time": f"2026-01-{n:02d}T09:30:00Z",
            "date": f"2026-01-{n:02d}",
            "time": "09:30:00Z",
            "email": f"user{n}@example.com",
            "uri": f"https://example.com/{n}",
            "url": f"https://example.com/{n}",
            "uuid": f"{rng.getrandbits(32):08x}-0000-4000-8000-{rng.getrandbits(48):012x}",
            "hostname": f"host{n}.example.com",
            "ipv4": f"10.0.0.{n}",
        }.get(kind)
        if isinstance(kind, str)
        else None
    )


def _from_pattern(pattern: str, rng: random.Random) -> str | None:
    """A string `re.search(pattern, ...)` finds, built from Python's parse of the regex; None for a construct
    it does not build (a lookaround, a backreference) or a result that does not match."""
    try:
        text = "".join(_emit(sre_parse.parse(pattern), rng))
    except (re.error, ValueError, IndexError, TypeError):
        return None
    return text if re.search(pattern, text) else None


_CATEGORY = {"CATEGORY_DIGIT": string.digits, "CATEGORY_WORD": string.ascii_letters + "_", "CATEGORY_SPACE": " "}


def _emit(parsed: Any, rng: random.Random) -> list[str]:
    out: list[str] = []
    for op, arg in parsed:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "ANY":
            out.append(rng.choice(string.ascii_lowercase))
        elif name == "IN":
            out.append(_one_of(arg, rng))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, inner = arg
            count = low if high == low else rng.randint(low, min(high, low + 3))
            out.extend(piece for _ in range(max(count, low)) for piece in _emit(inner, rng))
        elif name == "SUBPATTERN":
            out.extend(_emit(arg[-1], rng))
        elif name == "BRANCH":
            out.extend(_emit(arg[1][0], rng))
        elif name == "AT":
            continue
        else:
            raise ValueError(f"unsupported regex construct {name}")
    return out


def _one_of(items: Any, rng: random.Random) -> str:
    choices: list[str] = []
    for op, arg in items:
        name = str(op)
        if name == "NEGATE":
            return rng.choice([c for c in string.ascii_letters if not re.fullmatch(_class_text(items), c)] or ["?"])
        if name == "LITERAL":
            choices.append(chr(arg))
        elif name == "RANGE":
            choices.extend(chr(c) for c in range(arg[0], min(arg[1], arg[0] + 25) + 1))
        elif name == "CATEGORY":
            choices.extend(_CATEGORY.get(str(arg), "a"))
    if not choices:
        raise ValueError("empty character class")
    return rng.choice(choices)


def _class_text(items: Any) -> str:
    """A negated class's regex text again (to test candidates against), from its parsed items."""
    parts = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            parts.append(re.escape(chr(arg)))
        elif name == "RANGE":
            parts.append(f"{re.escape(chr(arg[0]))}-{re.escape(chr(arg[1]))}")
        elif name == "CATEGORY":
            parts.append({"CATEGORY_DIGIT": r"\d", "CATEGORY_WORD": r"\w", "CATEGORY_SPACE": r"\s"}.get(str(arg), ""))
    return f"[^{''.join(parts)}]"
