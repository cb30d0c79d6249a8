"""The index of the records a call can name: for each top-level collection of a state, which records hold each
needle (a key or a scalar value at any depth), built once per base state and shared by every state derived
from it, so finding a call's records costs what the call names, not the size of the state.

A *collection* is a top-level value that is an object whose values are all objects (records by key) or a
list of objects (records by position). A *needle* is a key or a string or integer value, as lower-case text
of two characters or more. A needle held by more than `MAX_HOLDERS` records of one collection names none of
them; the index keeps only its count. A derived `State` is answered from its base's index for the records it
did not touch, and from a scan of the records it did (`state.touched`): O(what changed).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from ..world import State, as_state, compact_json

__all__ = ["MAX_HOLDERS", "CollectionIndex", "IndexedState", "Kind", "RecordKey", "StateIndex", "StateIndexes"]

MAX_HOLDERS = 256
"""A needle held by more records than this (in one collection) names none of them: only its count is kept."""

RecordKey = str | int
"""A record's key in its collection: an object's key, or a list's position."""

Kind = Literal["object", "list"]

_Postings = dict[str, RecordKey | list[RecordKey]]  # needle -> one key, or several


def fold(text: str) -> str:
    """A needle as the index keeps it: lower case (the state's own string when it already is)."""
    low = text.lower()
    return text if low == text else low


def record_needles(key: RecordKey, record: Any) -> tuple[set[str], set[str]]:
    """(every needle the record holds, those it holds as an object key: the ids it *defines*, as a product its
    variants' item ids, a user its payment methods' ids). An object's record key counts as both."""
    held: set[str] = set()
    defined: set[str] = set()
    if isinstance(key, str) and len(key) >= 2:
        held.add(fold(key))
        defined.add(fold(key))
    stack = [record]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for k in value:
                if len(k) >= 2:
                    needle = fold(k)
                    held.add(needle)
                    defined.add(needle)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str):
            if len(value) >= 2:
                held.add(fold(value))
        elif isinstance(value, int) and not isinstance(value, bool) and (value >= 10 or value < 0):
            held.add(str(value))
    return held, defined


def _post(postings: _Postings, common: dict[str, int], needle: str, key: RecordKey) -> None:
    if needle in common:
        common[needle] += 1
        return
    current = postings.get(needle)
    if current is None:
        postings[needle] = key
    elif isinstance(current, list):
        if len(current) >= MAX_HOLDERS:
            del postings[needle]
            common[needle] = len(current) + 1
        else:
            current.append(key)
    else:
        postings[needle] = [current, key]


def _lookup(postings: _Postings, common: dict[str, int], needle: str) -> list[RecordKey] | None:
    if needle in common:
        return None
    found = postings.get(needle)
    if found is None:
        return []
    return found if isinstance(found, list) else [found]


@dataclass
class CollectionIndex:
    """The needles of one collection's records.

    Attributes:
        kind: `object` (records by key) or `list` (records by position).
        held: needle -> the records holding it (anywhere inside, or as their key).
        defined: needle -> the records holding it as an object key (the records that own that id).
        common: needle -> how many records hold it, for needles held by more than `MAX_HOLDERS`.
    """

    kind: Kind
    held: _Postings = field(default_factory=dict)
    defined: _Postings = field(default_factory=dict)
    common: dict[str, int] = field(default_factory=dict)
    common_defined: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, kind: Kind, records: Iterable[tuple[RecordKey, Any]]) -> CollectionIndex:
        index = cls(kind)
        for key, record in records:
            index.add(key, record)
        return index

    def add(self, key: RecordKey, record: Any, needles: _Needles | None = None) -> None:
        held, defined = record_needles(key, record) if needles is None else needles.of(key, record)
        for needle in held:
            _post(self.held, self.common, needle, key)
        for needle in defined:
            _post(self.defined, self.common_defined, needle, key)

    def holders(self, needle: str) -> list[RecordKey] | None:
        """The records holding `needle` (None: too many to name any)."""
        return _lookup(self.held, self.common, needle)

    def owners(self, needle: str) -> list[RecordKey] | None:
        """The records holding `needle` as an object key (None: too many to name any)."""
        return _lookup(self.defined, self.common_defined, needle)


def kind_of(value: Any) -> Kind | None:
    """Whether a top-level value is a collection of records, and of which kind (None: a plain value)."""
    if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
        return "object"
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return "list"
    return None


def records_of(value: Any, kind: Kind) -> Iterator[tuple[RecordKey, Any]]:
    return iter(value.items()) if kind == "object" else enumerate(value)


