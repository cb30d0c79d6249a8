"""Declarations that compute (JSONata in a tool's grounding): sums, values read from the state, one operation per
element, sorting, "or", generated ids and bare outputs are answered exactly with no model (the scripted backend has
nothing scripted: any model call fails the test); a bad expression fails the world's load naming the tool, the
field and the fix; a failing one at run time is the declared code or an infra error, and never changes the state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from simia.cli import main
from simia.sim.backends import ScriptedBackend
from simia.sim.engine import Simulator, Step, ToolCall
from simia.sim.world import evaluate, load_world, load_worlds

STATE = {
    "users": {
        "ana_1": {
            "email": "Ana@Example.com",
            "payment_methods": {
                "gift_card_1": {"source": "gift_card", "balance": 10.0},
                "card_1": {"source": "credit_card"},
            },
        },
    },
    "orders": {
        "#W1": {
            "user_id": "ana_1",
            "status": "pending",
            "items": [{"item_id": "i2", "price": 30.25}, {"item_id": "i1", "price": 19.75}],
            "payment_history": [
                {"transaction_type": "payment", "amount": 20.5, "payment_method_id": "gift_card_1"},
                {"transaction_type": "payment", "amount": 29.5, "payment_method_id": "card_1"},
            ],
        },
        "#W2": {"user_id": "ana_1", "status": "delivered", "items": [], "payment_history": []},
    },
    "entities": {},
    "notes": {},
}

ORDER_ERRORS = [
    {"code": "order_not_found", "when": "no such order", "text": "Error: Order not found"},
    {"code": "not_cancellable", "when": "the order is neither pending nor processing"},
]
TOOLS: list[dict[str, Any]] = [
    {
        "name": "find_user_id_by_email",
        "inputSchema": {"type": "object", "required": ["email"], "properties": {"email": {"type": "string"}}},
        "annotations": {"readOnlyHint": True},
        "errors": [{"code": "user_not_found", "when": "no user has this email", "text": "Error: User not found"}],
        "grounding": {
            "read": {
                "expr": "$keys($state.users)[$lowercase($lookup($state.users, $).email) = $lowercase($args.email)][0]",
                "missing": "user_not_found",
            }
        },
    },
    {
        "name": "cancel_order",
        "inputSchema": {"type": "object", "required": ["order_id"], "properties": {"order_id": {"type": "string"}}},
        "errors": ORDER_ERRORS,
        "grounding": {
            "let": {"order": "$lookup($state.orders, $args.order_id)"},
            "preconditions": [
                {"expr": "$exists($order)", "error": "order_not_found"},
                {
                    "expr": "$order.status = 'pending' or $order.status = 'processing'",
                    "error": "not_cancellable",
                    "message": "'Error: a ' & $order.status & ' order cannot be cancelled'",
                },
            ],
            "effects": [
                {"op": "replace", "path": "/orders/{order_id}/status", "value": "cancelled"},
                {
                    "expr": '$order.payment_history.{"op": "add", "path": $pointer("orders", $args.order_id, '
                    '"payment_history", "-"), "value": {"transaction_type": "refund", "amount": amount, '
                    '"payment_method_id": payment_method_id}}'
                },
                {
                    "expr": "$order.payment_history[$lookup($lookup($state.users, $order.user_id).payment_methods, "
                    'payment_method_id).source = "gift_card"].{"op": "replace", "path": $pointer("users", '
                    '$order.user_id, "payment_methods", payment_method_id, "balance"), "value": '
                    "$round($lookup($lookup($state.users, $order.user_id).payment_methods, payment_method_id)"
                    ".balance + amount, 2)}"
                },
            ],
            "read": {
                "expr": '$merge([$lookup($state.orders, $args.order_id), {"refund": '
                '$sum($order.payment_history.amount), "items": [$sort($order.items, function($a, $b) '
                "{$a.item_id > $b.item_id})]}])"
            },
        },
    },
    {
        "name": "create_entities",
        "inputSchema": {
            "type": "object",
            "required": ["entities"],
            "properties": {
                "entities": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "type"],
                        "properties": {"name": {"type": "string"}, "type": {"type": "string"}},
                    },
                }
            },
        },
        "grounding": {
            "effects": [
                {
                    "expr": '[$args.entities[$not($exists($lookup($state.entities, name)))].{"op": "add", '
                    '"path": $pointer("entities", name), "value": {"name": name, "entityType": type}}]'
                }
            ],
            "read": {"expr": '{"created": [$args.entities[$not($exists($lookup($before.entities, name)))].name]}'},
        },
    },
    {
        "name": "create_note",
        "inputSchema": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}},
        "outputSchema": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
        "grounding": {
            "let": {"id": '$newid("N-", 6, $state.notes)'},
            "effects": [
                {"expr": '{"op": "add", "path": $pointer("notes", $id), "value": {"id": $id, "text": $args.text}}'}
            ],
            "read": {"expr": "$lookup($state.notes, $id)"},
        },
    },
    {
        "name": "split_bill",
        "inputSchema": {"type": "object", "required": ["people"], "properties": {"people": {"type": "integer"}}},
        "annotations": {"readOnlyHint": True},
        "grounding": {"read": {"expr": "$sum($state.orders.*.items.price) / $args.people"}},
    },
]


def shop(tmp_path: Path, tools: list[dict[str, Any]] = TOOLS) -> Path:
    folder = tmp_path / "shop"
    folder.mkdir(exist_ok=True)
    (folder / "world.yaml").write_text(yaml.safe_dump({"name": "shop", "tools": tools}, sort_keys=False))
    (folder / "state.json").write_text(json.dumps(STATE))
    return folder


async def call(tmp_path: Path, *calls: tuple[str, dict[str, Any]], seed: int | None = 7) -> list[Step]:
    world = load_world(shop(tmp_path))
    sim = Simulator(backend=ScriptedBackend([]))  # nothing scripted: a model call would be an infra error
    state: dict[str, Any] = world.initial_state
    steps = []
    for tool, arguments in calls:
        step = await sim.step(world, state, [], ToolCall(tool, arguments), seed=seed)
        assert step.error_kind != "infra", step.detail
        steps.append(step)
        state = step.state
    return steps


async def test_a_bare_string_answer_is_found_case_insensitively_and_sent_as_its_text(tmp_path: Path) -> None:
    found, missing = await call(
        tmp_path, ("find_user_id_by_email", {"email": "ana@EXAMPLE.com"}), ("find_user_id_by_email", {"email": "x"})
    )
    assert (found.output, found.text, found.is_error, found.model) == ("ana_1", "ana_1", False, "")
    assert (missing.is_error, missing.error_code, missing.text) == (True, "user_not_found", "Error: User not found")


async def test_a_cancel_refunds_each_payment_credits_the_gift_card_and_answers_sorted_items(tmp_path: Path) -> None:
    (step,) = await call(tmp_path, ("cancel_order", {"order_id": "#W1"}))
    order = step.state["orders"]["#W1"]
    assert order["status"] == "cancelled"
    assert order["payment_history"][2:] == [
        {"transaction_type": "refund", "amount": 20.5, "payment_method_id": "gift_card_1"},
        {"transaction_type": "refund", "amount": 29.5, "payment_method_id": "card_1"},
    ]
    assert step.state["users"]["ana_1"]["payment_methods"]["gift_card_1"]["balance"] == 30.5
    assert step.output["refund"] == 50.0 and isinstance(step.output["refund"], float)  # Python's sum: 50.0
    assert [i["item_id"] for i in step.output["items"]] == ["i1", "i2"]
    assert '"refund": 50.0' in step.text
    assert STATE["orders"]["#W1"]["status"] == "pending"  # the world's state is not the episode's


async def test_a_precondition_that_says_or_and_its_computed_message(tmp_path: Path) -> None:
    delivered, missing = await call(
        tmp_path, ("cancel_order", {"order_id": "#W2"}), ("cancel_order", {"order_id": "#W9"})
    )
    assert (delivered.error_code, delivered.text) == ("not_cancellable", "Error: a delivered order cannot be cancelled")
    assert (missing.error_code, missing.text) == ("order_not_found", "Error: Order not found")
    assert delivered.state_patch == [] and missing.state_patch == []


async def test_a_refusal_keeps_what_its_precondition_declares_the_call_wrote_before_failing(tmp_path: Path) -> None:
    """A real API that fails half-way keeps what it wrote (tau2's book_reservation): the precondition's `effects`
    are applied although the answer is its error; a refusal without them, and one whose effects fail, write
    nothing."""
    half_way = {
        "let": {"order": "$lookup($state.orders, $args.order_id)"},
        "preconditions": [
            {
                "expr": "$order.status = 'pending'",
                "error": "not_cancellable",
                "message": "'Error: ' & $order.status",
                "effects": [{"op": "replace", "path": "/orders/{order_id}/status", "value": "stuck"}],
            },
            {"expr": "$exists($order.nothing)", "error": "not_cancellable", "effects": [{"expr": "1 / 0"}]},
        ],
        "read": {"expr": "'never'"},
    }
    tools = [
        {"name": "half_way", "inputSchema": TOOLS[1]["inputSchema"], "errors": ORDER_ERRORS, "grounding": half_way}
    ]
    world = load_world(shop(tmp_path, tools))
    sim = Simulator(backend=ScriptedBackend([]))
    kept = await sim.step(world, world.initial_state, [], ToolCall("half_way", {"order_id": "#W2"}))
    broken = await sim.step(world, world.initial_state, [], ToolCall("half_way", {"order_id": "#W1"}))
    assert (kept.is_error, kept.error_code, kept.text) == (True, "not_cancellable", "Error: delivered")
    assert kept.state_patch == [{"op": "replace", "path": "/orders/#W2/status", "value": "stuck"}]
    assert kept.state["orders"]["#W2"]["status"] == "stuck"
    assert (broken.error_kind, broken.error_code, broken.state_patch) == ("infra", "invalid_simulation", [])
    assert "precondition's effects failed" in broken.detail and broken.state is world.initial_state


async def test_one_record_per_array_element_and_a_later_call_sees_them(tmp_path: Path) -> None:
    entities = [{"name": "Ada", "type": "person"}, {"name": "Bletchley", "type": "place"}]
    first, again = await call(
        tmp_path,
        ("create_entities", {"entities": entities}),
        ("create_entities", {"entities": [*entities, {"name": "Turing", "type": "person"}]}),
    )
    assert first.output == {"created": ["Ada", "Bletchley"]}
    assert again.output == {"created": ["Turing"]}
    assert again.state["entities"] == {
        "Ada": {"name": "Ada", "entityType": "person"},
        "Bletchley": {"name": "Bletchley", "entityType": "place"},
        "Turing": {"name": "Turing", "entityType": "person"},
    }


async def test_a_generated_id_is_shaped_fresh_and_the_same_for_the_same_seed_and_step(tmp_path: Path) -> None:
    one, two = await call(tmp_path, ("create_note", {"text": "a"}), ("create_note", {"text": "a"}))
    assert one.output["id"].startswith("N-") and len(one.output["id"]) == 8 and one.output["id"][2:].isdigit()
    assert one.output["id"] != two.output["id"]
    assert set(two.state["notes"]) == {one.output["id"], two.output["id"]}
    (replayed,) = await call(tmp_path, ("create_note", {"text": "a"}))
    assert replayed.output == one.output
    (other_seed,) = await call(tmp_path, ("create_note", {"text": "a"}), seed=8)
    assert other_seed.output != one.output


async def test_a_number_answer_and_a_division_by_zero_is_an_infra_error_naming_the_expression(tmp_path: Path) -> None:
    world = load_world(shop(tmp_path))
    sim = Simulator(backend=ScriptedBackend([]))
    half = await sim.step(world, world.initial_state, [], ToolCall("split_bill", {"people": 2}))
    assert (half.output, half.text) == (25.0, "25.0")
    zero = await sim.step(world, world.initial_state, [], ToolCall("split_bill", {"people": 0}))
    assert (zero.is_error, zero.error_kind, zero.error_code) == (True, "infra", "invalid_simulation")
    assert "divides by zero" in zero.detail and zero.state is world.initial_state


async def test_an_effect_expression_that_fails_changes_nothing(tmp_path: Path) -> None:
    tools = [
        {
            "name": "bad_write",
            "inputSchema": {"type": "object", "properties": {}},
            "grounding": {
                "effects": [
                    {"op": "replace", "path": "/orders/#W1/status", "value": "cancelled"},
                    {"expr": '{"op": "add", "path": "/notes/x", "value": 1 / 0}'},
                ],
                "read": {"expr": '{"ok": true}'},
            },
        },
        {
            "name": "not_an_op",
            "inputSchema": {"type": "object", "properties": {}},
            "grounding": {"effects": [{"expr": '{"path": "/notes/x"}'}], "read": {"expr": '{"ok": true}'}},
        },
        {
            "name": "runaway",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"readOnlyHint": True},
            "grounding": {"read": {"expr": "($f := function($n) { 1 + $f($n + 1) }; $f(0))"}},
        },
    ]
    world = load_world(shop(tmp_path, tools))
    sim = Simulator(backend=ScriptedBackend([]))
    for name, why in [
        ("bad_write", "divides by zero"),
        ("not_an_op", "not an RFC 6902 operation"),
        ("runaway", "deeper"),
    ]:
        step = await sim.step(world, world.initial_state, [], ToolCall(name, {}))
        assert (step.error_kind, step.state, step.state_patch) == ("infra", world.initial_state, [])
        assert why in step.detail


@pytest.mark.parametrize(
    ("grounding", "path", "message", "hint"),
    [
        (
            {"read": {"expr": "$lookup($state.orders, $args.order_id"}},
            "$.tools[0].grounding.read.expr",
            "tool 'look': the JSONata expression does not parse: ",
            "see docs/worlds.md#declarations-that-compute",
        ),
        (
            {"read": {"expr": "$lookup($state.orders, $args.order)"}},
            "$.tools[0].grounding.read.expr",
            "tool 'look': $args.order names no argument of the tool's inputSchema",
            "did you mean $args.order_id?",
        ),
        ({"let": {"state": "1"}, "read": {"expr": "1"}}, "$.tools[0].grounding", "let name 'state' is one simia", None),
        (
            {"preconditions": [{"expr": "true", "pointer": "/orders", "error": "not_found"}]},
            "$.tools[0].grounding.preconditions[0]",
            "an expr precondition takes no pointer",
            None,
        ),
        (
            {"effects": [{"expr": "1 +"}]},
            "$.tools[0].grounding.effects[0].expr",
            "tool 'look': the JSONata expression does not parse: ",
            None,
        ),
    ],
)
def test_a_bad_expression_fails_the_load_naming_the_tool_field_and_fix(
    tmp_path: Path, grounding: dict[str, Any], path: str, message: str, hint: str | None
) -> None:
    tool = {
        "name": "look",
        "inputSchema": {"type": "object", "required": ["order_id"], "properties": {"order_id": {"type": "string"}}},
        "grounding": grounding,
    }
    report = load_worlds([shop(tmp_path, [tool])])
    assert not report.worlds
    (error,) = report.errors
    (issue,) = error.issues
    assert (Path(issue.file).name, issue.path) == ("world.yaml", path)
    assert message in issue.message
    if hint is not None:
        assert issue.hint == hint
    assert main(["validate", str(tmp_path / "shop")]) != 0


def test_the_computing_world_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(shop(tmp_path))]) == 0


def test_a_map_building_arrays_and_objects_over_many_items_is_not_a_runaway_recursion() -> None:
    # JSONata leaves a frame flag set after building an array or object; the depth bound must not count it
    assert evaluate('$count($map([1..250], function($i) { [1, {"a": $i, "b": 2}] }))', {}) == 250
