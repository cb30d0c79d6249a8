"""Helpers shared by the training tests: a store with a few judged episodes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simia.server.episodes import EpisodeService
from simia.server.settings import ServerSettings
from simia.sim import load_worlds
from simia.sim.backends import FunctionBackend
from simia.sim.engine import Simulator
from simia.sim.judging import Judge
from simia.sim.storage import open_store
from simia.testing.mock_world import mock_world_answer

ROOT = Path(__file__).resolve().parents[2]
WORLDS = load_worlds([ROOT / "tool_specs"]).worlds


def call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        ],
    }


GOOD = [
    {"role": "system", "content": "You manage a pantry."},
    {"role": "user", "content": "Set the milk to 4 litres."},
    call(1, "set_quantity", {"name": "milk", "qty": 4}),
    {"role": "tool", "tool_call_id": "call_1", "content": '{"name": "milk", "qty": 4}'},
    {"role": "assistant", "content": "Done."},
]
BAD = [*GOOD[:2], call(1, "launch_rocket", {}), {"role": "tool", "tool_call_id": "call_9", "content": "?"}]


async def make_db(path: Path) -> dict[str, str]:
    service = EpisodeService(
        WORLDS,
        Simulator(FunctionBackend(mock_world_answer)),
        open_store(path),
        ServerSettings(),
        judge=Judge(None),
    )
    ids = {}
    good = await service.create("mock", task="restock_milk")
    await service.call(good.id, "", "set_quantity", {"name": "milk", "qty": 4})
    await service.end(
        good.id,
        "",
        GOOD,
        {"prompt_ids": [1, 2], "completion_ids": [3, 4, 5], "env_mask": [1, 0, 1], "logprobs": [-0.1, 0.0, -0.2]},
    )
    ids["good"] = good.id
    fork = await service.fork(good.id, step=0, principal="")
    await service.end(fork.id, "")  # no transcript: rebuilt from events; rule check fails -> reward 0
    ids["fork"] = fork.id
    bad = await service.create("mock", task="count_apples")
    await service.end(bad.id, "", BAD)
    ids["bad"] = bad.id
    await service.store.close()
    return ids