class StateIndex:
    """The index of one base state: its collections' needles, and the serialized size of each top-level value.

    Attributes:
        digest: the base's digest.
        collections: top-level name -> its index, for each collection.
        sizes: top-level name -> the characters its value takes as compact JSON.
        size: the characters the whole base takes as compact JSON.
    """

    def __init__(self, base: State) -> None:
        self.digest = base.digest
        self.base = base
        self.collections: dict[str, CollectionIndex] = {}
        self.sizes: dict[str, int] = {}
        for name, value in base.items():
            self.sizes[name] = len(compact_json(value))
            kind = kind_of(value)
            if kind is not None:
                self.collections[name] = CollectionIndex.of(kind, records_of(value, kind))
        self.size = (
            2
            + sum(len(compact_json(name)) + 1 + size for name, size in self.sizes.items())
            + max(0, len(self.sizes) - 1)
        )


class _Needles:
    """The needles of the records patches changed, remembered by record identity: a patched state shares every
    record its last patch did not change with the state before it, so each state re-indexes only those."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._seen: OrderedDict[tuple[int, RecordKey], tuple[Any, tuple[set[str], set[str]]]] = OrderedDict()

    def of(self, key: RecordKey, record: Any) -> tuple[set[str], set[str]]:
        known = self._seen.get((id(record), key))
        if known is not None and known[0] is record:
            self._seen.move_to_end((id(record), key))
            return known[1]
        needles = record_needles(key, record)
        self._seen[(id(record), key)] = (record, needles)  # holding the record keeps its id unique
        while len(self._seen) > self.kept:
            self._seen.popitem(last=False)
        return needles


class _Overlay:
    """How one derived state differs from its base's index: the records it changed, re-indexed on their own."""

    def __init__(self, index: StateIndex, state: State, needles: _Needles) -> None:
        base = index.base
        self.kinds: dict[str, Kind | None] = {}  # every top-level name of the state -> its kind now
        self.changed: dict[str, set[RecordKey]] = {}  # collection -> records whose base entries are void
        self.extra: dict[str, CollectionIndex] = {}  # collection -> the index of its changed records
        self.fresh: dict[str, CollectionIndex] = {}  # collection -> a whole new index (replaced collections)
        self.sizes: dict[str, int] = {}  # plain values the state changed -> their size
        whole = {t[0] for t in state.touched if len(t) == 1}
        keys: dict[str, set[str]] = {}
        for t in state.touched:
            if len(t) == 2 and t[0] not in whole:
                keys.setdefault(t[0], set()).add(t[1])
        for name in state:
            known = index.collections.get(name)
            self.kinds[name] = known.kind if known is not None else None
        for name in whole | set(keys):
            if name not in state:
                continue
            value, known = state[name], index.collections.get(name)
            if known is None or (name in whole and kind_of(value) != known.kind):
                kind = kind_of(value)
                self.kinds[name] = kind
                if kind is None:
                    self.sizes[name] = len(compact_json(value))
                else:
                    self.fresh[name] = CollectionIndex.of(kind, records_of(value, kind))
                continue
            old = base[name]
            changed = _changed_records(old, value, known.kind) if name in whole else set[RecordKey](keys[name])
            extra = CollectionIndex(known.kind)
            for key in changed:
                record = _record(value, key)
                if record is not _ABSENT:
                    extra.add(key, record, needles)
            self.changed[name], self.extra[name] = changed, extra


_ABSENT = object()


def _record(collection: Any, key: RecordKey) -> Any:
    if isinstance(collection, dict):
        return collection.get(key, _ABSENT) if isinstance(key, str) else _ABSENT
    if isinstance(key, int) and 0 <= key < len(collection):
        return collection[key]
    return _ABSENT


def _changed_records(old: Any, new: Any, kind: Kind) -> set[RecordKey]:
    """The records of a rewritten collection that are not the same objects as its base's: a pointer
    comparison per record (the records a patch did not change are shared with the base)."""
    if kind == "object":
        changed: set[RecordKey] = {k for k, v in new.items() if old.get(k, _ABSENT) is not v}
        changed.update(k for k in old if k not in new)
        return changed
    shared = min(len(old), len(new))
    out: set[RecordKey] = {i for i in range(shared) if old[i] is not new[i]}
    out.update(range(shared, max(len(old), len(new))))
    return out


