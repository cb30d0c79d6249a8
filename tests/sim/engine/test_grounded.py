"""State-grounded tools on the shipped retail world: every tool, its writes included (a cancel's refund, an item
exchange's price difference and gift card, a return's refund), is answered from the state, exactly and
consistently, without a model (the scripted backend, with nothing scripted, and the fake provider over HTTP, both
fail any model call); a broken precondition or a record deleted at run time gives the documented code. On a copy
of the world whose writes are declared guided (as retail's were before declarations computed), a guided call asks
the model with the declared parts fixed and rejects an answer that contradicts them."""

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
from simia.sim.world import Grounding, World, apply_patch
from simia.testing.fake_provider import FakeProvider

ROOT = Path(__file__).resolve().parents[3]
WORLD = load_world(ROOT / "tool_specs" / "retail")
STATE = WORLD.initial_state
ADDRESS = {"address1": "401 Congress Ave", "city": "Austin", "state": "TX", "country": "USA", "zip": "78701"}
EXCHANGE = {
    "order_id": "#W1001",
    "item_ids": ["I2001"],
    "new_item_ids": ["I2002"],
    "payment_method_id": "gift_card_7731",
}
RETURN = {"order_id": "#W1003", "item_ids": ["I2002"], "payment_method_id": "credit_card_9902"}
READS = [  # every declared read, and the record the state holds for it
    ("find_user_by_email", {"email": "mia.lee@example.com"}, {"user_id": "mia_lee_1021"}),
    ("find_user_by_email", {"email": " Mia.Lee@Example.com "}, {"user_id": "mia_lee_1021"}),  # as the real API
    ("get_user_details", {"user_id": "omar_haddad_3310"}, STATE["users"]["omar_haddad_3310"]),
    ("get_order_details", {"order_id": "#W1003"}, STATE["orders"]["#W1003"]),
    ("get_product_details", {"product_id": "P300"}, STATE["products"]["P300"]),
    (
        "list_products",
        {},
        {"products": [{"product_id": p["product_id"], "name": p["name"]} for p in STATE["products"].values()]},
    ),
]


GUIDED_DECLARATIONS: dict[str, dict[str, Any] | None] = {  # retail's writes as they were declared before they computed
    "cancel_pending_order": {
        "preconditions": [
            {"pointer": "/orders/{order_id}", "exists": True, "error": "order_not_found"},
            {"pointer": "/orders/{order_id}/status", "equals": "pending", "error": "order_not_pending"},
        ],
        "effects": [{"op": "replace", "path": "/orders/{order_id}/status", "value": "cancelled"}],
        "read": {"pointer": "/orders/{order_id}/status", "key": "status"},
        "mode": "guided",  # the refund (its amount, the payment_history entry) is the model's
    },
    "return_delivered_order_items": {
        "preconditions": [
            {"pointer": "/orders/{order_id}", "exists": True, "error": "order_not_found"},
            {"pointer": "/orders/{order_id}/status", "equals": "delivered", "error": "order_not_delivered"},
        ],
        "effects": [
            {"op": "replace", "path": "/orders/{order_id}/status", "value": "return requested"},
            {"op": "add", "path": "/orders/{order_id}/return_items", "value": "{item_ids}"},
        ],
        "read": {"pointer": "/orders/{order_id}/status", "key": "status"},
        "mode": "guided",  # the refund amount and the item and payment checks are the model's
    },
    "transfer_to_human_agent": None,  # undeclared: the model answers
}


def guided(world: World = WORLD) -> World:
    """`world` with its writes declared guided (and the transfer undeclared): the model answers them."""
    tools = []
    for tool in world.tools:
        if tool.name in GUIDED_DECLARATIONS:
            declared = GUIDED_DECLARATIONS[tool.name]
            grounding = Grounding.model_validate(declared) if declared is not None else None
            tool = tool.model_copy(update={"grounding": grounding})
        tools.append(tool)
    return world.model_copy(update={"tools": tools})


GUIDED = guided()


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


