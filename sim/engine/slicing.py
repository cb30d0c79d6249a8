"""The state as the simulator's prompt shows it: whole when it is small; else the records the call names,
whole, then the records they reference, then a little context, so a prompt stays bounded however large the
state grows and never lacks the records a call acts on.

A small state (its base within `SMALL_STATE` times the budget) is sliced by walking it, as it always was:
the records a call mentions whole, the rest cut to stubs. A large one is sliced from its index
(`simia.sim.engine.index`), at a cost that follows what the call names, not the state's size.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice
from typing import Any

from ..world import canonical_json, compact_json
from .index import IndexedState, RecordKey, StateIndexes, fold

__all__ = ["NamedRecord", "StateView", "needles_of", "slice_state", "state_text", "state_view"]

SMALL_STATE = 4
"""A state whose base takes at most this many times `max_chars` is sliced by walking it (as before)."""
NAMED_PER_NEEDLE = 8
"""A needle that no record has as its key names the records that hold it when they are at most this many."""
NEIGHBOURS = 3
"""Stubs of this many other records of each collection are shown, as context."""
CANDIDATES = 64
"""At most this many other records a call mentions are weighed as context (whole, or as stubs)."""


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


@dataclass(frozen=True)
class NamedRecord:
    """A record a call names: its collection, its key (a list's records: their position) and its size."""

    collection: str
    key: RecordKey
    chars: int

    def __str__(self) -> str:
        return f"{self.collection}/{self.key} ({self.chars:,} characters)"


@dataclass(frozen=True)
class StateView:
    """The state as one call's prompt shows it.

    Attributes:
        text: the state section, compact JSON on one line.
        sliced: whether records were abbreviated or left out.
        named: the records the call names, each shown whole (empty when the state is shown whole, or
            sliced by walking it).
    """

    text: str
    sliced: bool
    named: tuple[NamedRecord, ...] = ()

    @property
    def named_chars(self) -> int:
        """The characters the named records take."""
        return sum(record.chars for record in self.named)


def state_text(state: dict[str, Any], arguments: dict[str, Any], max_chars: int) -> tuple[str, bool]:
    """The state as the simulator's prompt shows it (see `state_view`), indexing it here: O(its size), for
    one-off use; a simulator keeps its indexes (`StateIndexes`) and calls `state_view`.

    Returns:
        (the JSON text, whether it was sliced).
    """
    view = state_view(StateIndexes(max_bases=1).index_of(state), arguments, max_chars)
    return view.text, view.sliced


def state_view(indexed: IndexedState, arguments: dict[str, Any], max_chars: int) -> StateView:
    """The state as the prompt of a call with `arguments` shows it.

    A state whose base is small (at most `SMALL_STATE` times `max_chars` as JSON) is shown whole when it fits
    in `max_chars`, else sliced by walking it (`slice_state`). A larger one (or a small one whose mentioned
    records alone overflow `max_chars`) shows, in order:

    1. the records the call names, whole: a record whose key is an argument value; the records holding as
       an object key an argument value that few records do (a product its variant's item id, a user a
       payment method's id); else the records holding the most argument values among those holding it,
       when they are few (`NAMED_PER_NEEDLE`). These are never cut: their size is `StateView.named_chars`;
    2. the records those reference by key (an order's `user_id`, its items' `product_id`s), whole while
       they take at most `max_chars` more;
    3. context within `max_chars`: plain top-level values, other records the call mentions (whole or as
       stubs), a few stubs of each collection (`NEIGHBOURS`); and per collection a note of how many records
       are not shown.

    Cost: what the call names and the budgets, never the state's size.
    """
    state = indexed.state
    if indexed.index.size <= SMALL_STATE * max_chars:
        text = compact_json(state)
        if len(text) <= max_chars:
            return StateView(text, False)
        view, sliced, cut = _walked_slice(state, needles_of([arguments]), max_chars)
        if not cut:
            return StateView(compact_json(view), sliced)
    return _Slicer(indexed, max_chars).view(arguments)


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
    view, sliced, _ = _walked_slice(state, needles, max_chars)
    return view, sliced


def _walked_slice(state: dict[str, Any], needles: set[str], max_chars: int) -> tuple[dict[str, Any], bool, bool]:
    """`slice_state`, and whether it had to cut a whole value (records the call mentions) to fit."""
    if len(canonical_json(state)) <= max_chars:
        return state, False, False
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
    cut = len(text) > max_chars
    while len(text) > max_chars:  # whole records that mention the call are too big: cut the largest value
        largest = max(view, key=lambda k: len(json.dumps(view[k], default=str)))
        view[largest] = f"<{len(json.dumps(view[largest], default=str))} characters not shown>"
        text = canonical_json(view)
    return view, True, cut


Ref = tuple[str, RecordKey]  # (collection, record key)


def _argument_needles(arguments: Any) -> list[str]:
    """The needles of a call's arguments (as `needles_of`), in the order the arguments give them."""
    out: dict[str, None] = {}
    stack = [arguments]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, list):
            stack.extend(reversed(value))
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            text = str(value).strip()
            if len(text) >= 2:
                out[text] = None
    return list(out)


