"""The answer schema is exactly the set of answers the simulator accepts for their shape, on every tool of the
shipped worlds and of a world imported from a real MCP server (the official memory server's tools); and each
backend's form of it is one that backend's API or grammar converter reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from simia.sim import World, load_world, load_worlds
from simia.sim.backends import ScriptedBackend
from simia.sim.backends._schema_forms import ANY_VALUE, grammar_form, object_rooted
from simia.sim.engine import Simulator, ToolCall, answer_schema
from simia.sim.world import ToolSpec
from simia.testing import schema_instance

ROOT = Path(__file__).resolve().parents[3]


def modelled(world: World) -> World:
    """`world` with every tool answered by the model (a state-grounded tool would not ask it)."""
    return world.model_copy(update={"tools": [t.model_copy(update={"grounding": None}) for t in world.tools]})


WORLDS = [
    *map(modelled, load_worlds([ROOT / "tool_specs"]).worlds.values()),
    modelled(load_world(ROOT / "tests" / "fixtures" / "imported" / "memory")),
]
TOOLS = [pytest.param(world, tool, id=f"{world.name}.{tool.name}") for world in WORLDS for tool in world.tools]


def valid_answers(world: World, tool: ToolSpec) -> list[dict[str, Any]]:
    """A success (an instance of the tool's output schema) and one error per code the tool may return."""
    output = schema_instance(tool.output_schema or {"type": "object"}, seed=tool.name)
    read_only = bool(tool.annotations and tool.annotations.get("readOnlyHint") is True)
    success = {"is_error": False, "output": output, **({} if read_only else {"state_patch": []})}
    errors = [{"is_error": True, "error_code": e.code, "message": "no"} for e in world.error_codes(tool)]
    return [success, *errors]


def full_envelopes(world: World, tool: ToolSpec) -> list[dict[str, Any]]:
    """The valid answers written with every member, as prompts before sim-5 asked (still accepted)."""
    success, error = valid_answers(world, tool)[:2]
    return [
        {"error_code": None, "message": "ok", "state_patch": [], **success},
        {"output": None, "state_patch": [], **error},
    ]


def shape_breaking(world: World, tool: ToolSpec) -> dict[str, dict[str, Any]]:
    """Answers the simulator rejects for their shape, each named by what is wrong (the embedded model wrote
    the first two on the memory server under the old schema)."""
    success, error = valid_answers(world, tool)[:2]
    writes = not (tool.annotations and tool.annotations.get("readOnlyHint") is True)  # else its patch is dropped
    unpointed = {"patch path not a JSON Pointer": {**success, "state_patch": [{"op": "add", "path": "x", "value": 1}]}}
    return {
        **(unpointed if writes else {}),
        "success without output": {**success, "output": None},
        "error without a code": {**error, "error_code": None},
        "error with a code it does not have": {**error, "error_code": "made_up"},
        "is_error not a boolean": {**success, "is_error": "false"},
        "output not an object": {**success, "output": [output for output in [success["output"]]]},
        "a success without its output": {k: v for k, v in success.items() if k != "output"},
        "an answer without is_error": {k: v for k, v in success.items() if k != "is_error"},
        "a member too many": {**success, "note": "extra"},
        "message not a string": {**success, "message": None},
        "patch not a list": {**success, "state_patch": {"op": "add", "path": "/x", "value": 1}},
        "patch operation without op": {**success, "state_patch": [{"path": "/x", "value": 1}]},
        "patch operation of an unknown kind": {**success, "state_patch": [{"op": "merge", "path": "/x"}]},
    }


async def simulated(world: World, tool: ToolSpec, answer: dict[str, Any]) -> tuple[bool, str]:
    """(whether the simulator accepted `answer` for a valid call of `tool`, why not)."""
    arguments = schema_instance(tool.input_schema, seed=tool.name)
    step = await Simulator(ScriptedBackend([answer]), max_attempts=1).step(
        world, world.initial_state, [], ToolCall(tool.name, arguments)
    )
    return step.error_kind != "infra", step.detail


def accepts(schema: dict[str, Any], answer: Any) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(answer)


@pytest.mark.parametrize(("world", "tool"), TOOLS)
async def test_every_answer_the_simulator_accepts_fits_the_schema(world: World, tool: ToolSpec) -> None:
    schema = answer_schema(world, tool)
    jsonschema.Draft202012Validator.check_schema(schema)
    for answer in valid_answers(world, tool):
        assert await simulated(world, tool, answer) == (True, "")
        assert accepts(schema, answer), answer
    for answer in full_envelopes(world, tool):  # members an outcome does not use are never asked for
        assert await simulated(world, tool, answer) == (True, "")
        assert not accepts(schema, answer), answer


@pytest.mark.parametrize(("world", "tool"), TOOLS)
async def test_every_answer_the_simulator_rejects_for_its_shape_breaks_the_schema(world: World, tool: ToolSpec) -> None:
    schema = answer_schema(world, tool)
    for what, answer in shape_breaking(world, tool).items():
        ok, detail = await simulated(world, tool, answer)
        assert not ok and "invalid after 1 attempts" in detail, what
        assert not accepts(schema, answer), what


@pytest.mark.parametrize(("world", "tool"), TOOLS)
def test_a_success_has_no_code_and_a_read_only_tool_or_an_error_no_patch(world: World, tool: ToolSpec) -> None:
    # The simulator tolerates these (it ignores the code, drops the patch); the schema asks for the clean form.
    schema = answer_schema(world, tool)
    success, error = valid_answers(world, tool)[:2]
    operation = [{"op": "add", "path": "/note", "value": "x"}]
    read_only = bool(tool.annotations and tool.annotations.get("readOnlyHint") is True)
    assert accepts(schema, {**success, "state_patch": operation}) is not read_only
    assert not accepts(schema, {**error, "state_patch": operation})
    assert not accepts(schema, {**success, "error_code": error["error_code"]})


def test_an_operation_needs_the_members_of_its_kind() -> None:
    world = load_world(ROOT / "tool_specs" / "retail")
    tool = world.tool("cancel_pending_order")
    assert tool is not None
    success = valid_answers(world, tool)[0]
    operations = {
        "add without a value": ({"op": "add", "path": "/x"}, False),
        "replace with a value of any type": ({"op": "replace", "path": "/x", "value": "cancelled"}, True),
        "remove": ({"op": "remove", "path": "/x"}, True),
        "move without from": ({"op": "move", "path": "/x"}, False),
        "copy": ({"op": "copy", "from": "/y", "path": "/x"}, True),
    }
    schema = answer_schema(world, tool)
    assert {what: accepts(schema, {**success, "state_patch": [op]}) for what, (op, _) in operations.items()} == {
        what: ok for what, (_, ok) in operations.items()
    }


def test_an_output_schemas_definitions_resolve_from_the_answers_root() -> None:
    world = load_world(ROOT / "tool_specs" / "mock")
    defs = {"Item": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}
    output = {"type": "object", "properties": {"item": {"$ref": "#/$defs/Item"}}, "required": ["item"], "$defs": defs}
    tool = world.tools[0].model_copy(update={"output_schema": output})
    schema = answer_schema(world, tool)
    assert schema["$defs"] == defs
    success = {"is_error": False}  # list_items is read-only: no state_patch
    assert accepts(schema, {**success, "output": {"item": {"name": "apple"}}})
    assert not accepts(schema, {**success, "output": {"item": {"qty": 1}}})


def test_an_output_schema_referring_into_itself_keeps_its_meaning_inside_the_answer() -> None:
    """`#` and `#/properties/a` in an outputSchema name the tool's result, not the answer envelope around it."""
    world = load_world(ROOT / "tool_specs" / "mock")
    defs = {"Tag": {"type": "string", "enum": ["x", "y"]}}
    output = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "enum": ["x", "y"]},
            "b": {"$ref": "#/properties/a"},
            "next": {"$ref": "#"},
            "tag": {"$ref": "#/$defs/Tag"},
            "note": {"const": {"$ref": "#"}},  # data, not a reference
            "enum": {"$ref": "#/properties/a"},  # a property named like a keyword is a schema
        },
        "required": ["a", "b"],
        "$defs": defs,
    }
    tool = world.tools[0].model_copy(update={"output_schema": output})
    schema = answer_schema(world, tool)
    success = {"is_error": False}
    assert accepts(schema, {**success, "output": {"a": "x", "b": "y", "next": {"a": "y", "b": "x"}, "tag": "x"}})
    assert not accepts(schema, {**success, "output": {"a": "x", "b": "z"}})  # b is an a
    assert not accepts(schema, {**success, "output": {"a": "x", "b": "y", "next": {"is_error": False}}})
    assert not accepts(schema, {**success, "output": {"a": "x", "b": "y", "tag": "z"}})
    assert not accepts(schema, {**success, "output": {"a": "x", "b": "y", "enum": "z"}})
    assert accepts(schema, {**success, "output": {"a": "x", "b": "y", "note": {"$ref": "#"}}})
    rooted = object_rooted(schema)
    assert accepts(rooted, {**success, "output": {"a": "x", "b": "y"}})
    assert not accepts(rooted, {**success, "output": {"a": "x", "b": "z"}})


