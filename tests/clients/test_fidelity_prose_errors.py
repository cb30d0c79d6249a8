"""A real server that answers its errors in prose (tau2-bench: "Error: Order not found") is scored by the texts and
patterns its world maps to codes: the same text names the same code on both sides, and a text no code claims
names none (a server naming the code itself still maps, as before)."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from simia.clients.fidelity.compare import compare, real_answer
from simia.sim.engine import Step, ToolCall
from simia.sim.world import ToolErrorSpec, ToolSpec, World

TOOL = ToolSpec.model_validate(
    {
        "name": "get_order_details",
        "inputSchema": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        "errors": [
            {"code": "order_not_found", "when": "no such order", "text": "Error: Order not found"},
            {"code": "item_not_found", "when": "an item is not in the order", "pattern": r"^Error: Item \S+ not found"},
            {"code": "user_not_found", "when": "no such user"},
        ],
    }
)
WORLD = World(name="shop", tools=[TOOL])


def error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def test_prose_errors_map_to_their_codes_by_text_pattern_or_name() -> None:
    assert [
        real_answer(error(text), TOOL, WORLD).code
        for text in [
            "Error: Order not found",
            "Error: Item 1008292230 not found",
            "user_not_found: no such user",
            "Error: Non-pending order cannot be cancelled",
        ]
    ] == ["order_not_found", "item_not_found", "user_not_found", None]


def step(**fields: Any) -> Step:
    return Step("get_order_details", {"order_id": "#W9"}, None, "", True, {}, **fields)


def test_a_simulated_error_agrees_with_a_prose_one_of_its_code_and_not_with_another() -> None:
    real = real_answer(error("Error: Order not found"), TOOL, WORLD)
    call = ToolCall("get_order_details", {"order_id": "#W9"})
    same = compare(0, call, TOOL, real, step(error_code="order_not_found", error_kind="agent"))
    other = compare(0, call, TOOL, real, step(error_code="user_not_found", error_kind="agent"))
    assert (same.code_agrees, same.agreement, other.code_agrees, other.agreement) == (True, 1.0, False, 0.0)


def test_a_bare_string_answer_agrees_with_a_text_only_real_one() -> None:
    real = real_answer(types.CallToolResult(content=[types.TextContent(type="text", text="ana_1")]), TOOL, WORLD)
    answered = Step("get_order_details", {}, "ana_1", "ana_1", False, {})
    assert compare(0, ToolCall("get_order_details", {}), TOOL, real, answered).agreement == 1.0


def test_an_error_pattern_that_is_not_a_regular_expression_is_refused() -> None:
    with pytest.raises(ValueError, match="pattern is not a regular expression"):
        ToolErrorSpec(code="x", when="y", pattern="(")
