"""Training rows from a world's tasks: which tasks a `--tasks` selection names, and rows written as Parquet or
JSONL (the dataset commands of the verl and SkyRL adapters share them)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._wire import Task, World

__all__ = ["select_tasks", "write_rows"]


def select_tasks(world: World, tasks: str = "all") -> list[Task]:
    """The tasks `tasks` names: `all`, or ids separated by commas, in the world's order.

    Raises:
        ValueError: an id the world does not have, or a world with no tasks (the message lists its tasks).
    """
    known = ", ".join(t.id for t in world.tasks) or "(none)"
    if tasks == "all":
        if not world.tasks:
            raise ValueError(f"world {world.name!r} has no tasks: add a tasks.jsonl to its folder")
        return list(world.tasks)
    wanted = [t.strip() for t in tasks.split(",") if t.strip()]
    unknown = [t for t in wanted if t not in {task.id for task in world.tasks}]
    if unknown or not wanted:
        raise ValueError(f"world {world.name!r} has no task {', '.join(unknown) or tasks!r}; its tasks: {known}")
    return [t for t in world.tasks if t.id in wanted]


def write_rows(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write `rows` to `path`: Parquet for `.parquet` (needs pyarrow, which verl and SkyRL install), else JSONL.

    Raises:
        ValueError: a `.parquet` path without pyarrow installed (the message says what to install).
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ValueError(f"writing {out} needs pyarrow: pip install pyarrow (or write .jsonl)") from None
        pq.write_table(pa.Table.from_pylist(list(rows)), out)
    else:
        out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return out