@pytest.mark.parametrize(("world", "tool"), TOOLS)
def test_openai_and_anthropic_get_an_object_at_the_root_that_still_accepts_every_valid_answer(
    world: World, tool: ToolSpec
) -> None:
    rooted = object_rooted(answer_schema(world, tool))
    assert rooted["type"] == "object" and not {"anyOf", "oneOf", "allOf"} & set(rooted)
    assert rooted["required"] == ["is_error"]  # the one member every outcome has
    assert all(accepts(rooted, answer) for answer in valid_answers(world, tool))


@pytest.mark.parametrize(("world", "tool"), TOOLS)
def test_llama_cpp_reads_the_grammar_form_of_every_answer_schema(world: World, tool: ToolSpec) -> None:
    grammar = pytest.importorskip("llama_cpp.llama_grammar", reason="needs the `local` extra")
    form = grammar_form(answer_schema(world, tool))
    assert "root ::= " in grammar.json_schema_to_gbnf(json.dumps(form))  # converted: no fallback to any JSON
    assert all(accepts(form, answer) for answer in valid_answers(world, tool) if len(json.dumps(answer)) < 200)


def test_the_grammar_form_keeps_what_llama_cpps_converter_would_drop() -> None:
    assert grammar_form({}) == grammar_form({"description": "anything"}) == grammar_form(ANY_VALUE)
    assert grammar_form({"type": ["string", "null"], "enum": ["a", None]}) == {
        "anyOf": [{"type": "string", "enum": ["a", None]}, {"type": "null", "enum": ["a", None]}]
    }
    wildcard = '[^"\\\\]'  # any character but a quote or a backslash, which would end the JSON string
    assert grammar_form({"type": "string", "pattern": "[0-9]+"}) == {  # repetitions capped, as strings are
        "type": "string",
        "pattern": f"^{wildcard}{{0,64}}([0-9]{{1,64}}){wildcard}{{0,64}}$",
    }
    assert grammar_form({"type": "string", "pattern": "^#W[0-9]+$"}) == {"type": "string", "pattern": "^#W[0-9]{1,64}$"}
    assert grammar_form({"type": "string", "pattern": "^[*+]\\*(a|b)*$"})["pattern"] == "^[*+]\\*(a|b){0,64}$"
    assert grammar_form({"type": "object", "required": ["id"]})["properties"] == {"id": grammar_form(ANY_VALUE)}
    assert grammar_form({"allOf": [{"type": "string"}, {"minLength": 2}]}) == {
        "type": "string",
        "minLength": 2,
        "maxLength": 64,
    }
    assert grammar_form({"type": "array", "items": {"type": "integer"}, "minItems": 9}) == {
        "type": "array",
        "items": {"type": "integer"},
        "minItems": 9,
        "maxItems": 9,
    }


