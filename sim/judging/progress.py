"""Progress: how far an episode got after every call, computed exactly from its explicit state.

A task's checks are its goals (`expected_state`) and its forbidden states (the task's `forbidden_state`, and its
world's `simulator.forbidden_state` for pointers the task does not name), each with a weight (`weights`, 1 by
default). The potential of a state s is

    Phi(s) = (sum of w over goals that hold in s
              - sum of w over goals that held at the start and no longer hold   (a kept check broken)
              - sum of w over forbidden states that hold in s) / W

with W the goals' total weight (a task with forbidden states only: theirs). A full solution scores 1; a goal that
already held at the start counts while it is kept, and breaking it costs twice its weight (its share, and as much
again), so undoing a kept check scores below doing nothing, and trading one for another goal too. The shaped reward
of a call is potential-based, r_t = gamma * Phi(s_t+1) - Phi(s_t) (which leaves the optimal policy unchanged); with
gamma = 1 an episode's rewards sum to Phi(end) - Phi(start). A call that failed for infrastructure reasons or that
a budget refused never reached the world: its reward is 0. `ProgressTracker` folds one event at a time, for a
server that rewards each call as it answers it; `progress_curve` folds a whole episode with it.

The states are folded from the start with the events' committed patches at the grain of records (one key of a
top-level object, as `simia.sim.world.Touched` names them): a patch that changes records copies those records
only, never the collections that hold them, and only the checks whose pointers it may have changed are evaluated
again. So a step costs what it changed, whatever the size of the world; a patch that changes a whole collection
(or an array's items) is applied to the whole state instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jsonpointer

from ..records import EventRecord
from ..verdict import ProgressCheck, ProgressCurve, ProgressStep
from ..world import ABSENT, State, Task, World, apply_patch, as_state, is_missing, resolve_pointer
from .rules import check_holds, value_holds

__all__ = ["Check", "ProgressTracker", "progress_curve", "task_checks"]


@dataclass(frozen=True)
class Check:
    """One check progress weighs: the value `expected` at `pointer` (`ABSENT`: nothing there)."""

    pointer: str
    expected: Any
    weight: float = 1.0
    forbidden: bool = False

    def holds(self, state: dict[str, Any]) -> bool:
        return check_holds(state, self.pointer, self.expected)[0]


def task_checks(world: World, task: Task) -> list[Check]:
    """The task's goals, then its forbidden states and its world's (a pointer the task names is the task's)."""
    named = task.expected_state.keys() | task.forbidden_state.keys()
    forbidden = {**{p: v for p, v in world.simulator.forbidden_state.items() if p not in named}, **task.forbidden_state}
    goals = [Check(p, v, task.weights.get(p, 1.0)) for p, v in task.expected_state.items()]
    return goals + [Check(p, v, task.weights.get(p, 1.0), forbidden=True) for p, v in forbidden.items()]


def progress_curve(
    checks: Sequence[Check], start: dict[str, Any], events: Sequence[EventRecord], *, gamma: float = 1.0
) -> ProgressCurve | None:
    """Phi at the start and after each event, and the shaped reward of each; None when there are no checks.

    Args:
        checks: the task's checks (`task_checks`).
        start: the episode's initial state.
        events: its events in order, with their committed `state_patch`es.
        gamma: the discount of the shaped reward, in (0, 1].
    """
    if not checks:
        return None
    tracker = ProgressTracker(checks, start, gamma=gamma)
    steps = [tracker.step(event) for event in events]
    return ProgressCurve(
        start=tracker.start,
        end=tracker.phi,
        gamma=gamma,
        checks=[
            ProgressCheck(
                pointer=c.pointer,
                expected="absent" if c.expected == ABSENT else c.expected,
                weight=c.weight,
                forbidden=c.forbidden,
                at_start=tracker.at_start[i],
                at_end=tracker.held[i],
                missing=is_missing(tracker.value(i)),
            )
            for i, c in enumerate(checks)
        ],
        steps=steps,
    )


class ProgressTracker:
    """Progress followed one committed event at a time from an episode's start: what `progress_curve` folds over a
    whole episode, for a server that rewards each call as it answers it (the state before the call is the fold so
    far, the state after it that fold with the event's patch).

    Args:
        checks: the task's checks (`task_checks`; at least one).
        start: the episode's initial state.
        gamma: the discount of the shaped reward, in (0, 1].
    """

    def __init__(self, checks: Sequence[Check], start: dict[str, Any], *, gamma: float = 1.0) -> None:
        if not checks:
            raise ValueError("progress needs at least one check: a task without checks has no progress")
        self.checks = list(checks)
        self.gamma = gamma
        goal_weight = sum(c.weight for c in checks if not c.forbidden)
        self._scale = goal_weight or sum(c.weight for c in checks)
        self._parts = [_parts(c.pointer) for c in checks]
        self._fold = _Fold(start)
        self.at_start = [value_holds(self.value(i), c.expected) for i, c in enumerate(checks)]
        self.held = list(self.at_start)
        self.start = self.phi = self._potential()

    def value(self, i: int) -> Any:
        """The value check `i` reads, now (`is_missing` when there is none)."""
        return self._fold.value(self._parts[i])

    def _potential(self) -> float:
        total = []
        for check, now, then in zip(self.checks, self.held, self.at_start, strict=True):
            if check.forbidden:
                total.append(-check.weight if now else 0.0)
            else:
                total.append(check.weight if now else (-check.weight if then else 0.0))
        return math.fsum(total) / self._scale  # exact sums: no drift over steps

    def step(self, event: EventRecord) -> ProgressStep:
        """Fold the next event (its committed `state_patch`): Phi after it, and its shaped reward."""
        changed: list[int] = []
        if event.state_patch:
            self._fold.apply(event.state_patch)
            for i in _affected(self._parts, event.state_patch):
                now = value_holds(self.value(i), self.checks[i].expected)
                if now != self.held[i]:
                    self.held[i] = now
                    changed.append(i)
        infra = event.error_kind == "infra" or not event.counts_as_call
        phi, self.phi = self.phi, self._potential()
        checks, held = self.checks, self.held
        return ProgressStep(
            seq=event.seq,
            progress=self.phi,
            reward=0.0 if infra else self.gamma * self.phi - phi,
            infra=infra,
            achieved=[checks[i].pointer for i in changed if held[i] and not checks[i].forbidden],
            broken=[checks[i].pointer for i in changed if not held[i] and not checks[i].forbidden],
            violated=[checks[i].pointer for i in changed if held[i] and checks[i].forbidden],
        )


class _Fold:
    """A state folded with patches: the start, and the records changed since, each as a one-key document
    `{"r": value}` (`{}`: removed) that patches of that record are applied to."""

    def __init__(self, start: dict[str, Any]) -> None:
        self.state: State = as_state(start)
        self.records: dict[tuple[str, ...], dict[str, Any]] = {}

    def value(self, parts: tuple[str, ...]) -> Any:
        """The value at a pointer's `parts` now (`is_missing` when there is none)."""
        record = self.records.get(parts[:2]) if len(parts) >= 2 else None
        if record is None:
            return resolve_pointer(self.state, _pointer(parts))
        return resolve_pointer(record, _pointer(("r", *parts[2:])))

    def apply(self, patch: list[dict[str, Any]]) -> None:
        by_record = self._by_record(patch)
        if by_record is None:  # a collection, an array or the root changes: patch the whole state
            self.state = apply_patch(self.state, [*self._flush(), *patch], None)
            self.records = {}
            return
        for (collection, key), ops in by_record.items():
            record = self.records.get((collection, key))
            if record is None:
                held = self.state[collection]
                record = {"r": held[key]} if key in held else {}
            self.records[(collection, key)] = apply_patch(record, ops, None)

    def _by_record(self, patch: list[dict[str, Any]]) -> dict[tuple[str, ...], list[dict[str, Any]]] | None:
        """The patch's operations by the record they change, rewritten onto its `{"r": value}` document; None
        when one changes more than one record of an object collection."""
        out: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for op in patch:
            path = _parts(op["path"])
            source = _parts(op["from"]) if op.get("op") in ("move", "copy") else path
            if len(path) < 2 or source[:2] != path[:2] or not isinstance(self.state.get(path[0]), dict):
                return None
            moved = {"from": _pointer(("r", *source[2:]))} if "from" in op else {}
            out.setdefault(path[:2], []).append({**op, "path": _pointer(("r", *path[2:])), **moved})
        return out

    def _flush(self) -> list[dict[str, Any]]:
        """The records changed so far, as operations on the whole state."""
        ops: list[dict[str, Any]] = []
        for (collection, key), record in self.records.items():
            path = _pointer((collection, key))
            if "r" in record:
                ops.append({"op": "add", "path": path, "value": record["r"]})
            elif key in self.state[collection]:
                ops.append({"op": "remove", "path": path})
        return ops


def _parts(pointer: str) -> tuple[str, ...]:
    return tuple(jsonpointer.JsonPointer(pointer).parts)


def _pointer(parts: tuple[str, ...]) -> str:
    return str(jsonpointer.JsonPointer.from_parts(parts).path)


def _affected(parts: list[tuple[str, ...]], patch: list[dict[str, Any]]) -> list[int]:
    """The checks whose value an operation of `patch` may have changed: those at or above a path it writes, or
    inside that path's parent (an insert or removal in an array moves the items after it)."""
    written = [_parts(op["path"]) for op in patch if op.get("op") != "test"]
    written += [_parts(op["from"]) for op in patch if op.get("op") == "move"]
    return [
        i
        for i, check in enumerate(parts)
        if any(not path or check[: len(path) - 1] == path[:-1] or path[: len(check)] == check for path in written)
    ]
