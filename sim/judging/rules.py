"""Rule checks: a task's `expected_state` (JSON Pointer -> value, or {"$absent": true}) evaluated on a state.

No model is needed: the state is explicit, so whether a goal holds is computed. The judge, bootstrap (a
drafted task's goal must not hold at the start) and the verdict read these.
"""

from __future__ import annotations

import math
from typing import Any

from ..verdict import RuleCheck
from ..world import ABSENT, Task, is_missing, resolve_pointer

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


def rule_checks(task: Task, final_state: dict[str, Any]) -> list[RuleCheck]:
    """Evaluate `expected_state` (JSON Pointer -> value, or {"$absent": true}) on the final state."""
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
    return out
