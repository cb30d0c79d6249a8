"""`simia demo`: the whole loop offline on the embedded model, in a few minutes on 2 cores.

Serves the `retail` world in process, runs one task with the built-in agent and user
simulator, judges it, prints the trajectory (tool calls, outputs, state changes, the
verdict), why the episode stopped and where its results are, and writes it as an SFT record after the same
checks `simia export --min-reward 1` runs: an episode that failed its task (reward 0) or is masked (its verdict
gives no usable reward) is never one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from simia.clients.api import SimiaClient
from simia.clients.demo import render
from simia.clients.rollout import RolloutConfig, rollout
from simia.sim.backends import Backend
from simia.sim.backends.local import LocalBackend, embedded_model_path
from simia.sim.errors import BackendConfigError
from simia.sim.verdict import outcome
from simia.sim.world import Task, World
from simia.training.export import check_transcript, openai_record

from ._common import CliError, add_worlds_dir, in_process_server, load_world_set, positive, writable_dir

__all__ = ["register", "run_demo"]


async def run_demo(
    world: World,
    task_id: str,
    *,
    sim: Backend,
    agent: Backend,
    user: Backend,
    judge: Backend,
    out_dir: Path,
    max_turns: int,
    out: TextIO = sys.stdout,
) -> dict[str, Any]:
    """Run the demo; returns what it wrote (episode id, status, verdict, SFT record path or why it was dropped)."""
    task = _task(world, task_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    db = out_dir / "demo.db"
    start = time.monotonic()
    print(f"simia demo: world {world.name!r}, task {task.id!r}, all models: {agent.spec} (embedded, offline)", file=out)
    print(f"  the user wants: {task.instruction}", file=out, flush=True)
    async with (
        in_process_server({world.name: world}, sim, db, judge, sim_max_tokens=384) as url,
        SimiaClient(url) as api,
    ):
        info = await api.world(world.name)
        config = RolloutConfig(
            server=url,
            world=info,
            tasks=[t for t in info.tasks if t.id == task.id],
            n=1,
            concurrency=1,
            max_turns=max_turns,
            out=out_dir,
            retries=0,
            seed=7,
            agent_max_tokens=256,
            user_max_tokens=96,
        )
        result = (await rollout(config, agent, user)).results[0]
        episode = await api.get(result.episode_id) if result.episode_id else None
    print(
        f"\nTrajectory ({result.turns} agent turns, {result.tool_calls} tool calls, {time.monotonic() - start:.0f} s):",
        file=out,
    )
    render(result.transcript, episode.events if episode else [], episode.verdict if episode else None, out)
    record_path = out_dir / "sft.jsonl"
    judged = outcome(episode.verdict if episode else None)
    problems = check_transcript(world, result.transcript) if result.transcript else ["no transcript"]
    if judged.kind == "masked":
        problems = [f"the episode is {judged}: simia export leaves it out unless --include-masked", *problems]
    elif judged.kind == "unrewarded":  # SFT data is what `simia export --min-reward 1` writes: successes only
        problems = [
            "the episode failed its task (reward 0): SFT data is successes, as `simia export --min-reward 1` writes",
            *problems,
        ]
    if problems:
        record_path.unlink(missing_ok=True)
        print(f"\nNo SFT record: the export checks dropped it ({'; '.join(problems[:3])})", file=out)
    else:
        record_path.write_text(json.dumps(openai_record(world, result.transcript)) + "\n")
        print(f"\nSFT record (OpenAI fine-tuning format, export checks passed): {record_path}", file=out)
    print(f"Stopped: {_stopped(result.stop, max_turns)}", file=out)
    print(
        f"Episode {result.episode_id} stored in {db} ({result.status}{': ' + result.error if result.error else ''})",
        file=out,
    )
    print(
        f"Results: {out_dir / 'results.jsonl'} (one line per run, every run appended), {out_dir / 'summary.json'} "
        f"(this run); in the browser: simia view --db {db}",
        file=out,
    )
    print(
        "\nThe embedded 135M model only shows the loop working; point simia at a real model:\n"
        "  export OPENAI_API_KEY=...  &&  simia serve --backend openai:gpt-5.4-mini\n"
        "  simia rollout --server http://127.0.0.1:8765 --world retail --tasks all --agent openai:gpt-5.4-mini "
        "--user openai:gpt-5.4-mini --n 4 --out runs/",
        file=out,
    )
    return {
        "episode_id": result.episode_id,
        "status": result.status,
        "verdict": episode.verdict if episode else None,
        "record": None if problems else str(record_path),
        "dropped": problems,
        "transcript": result.transcript,
    }


_STOPS = {
    "answered": "the agent gave its final answer",
    "user_done": "the simulated user said their request was done",
    "infra_error": "a tool call failed in the environment (an infrastructure failure, not the agent's)",
    "agent_error": "the agent's model gave no usable turn",
}


def _stopped(stop: str, max_turns: int) -> str:
    """Why the demo's episode ended, in words."""
    if stop == "max_turns":
        return f"the agent used all {max_turns} of its turns (--max-turns {max_turns}) before finishing"
    return _STOPS.get(stop, stop or "the episode never started")


def _task(world: World, task_id: str) -> Task:
    task = world.task(task_id)
    if task is None:
        raise CliError(f"unknown task {task_id!r}; tasks: {', '.join(t.id for t in world.tasks)}")
    return task


def _demo(args: argparse.Namespace) -> int:
    worlds = load_world_set(args)
    if "retail" not in worlds:
        raise CliError("the demo runs the bundled retail world; it is missing from --worlds-dir")
    try:
        embedded_model_path()
    except BackendConfigError as exc:
        raise CliError(f"{exc} (or run `make demo`, which installs it)") from None
    _task(worlds["retail"], args.task)  # before anything is written
    out_dir = writable_dir(args.out, "--out")
    sim, agent, user, judge = (LocalBackend(slot=role) for role in ("sim", "agent", "user", "judge"))
    result = asyncio.run(
        run_demo(
            worlds["retail"],
            args.task,
            sim=sim,
            agent=agent,
            user=user,
            judge=judge,
            out_dir=out_dir,
            max_turns=args.max_turns,
        )
    )
    return 0 if result["episode_id"] else 1


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="offline end-to-end run on the embedded model")
    p.add_argument("--task", default="cancel_by_mistake", help="retail task to run (default: cancel_by_mistake)")
    p.add_argument("--max-turns", type=positive, default=3, help="agent model calls (default 3)")
    p.add_argument("--out", default="simia-demo", metavar="DIR", help="output folder (default: simia-demo)")
    add_worlds_dir(p)
    p.set_defaults(func=_demo)
