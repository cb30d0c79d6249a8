"""Agreement of one call: the real server's answer and the simulated step side by side, scored on outcome
(both answered or both failed with an agent error), the simulated answer's fit to the tool's output schema,
shared key paths (structure), equal JSON leaves (values) and, for two errors, the error code. An `Answer` is
one side's answer in one shape, so the consistency checks read both sides alike. Where the real side is a
state too (the world's declarations, `declared`), `state_change` scores the state the simulated call left
against the one the exact call left: the share of the changed fields that agree."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

import mcp_types as types
from simia.sim.engine import Step, ToolCall
from simia.sim.schema import validate_instance
from simia.sim.world import ToolSpec, World

__all__ = [
    "Answer",
    "CallComparison",
    "StateChange",
    "change_bucket",
    "compare",
    "leaves",
    "real_answer",
    "simulated_answer",
    "state_change",
]


@dataclass
class CallComparison:
    """One call, answered by the real server and by the simulation."""

    index: int
    tool: str
    arguments: dict[str, Any]
    real_error: bool
    sim_error: bool
    sim_infra: bool
    outcome_agrees: bool  # both answered, or both failed with the simulation's failure an agent error
    schema_valid: bool | None  # None: the tool has no output schema, or the simulation failed
    structure: float | None  # key-path Jaccard, when both answered
    values: float | None  # share of equal leaves over all leaf paths, when both answered
    real_code: str | None  # the tool's code the real error text names (None: it names none)
    sim_code: str | None
    code_agrees: bool | None  # the real server errored: the simulation erred with that same code
    source: str = "simulated"  # the simulated step's: `simulated` (a model answered) or `state` (no model)
    real: Any = None
    simulated: Any = None
    null: float = 0.0  # what the null simulator scores on this call (`baselines`)
    constant: float = 0.0  # what the constant simulator scores on this call
    grade: dict[str, dict[str, Any]] | None = None  # `--grade`: dimension -> {"score", "reason"}
    grade_error: str | None = None  # `--grade`: why this step has no grade
    changed: int | None = None  # against the declarations: the state fields the exact call changed
    state: float | None = None  # against the declarations: the share of changed fields that agree (`state_change`)
    state_disagrees: list[str] | None = None  # against the declarations: where they do not (JSON Pointers, 20 at most)

    @property
    def agreement(self) -> float:
        """The value agreement of two answers; for a real error, 1 when the simulation erred with the same
        documented code; 0 otherwise (one answered and one failed, another code, or a simulator failure)."""
        if not self.outcome_agrees:
            return 0.0
        return float(bool(self.code_agrees)) if self.real_error else float(self.values or 0.0)


@dataclass(frozen=True)
class Answer:
    """One side's answer to a call: a JSON value, or an error (`value` is then its text) with its code (None for
    a real error text that names none of the tool's codes)."""

    error: bool
    code: str | None = None
    value: Any = None

    def same(self, other: Answer) -> bool:
        """Two answers alike: equal values, or errors of one code (two real errors naming no code: equal texts)."""
        if self.error != other.error:
            return False
        if self.error:
            return self.code == other.code and (self.code is not None or self.value == other.value)
        return bool(self.value == other.value)


def real_answer(result: types.CallToolResult, tool: ToolSpec | None, world: World) -> Answer:
    """The real server's answer: its structured content, its text parsed as JSON, or `{"text": ...}`."""
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    if result.is_error:
        return Answer(True, world.code_named(text, tool) if tool else None, text)
    if result.structured_content is not None:
        return Answer(False, value=result.structured_content)
    try:
        return Answer(False, value=json.loads(text))
    except json.JSONDecodeError:
        return Answer(False, value={"text": text})


def simulated_answer(step: Step) -> Answer | None:
    """The simulated answer, or None for an infrastructure failure (the simulator gave no answer)."""
    if step.error_kind == "infra":
        return None
    return Answer(True, step.error_code, step.text) if step.is_error else Answer(False, value=step.output)


def compare(index: int, call: ToolCall, tool: ToolSpec | None, real: Answer, step: Step) -> CallComparison:
    """One call compared (`tool` is None for a name the world lacks: an agent's call may name one)."""
    sim_infra = step.error_kind == "infra"
    real_error, sim_error = real.error, bool(step.is_error)
    sim_answer = {"text": step.output} if isinstance(step.output, str) else step.output  # as a text-only real one
    structure = values = None
    if not real_error and not sim_error:
        a, b = leaves(real.value), leaves(sim_answer)
        union = set(a) | set(b)
        structure = len(set(a) & set(b)) / len(union) if union else 1.0
        values = sum(1 for p in union if p in a and p in b and a[p] == b[p]) / len(union) if union else 1.0
    schema_valid = None
    if tool and tool.output_schema and not sim_error:
        schema_valid = not validate_instance(tool.output_schema, sim_answer)
    sim_code = step.error_code if sim_error else None
    return CallComparison(
        index=index,
        tool=call.tool,
        arguments=call.arguments,
        real_error=real_error,
        sim_error=sim_error,
        sim_infra=sim_infra,
        outcome_agrees=real_error == sim_error and not sim_infra,
        schema_valid=schema_valid,
        structure=structure,
        values=values,
        real_code=real.code,
        sim_code=sim_code,
        code_agrees=(real.code is not None and real.code == sim_code and not sim_infra) if real_error else None,
        source=step.source,
        real=real.value,
        simulated=sim_answer if not sim_error else step.text,
    )


