"""The state as the simulator's prompt shows it: the whole state when it is small, else sliced to the records
a call mentions (by key, or by a value few records share) with the rest cut to stubs, so a prompt stays
bounded however large the state grows.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from ..world import canonical_json, compact_json

__all__ = ["needles_of", "slice_state", "state_text"]


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


def _mentioned(key: str, record: Any, needles: set[str]) -> set[str]:
    """The needles that are the record's key, or any key or scalar value at any depth inside it (an item id kept
    in a product's `variants`, a payment method in a user's `payment_methods`)."""
    found = {key} & needles
    stack = [record]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            found.update(k for k in value if k in needles)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str | int) and not isinstance(value, bool) and str(value) in needles:
            found.add(str(value))
    return found


def _mentioning(keyed: list[tuple[str, Any]], needles: set[str]) -> list[bool]:
    """Which records of one collection the call mentions: by their key, or by a needle found in few of them
    (at most half): a value every record shares (a country, a status) singles none out."""
    found = [_mentioned(key, record, needles) for key, record in keyed]
    counts = Counter(needle for needles_found in found for needle in needles_found)
    rare = {needle for needle, n in counts.items() if n <= max(1, len(keyed) // 2)}
    return [key in needles or bool(f & rare) for (key, _), f in zip(keyed, found, strict=True)]


def _stub(record: Any) -> Any:
    """A record cut to its short scalar fields: enough to know it exists and what it is."""
    if not isinstance(record, dict):
        return record
    return {
        k: v
        for k, v in record.items()
        if (isinstance(v, int | float | bool) or v is None) or (isinstance(v, str) and len(v) <= 40)
    }


def state_text(state: dict[str, Any], arguments: dict[str, Any], max_chars: int) -> tuple[str, bool]:
    """The state as the simulator's prompt shows it: compact JSON, sliced (see `slice_state`) around the
    records the call's `arguments` mention when it is too long.

    Returns:
        (the JSON text, whether it was sliced).
    """
    text = compact_json(state)
    if len(text) <= max_chars:
        return text, False
    view, sliced = slice_state(state, needles_of([arguments]), max_chars)
    return compact_json(view), sliced


def slice_state(state: dict[str, Any], needles: set[str], max_chars: int) -> tuple[dict[str, Any], bool]:
    """Bound the state shown to the simulator.

    A state within `max_chars` (as canonical JSON) is returned whole. Otherwise, in
    each top-level collection (an object of records, or a list of records), the
    records the call mentions are shown whole (their key is one of `needles`, or a needle that at
    most half of the collection's records hold, as any key or value at any depth) and the
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
            for (key, record), whole in zip(value.items(), _mentioning(list(value.items()), needles), strict=True):
                if whole:
                    view[name][key] = record
                else:
                    view[name][key] = _stub(record)
                    stubs.append((name, key))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            view[name] = []
            mentioned = _mentioning([("", record) for record in value], needles)
            for index, record in enumerate(value):
                if mentioned[index]:
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
