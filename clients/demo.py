"""`simia demo`: the whole loop offline on the embedded model, in a few minutes on 2 cores.

Starts the server in process on a free port, runs one `retail` task with the built-in
agent and user simulator, judges it, exports the episode as an SFT record and prints
the trajectory: tool calls, outputs, state changes and the verdict.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import httpx2 as httpx
from simia.sim.backends import Backend
from simia.sim.world import World

from .rollout import RolloutConfig, in_process_server, rollout

__all__ = ["run_demo"]


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render(
    transcript: list[dict[str, Any]], events: list[dict[str, Any]], verdict: dict[str, Any] | None, out: TextIO
) -> None:
    """Print a trajectory readably."""
    by_call = iter(events)
    for message in transcript:
        role = message["role"]
        if role == "system":
            continue
        if role == "user":
            print(f"  USER       {_short(message.get('content') or '')}", file=out)
        elif role == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                fn = call["function"]
                print(f"  AGENT ->   {fn['name']}({_short(fn['arguments'], 120)})", file=out)
        elif role == "assistant":
            print(f"  AGENT      {_short(message.get('content') or '')}", file=out)
        elif role == "tool":
            event = next(by_call, None)
            kind = f" [{event['error_kind']} error]" if event and event["is_error"] else ""
            print(f"  TOOL{kind:<7}{_short(message.get('content') or '')}", file=out)
            if event and event["state_patch"]:
                print(f"  STATE      {_short(event['state_patch'])}", file=out)
    if verdict:
        print(f"  VERDICT    reward={verdict.get('reward')} status={verdict.get('status')}", file=out)
        for check in verdict.get("rule_checks", []):
            mark = "pass" if check["passed"] else "FAIL"
            print(
                f"    rule {mark}: {check['pointer']} expected {json.dumps(check['expected'])}, "
                f"found {json.dumps(check['actual'])}",
                file=out,
            )
        for reason in verdict.get("reasons", [])[:3]:
            print(f"    reason: {_short(reason)}", file=out)


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
    """Run the demo; returns what it wrote (episode id, verdict, SFT record path)."""
    from simia.training.export import openai_record

    task = world.task(task_id)
    if task is None:
        raise ValueError(f"unknown task {task_id!r}; tasks: {', '.join(t.id for t in world.tasks)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    db = out_dir / "demo.db"
    start = time.monotonic()
    print(f"simia demo: world {world.name!r}, task {task.id!r}, all models: {agent.spec} (embedded, offline)", file=out)
    print(f"  the user wants: {task.instruction}", file=out, flush=True)
    async with in_process_server({world.name: world}, sim, db, judge, sim_max_tokens=384) as url:
        config = RolloutConfig(
            server=url,
            world=world,
            tasks=[task],
            n=1,
            concurrency=1,
            max_turns=max_turns,
            out=out_dir,
            retries=0,
            seed=7,
            agent_max_tokens=256,
            user_max_tokens=96,
        )
        summary = await rollout(config, agent, user)
        result = summary.results[0]
        async with httpx.AsyncClient(base_url=url) as http:
            episode = (await http.get(f"/v1/episodes/{result.episode_id}")).json() if result.episode_id else {}
    print(
        f"\nTrajectory ({result.turns} agent turns, {result.tool_calls} tool calls, {time.monotonic() - start:.0f} s):",
        file=out,
    )
    render(result.transcript, episode.get("events", []), episode.get("verdict"), out)
    record_path = out_dir / "sft.jsonl"
    if result.transcript:
        record_path.write_text(json.dumps(openai_record(world, result.transcript)) + "\n")
        print(f"\nSFT record (OpenAI fine-tuning format): {record_path}", file=out)
    print(
        f"Episode {result.episode_id} stored in {db} ({result.status}{': ' + result.error if result.error else ''})",
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
        "verdict": episode.get("verdict"),
        "record": str(record_path),
        "status": result.status,
        "transcript": result.transcript,
    }