def leaves(value: Any, path: str = "") -> dict[str, Any]:
    """A JSON value's leaves by path (`/key/0/...`); an empty object or list is a leaf."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(leaves(item, f"{path}/{key}"))
        return out or {path: {}}
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            out.update(leaves(item, f"{path}/{i}"))
        return out or {path: []}
    return {path: value}


_MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "MISSING"})()
"""A field one side of a state change lacks."""
_SHOWN_FIELDS = 20  # fields a call's `state_disagrees` names


class StateChange(NamedTuple):
    """The state one call left on each side, from the same state before it.

    Attributes:
        changed: how many fields (JSON leaves, an empty object or list being one) the exact call changed.
        agreement: the share of the fields either side changed that hold the same value on both sides after the
            call; None when neither changed any (a read: nothing to score).
        disagrees: the fields whose values differ after the call (JSON Pointers, sorted; 20 at most).
    """

    changed: int
    agreement: float | None
    disagrees: list[str]


def state_change(before: Any, exact: Any, simulated: Any) -> StateChange:
    """Score the state a simulated call left (`simulated`) against the one the exact call left (`exact`), both
    from `before`. O(what they changed) for states that share their unchanged parts with `before`, as patched
    states do: an unchanged part is skipped by identity."""
    want, got = _changed(before, exact), _changed(before, simulated)
    fields = want.keys() | got.keys()
    if not fields:
        return StateChange(0, None, [])
    wrong = sorted(
        path
        for path in fields
        if not _same(
            want[path][1] if path in want else got[path][0],  # the exact value: as before where it did not change it
            got[path][1] if path in got else want[path][0],
        )
    )
    return StateChange(len(want), (len(fields) - len(wrong)) / len(fields), wrong[:_SHOWN_FIELDS])


def change_bucket(changed: int) -> str:
    """Where a call falls by the state fields its exact call changes: `0`, `1`, `2-3` or `4+` (the writes that
    change many fields are where simulators fail: EnvSimBench's state change cliff)."""
    return "0" if changed == 0 else "1" if changed == 1 else "2-3" if changed <= 3 else "4+"


def _changed(before: Any, after: Any, path: str = "") -> dict[str, tuple[Any, Any]]:
    """The leaves that differ between two JSON values, by path: (before, after), `_MISSING` where absent."""
    if before is after:
        return {}
    out: dict[str, tuple[Any, Any]] = {}
    if isinstance(before, dict) and isinstance(after, dict):
        for key in before.keys() | after.keys():
            out.update(_changed(before.get(key, _MISSING), after.get(key, _MISSING), f"{path}/{_token(key)}"))
        return out
    if isinstance(before, list) and isinstance(after, list):
        for i in range(max(len(before), len(after))):
            out.update(
                _changed(
                    before[i] if i < len(before) else _MISSING, after[i] if i < len(after) else _MISSING, f"{path}/{i}"
                )
            )
        return out
    old = {} if before is _MISSING else _pointers(before, path)
    new = {} if after is _MISSING else _pointers(after, path)
    for leaf in old.keys() | new.keys():
        a, b = old.get(leaf, _MISSING), new.get(leaf, _MISSING)
        if not _same(a, b):
            out[leaf] = (a, b)
    return out


def _pointers(value: Any, path: str) -> dict[str, Any]:
    """`leaves`, keyed by JSON Pointers (`~` and `/` in a key escaped)."""
    if isinstance(value, dict) and value:
        return {p: v for key, item in value.items() for p, v in _pointers(item, f"{path}/{_token(key)}").items()}
    if isinstance(value, list) and value:
        return {p: v for i, item in enumerate(value) for p, v in _pointers(item, f"{path}/{i}").items()}
    return {path: value}


def _token(key: Any) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _same(a: Any, b: Any) -> bool:
    """Two leaves alike as JSON: 1 is 1.0, but true is not 1 (and an absent leaf is only itself)."""
    if a is _MISSING or b is _MISSING or isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and bool(a == b)
