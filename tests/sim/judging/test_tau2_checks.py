"""tau2-bench's checks beside the expected state, computed with no model: `state_exact` (nothing else changed, so
a task whose goal changes nothing checks that nothing changed), `expected_actions` (each gold call was made, its
compared arguments equal) and `communicate_info` (each fact appears in what the assistant told the user). Each
fails where it should: a null agent (no calls, nothing said) and a sloppy one (the goal plus a stray write)."""

from __future__ import annotations

from typing import Any

from simia.sim.judging.rules import rule_checks
from simia.sim.judging.transcript import RecordedCall
from simia.sim.world import Task, apply_patch, as_state

INITIAL = as_state({"orders": {"#W1": {"status": "pending", "note": ""}, "#W2": {"status": "pending", "note": ""}}})
TASK = Task.model_validate(
    {
        "id": "t",
        "instruction": "Cancel #W1 and tell me the refund.",
        "expected_state": {"/orders/#W1/status": "cancelled"},
        "state_exact": True,
        "expected_actions": [
            {"name": "cancel_pending_order", "arguments": {"order_id": "#W1", "reason": "no longer needed"}},
            {"name": "get_order_details", "arguments": {"order_id": "#W1", "x": 1}, "compare_args": ["order_id"]},
        ],
        "communicate_info": ["1,093.34"],
    }
)
GOAL = [{"op": "replace", "path": "/orders/#W1/status", "value": "cancelled"}]
CALLS = [
    RecordedCall("get_order_details", {"order_id": "#W1"}),
    RecordedCall("cancel_pending_order", {"order_id": "#W1", "reason": "no longer needed"}),
]
TOLD = [{"role": "user", "content": "1093.34?"}, {"role": "assistant", "content": "Your refund is $1093.34."}]


def passed(final: dict[str, Any], calls: list[RecordedCall], transcript: list[dict[str, Any]] | None) -> list[bool]:
    checks = rule_checks(TASK, final, initial_state=INITIAL, calls=calls, transcript=transcript)
    return [c.passed for c in checks]


def test_the_gold_run_passes_every_check() -> None:
    assert passed(apply_patch(INITIAL, GOAL, None), CALLS, TOLD) == [True] * 5


def test_doing_nothing_fails_every_check_but_nothing_else_changed() -> None:
    assert passed(INITIAL, [], None) == [False, False, False, False, False]


def test_a_stray_write_a_wrong_argument_and_a_fact_only_the_user_said_fail_their_checks() -> None:
    stray = apply_patch(INITIAL, [*GOAL, {"op": "replace", "path": "/orders/#W2/note", "value": "x"}], None)
    wrong = [CALLS[0], RecordedCall("cancel_pending_order", {"order_id": "#W1", "reason": "ordered by mistake"})]
    assert passed(stray, wrong, TOLD[:1]) == [True, False, False, True, False]
    (exact,) = [c for c in rule_checks(TASK, stray, initial_state=INITIAL) if c.pointer == ""]
    assert exact.actual == {"also changed": ["/orders/#W2/note"]}


def test_a_task_whose_goal_changes_nothing_checks_that_nothing_changed() -> None:
    task = Task(id="n", instruction="Just look.", state_exact=True)
    (check,) = rule_checks(task, INITIAL, initial_state=INITIAL)
    assert check.passed
    (check,) = rule_checks(task, apply_patch(INITIAL, GOAL, None), initial_state=INITIAL)
    assert not check.passed
