"""`schema_instance` builds a valid instance of any schema the worlds use, the same for the same seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from simia.sim import load_world, load_worlds
from simia.sim.engine import answer_schema
from simia.sim.schema import validate_instance
from simia.testing import schema_answer, schema_instance

ROOT = Path(__file__).resolve().parents[2]
WORLDS = [*load_worlds([ROOT / "tool_specs"]).worlds.values(), load_world(ROOT / "tests/fixtures/imported/memory")]
SCHEMAS = [
    pytest.param(schema, id=f"{world.name}.{tool.name}.{kind}")
    for world in WORLDS
    for tool in world.tools
    for kind, schema in (("input", tool.input_schema), ("output", tool.output_schema), ("answer", None))
    if kind != "output" or schema
    for schema in [schema if kind != "answer" else answer_schema(world, tool)]
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_every_schema_of_the_worlds_gets_a_valid_instance(schema: dict[str, Any]) -> None:
    assert validate_instance(schema, schema_instance(schema, seed=7)) == []


def test_an_instance_is_the_same_for_the_same_seed_and_respects_each_keyword() -> None:
    schema = {
        "type": "object",
        "properties": {
            "kind": {"enum": ["a", "b", "c"]},
            "fixed": {"const": {"x": [1]}},
            "either": {"oneOf": [{"type": "integer", "minimum": 3}, {"type": "integer", "maximum": 5}]},
            "count": {"type": "integer", "exclusiveMinimum": 10, "maximum": 12},
            "share": {"type": "number", "minimum": 0.25, "maximum": 0.5},
            "step": {"type": "integer", "minimum": 1, "maximum": 40, "multipleOf": 7},
            "id": {"type": "string", "pattern": "^#W[0-9]{4}$"},
            "code": {"type": "string", "pattern": "[A-Z]{3}-(x|y)"},
            "name": {"type": "string", "minLength": 30, "maxLength": 31},
            "when": {"type": "string", "format": "date-time"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "minItems": 2},
            "maybe": {"type": ["null", "string"]},
            "optional": {"type": "string"},
        },
        "required": [
            "kind",
            "fixed",
            "either",
            "count",
            "share",
            "step",
            "id",
            "code",
            "name",
            "when",
            "tags",
            "maybe",
        ],
        "additionalProperties": False,
    }
    value = schema_instance(schema, seed=1)
    assert value == schema_instance(schema, seed=1)
    assert validate_instance(schema, value) == []
    assert set(value) == set(schema["required"]) and value["maybe"] is None and value["fixed"] == {"x": [1]}
    assert [schema_instance(schema, seed=s)["kind"] for s in range(20)].count("a") not in (0, 20)  # a seeded choice


def test_a_schema_it_cannot_satisfy_is_named_not_answered_wrongly() -> None:
    with pytest.raises(ValueError, match="could not build an instance of the schema"):
        schema_instance({"type": "string", "not": {"type": "string"}})


def test_the_answer_function_answers_each_request_schema_and_the_tool_an_anthropic_request_forces() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 1}}, "required": ["n"]}
    answer = schema_answer(seed=3)
    openai = {"messages": [{"role": "user", "content": "hi"}], "response_format": {"json_schema": {"schema": schema}}}
    anthropic = {
        "tools": [{"name": "respond", "input_schema": schema}],
        "tool_choice": {"type": "tool", "name": "respond"},
    }
    assert answer(openai) == answer(anthropic) == {"n": 1}
    assert answer({"messages": [], "tools": [{"type": "function"}]}) == {"message": "", "tool_calls": []}
