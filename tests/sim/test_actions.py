"""The structured action: its schema from tools, a tool-calling conversation as plain turns, the answer read back."""

from __future__ import annotations

import json

import mcp_types as types
from simia.sim.backends.actions import FunctionTool, action_messages, action_schema, read_action

PARAMETERS = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "properties": {}}
OPENAI_TOOL = {"type": "function", "function": {"name": "list_items", "description": "List.", "parameters": PARAMETERS}}


def test_the_schema_is_the_same_from_mcp_tools_and_openai_function_tools() -> None:
    mcp_tool = types.Tool(name="list_items", description="List.", input_schema=PARAMETERS)
    schema = action_schema([mcp_tool])
    assert schema == action_schema([FunctionTool.from_openai(OPENAI_TOOL)])
    assert schema["properties"]["tool_calls"]["items"]["anyOf"] == [
        {
            "type": "object",
            "properties": {"name": {"const": "list_items"}, "arguments": {"type": "object", "properties": {}}},
            "required": ["name", "arguments"],
        }
    ]


def test_a_tool_calling_conversation_becomes_plain_turns() -> None:
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "list_items", "arguments": "{}"}},
        {"id": "call_2", "type": "function", "function": {"name": "get_item", "arguments": '{"name": "milk"}'}},
    ]
    messages = [
        {"role": "system", "content": "Be helpful."},
        {"role": "user", "content": "How much milk?"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": '["milk"]'},
        {"role": "tool", "tool_call_id": "call_2", "content": '{"qty": 2}'},
        {"role": "assistant", "content": "Two."},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
    ]
    tools = [FunctionTool.from_openai(OPENAI_TOOL)]
    system, *turns = action_messages(messages, tools)
    assert system["role"] == "system" and system["content"].startswith("Be helpful.\n\n# Tools\n- list_items(")
    assert turns == [
        {"role": "user", "content": "How much milk?"},
        {
            "role": "assistant",
            "content": json.dumps(
                {
                    "message": "",
                    "tool_calls": [
                        {"name": "list_items", "arguments": {}},
                        {"name": "get_item", "arguments": {"name": "milk"}},
                    ],
                }
            ),
        },
        {"role": "user", "content": 'Result of call_1 list_items: ["milk"]\nResult of call_2 get_item: {"qty": 2}'},
        {"role": "assistant", "content": '{"message": "Two.", "tool_calls": []}'},
        {"role": "user", "content": "Thanks"},
    ]
    assert action_messages([{"role": "user", "content": "Hi"}], tools)[0]["content"].startswith("# Tools\n")


def test_an_answer_reads_back_in_the_native_tool_calling_shape() -> None:
    answer = {"message": None, "tool_calls": [{"name": "get_item", "arguments": "milk"}, "junk"], "extra": 1}
    assert read_action(answer) == {
        "message": "",
        "tool_calls": [{"id": None, "name": "get_item", "arguments": {"_unparsed_arguments": "milk"}}],
    }