RETAIL = load_world(ROOT / "tool_specs" / "retail")
ROOTS = tuple(RETAIL.initial_state)  # users, orders, products


def patched(*operations: dict[str, Any], output: dict[str, Any] | None = None) -> dict[str, Any]:
    """A success with these operations (by default of retail's `cancel_pending_order`)."""
    output = output or {"order_id": "#W1001", "status": "cancelled", "refund_amount": 19.99}
    return {"is_error": False, "output": output, "state_patch": list(operations)}


@pytest.mark.parametrize(
    ("operation", "applies"),
    [
        ({"op": "replace", "path": "/orders/#W1001/status", "value": "cancelled"}, True),
        ({"op": "add", "path": "/returns", "value": {}}, True),  # a new top-level member
        (
            {
                "op": "add",
                "path": "/orders/#W1009",
                "value": {**RETAIL.initial_state["orders"]["#W1001"], "order_id": "#W1009"},
            },
            True,
        ),
        ({"op": "copy", "from": "/users/mia_lee_1021", "path": "/archived"}, True),
        ({"op": "replace", "path": "", "value": dict(RETAIL.initial_state)}, True),  # the whole state, by an object
        ({"op": "add", "path": "/returns/R1", "value": {}}, False),  # under a member the state lacks
        ({"op": "remove", "path": "/returns"}, False),
        ({"op": "replace", "path": "//x", "value": 1}, False),  # an empty first token: no such member
        ({"op": "move", "from": "/returns", "path": "/orders/x"}, False),
        ({"op": "remove", "path": ""}, False),  # the whole state is never removed
        ({"op": "replace", "path": "", "value": 5}, False),  # nor replaced by a non-object
    ],
)
async def test_on_a_known_state_the_schema_keeps_exactly_the_patch_paths_that_apply(
    operation: dict[str, Any], applies: bool
) -> None:
    tool = RETAIL.tool("cancel_pending_order")
    assert tool is not None
    answer = patched(operation)
    step = await Simulator(ScriptedBackend([answer]), max_attempts=1).step(
        modelled(RETAIL),
        RETAIL.initial_state,
        [],
        ToolCall(tool.name, {"order_id": "#W1001", "reason": "ordered by mistake"}),
    )
    assert (step.error_kind != "infra") is applies, step.detail
    assert accepts(answer_schema(RETAIL, tool, ROOTS), answer) is applies
    assert accepts(answer_schema(RETAIL, tool), answer)  # the generic pointer, without the state, is looser


