"""Consistency over a call sequence, as pairs of calls: a repeated read (a read-only call made again with no
write between) must answer as before, and a write then a read of the resource it names must show what the
write set.

The reference is the real server where there is one: a write is a call of a tool not annotated `readOnlyHint`
that the real server answered; a repeated read is consistent when the two simulated answers agree as the real
ones do (an error repeated where the real server answered is not); a read after a write must show the values
the write set that the real read shows (from the real write's answer, else from the write's arguments; the
values naming the resource are left out, they show either way). With no real server (`bench/consistency.py`)
the simulation is its own reference: its writes' answers say what they set. A write and a read name the same
resource when they share a string argument value (`write_file(path)`, `read_text_file(path)`). A pair the
simulation failed (infra) is found but not checked: the counts say both."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from simia.sim.engine import Step, ToolCall
from simia.sim.world import World

from .compare import Answer, leaves, simulated_answer

__all__ = ["Check", "Consistency", "Pair", "consistency", "pairs", "read_only", "summary"]

PairKind = Literal["repeated_read", "read_after_write"]


@dataclass(frozen=True)
class Pair:
    """Two calls of a check: `first` is the earlier read or the write, `second` the later read (indices)."""

    kind: PairKind
    first: int
    second: int
    checked: bool
    consistent: bool
    why: str  # what held or failed, or why the pair could not be checked


class Check(NamedTuple):
    consistent: int
    checked: int
    found: int


class Consistency(NamedTuple):
    repeated_read: Check
    read_after_write: Check


def consistency(
    world: World, calls: Sequence[ToolCall], steps: Sequence[Step], real: Sequence[Answer] | None = None
) -> Consistency:
    """The counts of `pairs`."""
    return summary(pairs(world, calls, steps, real))


def summary(found: Sequence[Pair]) -> Consistency:
    """(consistent, checked, found) of each kind."""

    def count(kind: PairKind) -> Check:
        mine = [p for p in found if p.kind == kind]
        return Check(sum(p.consistent for p in mine), sum(p.checked for p in mine), len(mine))

    return Consistency(count("repeated_read"), count("read_after_write"))


def pairs(
    world: World, calls: Sequence[ToolCall], steps: Sequence[Step], real: Sequence[Answer] | None = None
) -> list[Pair]:
    """Every pair of the sequence, checked where it can be (`real`: the real server's answers, one a call)."""
    sims = [simulated_answer(step) for step in steps]
    refs: Sequence[Answer | None] = real if real is not None else sims
    found: list[Pair] = []
    for i, call in enumerate(calls):
        if not read_only(world, call.tool):
            continue
        key = _key(call)
        earlier = next((j for j in range(i - 1, -1, -1) if _key(calls[j]) == key), None)
        since = -1 if earlier is None else earlier
        writes = [w for w in range(since + 1, i) if not read_only(world, calls[w].tool) and _answered(refs[w])]
        if earlier is not None and not writes:
            found.append(_repeated(earlier, i, sims, real))
        elif (write := next((w for w in reversed(writes) if _names(calls[w], call)), None)) is not None:
            found.append(_after_write(write, i, calls, sims, real))
    return found


def _repeated(first: int, second: int, sims: Sequence[Answer | None], real: Sequence[Answer] | None) -> Pair:
    a, b = sims[first], sims[second]

    def pair(consistent: bool, why: str, checked: bool = True) -> Pair:
        return Pair("repeated_read", first, second, checked, consistent, why)

    if a is None or b is None:
        return pair(False, "the simulation failed (infra) on a read", checked=False)
    if real is None:
        return pair(a.same(b), "the simulated answers agree" if a.same(b) else "the simulated answers differ")
    ra, rb = real[first], real[second]
    if (a.error, b.error) != (ra.error, rb.error):
        return pair(False, "the simulation errs where the real server answers, or answers where it errs")
    if a.same(b) != ra.same(rb):
        return pair(False, "the simulated answers differ where the real ones agree" if ra.same(rb)
                    else "the simulated answers agree where the real ones differ")  # fmt: skip
    return pair(True, "the simulated answers agree as the real ones do")


def _after_write(
    write: int, read: int, calls: Sequence[ToolCall], sims: Sequence[Answer | None], real: Sequence[Answer] | None
) -> Pair:
    sim = sims[read]

    def pair(consistent: bool, why: str, checked: bool = True) -> Pair:
        return Pair("read_after_write", write, read, checked, consistent, why)

    if sim is None:
        return pair(False, "the simulated read failed (infra)", checked=False)
    named = set(_strings(calls[read].arguments))
    wrote = real[write] if real is not None else sims[write]
    shown = real[read] if real is not None else None
    assert wrote is not None  # a write is a call its reference answered
    if shown is not None and shown.error:
        ok = sim.error and (shown.code is None or sim.code == shown.code)
        return pair(ok, f"the real read failed ({shown.code or 'an error'}): the simulated read must too")
    facts = _facts(wrote.value, named, shown) or _facts(calls[write].arguments, named, shown)
    if not facts:
        return pair(False, "the read shows nothing the write set", checked=False)
    if sim.error:
        return pair(False, f"the simulated read failed with {sim.code}")
    missing = [f for f in facts if not _appears(f, sim.value)]
    listed = ", ".join(json.dumps(f) for f in (missing or facts)[:3])
    return pair(not missing, f"the read lacks what the write set: {listed}" if missing else f"the read shows {listed}")


def _facts(value: Any, named: set[str], shown: Answer | None) -> list[Any]:
    """The scalar values of a write's answer or arguments, less those naming the resource, that the reference
    read shows (all, with no reference read)."""
    facts: list[Any] = []
    for leaf in leaves(value).values():
        if isinstance(leaf, dict | list) or leaf is None or leaf in named or leaf in facts:
            continue
        if shown is None or _appears(leaf, shown.value):
            facts.append(leaf)
    return facts


def _appears(fact: Any, answer: Any) -> bool:
    """A value is in an answer: an equal leaf (a boolean equals only a boolean), or a string leaf holding a
    string of 3 characters or more (a file's content inside a longer text)."""
    for leaf in leaves(answer).values():
        if isinstance(leaf, bool) or isinstance(fact, bool):
            found = leaf is fact
        elif isinstance(leaf, str) and isinstance(fact, str):
            found = leaf == fact or (len(fact) >= 3 and fact in leaf)
        else:
            found = isinstance(leaf, int | float) and isinstance(fact, int | float) and leaf == fact
        if found:
            return True
    return False


def _names(write: ToolCall, read: ToolCall) -> bool:
    return bool(set(_strings(write.arguments)) & set(_strings(read.arguments)))


def _strings(arguments: dict[str, Any]) -> list[str]:
    return [v for v in leaves(arguments).values() if isinstance(v, str) and v]


def _answered(reference: Answer | None) -> bool:
    return reference is not None and not reference.error


def read_only(world: World, name: str) -> bool:
    """Whether the world's tool `name` is annotated `readOnlyHint: true` (anything else may write)."""
    tool = world.tool(name)
    return bool(tool and tool.annotations and tool.annotations.get("readOnlyHint") is True)


def _key(call: ToolCall) -> str:
    return json.dumps([call.tool, call.arguments], sort_keys=True)
