"""A task's reference reaches the user simulator as its user turns only (`TaskInfo.of`): what the seed's user said,
never the calls and results the harness's agent must not see."""

from __future__ import annotations

from typing import Any

from simia.clients.user import UserSimulator
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.wire import TaskInfo
from simia.sim.world import Task

REFERENCE: list[dict[str, Any]] = [
    {"role": "user", "content": "Please set the oat milk to 12 cartons."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "set_quantity", "arguments": '{"name": "oat milk", "qty": 12}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"shelf": "B7"}'},
    {"role": "assistant", "content": "Done, shelf B7."},
    {"role": "user", "content": [{"type": "text", "text": "And put it on my tab."}]},
]


def test_a_harness_sees_the_references_user_turns_and_nothing_else() -> None:
    task = Task(id="oat", instruction="Stock oat milk.", reference=REFERENCE)
    info = TaskInfo.of(task)
    assert info == TaskInfo(
        id="oat",
        instruction="Stock oat milk.",
        user_turns=["Please set the oat milk to 12 cartons.", "And put it on my tab."],
    )
    assert "B7" not in info.model_dump_json()


async def test_the_user_simulator_is_given_what_the_seeds_user_said() -> None:
    seen: list[str] = []

    def answer(request: CompletionRequest) -> dict[str, Any]:
        seen.append(request.messages[0]["content"])
        return {"message": "Hi, oat milk to 12 please.", "done": False}

    turns = ["Please set the oat milk to 12 cartons.", "And put it on my tab."]
    user = UserSimulator(FunctionBackend(answer), instruction="Stock oat milk.", reference_turns=turns)
    await user.start("Stock oat milk.")
    assert (
        "# What you said in the original conversation (in order: say the same things, in your own words, when the "
        "conversation reaches them)\n1. Please set the oat milk to 12 cartons.\n2. And put it on my tab.\n"
    ) in seen[0]
