"""`python -m simia_verl.dataset`: a world's tasks as verl training rows, and the agent-loop YAML that runs them.

Each row is one task: `prompt` (simia's agent system prompt under the world's policy, the task's instruction as
the user turn), `agent_name: simia_agent`, `data_source: simia/<world>`, and `extra_info` with what the loop reads
(`world`, `task`, `seed`, `server`, `tools_in_prompt`). The YAML beside the parquet (`simia_agent.yaml`) names the
loop for `actor_rollout_ref.rollout.agent.agent_loop_config_path`. verl samples each prompt `rollout.n` times.

    python -m simia_verl.dataset --server http://127.0.0.1:8765 --world retail --out data/train.parquet
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simia_env_client import EnvClient, SimiaEnvError, World, select_tasks, task_messages, write_rows

from . import AGENT_NAME

__all__ = ["agent_loop_yaml", "main", "rows"]

TARGET = "simia_verl.agent_loop.SimiaAgentLoop"


def rows(
    world: World, server: str, tasks: str = "all", seed: int | None = None, *, tools_in_prompt: bool = False
) -> list[dict[str, Any]]:
    """One verl row per selected task of `world` (see the module docstring).

    Args:
        tools_in_prompt: list the tools in the system prompt, for a chat template that cannot render them (the
            loop then passes none to the template); default: the template renders them.
    """
    return [
        {
            "data_source": f"simia/{world.name}",
            "prompt": task_messages(world, task, tools_in_prompt=tools_in_prompt),
            "agent_name": AGENT_NAME,
            "ability": "tool_use",
            "reward_model": {"style": "simia", "ground_truth": ""},
            "extra_info": {
                "index": i,
                "world": world.name,
                "task": task.id,
                "seed": seed,
                "server": server,
                "tools_in_prompt": tools_in_prompt,
            },
        }
        for i, task in enumerate(select_tasks(world, tasks))
    ]


def agent_loop_yaml(server: str | None = None) -> str:
    """The agent-loop config entry of `simia_agent` (verl's `agent_loop_config_path` reads a list of them)."""
    lines = [f"- name: {AGENT_NAME}", f"  _target_: {TARGET}"]
    if server:
        lines.append(f"  server: {server}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simia_verl.dataset", description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="the simia server, e.g. http://127.0.0.1:8765")
    parser.add_argument("--world", required=True, help="a world the server serves")
    parser.add_argument("--tasks", default="all", help="all, or task ids separated by commas (default: all)")
    parser.add_argument("--seed", type=int, help="the seed of every episode (replays injected faults)")
    parser.add_argument("--token", help="bearer token, when the server was started with --token")
    parser.add_argument(
        "--tools-in-prompt", action="store_true", help="list the tools in the system prompt (templates without tools)"
    )
    parser.add_argument("--out", type=Path, required=True, help="the .parquet file to write (the YAML goes beside it)")
    args = parser.parse_args(argv)
    try:
        with EnvClient(args.server, token=args.token) as client:
            found = rows(
                client.world(args.world), args.server, args.tasks, args.seed, tools_in_prompt=args.tools_in_prompt
            )
        out = write_rows(found, args.out)
    except (SimiaEnvError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    config = out.with_name(f"{AGENT_NAME}.yaml")
    config.write_text(agent_loop_yaml(args.server), encoding="utf-8")
    print(f"wrote {len(found)} rows ({args.world}) to {out}")
    print(f"agent loop: actor_rollout_ref.rollout.agent.agent_loop_config_path={config}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