class IndexedState:
    """A state and the index that answers for it (its base's, with what it changed re-indexed).

    Attributes:
        state: the state.
        index: its base's index.
    """

    def __init__(self, state: State, index: StateIndex, overlay: _Overlay | None) -> None:
        self.state = state
        self.index = index
        self._overlay = overlay

    def kind(self, name: str) -> Kind | None:
        """The kind of the top-level value `name` (None: a plain value, or absent)."""
        if self._overlay is not None:
            return self._overlay.kinds.get(name)
        known = self.index.collections.get(name)
        return known.kind if known is not None and name in self.state else None

    def size(self, name: str) -> int:
        """The characters the plain top-level value `name` takes as compact JSON."""
        if self._overlay is not None and name in self._overlay.sizes:
            return self._overlay.sizes[name]
        if name in self.index.sizes and not any(t[0] == name for t in self.state.touched):
            return self.index.sizes[name]
        return len(compact_json(self.state.get(name)))

    def holders(self, name: str, needle: str) -> list[RecordKey] | None:
        """The records of collection `name` holding `needle` (None: too many to name any)."""
        return self._find(name, needle, owners=False)

    def owners(self, name: str, needle: str) -> list[RecordKey] | None:
        """The records of collection `name` holding `needle` as an object key (None: too many)."""
        return self._find(name, needle, owners=True)

    def _find(self, name: str, needle: str, *, owners: bool) -> list[RecordKey] | None:
        overlay = self._overlay
        if overlay is not None and name in overlay.fresh:
            fresh = overlay.fresh[name]
            return fresh.owners(needle) if owners else fresh.holders(needle)
        known = self.index.collections.get(name)
        if known is None or name not in self.state:
            return []
        found = known.owners(needle) if owners else known.holders(needle)
        if found is None or overlay is None or name not in overlay.changed:
            return found
        changed, extra = overlay.changed[name], overlay.extra[name]
        added = (extra.owners(needle) if owners else extra.holders(needle)) or []
        return [k for k in found if k not in changed] + added


class StateIndexes:
    """The indexes of the bases a simulator has seen (a small LRU, by base digest), and of their derived
    states' changes (by state digest).

    Args:
        max_bases: base indexes kept (each takes about an eighth of what its state takes in memory).
        max_states: derived states' overlays kept (each is the size of what its patches changed).
    """

    def __init__(self, *, max_bases: int = 8, max_states: int = 256) -> None:
        self.max_bases = max_bases
        self.max_states = max_states
        self._bases: OrderedDict[str, StateIndex] = OrderedDict()
        self._overlays: OrderedDict[str, _Overlay] = OrderedDict()
        self._building: dict[str, Future[StateIndex]] = {}
        self._needles = _Needles(kept=4 * max_states)
        self._lock = threading.Lock()
        self.builds = 0  # base indexes built (for tests and metrics)

    def cached(self, state: dict[str, Any]) -> StateIndex | None:
        """The index of `state`'s base, if it is built."""
        digest = as_state(state).base.digest
        with self._lock:
            index = self._bases.get(digest)
            if index is not None:
                self._bases.move_to_end(digest)
            return index

    def index_of(self, state: dict[str, Any]) -> IndexedState:
        """`state` with its index, building its base's index here if it is not built (O(the base's size)
        once: from async code use `aindex_of`, which builds it off the event loop)."""
        state = as_state(state)
        index = self.cached(state)
        if index is None:
            index = self._build(state.base)
        return self._indexed(state, index)

    async def aindex_of(self, state: dict[str, Any]) -> IndexedState:
        """`state` with its index; the first call for a base builds its index in a worker thread, and
        concurrent first calls wait for that one build."""
        state = as_state(state)
        index = self.cached(state)
        if index is None:
            digest = state.base.digest
            with self._lock:
                index, future = self._bases.get(digest), self._building.get(digest)
                if index is None and future is None:
                    future = self._building[digest] = Future()
                    # The build runs on in its thread even if this caller is cancelled: others wait for it.
                    asyncio.get_running_loop().run_in_executor(None, self._build_into, future, state.base)
            if index is None:
                assert future is not None  # one is built, or being built
                index = await asyncio.wrap_future(future)
        return self._indexed(state, index)

    def _build_into(self, future: Future[StateIndex], base: State) -> None:
        try:
            future.set_result(self._build(base))
        except BaseException as exc:  # handed to every caller waiting for this build
            future.set_exception(exc)
        finally:
            with self._lock:
                self._building.pop(base.digest, None)

    def _build(self, base: State) -> StateIndex:
        index = StateIndex(base)
        with self._lock:
            self.builds += 1
            self._bases[index.digest] = index
            while len(self._bases) > self.max_bases:
                self._bases.popitem(last=False)
        return index

    def _indexed(self, state: State, index: StateIndex) -> IndexedState:
        if state is state.base or not state.touched:
            return IndexedState(state, index, None)
        with self._lock:  # O(what the state's patches changed)
            overlay = self._overlays.get(state.digest)
            if overlay is not None:
                self._overlays.move_to_end(state.digest)
            else:
                overlay = self._overlays[state.digest] = _Overlay(index, state, self._needles)
                while len(self._overlays) > self.max_states:
                    self._overlays.popitem(last=False)
        return IndexedState(state, index, overlay)
