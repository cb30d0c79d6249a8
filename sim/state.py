"""World state: a JSON object passed in and returned, never hidden on an object.

Helpers here hash a state, apply an RFC 6902 patch under the world's
`state_schema` (all or nothing), and slice a large state down to the records a
call touches so the simulator's prompt stays bounded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

import jsonpatch
import jsonpointer

from .errors import StateError
from .loader import validate_instance
from .world import canonical_json

__all__ = ["apply_patch", "is_missing", "needles_of", "resolve_pointer", "slice_state", "state_hash"]

_MISSING = object()


def state_hash(state: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(state).encode()).hexdigest()


def apply_patch(state: dict[str, Any], patch: list[dict[str, Any]], schema: dict[str, Any] | None) -> dict[str, Any]:
    """Apply `patch` to a copy of `state` and check the result against `schema`.

    Returns:
        The new state; `state` itself is never modified.

    Raises:
        StateError: the patch is malformed, does not apply, or breaks the schema.
    """
    if not patch:
        return state
    try:
        new = jsonpatch.apply_patch(state, patch, in_place=False)  # copies: `state` is never modified
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise StateError(f"state_patch does not apply: {exc}") from None
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise StateError(f"state_patch is malformed: {type(exc).__name__}: {exc}") from None
    if not isinstance(new, dict):
        raise StateError("state_patch replaced the state with a non-object")
    if schema is not None:
        problems = validate_instance(schema, new)
        if problems:
            raise StateError("patched state breaks state_schema: " + "; ".join(problems[:3]))
    return new


def resolve_pointer(state: Any, pointer: str) -> Any:
    """The value at `pointer`, or a marker that `is_missing` recognises when nothing is there."""
    try:
        return jsonpointer.resolve_pointer(state, pointer)
    except jsonpointer.JsonPointerException:
        return _MISSING


def is_missing(value: Any) -> bool:
    return value is _MISSING


def needles_of(values: Iterable[Any]) -> set[str]:
    """Every string and number inside `values`, as strings: what a call may refer to."""
    out: set[str] = set()
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            text = str(value).strip()
            if len(text) >= 2:
                out.add(text)
    return out


def _mentions(key: str, record: Any, needles: set[str]) -> bool:
    if key in needles:
        return True
    if isinstance(record, dict):
        return any(isinstance(v, str | int) and not isinstance(v, bool) and str(v) in needles for v in record.values())
    return False


def _stub(record: Any) -> Any:
    """A record cut to its short scalar fields: enough to know it exists and what it is."""
    if not isinstance(record, dict):
        return record
    return {
        k: v
        for k, v in record.items()
        if (isinstance(v, int | float | bool) or v is None) or (isinstance(v, str) and len(v) <= 40)
    }


def slice_state(state: dict[str, Any], needles: set[str], max_chars: int) -> tuple[dict[str, Any], bool]:
    """Bound the state shown to the simulator.

    A state within `max_chars` (as canonical JSON) is returned whole. Otherwise, in
    each top-level collection (an object of records, or a list of records), the
    records whose key or fields mention one of `needles` are shown whole and the
    others are abbreviated to their short scalar fields; if that is still too
    large, abbreviated records are left out (with a count) until it fits.

    Returns:
        (the view, whether it was sliced).
    """
    if len(canonical_json(state)) <= max_chars:
        return state, False
    view: dict[str, Any] = {}
    stubs: list[tuple[str, str | int]] = []  # (collection, key or index) of abbreviated records
    for name, value in state.items():
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            view[name] = {}
            for key, record in value.items():
                if _mentions(key, record, needles):
                    view[name][key] = record
                else:
                    view[name][key] = _stub(record)
                    stubs.append((name, key))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            view[name] = []
            for index, record in enumerate(value):
                if _mentions("", record, needles):
                    view[name].append(record)
                else:
                    view[name].append(_stub(record))
                    stubs.append((name, index))
        else:
            view[name] = value
    dropped: dict[str, int] = {}
    size = len(canonical_json(view))
    budget = max_chars - 100 * len(view)  # room for the "not shown" notes
    while size > budget and stubs:
        name, key = stubs.pop()
        collection = view[name]
        if isinstance(collection, dict):
            size -= len(canonical_json(collection.pop(str(key), None))) + len(json.dumps(str(key))) + 2
        else:
            size -= len(canonical_json(collection[int(key)])) + 1
            collection[int(key)] = None
        dropped[name] = dropped.get(name, 0) + 1
    for name, count in dropped.items():
        collection = view[name]
        note = f"{count} other record(s) not shown; they exist unchanged"
        if isinstance(collection, dict):
            collection["..."] = note
        else:
            view[name] = [r for r in collection if r is not None] + [{"...": note}]
    text = canonical_json(view)
    while len(text) > max_chars:  # whole records that mention the call are too big: cut the largest value
        largest = max(view, key=lambda k: len(json.dumps(view[k], default=str)))
        view[largest] = f"<{len(json.dumps(view[largest], default=str))} characters not shown>"
        text = canonical_json(view)
    return view, True
