"""tau2-bench's database hash, computed on simia's JSON state: what checks an imported world against real tau2.

tau2 hashes a database as sha256 of `json.dumps(db.model_dump(), sort_keys=True, default=str)` (`get_dict_hash`).
Where the model's JSON dump serializes the same (retail, airline, mock: the probe says so per database), the hash
of simia's state is tau2's. `PatchedHashes` hashes many states that differ from one base in a few records (each
task's initial and final state) without copying or re-serializing the records no patch touched: a retail state is
1.5 MB, a task changes a few orders.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import jsonpatch

__all__ = ["PatchedHashes", "tau2_hash"]


def tau2_hash(value: Any) -> str:
    """tau2's database hash (`get_dict_hash`) of a JSON value."""
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _tokens(pointer: str) -> tuple[str, ...]:
    return tuple(p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]) if pointer else ()


class PatchedHashes:
    """tau2's hash of the part of a state at `where` (a JSON Pointer, "" for the whole state), for states made from
    `base` by RFC 6902 patches.

    The text of each record (a member of a member of the part: `/orders/#W1`) is made once from the base; a state's
    hash re-serializes only the records its patches touched. `base` is never changed.
    """

    def __init__(self, base: dict[str, Any], where: str = "") -> None:
        self.base = base
        self.prefix = _tokens(where)
        part = jsonpatch.JsonPointer(where).resolve(base) if where else base
        self._texts: dict[str, Any] = {}
        if isinstance(part, dict):
            for key, value in part.items():
                members = isinstance(value, dict)
                self._texts[key] = {k: _canonical(v) for k, v in value.items()} if members else _canonical(value)

    def apply(
        self, state: dict[str, Any], patch: list[dict[str, Any]], touched: set[tuple[str, ...]]
    ) -> dict[str, Any]:
        """`state` with `patch` applied, copying only the containers on the patched paths (`state` and the base
        are left as they were); adds each patched path to `touched`."""
        copied: set[int] = set()
        root = dict(state)
        copied.add(id(root))
        for op in patch:
            for pointer in (op["path"], op.get("from")):
                if pointer is None:
                    continue
                tokens = _tokens(pointer)
                touched.add(tokens)
                node: Any = root
                for token in tokens[:-1]:  # copy the containers down to the patched one
                    key: Any = int(token) if isinstance(node, list) and token.isdigit() else token
                    try:
                        child = node[key]
                    except (KeyError, IndexError, TypeError):
                        break
                    if isinstance(child, (dict, list)) and id(child) not in copied:
                        child = dict(child) if isinstance(child, dict) else list(child)
                        copied.add(id(child))
                        node[key] = child
                    node = child
        return jsonpatch.apply_patch(root, copy.deepcopy(patch), in_place=True)  # type: ignore[no-any-return]

    def digest(self, state: dict[str, Any], touched: set[tuple[str, ...]]) -> str:
        """tau2's hash of the part of `state` (made by `apply` from the base), given every path patched so far."""
        part = jsonpatch.JsonPointer("/" + "/".join(self.prefix)).resolve(state) if self.prefix else state
        depth = len(self.prefix)
        inside = [t[depth:] for t in touched if t[:depth] == self.prefix]
        if not isinstance(part, dict) or any(len(t) == 0 for t in inside):
            return tau2_hash(part)
        whole = {t[0] for t in inside if len(t) == 1}
        records = {(t[0], t[1]) for t in inside if len(t) >= 2}
        pieces = []
        for key in sorted(part):
            value, cached = part[key], self._texts.get(key)
            if key in whole or cached is None or isinstance(cached, dict) != isinstance(value, dict):
                text = _canonical(value)
            elif isinstance(value, dict):
                text = (
                    "{"
                    + ", ".join(
                        f"{json.dumps(k)}: "
                        + (cached[k] if k in cached and (key, k) not in records else _canonical(value[k]))
                        for k in sorted(value)
                    )
                    + "}"
                )
            else:
                text = cached if not any(r[0] == key for r in records) else _canonical(value)
            pieces.append(f"{json.dumps(key)}: {text}")
        return hashlib.sha256(("{" + ", ".join(pieces) + "}").encode()).hexdigest()
