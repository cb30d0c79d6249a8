"""The GRPO prompts: one row per task of the world (the agent system prompt under its policy, the
instruction as the user turn), keyed by task and group so a group's rollouts fork one snapshot; each task
repeated alike, or as often as a curriculum plans (`simia.clients.curriculum`: most where the recorded pass rate
is near one half)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simia.clients.prompt import agent_system_prompt
from simia.sim.wire import TaskInfo, WorldInfo

__all__ = ["chosen_tasks", "task_dataset"]


def chosen_tasks(world: WorldInfo, tasks: str = "all") -> list[TaskInfo]:
    """The world's tasks `tasks` names (`all` or comma-separated ids), in the world's order.

    Raises:
        ValueError: it names none of them.
    """
    chosen = world.tasks if tasks == "all" else [t for t in world.tasks if t.id in set(tasks.split(","))]
    if not chosen:
        raise ValueError(f"no tasks selected from {world.name!r}: {tasks!r}")
    return list(chosen)


def task_dataset(
    world: WorldInfo, tasks: str = "all", repeat: int = 8, *, rows: Mapping[str, int] | None = None
) -> Any:
    """Prompts from the world's tasks: the agent system prompt under its policy, the instruction as user turn.

    Args:
        world: the world, as the server describes it.
        tasks: `all` or comma-separated task ids.
        repeat: rows per task (each row is one GRPO group).
        rows: rows per task id instead (a curriculum's plan: `Curriculum.attempts(1)`); a task it lacks gets none.
    """
    from datasets import Dataset  # optional extra (train)

    system = agent_system_prompt(world.policy)
    out = []
    for task in chosen_tasks(world, tasks):
        row = {
            "prompt": [{"role": "system", "content": system}, {"role": "user", "content": task.instruction}],
            "task": task.id,
            "group": task.id,
        }
        out.append((row, repeat if rows is None else rows.get(task.id, 0)))
    rounds = max(n for _, n in out)  # in rounds (each task once, then again): the order an unshuffled run trains in
    return Dataset.from_list([row for i in range(rounds) for row, n in out if n > i])
