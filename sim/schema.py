"""Per-call JSON Schema validation: a tool's arguments and output, and a patched state, against their schemas.

Validators are compiled once per schema object with the Rust `jsonschema-rs` and
fall back to the reference `jsonschema` for schemas it cannot compile. Checking a
schema itself against its metaschema is world loading (`simia.sim.world.loader`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator, validators

__all__ = ["error_path", "non_finite_path", "validate_instance"]


def error_path(prefix: str, parts: Iterable[str | int]) -> str:
    """The JSON path (`$.items[0].name`) of `parts` below `prefix`, as problems name their place."""
    return prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


_VALIDATORS: dict[tuple[int, bool], tuple[dict[str, Any], Any]] = {}


def _validator(schema: dict[str, Any], formats: bool = False) -> Any:
    """A compiled validator per schema object (worlds are immutable, so their schemas are too).

    The Rust `jsonschema-rs` validates on every tool call (about 200x faster than the
    pure-Python `jsonschema`, which the loader keeps for metaschema checks); schemas it
    cannot compile fall back to `jsonschema`.
    """
    entry = _VALIDATORS.get((id(schema), formats))
    if entry is None or entry[0] is not schema:
        if len(_VALIDATORS) > 4096:
            _VALIDATORS.clear()
        try:
            compiled: Any = jsonschema_rs.validator_for(schema, validate_formats=formats)
        except Exception:  # unsupported by jsonschema-rs (e.g. a remote $ref): use the reference implementation
            compiled = _PyValidator(schema, formats)
        entry = _VALIDATORS[(id(schema), formats)] = (schema, compiled)
    return entry[1]


class _PyValidator:
    def __init__(self, schema: dict[str, Any], formats: bool) -> None:
        cls = validators.validator_for(schema, default=Draft202012Validator)
        self._validator = cls(schema, format_checker=cls.FORMAT_CHECKER if formats else None)

    def is_valid(self, instance: Any) -> bool:
        return bool(self._validator.is_valid(instance))

    def iter_errors(self, instance: Any) -> Any:
        for err in self._validator.iter_errors(instance):
            err.instance_path = list(err.absolute_path)  # type: ignore[attr-defined]  # the jsonschema-rs name
            yield err


def validate_instance(schema: dict[str, Any], instance: Any, *, formats: bool = False) -> list[str]:
    """Validate `instance` against `schema`; returns readable messages (empty when valid).

    Args:
        formats: also check `format` (date, date-time, email, uuid, ipv4, uri, ...; unknown formats such as
            OpenAPI's int32 pass). On for what an agent sends, as a real API would refuse `"date": "tomorrow"`;
            off for what a model answers (JSON Schema makes `format` an annotation, and a constrained decoder
            does not enforce it).
    """
    validator = _validator(schema, formats)
    if validator.is_valid(instance):
        return []
    errors = sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.instance_path])
    messages = [f"{error_path('$', list(err.instance_path))}: {_message(schema, instance, err)}" for err in errors]
    return list(dict.fromkeys(messages))


def _message(schema: dict[str, Any], instance: Any, err: Any) -> str:
    """The error's message, naming the unexpected members where jsonschema-rs says only "False schema does not
    allow 1" (`additionalProperties: false` with no `properties` beside it)."""
    where = list(getattr(err, "schema_path", []) or [])
    if not err.message.startswith("False schema does not allow") or not where or where[-1] != "additionalProperties":
        return str(err.message)
    node, value = _at(schema, where[:-1]), _at(instance, list(err.instance_path))
    if not isinstance(node, dict) or not isinstance(value, dict):
        return str(err.message)
    known, patterns = node.get("properties") or {}, node.get("patternProperties") or {}
    extra = [k for k in value if k not in known and not any(re.search(p, k) for p in patterns)]
    if not extra:
        return str(err.message)
    names = ", ".join(repr(k) for k in extra)
    return f"Additional properties are not allowed ({names} {'was' if len(extra) == 1 else 'were'} unexpected)"


def _at(document: Any, path: list[Any]) -> Any:
    """The part of `document` at `path` (keys and indexes), or None when there is none."""
    for part in path:
        found = isinstance(document, dict) and part in document
        found = found or (isinstance(document, list) and isinstance(part, int) and 0 <= part < len(document))
        if not found:
            return None
        document = document[part]
    return document


def non_finite_path(value: Any) -> str | None:
    """The JSON path of the first NaN or infinite number inside `value` (iterative), or None when there is none.

    JSON has no such numbers, but Python's and pydantic's parsers accept `NaN` and `Infinity`; serialized, they
    would become null, so the simulator (and the log) would see a value the agent never sent."""
    stack: list[tuple[Any, str]] = [(value, "$")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path
        if isinstance(item, dict):
            stack.extend((inner, f"{path}.{key}") for key, inner in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((inner, f"{path}[{i}]") for i, inner in reversed(list(enumerate(item))))
    return None