def test_a_member_built_and_filled_in_one_patch_is_written_as_one_add_instead() -> None:
    # The one narrowing: both patches apply; the schema keeps the second, which makes the same change.
    tool = RETAIL.tool("cancel_pending_order")
    assert tool is not None
    schema = answer_schema(RETAIL, tool, ROOTS)
    two = patched({"op": "add", "path": "/returns", "value": {}}, {"op": "add", "path": "/returns/R1", "value": 1})
    assert not accepts(schema, two)
    assert accepts(schema, patched({"op": "add", "path": "/returns", "value": {"R1": 1}}))


def test_an_empty_state_can_only_be_added_to() -> None:
    world = modelled(load_world(ROOT / "tests" / "fixtures" / "imported" / "memory"))
    tool = world.tool("create_entities")
    assert tool is not None and world.initial_state == {}
    schema = answer_schema(world, tool, ())
    output = schema_instance(tool.output_schema or {"type": "object"}, seed=tool.name)
    assert accepts(schema, patched({"op": "add", "path": "/entities", "value": {"Ada": {}}}, output=output))
    assert not accepts(schema, patched({"op": "add", "path": "/entities/Ada", "value": {}}, output=output))
    assert not accepts(schema, patched({"op": "remove", "path": "/entities"}, output=output))
    grammar = pytest.importorskip("llama_cpp.llama_grammar", reason="needs the `local` extra")
    assert "root ::= " in grammar.json_schema_to_gbnf(json.dumps(grammar_form(schema)))


async def test_the_simulator_sends_the_schema_of_the_states_members() -> None:
    tool = RETAIL.tool("cancel_pending_order")
    assert tool is not None
    backend = ScriptedBackend([patched({"op": "add", "path": "/returns", "value": {}})])
    call = ToolCall(tool.name, {"order_id": "#W1001", "reason": "ordered by mistake"})
    step = await Simulator(backend, max_attempts=1).step(modelled(RETAIL), RETAIL.initial_state, [], call)
    assert step.error_kind is None
    assert backend.requests[-1].schema == answer_schema(RETAIL, tool, ROOTS)


def test_keys_with_regex_and_pointer_metacharacters_are_matched_literally() -> None:
    tool = RETAIL.tool("cancel_pending_order")
    assert tool is not None
    schema = answer_schema(RETAIL, tool, ("a.b", "we~ird/key", "x|y"))
    assert accepts(schema, patched({"op": "remove", "path": "/we~0ird~1key/1"}))
    assert accepts(schema, patched({"op": "remove", "path": "/a.b"}))
    assert not accepts(schema, patched({"op": "remove", "path": "/aXb"}))
    assert not accepts(schema, patched({"op": "remove", "path": "/x"}))
