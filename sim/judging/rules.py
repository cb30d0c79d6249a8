"""Rule checks: a task's `expected_state` (JSON Pointer -> value, or {"$absent": true}) evaluated on a state, and
the checks tau2-bench makes beside it: `state_exact` (nothing else changed), `expected_actions` (calls made),
`communicate_info` (facts told to the user) and `assertions` (facts computed on the final state: its env
assertions).

No model is needed: the state is explicit, so whether a goal holds is computed. The judge, bootstrap (a
drafted task's goal must not hold at the start) and the verdict read these.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import StateError
from ..verdict import RuleCheck
from ..world import (
    ABSENT,
    ExpressionError,
    StateAssertion,
    Task,
    apply_patch,
    evaluate,
    is_missing,
    resolve_pointer,
    state_diff,
    with_functions,
)

__all__ = ["check_holds", "json_equal", "rule_checks", "value_holds"]


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality as a rule means it: numbers within 1e-9, booleans never equal to numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def value_holds(actual: Any, expected: Any) -> bool:
    """Whether a value found (`resolve_pointer`'s answer) is `expected`; nothing there holds only for `ABSENT`."""
    missing = is_missing(actual)
    return missing if expected == ABSENT else (not missing and json_equal(actual, expected))


def check_holds(state: dict[str, Any], pointer: str, expected: Any) -> tuple[bool, Any]:
    """Whether the value at `pointer` is `expected` (`ABSENT`: nothing is there), and what is there (a marker
    that `is_missing` recognises when the pointer resolves to nothing)."""
    actual = resolve_pointer(state, pointer)
    return value_holds(actual, expected), actual


def rule_checks(
    task: Task,
    final_state: dict[str, Any],
    *,
    initial_state: dict[str, Any] | None = None,
    calls: Sequence[Any] | None = None,
    transcript: list[dict[str, Any]] | None = None,
    functions: Mapping[str, str] | None = None,
) -> list[RuleCheck]:
    """Evaluate `expected_state` (JSON Pointer -> value, or {"$absent": true}) on the final state; with the initial
    state, `state_exact`; with the calls made (each with `tool` and `arguments`: the user's own calls count too, as
    tau2 counts them), `expected_actions`; `communicate_info` on the transcript's assistant messages (no transcript:
    those fail, nothing was told); and the `assertions` on the final state, with the world's `functions` bound
    (`World.functions`)."""
    out = []
    for pointer, expected in task.expected_state.items():
        passed, actual = check_holds(final_state, pointer, expected)
        out.append(
            RuleCheck(
                pointer=pointer,
                expected="absent" if expected == ABSENT else expected,
                actual="absent" if is_missing(actual) else actual,
                passed=passed,
            )
        )
    if task.state_exact and initial_state is not None:
        out.append(_nothing_else_changed(task, initial_state, final_state))
    if task.expected_actions and calls is not None:
        made = [(str(getattr(c, "tool", "")), getattr(c, "arguments", None) or {}) for c in calls]
        for i, action in enumerate(task.expected_actions):
            found = any(action.matches(tool, arguments) for tool, arguments in made)
            out.append(
                RuleCheck(
                    pointer=f"expected_actions[{i}]",
                    expected={"name": action.name, "arguments": action.arguments},
                    actual="called" if found else "not called",
                    passed=found,
                )
            )
    if task.communicate_info:
        told = _told(transcript)
        for i, info in enumerate(task.communicate_info):
            passed = _normal(info) in told
            out.append(
                RuleCheck(
                    pointer=f"communicate_info[{i}]",
                    expected=info,
                    actual="told" if passed else ("no transcript" if transcript is None else "not told"),
                    passed=passed,
                )
            )
    for i, assertion in enumerate(task.assertions):
        out.append(_asserted(f"assertions[{i}]", assertion, final_state, functions or {}))
    return out


def _asserted(
    pointer: str, assertion: StateAssertion, final: dict[str, Any], functions: Mapping[str, str]
) -> RuleCheck:
    """An assertion's check: true holds; false, anything else or a failure (its message) does not."""
    expected = assertion.message or assertion.expr
    try:
        value = evaluate(with_functions(functions, assertion.expr), {"state": final, "before": final})
    except ExpressionError as exc:
        return RuleCheck(pointer=pointer, expected=expected, actual=f"failed: {exc}", passed=False)
    return RuleCheck(pointer=pointer, expected=expected, actual=value, passed=value is True)


def _nothing_else_changed(task: Task, initial: dict[str, Any], final: dict[str, Any]) -> RuleCheck:
    """The final state is the initial one with `expected_state` applied: the differences left are listed."""
    ops = []
    for pointer, value in task.expected_state.items():
        there = not is_missing(resolve_pointer(initial, pointer))
        if value == ABSENT:
            ops += [{"op": "remove", "path": pointer}] if there else []
        else:
            ops.append({"op": "replace" if there else "add", "path": pointer, "value": value})
    try:
        expected = apply_patch(initial, ops, None)
    except StateError as exc:
        return RuleCheck(pointer="", expected="nothing else changed", actual=f"unreachable: {exc}", passed=False)
    other = sorted({op["path"] for op in state_diff(expected, final)})
    actual = "nothing else changed" if not other else {"also changed": other[:20]}
    return RuleCheck(pointer="", expected="nothing else changed", actual=actual, passed=not other)


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower().replace(",", "")).strip()


def _told(transcript: list[dict[str, Any]] | None) -> str:
    """What the assistant said, as `communicate_info` is compared: lowercased, commas and runs of spaces aside."""
    said: list[str] = []
    for message in transcript or []:
        if message.get("role") != "assistant":
            continue
        content = message.get("content")
        if isinstance(content, str):
            said.append(content)
        elif isinstance(content, list):
            said += [str(part.get("text", "")) for part in content if isinstance(part, dict)]
    return _normal(" \n ".join(said))
