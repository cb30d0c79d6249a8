"""State-grounded tools on the shipped retail world: what the state decides is answered from it, exactly and
consistently, without a model (the scripted backend, with nothing scripted, and the fake provider over HTTP, both
fail any model call), a broken precondition or a record deleted at run time gives the documented code, and a guided
call asks the model with the declared parts fixed and rejects an answer that contradicts them."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from simia.sim import load_world
from simia.sim.backends import Backend, ScriptedBackend, resolve_backend
from simia.sim.engine import Simulator, Step, ToolCall
from simia.sim.storage import SqliteCache
from simia.sim.world import apply_patch
from simia.testing.fake_provider import FakeProvider

ROOT = Path(__file__).resolve().parents[3]
WORLD = load_world(ROOT / "tool_specs" / "retail")
STATE = WORLD.initial_state
ADDRESS = {"address1": "401 Congress Ave", "city": "Austin", "state": "TX", "country": "USA", "zip": "78701"}
READS = [  # every declared read, and the record the state holds for it
    ("find_user_by_email", {"email": "mia.lee@example.com"}, {"user_id": "mia_lee_1021"}),
    ("get_user_details", {"user_id": "omar_haddad_3310"}, STATE["users"]["omar_haddad_3310"]),
    ("get_order_details", {"order_id": "#W1003"}, STATE["orders"]["#W1003"]),
    ("get_product_details", {"product_id": "P300"}, STATE["products"]["P300"]),
    (
        "list_products",
        {},
        {"products": [{"product_id": p["product_id"], "name": p["name"]} for p in STATE["products"].values()]},
    ),
]


def ok(output: dict[str, Any], patch: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"is_error": False, "error_code": None, "message": "", "output": output, "state_patch": patch or []}


@pytest.fixture(params=["scripted", "fake provider"])
async def no_model(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """A backend any model call to fails: nothing scripted, or a fake provider whose every answer is invalid."""
    if request.param == "scripted":
        yield ScriptedBackend([])
        return
    async with FakeProvider({"not": "an answer"}).running() as fake:
        backend = resolve_backend("openai:gpt-4.1-mini", base_url=fake.base_url, env={"OPENAI_API_KEY": "k"})
        yield backend
        await backend.aclose()
        assert fake.requests == []


async def run(sim: Simulator, state: dict[str, Any], *calls: tuple[str, dict[str, Any]]) -> list[Step]:
    steps = []
    for tool, arguments in calls:
        step = await sim.step(WORLD, state, [], ToolCall(tool, arguments))
        steps.append(step)
        state = step.state
    return steps


@pytest.mark.parametrize(("tool", "arguments", "record"), READS, ids=[r[0] for r in READS])
async def test_every_declared_read_is_the_state_record_with_no_model_call(
    no_model: Backend, tool: str, arguments: dict[str, Any], record: dict[str, Any]
) -> None:
    (step,) = await run(Simulator(no_model), STATE, (tool, arguments))
    assert (step.output, step.is_error, step.source, step.state_patch, step.state) == (
        record,
        False,
        "state",
        [],
        STATE,
    )
    assert (step.model, step.attempts, step.usage.calls, step.usage.prompt_tokens) == ("", 0, 0, 0)


async def test_a_repeated_read_and_a_read_after_a_declared_write_agree_with_the_state(no_model: Backend) -> None:
    first, again, write, after = await run(
        Simulator(no_model),
        STATE,
        ("get_order_details", {"order_id": "#W1004"}),
        ("get_order_details", {"order_id": "#W1004"}),
        ("modify_pending_order_address", {"order_id": "#W1004", **ADDRESS}),
        ("get_order_details", {"order_id": "#W1004"}),
    )
    changed = {**STATE["orders"]["#W1004"], "address": {**ADDRESS, "address2": ""}}  # its inputSchema default
    assert first.output == again.output == STATE["orders"]["#W1004"]
    shown = {"order_id": "#W1004", "address": changed["address"]}  # the API's view of the changed order
    assert (write.source, write.output, write.state["orders"]["#W1004"]) == ("state", shown, changed)
    assert write.state_patch == [{"op": "replace", "path": "/orders/#W1004/address", "value": changed["address"]}]
    assert after.output == changed and after.state is write.state


@pytest.mark.parametrize(
    ("tool", "arguments", "code", "text"),
    [
        ("cancel_pending_order", {"order_id": "#W1002", "reason": "no longer needed"}, "order_not_pending",
         "Error (order_not_pending): the order's status is not pending"),
        ("return_delivered_order_items", {"order_id": "#W1001", "item_ids": ["I1001"], "payment_method_id": "x"},
         "order_not_delivered", "Error (order_not_delivered): the order's status is not delivered"),
        ("modify_pending_order_address", {"order_id": "#W9999", **ADDRESS}, "order_not_found",
         "Error (order_not_found): the order id does not exist"),
        ("find_user_by_email", {"email": "mia.lee@exmaple.org"}, "user_not_found",
         "Error (user_not_found): no account has this email"),
        ("get_product_details", {"product_id": "P999"}, "product_not_found",
         "Error (product_not_found): the product id does not exist"),
    ],
    ids=["cancel delivered", "return pending", "modify unknown", "unknown email", "unknown product"],
)  # fmt: skip
async def test_a_call_that_breaks_a_precondition_gets_its_documented_code_without_a_model(
    no_model: Backend, tool: str, arguments: dict[str, Any], code: str, text: str
) -> None:
    (step,) = await run(Simulator(no_model), STATE, (tool, arguments))
    assert (step.is_error, step.error_kind, step.error_code, step.text) == (True, "agent", code, text)
    assert (step.source, step.state, step.state_patch, step.attempts) == ("state", STATE, [], 0)


async def test_a_record_deleted_at_run_time_gives_the_declared_code(no_model: Backend) -> None:
    deleted = apply_patch(STATE, [{"op": "remove", "path": "/orders/#W1001"}], WORLD.state_schema)
    steps = await run(
        Simulator(no_model),
        deleted,
        ("get_order_details", {"order_id": "#W1001"}),
        ("cancel_pending_order", {"order_id": "#W1001", "reason": "no longer needed"}),
        ("modify_pending_order_address", {"order_id": "#W1001", **ADDRESS}),
    )
    assert [(s.error_kind, s.error_code, s.source, s.state) for s in steps] == [
        ("agent", "order_not_found", "state", deleted)
    ] * 3


def cancel_answer(status: str = "cancelled", patch: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return ok({"order_id": "#W1001", "status": status, "refund_amount": 43.99}, patch)


REFUND_ENTRY = {"transaction_type": "refund", "amount": 43.99, "payment_method_id": "credit_card_4421"}
REFUND = {"op": "add", "path": "/orders/#W1001/payment_history/-", "value": REFUND_ENTRY}
CANCELLED = [{"op": "replace", "path": "/orders/#W1001/status", "value": "cancelled"}]


async def test_a_guided_write_applies_the_declared_effects_and_the_models_other_changes() -> None:
    backend = ScriptedBackend([cancel_answer(patch=[CANCELLED[0], REFUND])])  # the model repeats one declared op
    cancel, after = await run(
        Simulator(backend),
        STATE,
        ("cancel_pending_order", {"order_id": "#W1001", "reason": "ordered by mistake"}),
        ("get_order_details", {"order_id": "#W1001"}),
    )
    assert (cancel.source, cancel.output, cancel.state_patch) == (
        "simulated",
        cancel_answer()["output"],
        [*CANCELLED, REFUND],
    )
    prompt = backend.requests[0].messages[1]["content"]
    assert prompt.endswith(
        "Fixed facts (computed from the state; your answer must agree with them):\n"
        "- /orders/#W1001 exists.\n"
        '- /orders/#W1001/status equals "pending".\n'
        "- These errors do not apply: not_found, order_not_found, order_not_pending.\n"
        "- These state changes are applied for you (leave them out of state_patch): "
        '[{"op":"replace","path":"/orders/#W1001/status","value":"cancelled"}]\n'
        '- output.status is "cancelled".'
    )
    order = after.output
    assert order is not None and order["status"] == "cancelled" and "cancel_reason" not in order  # as the real API
    assert order["payment_history"][-1] == REFUND["value"] and after.source == "state" and len(backend.requests) == 1


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (cancel_answer("pending"), 'output.status must be "cancelled" (the state decides it)'),
        (cancel_answer(patch=[{"op": "replace", "path": "/orders/#W1001/status", "value": "canceled"}]),
         "state_patch operation replace /orders/#W1001/status changes what the declared effect replace "
         "/orders/#W1001/status sets: leave it out"),
        (cancel_answer(patch=[{"op": "remove", "path": "/orders/#W1001"}]),
         "state_patch operation remove /orders/#W1001 changes what the declared effect replace "
         "/orders/#W1001/status sets: leave it out"),
        ({"is_error": True, "error_code": "order_not_pending", "message": "", "output": None, "state_patch": []},
         "error_code 'order_not_pending' contradicts the state (the fixed facts rule it out)"),
    ],
    ids=["output", "patch on a declared path", "patch around a declared path", "ruled-out error"],
)  # fmt: skip
async def test_a_guided_answer_that_contradicts_the_declared_parts_is_fed_back_and_retried(
    answer: dict[str, Any], problem: str
) -> None:
    backend = ScriptedBackend([answer, cancel_answer()])
    (step,) = await run(
        Simulator(backend), STATE, ("cancel_pending_order", {"order_id": "#W1001", "reason": "ordered by mistake"})
    )
    assert (step.is_error, step.attempts, step.state_patch) == (False, 2, CANCELLED)
    assert (
        backend.requests[1].messages[-1]["content"]
        == f"Your answer was invalid: {problem}\nAnswer again with corrected JSON."
    )


async def test_a_guided_call_may_still_fail_for_a_reason_the_model_judges() -> None:
    refused = {"is_error": True, "error_code": "item_not_in_order", "message": "I9 is not in #W1003.", "output": None,
               "state_patch": []}  # fmt: skip
    arguments = {"order_id": "#W1003", "item_ids": ["I9"], "payment_method_id": "credit_card_9902"}
    (step,) = await run(Simulator(ScriptedBackend([refused])), STATE, ("return_delivered_order_items", arguments))
    assert (step.error_code, step.text, step.state, step.source) == (
        "item_not_in_order",
        "Error (item_not_in_order): I9 is not in #W1003.",
        STATE,
        "simulated",
    )


async def test_an_undeclared_tool_is_simulated_as_before() -> None:
    backend = ScriptedBackend([ok({"transferred": True})])
    (step,) = await run(Simulator(backend), STATE, ("transfer_to_human_agent", {"summary": "price adjustment"}))
    assert (step.output, step.source, step.attempts, len(backend.requests)) == (
        {"transferred": True},
        "simulated",
        1,
        1,
    )


async def test_state_answers_are_never_cached_and_guided_answers_are(tmp_path: Path) -> None:
    cache = SqliteCache(tmp_path / "cache.db")
    backend = ScriptedBackend([cancel_answer()])
    sim = Simulator(backend, cache=cache)
    call = ToolCall("cancel_pending_order", {"order_id": "#W1001", "reason": "ordered by mistake"})
    read = await sim.step(WORLD, STATE, [], ToolCall("get_order_details", {"order_id": "#W1001"}), seed=1)
    first = await sim.step(WORLD, STATE, [], call, seed=2)
    again = await sim.step(WORLD, STATE, [], call, seed=2)
    assert (read.cached, first.cached, again.cached, len(backend.requests)) == (False, False, True, 1)
    assert again.state_patch == first.state_patch == CANCELLED and again.state == first.state
    with sqlite3.connect(tmp_path / "cache.db") as db:
        assert db.execute("SELECT count(*) FROM llm_cache").fetchone() == (1,)  # the guided answer only