async def run(
    sim: Simulator, state: dict[str, Any], *calls: tuple[str, dict[str, Any]], world: World = WORLD
) -> list[Step]:
    steps = []
    for tool, arguments in calls:
        step = await sim.step(world, state, [], ToolCall(tool, arguments))
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
        ("modify_pending_order_items", {**EXCHANGE, "item_ids": ["I3001"]}, "item_not_in_order",
         "Error (item_not_in_order): an item id is not in the order"),
        ("modify_pending_order_items", {**EXCHANGE, "item_ids": ["I2001", "I2001"], "new_item_ids": ["I2002"] * 2},
         "item_not_in_order", "Error (item_not_in_order): an item id is not in the order"),  # #W1001 has one
        ("modify_pending_order_items", {**EXCHANGE, "new_item_ids": ["I2002", "I1002"]}, "item_not_in_order",
         "Error (item_not_in_order): an item id is not in the order"),  # not paired one to one
        ("modify_pending_order_items", {**EXCHANGE, "item_ids": ["I1001"], "new_item_ids": ["I1003"]},
         "variant_unavailable",
         "Error (variant_unavailable): a new item is not an available variant of the same product"),
        ("modify_pending_order_items", {**EXCHANGE, "item_ids": ["I1001"]}, "variant_unavailable",
         "Error (variant_unavailable): a new item is not an available variant of the same product"),  # a bottle
        ("return_delivered_order_items", {**RETURN, "item_ids": ["I3001"]}, "item_not_in_order",
         "Error (item_not_in_order): an item id is not in the order"),
        ("return_delivered_order_items", {**RETURN, "payment_method_id": "gift_card_7731"}, "invalid_payment_method",
         "Error (invalid_payment_method): the refund method is neither the original payment method nor a gift card "
         "of the user"),  # Mia's gift card, not Lena's
    ],
    ids=["cancel delivered", "return pending", "modify unknown", "unknown email", "unknown product",
         "exchange an item not in the order", "exchange an item twice", "exchange unpaired",
         "exchange for an unavailable variant", "exchange for another product", "return an item not in the order",
         "refund to another user's card"],
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


BOTTLE = {"item_id": "I2002", "product_id": "P200", "name": "Water Bottle",
          "options": {"capacity": "1000ml", "material": "steel"}, "price": 31.0}  # fmt: skip
WRITES = [  # every write, answered exactly: its output and its patch
    (
        "cancel_pending_order",
        {"order_id": "#W1004", "reason": "no longer needed"},
        {"order_id": "#W1004", "status": "cancelled", "refund_amount": 45.0},
        [
            {"op": "replace", "path": "/orders/#W1004/status", "value": "cancelled"},
            {"op": "add", "path": "/orders/#W1004/payment_history/-",
             "value": {"transaction_type": "refund", "amount": 45.0, "payment_method_id": "gift_card_7731"}},
        ],
    ),
    (
        "modify_pending_order_items",
        EXCHANGE,  # the 500ml bottle (24.00) for the 1000ml one (31.00), paid by Mia's gift card (40.00)
        {"order_id": "#W1001", "items": [STATE["orders"]["#W1001"]["items"][0], BOTTLE], "price_difference": 7.0},
        [
            {"op": "replace", "path": "/orders/#W1001/items", "value": [STATE["orders"]["#W1001"]["items"][0], BOTTLE]},
            {"op": "replace", "path": "/users/mia_lee_1021/payment_methods/gift_card_7731/balance", "value": 33.0},
            {"op": "add", "path": "/orders/#W1001/payment_history/-",
             "value": {"transaction_type": "payment", "amount": 7.0, "payment_method_id": "gift_card_7731"}},
        ],
    ),
    (
        "modify_pending_order_items",
        {"order_id": "#W1005", "item_ids": ["I1001"], "new_item_ids": ["I1002"], "payment_method_id": "paypal_5150"},
        {"order_id": "#W1005", "items": [{**STATE["orders"]["#W1005"]["items"][0], "item_id": "I1002",
                                          "options": {"color": "blue", "size": "L"}}], "price_difference": 0.0},
        [{"op": "replace", "path": "/orders/#W1005/items", "value": [{**STATE["orders"]["#W1005"]["items"][0],
          "item_id": "I1002", "options": {"color": "blue", "size": "L"}}]}],  # the same price: nothing to pay
    ),
    (
        "return_delivered_order_items",
        {**RETURN, "item_ids": ["I1002", "I2002"], "payment_method_id": "gift_card_1200"},
        {"order_id": "#W1003", "status": "return requested", "refund_amount": 50.99},
        [
            {"op": "replace", "path": "/orders/#W1003/status", "value": "return requested"},
            {"op": "add", "path": "/orders/#W1003/return_items", "value": ["I1002", "I2002"]},
        ],
    ),
    ("transfer_to_human_agent", {"summary": "price adjustment"}, {"transferred": True}, []),
]  # fmt: skip