def _values_in(record: Any) -> dict[str, None]:
    """The distinct strings (of two characters or more) and integers in a record, as text, shallowest first:
    where it may refer to other records by key (an order's `user_id` before its items' `product_id`s)."""
    out: dict[str, None] = {}
    queue = [record]
    for value in queue:  # breadth first: the queue grows as it is read
        if isinstance(value, dict):
            queue.extend(value.values())
        elif isinstance(value, list):
            queue.extend(value)
        elif isinstance(value, str):
            if len(value) >= 2:
                out[value] = None
        elif isinstance(value, int) and not isinstance(value, bool) and (value >= 10 or value < 0):
            out[str(value)] = None
    return out


def _entry(key: RecordKey, text: str) -> str:
    """`"key":text`, one member of a collection as the view shows it."""
    if isinstance(key, int) or (key.isprintable() and '"' not in key and "\\" not in key):
        return f'"{key}":{text}'  # what JSON writes for a key with nothing to escape
    return f"{compact_json(key)}:{text}"


class _Slicer:
    """The slice of one large state for one call (see `state_view`)."""

    def __init__(self, indexed: IndexedState, max_chars: int) -> None:
        self.indexed = indexed
        self.state = indexed.state
        self.max_chars = max_chars
        self.kinds = {name: indexed.kind(name) for name in self.state}
        self.collections = [name for name, kind in self.kinds.items() if kind is not None]
        self.shown: dict[str, dict[RecordKey, str]] = {name: {} for name in self.collections}
        self.score: Counter[Ref] = Counter()  # record -> how many of the call's needles it holds
        self.abbreviated = False

    def _record(self, ref: Ref) -> Any:
        return self.state[ref[0]][ref[1]]

    def view(self, arguments: dict[str, Any]) -> StateView:
        texts = {ref: compact_json(self._record(ref)) for ref in self._named(arguments)}
        named = [NamedRecord(ref[0], ref[1], len(text)) for ref, text in texts.items()]
        for (name, key), text in texts.items():
            self.shown[name][key] = text
        left, late = self.max_chars, []  # referenced records: their own budget, then as context stubs
        for ref in self._references(list(texts)):
            text = compact_json(self._record(ref))
            cost = len(_entry(ref[1], text)) + 1
            if cost <= left:
                self.shown[ref[0]][ref[1]] = text
                left -= cost
            else:
                late.append(ref)
        budget = self.max_chars - 100 * len(self.collections)  # room for the "not shown" notes
        plain: dict[str, str] = {}
        for name, kind in self.kinds.items():
            if kind is None:
                size = self.indexed.size(name)
                text = compact_json(self.state[name]) if size <= budget else f'"<{size} characters not shown>"'
                self.abbreviated |= size > budget
                budget -= len(text) + len(name) + 4
                plain[name] = text
        mentioned = [ref for ref, _ in sorted(self.score.items(), key=lambda item: -item[1])]
        context = [ref for ref in mentioned if ref[1] not in self.shown[ref[0]]][:CANDIDATES]
        for ref, whole in [*((ref, True) for ref in context), *((ref, False) for ref in late)]:
            if budget < 40:
                break
            budget -= self._show_within(ref, budget, whole=whole)
        for name in self.collections:
            budget -= self._neighbours(name, budget)
        text = self._render(plain)
        return StateView(text, self.abbreviated, tuple(named))

    def _show_within(self, ref: Ref, budget: int, *, whole: bool) -> int:
        """Show `ref` whole, else as a stub, if it fits in `budget` and is not shown yet; returns the
        characters it took."""
        if ref[1] in self.shown[ref[0]]:
            return 0
        record = self._record(ref)
        if whole:
            text = compact_json(record)
            cost = len(_entry(ref[1], text)) + 1
            if cost <= budget:
                self.shown[ref[0]][ref[1]] = text
                return cost
        text = compact_json(_stub(record))
        cost = len(_entry(ref[1], text)) + 1
        if cost > budget:
            return 0
        self.shown[ref[0]][ref[1]] = text
        self.abbreviated = True
        return cost

    def _neighbours(self, name: str, budget: int) -> int:
        """Stubs of the first few records of collection `name` not shown yet, within `budget`."""
        shown, records, used, added = self.shown[name], self.state[name], 0, 0
        pairs: Iterable[tuple[RecordKey, Any]] = records.items() if isinstance(records, dict) else enumerate(records)
        for key, record in islice(pairs, NEIGHBOURS + len(shown)):
            if added == NEIGHBOURS:
                break
            if key in shown:
                continue
            text = compact_json(_stub(record))
            cost = len(_entry(key, text)) + 1
            if used + cost > budget:
                break
            shown[key] = text
            used, added = used + cost, added + 1
            self.abbreviated = True
        return used

    def _named(self, arguments: dict[str, Any]) -> list[Ref]:
        """The records the call names (see `state_view`); scores every record it mentions on the way."""
        needles = _argument_needles(arguments)
        named: dict[Ref, None] = {}
        keyed: set[str] = set()  # folded needles that are a record's key
        for needle in needles:
            for name in self.collections:
                if self.kinds[name] == "object" and needle in self.state[name]:
                    named[(name, needle)] = None
                    keyed.add(fold(needle))
        folded = list(dict.fromkeys(fold(needle) for needle in needles))
        held: dict[str, list[Ref]] = {}
        for needle in folded:
            found = [(name, key) for name in self.collections for key in self.indexed.holders(name, needle) or ()]
            held[needle] = found
            self.score.update(found)
        for needle in folded:
            if needle in keyed:
                continue
            owners = [(name, key) for name in self.collections for key in self.indexed.owners(name, needle) or ()]
            if 0 < len(owners) <= NAMED_PER_NEEDLE:
                named.update(dict.fromkeys(owners))
                continue
            found = held[needle]
            if not found:
                continue
            best = max(self.score[ref] for ref in found)
            top = [ref for ref in found if self.score[ref] == best]
            # With a record named by key, a value held by one record each of many (a new address's city)
            # is data the call brings, not a name.
            if len(top) <= NAMED_PER_NEEDLE and (best >= 2 or not keyed or len(found) == 1):
                named.update(dict.fromkeys(top))
        return list(named)

    def _references(self, named: list[Ref]) -> list[Ref]:
        """The records the named ones refer to by key: their values that are keys of a collection's records."""
        objects = [(name, self.state[name]) for name in self.collections if self.kinds[name] == "object"]
        seen, out = set(named), list[Ref]()
        for ref in named:
            for value in _values_in(self._record(ref)):
                for name, records in objects:
                    if value in records and (name, value) not in seen:
                        seen.add((name, value))
                        out.append((name, value))
            if len(out) >= CANDIDATES:
                break
        return out[:CANDIDATES]

    def _render(self, plain: dict[str, str]) -> str:
        parts = []
        for name, kind in self.kinds.items():
            if kind is None:
                parts.append(f"{compact_json(name)}:{plain[name]}")
                continue
            shown, total = self.shown[name], len(self.state[name])
            hidden = total - len(shown)
            if kind == "list" and not hidden:
                parts.append(f"{compact_json(name)}:[{','.join(shown[i] for i in range(total))}]")
                continue
            entries = [_entry(key, text) for key, text in shown.items()]
            if hidden:
                note = f"{hidden} other record(s) not shown; they exist unchanged"
                if kind == "list":
                    note += f" (a list of {total} records: the keys shown are their positions)"
                entries.append(f'"...":{compact_json(note)}')
                self.abbreviated = True
            parts.append(f"{compact_json(name)}:{{{','.join(entries)}}}")
        return "{" + ",".join(parts) + "}"
