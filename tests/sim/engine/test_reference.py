"""A task's `reference` (its seed conversation, Simia-RL): checked on load as the world's examples are, and given to
the simulator in place of the world's examples, in a system message stable for every call of the task's episodes
(built once per world and task, its own provider prompt-cache key and response-cache key)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.engine import Simulator, ToolCall
from simia.sim.engine.prompts import system_prompt
from simia.sim.errors import WorldError
from simia.sim.world import load_world

ROOT = Path(__file__).resolve().parents[3]
MOCK = load_world(ROOT / "tool_specs" / "mock")

REFERENCE: list[dict[str, Any]] = [
    {"role": "user", "content": "Please set the oat milk to 12 cartons for the cafe."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "set_quantity", "arguments": '{"name": "oat milk", "qty": 12}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"name": "oat milk", "qty": 12, "shelf": "B7"}'},
    {"role": "assistant", "content": "Oat milk is at 12 cartons, on shelf B7."},
]


def with_tasks(tmp_path: Path, *tasks: dict[str, Any]) -> Path:
    folder = tmp_path / "mock"
    shutil.copytree(ROOT / "tool_specs" / "mock", folder)
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return folder


def test_a_task_reference_loads_and_replaces_the_world_examples_in_the_simulator_prompt(tmp_path: Path) -> None:
    world = load_world(with_tasks(tmp_path, {"id": "oat", "instruction": "Stock oat milk.", "reference": REFERENCE}))
    task = world.task("oat")
    assert task is not None and task.reference == REFERENCE
    sim = Simulator(FunctionBackend(lambda _: {}))
    call = ToolCall("get_item", {"name": "milk"})

    own = sim.build_messages(world, world.initial_state, [], call, task=task)[0]["content"]
    shared = sim.build_messages(world, world.initial_state, [], call)[0]["content"]

    assert "# Reference conversation" in own and "# Reference calls and results (style guide)" not in own
    assert "USER Please set the oat milk to 12 cartons for the cafe." in own
    assert 'CALL set_quantity {"name": "oat milk", "qty": 12}' in own
    assert 'RESULT {"name": "oat milk", "qty": 12, "shelf": "B7"}' in own
    assert "AGENT Oat milk is at 12 cartons, on shelf B7." in own
    assert "# Reference calls and results (style guide)" in shared and "oat milk" not in shared
    assert own == system_prompt(world, reference=REFERENCE)
    assert sim.build_messages(world, world.initial_state, [], call, task=task)[0]["content"] is own  # built once


def test_a_long_reference_is_cut_at_a_turn_and_says_so() -> None:
    turns = [{"role": "user", "content": f"turn {i} " + "x" * 90} for i in range(50)]
    prompt = system_prompt(MOCK, reference=turns, reference_chars=1_000)
    assert "USER turn 8 " in prompt and "USER turn 9 " not in prompt
    assert "... (41 more lines of the conversation cut)" in prompt


def test_a_reference_that_calls_a_tool_the_world_lacks_or_breaks_its_schema_fails_the_world(tmp_path: Path) -> None:
    wrong = json.loads(json.dumps(REFERENCE))
    wrong[1]["tool_calls"][0]["function"] = {"name": "set_quantiy", "arguments": '{"name": "oat milk"}'}
    broken = json.loads(json.dumps(REFERENCE))
    broken[1]["tool_calls"][0]["function"]["arguments"] = '{"name": "oat milk", "qty": "twelve"}'
    folder = with_tasks(
        tmp_path,
        {"id": "ok", "instruction": "Stock oat milk.", "reference": REFERENCE},
        {"id": "wrong", "instruction": "Stock oat milk.", "reference": wrong},
        {"id": "broken", "instruction": "Stock oat milk.", "reference": broken},
    )
    with pytest.raises(WorldError) as caught:
        load_world(folder)
    found = [(i.line, i.path, i.message) for i in caught.value.issues]
    assert found == [
        (2, "$.reference[1].tool_calls[0].function.name", "calls tool 'set_quantiy', which the world lacks"),
        (
            3,
            "$.reference[1].tool_calls[0].function.arguments",
            'breaks set_quantity\'s inputSchema: $.qty: "twelve" is not of type "integer"',
        ),
    ]


async def test_the_episodes_of_a_task_with_a_reference_send_it_under_their_own_cache_keys(tmp_path: Path) -> None:
    world = load_world(with_tasks(tmp_path, {"id": "oat", "instruction": "Stock oat milk.", "reference": REFERENCE}))
    requests: list[CompletionRequest] = []

    def answer(request: CompletionRequest) -> dict[str, Any]:
        requests.append(request)
        return {"is_error": False, "output": {"name": "milk", "qty": 2}}

    sim = Simulator(FunctionBackend(answer))
    call = ToolCall("get_item", {"name": "milk"})
    await sim.step(world, world.initial_state, [], call, seed=1, task=world.task("oat"))
    await sim.step(world, world.initial_state, [], call, seed=1)

    own, shared = requests
    assert "shelf B7" in own.messages[0]["content"] and "shelf B7" not in shared.messages[0]["content"]
    assert own.cache_key != shared.cache_key and own.cache_key.startswith(f"simia-{world.content_hash[:16]}-")
    assert own.key != shared.key  # a recorded answer of one prompt is never replayed for the other
