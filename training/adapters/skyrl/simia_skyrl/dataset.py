"""`python -m simia_skyrl.dataset`: a world's tasks as SkyRL training rows, read from a running simia server.

Each row is one task: `prompt` (simia's agent system prompt under the world's policy, with the tools listed for
the model, and the task's instruction as the user turn), `env_class` (`simia`), and the fields `SimiaTextEnv`
reads (`world`, `task`, `seed`, `server`). SkyRL samples each prompt `n_samples_per_prompt` times itself.

    python -m simia_skyrl.dataset --server http://127.0.0.1:8765 --world retail --out data/train.parquet
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simia_env_client import EnvClient, SimiaEnvError, World, select_tasks, task_messages, write_rows

from .env import ENV_ID

__all__ = ["main", "rows"]


def rows(world: World, server: str, tasks: str = "all", seed: int | None = None) -> list[dict[str, Any]]:
    """One SkyRL row per selected task of `world` (see the module docstring)."""
    return [
        {
            "prompt": task_messages(world, task, tools_in_prompt=True),
            "env_class": ENV_ID,
            "world": world.name,
            "task": task.id,
            "seed": seed,
            "server": server,
        }
        for task in select_tasks(world, tasks)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simia_skyrl.dataset", description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="the simia server, e.g. http://127.0.0.1:8765")
    parser.add_argument("--world", required=True, help="a world the server serves")
    parser.add_argument("--tasks", default="all", help="all, or task ids separated by commas (default: all)")
    parser.add_argument("--seed", type=int, help="the seed of every episode (replays injected faults)")
    parser.add_argument("--token", help="bearer token, when the server was started with --token")
    parser.add_argument("--out", type=Path, required=True, help="a .parquet (needs pyarrow) or .jsonl file")
    args = parser.parse_args(argv)
    try:
        with EnvClient(args.server, token=args.token) as client:
            found = rows(client.world(args.world), args.server, args.tasks, args.seed)
        out = write_rows(found, args.out)
    except (SimiaEnvError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(found)} rows ({args.world}) to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
