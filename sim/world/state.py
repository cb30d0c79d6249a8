"""World state: a JSON object passed in and returned, never hidden on an object.

Helpers here hash a state, apply an RFC 6902 patch under the world's
`state_schema` (all or nothing), and resolve JSON Pointers in it. How a large
state is shown to the simulator is the engine's (`simia.sim.engine.slicing`).

A patched state is a `State`: the plain JSON object (a dict), which shares every part the patches did not
change with its *base* (the world's initial state, say), and knows which records they changed (`touched`) and a
digest of the base and the patches since (`digest`). So a call costs what its patch touches: the new state copies
the containers on the patched paths only, its schema check reads the records the patch touched only
(`check_touched`), its cache key hashes the patch only, and a diff against another state of the same base compares
the touched records only (`state_diff`). Episodes of one world share their base in memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import jsonpatch
import jsonpointer

from ..errors import StateError
from ..schema import validate_instance
from .model import canonical_json

__all__ = [
    "Parked",
    "State",
    "Touched",
    "apply_patch",
    "apply_patches",
    "as_state",
    "check_touched",
    "is_missing",
    "park",
    "parked_patches",
    "resolve_pointer",
    "state_diff",
    "state_hash",
]

_MISSING = object()

Touched = tuple[str] | tuple[str, str]
"""What a patch changed: `(collection,)`, a whole top-level value, or `(collection, key)`, one record of a
top-level object (its key's value and anything below it)."""


class State(dict[str, Any]):
    """A world state (the JSON object itself: a dict) and how it was reached from its base.

    Attributes:
        base: the state this one shares its unchanged parts with (a base is its own base).
        touched: what the patches since the base changed (see `Touched`); empty for a base.
        digest: the base's content hash, then one SHA-256 step per applied patch: equal digests mean equal
            states (the converse does not hold: two paths to one content have two digests).

    Treat it as immutable, like every state: `apply_patch` returns a new one.
    """

    __slots__ = ("base", "digest", "touched")

    base: State
    touched: frozenset[Touched]
    digest: str


def as_state(value: dict[str, Any], *, digest: str | None = None) -> State:
    """`value` as a base `State` (itself when it is already a State). O(its size) once: its content hash (or the
    `digest` given, when the caller knows it)."""
    if isinstance(value, State):
        return value
    state = State(value)
    state.base = state
    state.touched = frozenset()
    state.digest = digest if digest is not None else state_hash(value)
    return state


def state_hash(state: dict[str, Any]) -> str:
    """The SHA-256 of the state's canonical JSON (O(its size): a base's digest, never a patched state's)."""
    return hashlib.sha256(canonical_json(state).encode()).hexdigest()


def _touched_by(state: dict[str, Any], tokens: list[str]) -> Touched | None:
    """What an operation at `tokens` changes in `state` (None: the whole document)."""
    if not tokens:
        return None
    if len(tokens) >= 2 and isinstance(state.get(tokens[0]), dict):
        return (tokens[0], tokens[1])
    return (tokens[0],)


def apply_patch(state: dict[str, Any], patch: list[dict[str, Any]], schema: dict[str, Any] | None) -> State:
    """Apply the RFC 6902 `patch` to `state` and check the result against `schema`.

    States are values: `state` is never modified. The new state copies only the
    objects and arrays on the patched paths and shares every other part with
    `state` (so a call costs what its patch touches, not the size of the world).

    Returns:
        The new state (`state` itself when the patch is empty).

    Raises:
        StateError: the patch is malformed, does not apply, or breaks the schema.
    """
    old = as_state(state)
    if not patch:
        return old
    patcher = _Patcher(old)
    new = patcher.apply(patch)
    if not isinstance(new, dict):
        raise StateError("state_patch replaced the state with a non-object")
    result = State(new)
    result.digest = hashlib.sha256((old.digest + canonical_json(patch)).encode()).hexdigest()
    if patcher.whole:  # the document itself was replaced: it is its own base now
        result.base, result.touched = result, frozenset()
    else:
        result.base, result.touched = old.base, old.touched | patcher.touched
    if schema is not None:
        problems = check_touched(schema, result, patcher.touched, whole=patcher.whole)
        if problems:
            raise StateError("patched state breaks state_schema: " + "; ".join(problems[:3]))
    return result


def apply_patches(state: dict[str, Any], patches: Iterable[list[dict[str, Any]]]) -> State:
    """Apply committed patches in order (a history: an episode's start, a fork's parent, a replica's catch-up), as
    `apply_patch` would one by one (the same state and digest), but copying each container they change once for
    all of them: the states in between are never returned, so the copy one patch made is the next one's to write.

    Raises:
        StateError: a patch does not apply (committed patches always do).
    """
    old = as_state(state)
    patcher = _Patcher(old)
    digest = old.digest
    for patch in patches:
        if patch:
            patcher.apply(patch)
            digest = hashlib.sha256((digest + canonical_json(patch)).encode()).hexdigest()
    changed = patcher.root is not old
    if not changed:
        return old
    if not isinstance(patcher.root, dict):
        raise StateError("state_patch replaced the state with a non-object")
    result = State(patcher.root)
    result.digest = digest
    if patcher.whole:
        result.base, result.touched = result, frozenset()
    else:
        result.base, result.touched = old.base, old.touched | patcher.touched
    return result


_PARK_RECORDS = 1_000
"""A state is worth parking (`park`) when a collection it copied holds more records than this."""


class Parked:
    """A patched state kept as what it changed: its base, the touched records' values, its touched set and digest
    (`park`); `unpark` makes the State again. The State copies each collection a patch wrote to (a shallow copy of
    every key), so a live episode of a world with 16,000 orders would keep ~600 KB per collection it wrote; parked,
    it keeps the records it changed."""

    __slots__ = ("base", "digest", "touched", "values")

    def __init__(self, state: State) -> None:
        self.base, self.touched, self.digest = state.base, state.touched, state.digest
        self.values = {part: _at(state, part) for part in state.touched}

    def unpark(self) -> State:
        """The state again: each touched collection copied once from the base, the touched records set in it."""
        base = self.base
        root = dict(base)
        copied: set[str] = set()
        for part in sorted(self.touched, key=len):  # whole values first, then the records inside them
            value = self.values[part]
            name = part[0]
            if len(part) == 1:
                if value is _MISSING:
                    root.pop(name, None)
                else:
                    root[name] = value
                copied.add(name)
                continue
            if name not in copied:
                root[name] = dict(root[name]) if isinstance(root.get(name), dict) else {}
                copied.add(name)
            if value is _MISSING:
                root[name].pop(part[1], None)
            else:
                root[name][part[1]] = value
        state = State(root)
        state.base, state.touched, state.digest = base, self.touched, self.digest
        return state


def park(state: State) -> State | Parked:
    """`state` parked (see `Parked`) when it holds a copy of a large collection of its base, else itself."""
    if state.base is state:
        return state
    for part in state.touched:
        collection = state.base.get(part[0])
        if len(part) == 2 and isinstance(collection, dict) and len(collection) > _PARK_RECORDS:
            return Parked(state)
    return state


def parked_patches(state: dict[str, Any], patches: Iterable[list[dict[str, Any]]]) -> Parked | None:
    """What `park(apply_patches(state, patches))` gives, made without copying the large collections the patches
    write to (a fork of an episode of a world with 16,000 orders: O(the records they change), not O(16,000)); None
    when that cannot be had that way (a patch reads or writes a large collection whole, or nothing large is
    written): use `apply_patches`.

    Raises:
        StateError: a patch does not apply (committed patches always do).
    """
    base = as_state(state)
    patches = [patch for patch in patches if patch]
    large = {
        name for name, value in base.items() if isinstance(value, dict) and len(value) > _PARK_RECORDS
    }  # the collections worth not copying
    if not patches or not large or not isinstance(base.base, State) or base.base is not base:
        return None  # a patched state: its patches are `apply_patches`' to fold
    written = False
    for patch in patches:
        if not isinstance(patch, list):
            return None
        for op in patch:
            paths = [op.get("path"), op.get("from")] if isinstance(op, dict) else [None]
            for path in paths[: 2 if isinstance(op, dict) and op.get("op") in ("move", "copy") else 1]:
                try:
                    tokens = _tokens(path) if isinstance(path, str) else None
                except _PatchFailure:
                    tokens = None
                if tokens is None:
                    return None  # not a pointer: `apply_patches` says what is wrong
                if tokens and tokens[0] in large:
                    if len(tokens) < 2:
                        return None  # the collection itself, read or written whole
                    written = True
    if not written:
        return None
    patcher = _SparsePatcher(base, large)
    digest = base.digest
    for patch in patches:
        patcher.apply(patch)
        digest = hashlib.sha256((digest + canonical_json(patch)).encode()).hexdigest()
    if patcher.whole or patcher.root is base or not isinstance(patcher.root, dict):
        return None  # replaced whole, or nothing changed (`apply_patches` then answers the base itself)
    parked = Parked.__new__(Parked)
    parked.base, parked.touched, parked.digest = base, frozenset(patcher.touched), digest
    parked.values = {part: _at(patcher.root, part) for part in parked.touched}
    return parked


class _Overlay(dict[str, Any]):
    """A large collection as `_SparsePatcher` writes it: the records it changed (held in the dict itself), the
    ones it removed, and the base collection for every other key. Never leaves `parked_patches`: code that reads
    a dict without its methods (JSON encoders) would see the changed records only."""

    def __init__(self, base: dict[str, Any]) -> None:
        super().__init__()
        self.base = base
        self.removed: set[str] = set()

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or (key not in self.removed and key in self.base)

    def __getitem__(self, key: str) -> Any:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        if key in self.removed or key not in self.base:
            raise KeyError(key)
        return self.base[key]

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        try:
            return self[key]
        except KeyError:
            return default

    def __setitem__(self, key: str, value: Any) -> None:
        self.removed.discard(key)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        if dict.__contains__(self, key):
            dict.__delitem__(self, key)
        self.removed.add(key)


_ROOT_KEYWORDS = {"type", "properties", "required", "additionalProperties", "title", "description", "$schema"}
_DEFINITIONS = ("$defs", "definitions")
"""Where a root schema keeps the subschemas its `#/$defs/...` references name (a pydantic model's JSON Schema)."""
_COLLECTION_KEYWORDS = {"type", "additionalProperties", "title", "description"}
_COMPOSED: dict[tuple[int, int], tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {}


def _in_context(root: dict[str, Any], sub: dict[str, Any]) -> dict[str, Any]:
    """`sub` as a schema of its own: with the root's definitions beside it, so its `#/$defs/...` references resolve
    as they did in the root (one object per pair: compiled validators are cached by the schema's identity)."""
    if not any(key in root for key in _DEFINITIONS) or any(key in sub for key in _DEFINITIONS):
        return sub
    entry = _COMPOSED.get((id(root), id(sub)))
    if entry is None or entry[0] is not root or entry[1] is not sub:
        if len(_COMPOSED) > 4096:
            _COMPOSED.clear()
        composed = {**sub, **{key: root[key] for key in _DEFINITIONS if key in root}}
        entry = _COMPOSED[(id(root), id(sub))] = (root, sub, composed)
    return entry[2]


def check_touched(
    schema: dict[str, Any], state: dict[str, Any], touched: Iterable[Touched], *, whole: bool = False
) -> list[str]:
    """The problems of `state` under `schema` in the parts `touched` names (the rest was valid before).

    A schema of the common shape (an object whose `properties` and `additionalProperties` give each top-level
    value's schema, each collection an object of records under one `additionalProperties` schema) is checked on
    the touched records only; a schema using other keywords at those levels is checked on the touched top-level
    values, or (at the root) whole.
    """
    if whole or not set(schema) <= _ROOT_KEYWORDS | set(_DEFINITIONS) or schema.get("type", "object") != "object":
        return validate_instance(schema, state)
    problems = [f"$: {name!r} is a required property" for name in schema.get("required", []) if name not in state]
    properties: dict[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties", True)
    by_collection: dict[str, set[str] | None] = {}
    for item in touched:
        keys = by_collection.setdefault(item[0], set())
        if len(item) == 1 or keys is None:
            by_collection[item[0]] = None
        else:
            keys.add(item[1])
    for name in sorted(by_collection):
        if name not in state:
            continue
        sub = properties.get(name, extra)
        sub = _in_context(schema, sub) if isinstance(sub, dict) else sub
        if sub is False:
            problems.append(f"$: additional property {name!r} is not allowed")
            continue
        if not isinstance(sub, dict):
            continue
        keys = by_collection[name]
        value = state[name]
        record = sub.get("additionalProperties")
        if (
            keys is None
            or not isinstance(value, dict)
            or not isinstance(record, dict)
            or not set(sub) <= _COLLECTION_KEYWORDS | set(_DEFINITIONS)
        ):
            problems += [f"$.{name}{p[1:]}" for p in validate_instance(sub, value)]
            continue
        for key in sorted(keys):
            if key in value:
                problems += [
                    f"$.{name}.{key}{p[1:]}" for p in validate_instance(_in_context(schema, record), value[key])
                ]
    return problems


def state_diff(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """An RFC 6902 patch from `before` to `after`: for two states of one base, made from the records either
    touched (O(what they changed)); otherwise by comparing them whole."""
    if not (isinstance(before, State) and isinstance(after, State) and before.base is after.base):
        return list(jsonpatch.make_patch(before, after).patch)
    whole = {t[0] for t in before.touched | after.touched if len(t) == 1}
    parts = sorted({t if t[0] not in whole else (t[0],) for t in before.touched | after.touched})
    ops: list[dict[str, Any]] = []
    for part in parts:
        old, new = (_at(s, part) for s in (before, after))
        if old is _MISSING and new is _MISSING:
            continue
        prefix = _pointer(list(part))
        if old is _MISSING:
            ops.append({"op": "add", "path": prefix, "value": new})
        elif new is _MISSING:
            ops.append({"op": "remove", "path": prefix})
        elif not _json_equal(old, new):
            for op in jsonpatch.make_patch(old, new).patch:
                ops.append(
                    {**op, "path": prefix + op["path"], **({"from": prefix + op["from"]} if "from" in op else {})}
                )
    return ops


def _at(state: dict[str, Any], part: Touched) -> Any:
    value = state.get(part[0], _MISSING)
    if len(part) == 2:
        value = value.get(part[1], _MISSING) if isinstance(value, dict) else _MISSING
    return value


class _Patcher:
    """RFC 6902 on a document shared with its original: containers are copied when first written."""

    def __init__(self, document: Any) -> None:
        self.root = document
        self.own: dict[int, Any] = {}  # id -> a container this patch created (kept alive, so ids stay unique)
        self.touched: set[Touched] = set()  # what the operations changed (see `Touched`)
        self.whole = False  # whether an operation replaced the whole document

    def _touch(self, tokens: list[str]) -> None:
        part = _touched_by(self.root, tokens) if isinstance(self.root, dict) else None
        if part is None:
            self.whole = True
        else:
            self.touched.add(part)

    def apply(self, patch: list[dict[str, Any]]) -> Any:
        if not isinstance(patch, list):
            raise StateError("state_patch is malformed: it must be a list of operations")
        for index, op in enumerate(patch):
            try:
                self._op(op)
            except _PatchFailure as exc:
                raise StateError(f"state_patch does not apply: operation {index} ({_describe(op)}): {exc}") from None
        return self.root

    def _op(self, op: Any) -> None:
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise _PatchFailure("each operation needs an 'op' and a string 'path'")
        kind, path = op.get("op"), _tokens(op["path"])
        if kind in ("add", "replace", "test") and "value" not in op:
            raise _PatchFailure(f"'{kind}' needs a 'value'")
        if kind in ("move", "copy") and not isinstance(op.get("from"), str):
            raise _PatchFailure(f"'{kind}' needs a string 'from'")
        if kind != "test":
            self._touch(path)
        if kind == "move":
            self._touch(_tokens(op["from"]))
        if kind == "add":
            self._put(path, _copy_json(op["value"]))
        elif kind == "remove":
            self._remove(path)
        elif kind == "replace":
            self._put(path, _copy_json(op["value"]), replace=True)
        elif kind == "test":
            if not _json_equal(_get(self.root, path), op["value"]):
                raise _PatchFailure(f"test failed: the value at {op['path']!r} is not {op['value']!r}")
        elif kind == "move":
            source = _tokens(op["from"])
            if path[: len(source)] == source and len(path) > len(source):
                raise _PatchFailure("cannot move a value into one of its own children")
            value = _get(self.root, source)
            if source == path:
                return  # moving a value onto itself changes nothing
            self._remove(source)
            self._put(path, value)
        elif kind == "copy":
            self._put(path, _copy_json(_get(self.root, _tokens(op["from"]))))
        else:
            raise _PatchFailure(f"unknown op {kind!r}; use add, remove, replace, move, copy or test")

    def _owned(self, container: Any) -> Any:
        if id(container) in self.own:
            return container
        copy = dict(container) if isinstance(container, dict) else list(container)
        self.own[id(copy)] = copy
        return copy

    def _parent(self, path: list[str]) -> Any:
        """The container that holds `path`'s last token, made writable along the way."""
        if not isinstance(self.root, dict | list):
            raise _PatchFailure("the document is not an object or array")
        node = self.root = self._owned(self.root)
        for depth, token in enumerate(path[:-1]):
            child = _child(node, token, path[: depth + 1])
            if not isinstance(child, dict | list):
                raise _PatchFailure(f"{_pointer(path[: depth + 1])} is not an object or array")
            child = self._owned(child)
            if isinstance(node, dict):
                node[token] = child
            else:
                node[_index(node, token, path[: depth + 1])] = child
            node = child
        return node

    def _put(self, path: list[str], value: Any, *, replace: bool = False) -> None:
        """`add` (sets an object member, inserts into an array) or `replace` (the target must exist)."""
        if not path:
            self.root = value
            return
        parent, token = self._parent(path), path[-1]
        if isinstance(parent, dict):
            if replace and token not in parent:
                raise _PatchFailure(f"nothing at {_pointer(path)} to replace")
            parent[token] = value
        elif replace:
            parent[_index(parent, token, path)] = value
        elif token == "-":
            parent.append(value)
        else:
            parent.insert(_index(parent, token, path, end_ok=True), value)

    def _remove(self, path: list[str]) -> None:
        if not path:
            raise _PatchFailure("cannot remove the whole document")
        parent, token = self._parent(path), path[-1]
        if isinstance(parent, dict):
            if token not in parent:
                raise _PatchFailure(f"nothing at {_pointer(path)}")
            del parent[token]
        else:
            del parent[_index(parent, token, path)]


class _SparsePatcher(_Patcher):
    """`_Patcher` that writes into the `large` collections of its document as `_Overlay`s instead of copies."""

    def __init__(self, document: Any, large: set[str]) -> None:
        super().__init__(document)
        self.large = {id(document[name]): name for name in large}

    def _owned(self, container: Any) -> Any:
        if id(container) in self.large and id(container) not in self.own:
            overlay = _Overlay(container)
            self.own[id(overlay)] = overlay
            return overlay
        return super()._owned(container)


class _PatchFailure(Exception):
    pass


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise _PatchFailure(f"path {pointer!r} must be '' or start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _pointer(tokens: list[str]) -> str:
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


def _index(array: list[Any], token: str, path: list[str], *, end_ok: bool = False) -> int:
    if not token.isdigit() or (token != "0" and token.startswith("0")) or not token.isascii():
        raise _PatchFailure(f"{_pointer(path)}: {token!r} is not an array index")
    index = int(token)
    if index > len(array) or (index == len(array) and not end_ok):
        raise _PatchFailure(f"{_pointer(path)}: index {index} is out of range (the array has {len(array)} items)")
    return index


def _child(node: Any, token: str, path: list[str]) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise _PatchFailure(f"nothing at {_pointer(path)}")
        return node[token]
    if isinstance(node, list):
        return node[_index(node, token, path)]
    raise _PatchFailure(f"{_pointer(path[:-1])} is not an object or array")


def _get(document: Any, path: list[str]) -> Any:
    node = document
    for depth, token in enumerate(path):
        node = _child(node, token, path[: depth + 1])
    return node


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as RFC 6902's `test` defines it: JSON types must match (true is not 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False
    return bool(a == b)


def _copy_json(value: Any) -> Any:
    """A private copy of a JSON value from a patch (scalars are immutable and shared)."""
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    return value


def _describe(op: Any) -> str:
    if isinstance(op, dict):
        return f"{op.get('op')!s} {op.get('path')!s}"
    return type(op).__name__


def resolve_pointer(state: Any, pointer: str) -> Any:
    """The value at `pointer`, or a marker that `is_missing` recognises when nothing is there."""
    try:
        return jsonpointer.resolve_pointer(state, pointer)
    except jsonpointer.JsonPointerException:
        return _MISSING


def is_missing(value: Any) -> bool:
    return value is _MISSING