def test_every_tool_of_the_shipped_retail_world_is_answered_exactly() -> None:
    assert [t.name for t in WORLD.tools if t.grounding is None or not t.grounding.exact] == []


@pytest.mark.parametrize(
    ("tool", "arguments", "output", "patch"), WRITES, ids=["cancel", "exchange", "even exchange", "return", "transfer"]
)
async def test_every_write_is_answered_from_the_state_with_no_model_call(
    no_model: Backend, tool: str, arguments: dict[str, Any], output: dict[str, Any], patch: list[dict[str, Any]]
) -> None:
    (step,) = await run(Simulator(no_model), STATE, (tool, arguments))
    assert (step.is_error, step.source, step.output, step.state_patch) == (False, "state", output, patch)
    assert step.state == apply_patch(STATE, patch, WORLD.state_schema)
    assert (step.model, step.attempts, step.usage.calls) == ("", 0, 0)


async def test_a_gift_card_pays_an_exchange_up_to_its_balance(no_model: Backend) -> None:
    lamp = "/products/P300/variants/I3002"
    exchange = {
        "order_id": "#W1004",
        "item_ids": ["I3001"],
        "new_item_ids": ["I3002"],
        "payment_method_id": "gift_card_7731",
    }
    available = {"op": "replace", "path": f"{lamp}/available", "value": True}
    costly = apply_patch(STATE, [available, {"op": "replace", "path": f"{lamp}/price", "value": 85.01}], None)
    (refused,) = await run(Simulator(no_model), costly, ("modify_pending_order_items", exchange))
    assert (refused.error_code, refused.state) == ("insufficient_gift_card_balance", costly)  # 40.01 > 40.00
    exact = apply_patch(costly, [{"op": "replace", "path": f"{lamp}/price", "value": 85.0}], None)
    (paid,) = await run(Simulator(no_model), exact, ("modify_pending_order_items", exchange))
    assert paid.output is not None and paid.output["price_difference"] == 40.0
    assert paid.state["users"]["mia_lee_1021"]["payment_methods"]["gift_card_7731"]["balance"] == 0.0


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
        world=GUIDED,
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
        Simulator(backend),
        STATE,
        ("cancel_pending_order", {"order_id": "#W1001", "reason": "ordered by mistake"}),
        world=GUIDED,
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
    (step,) = await run(
        Simulator(ScriptedBackend([refused])), STATE, ("return_delivered_order_items", arguments), world=GUIDED
    )
    assert (step.error_code, step.text, step.state, step.source) == (
        "item_not_in_order",
        "Error (item_not_in_order): I9 is not in #W1003.",
        STATE,
        "simulated",
    )


async def test_an_undeclared_tool_is_simulated_as_before() -> None:
    backend = ScriptedBackend([ok({"transferred": True})])
    (step,) = await run(
        Simulator(backend), STATE, ("transfer_to_human_agent", {"summary": "price adjustment"}), world=GUIDED
    )
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
    read = await sim.step(GUIDED, STATE, [], ToolCall("get_order_details", {"order_id": "#W1001"}), seed=1)
    first = await sim.step(GUIDED, STATE, [], call, seed=2)
    again = await sim.step(GUIDED, STATE, [], call, seed=2)
    assert (read.cached, first.cached, again.cached, len(backend.requests)) == (False, False, True, 1)
    assert again.state_patch == first.state_patch == CANCELLED and again.state == first.state
    with sqlite3.connect(tmp_path / "cache.db") as db:
        assert db.execute("SELECT count(*) FROM llm_cache").fetchone() == (1,)  # the guided answer only
