"""A state diff: what one step changed in an episode's state, as added, removed and changed JSON paths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Change", "state_diff"]


@dataclass(frozen=True)
class Change:
    """One difference between two states at a JSON Pointer (`before` is None when added, `after` when removed)."""

    op: Literal["added", "removed", "changed"]
    path: str
    before: Any = None
    after: Any = None


def _pointer(parent: str, key: str | int) -> str:
    return f"{parent}/{str(key).replace('~', '~0').replace('/', '~1')}"


def state_diff(before: Any, after: Any, path: str = "") -> list[Change]:
    """The smallest paths where `after` differs from `before`, in document order.

    Objects are compared key by key and arrays index by index (a longer or shorter array adds or removes
    its tail); anything else that differs, including a change of type, is one `changed` path. A part both
    states share (the same object: states of one episode share what its calls did not change) is skipped unread.
    """
    if before is after:
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        changes: list[Change] = []
        for key in before:
            if key not in after:
                changes.append(Change("removed", _pointer(path, key), before=before[key]))
            else:
                changes.extend(state_diff(before[key], after[key], _pointer(path, key)))
        changes.extend(Change("added", _pointer(path, k), after=v) for k, v in after.items() if k not in before)
        return changes
    if isinstance(before, list) and isinstance(after, list):
        changes = []
        for i, (old, new) in enumerate(zip(before, after, strict=False)):
            changes.extend(state_diff(old, new, _pointer(path, i)))
        changes.extend(Change("removed", _pointer(path, i), before=v) for i, v in enumerate(before) if i >= len(after))
        changes.extend(Change("added", _pointer(path, i), after=v) for i, v in enumerate(after) if i >= len(before))
        return changes
    if before == after and type(before) is type(after):
        return []
    return [Change("changed", path or "/", before=before, after=after)]
