"""The GRPO prompts: one row per task of the world (the agent system prompt under its policy, the
instruction as the user turn), keyed by task and group so a group's rollouts fork one snapshot."""

from __future__ import annotations

from typing import Any

from simia.clients.prompt import agent_system_prompt
from simia.sim.wire import WorldInfo

__all__ = ["task_dataset"]


def task_dataset(world: WorldInfo, tasks: str = "all", repeat: int = 8) -> Any:
    """Prompts from the world's tasks: the agent system prompt under its policy, the instruction as user turn."""
    from datasets import Dataset  # optional extra (train)

    chosen = world.tasks if tasks == "all" else [t for t in world.tasks if t.id in set(tasks.split(","))]
    if not chosen:
        raise ValueError(f"no tasks selected from {world.name!r}: {tasks!r}")
    system = agent_system_prompt(world.policy)
    rows = [
        {
            "prompt": [{"role": "system", "content": system}, {"role": "user", "content": t.instruction}],
            "task": t.id,
            "group": t.id,
        }
        for t in chosen
    ]
    return Dataset.from_list(rows * repeat)
