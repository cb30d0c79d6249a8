"""`simia fidelity`: run one call sequence on the real server and on the world's simulation, and compare; or, with
`--against-declarations`, on the world's declarations (exact, no server) and on a model simulating it without them."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from simia.clients.agent import Agent
from simia.clients.fidelity import (
    CallSequence,
    FidelityReport,
    exact_tools,
    example_sequences,
    load_calls,
    run_agent_fidelity,
    run_declared_fidelity,
    run_fidelity,
    task_sequences,
)
from simia.clients.user import UserSimulator
from simia.sim.backends import Backend
from simia.sim.world import World, load_world

from ._common import (
    CliError,
    add_model_flags,
    add_worlds_dir,
    backend,
    http_header,
    load_world_set,
    number,
    positive,
)

__all__ = ["register"]


def _fidelity(args: argparse.Namespace) -> int:
    path = Path(args.world)
    world = load_world(path) if (path / "world.yaml").is_file() else load_world_set(args, quiet=True).get(args.world)
    if world is None:
        raise CliError(f"{args.world!r} is neither a world folder (with world.yaml) nor a world in --worlds-dir")
    if args.against_declarations:
        return _finish(args, _against_declarations(args, world))
    if args.calls_from:
        raise CliError(
            "--calls-from plays the world's own calls against its declarations: add --against-declarations"
            " (a real server runs --calls FILE.jsonl)"
        )
    if args.real and args.command_after_dashes:
        raise CliError("give the real server once: --real URL, or -- COMMAND ARGS... (stdio)")
    real: str | list[str] = args.real or args.command_after_dashes
    if not real:
        raise CliError(
            "say where the real server is: --real URL, or -- COMMAND ARGS... (stdio); or, with no server, score the"
            " simulation against the world's declarations: --against-declarations"
        )
    if bool(args.calls) == bool(args.agent):
        raise CliError("say what to run: --calls FILE.jsonl, or --agent SPEC --task ID (one of the two)")
    if args.header and not isinstance(real, str):
        raise CliError("--header is for --real URL; a command (stdio) gets no HTTP headers")
    headers = dict(args.header or [])
    model = backend(args.backend, args)
    run = _sequence(args, world, real, model, headers)
    try:
        report = asyncio.run(run)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:  # the real server: unreachable, or died mid-run
        raise CliError(f"the real server failed: {type(exc).__name__}: {exc}") from None
    return _finish(args, report)


def _finish(args: argparse.Namespace, report: FidelityReport) -> int:
    """Print the report (and write it with --report); 1 when the real server stopped or under --min-agreement."""
    print(report.render())
    if args.report:
        Path(args.report).write_text(json.dumps(report.as_dict(), indent=1, default=str) + "\n")
        print(f"report: {args.report}")
    if report.stopped:
        return 1
    if args.min_agreement is not None and report.agreement() < args.min_agreement:
        print(f"agreement {report.agreement():.2f} is under --min-agreement {args.min_agreement}")
        return 1
    return 0


def _against_declarations(args: argparse.Namespace, world: World) -> FidelityReport:
    """`--against-declarations`: the calls (a file, or the world's examples or tasks), checked before anything
    runs, scored on the declarations and on the backend simulating the world without them."""
    if args.real is not None or args.command_after_dashes or args.header:
        raise CliError("--against-declarations needs no real server: leave out --real, --header and -- COMMAND")
    if args.agent:
        raise CliError("--agent runs on a real server; with --against-declarations give --calls FILE.jsonl")
    if bool(args.calls) == bool(args.calls_from):
        raise CliError("say what to run: --calls FILE.jsonl, or --calls-from examples|tasks (one of the two)")
    declared = exact_tools(world)
    if not declared:
        raise CliError(
            f"world {world.name!r} declares no tool exactly (a grounding with a read): there is nothing to score"
            " against; declare its tools (docs/worlds.md) or run fidelity against a real server"
        )
    try:
        if args.calls:
            sequences = [CallSequence(str(args.calls), load_calls(args.calls, world))]
        else:
            sequences = example_sequences(world) if args.calls_from == "examples" else task_sequences(world)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if not any(call.tool in declared for sequence in sequences for call in sequence.calls):
        raise CliError(
            f"none of the calls is of a tool world {world.name!r} declares exactly ({', '.join(declared)}):"
            " nothing to score"
        )
    model = backend(args.backend, args)
    grader = backend(args.grade, args) if args.grade else None

    async def run() -> FidelityReport:
        try:
            return await run_declared_fidelity(world, sequences, model, grader=grader)
        finally:  # their connections belong to this event loop
            await model.aclose()
            if grader is not None:
                await grader.aclose()

    return asyncio.run(run())


def _sequence(
    args: argparse.Namespace, world: World, real: str | list[str], model: Backend, headers: dict[str, str]
) -> Coroutine[Any, Any, FidelityReport]:
    """What to run on both sides, checked before anything runs: a calls file, or the agent on a task."""
    grader = backend(args.grade, args) if args.grade else None
    if args.calls:
        try:
            calls = load_calls(args.calls, world)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        return run_fidelity(
            world, real, calls, model, headers=headers, allow_drift=args.allow_drift,
            allow_writes=args.allow_writes, grader=grader,
        )  # fmt: skip
    if args.task is None:
        raise CliError("--agent runs one of the world's tasks: add --task ID")
    task = world.task(args.task)
    if task is None:
        known = ", ".join(t.id for t in world.tasks) or "none"
        raise CliError(f"world {world.name!r} has no task {args.task!r} (its tasks: {known})")
    agent = Agent(backend(args.agent, args), max_turns=args.max_turns)
    user_model = backend(args.user, args) if args.user and task.user_hidden else None
    user = UserSimulator(user_model, instruction=task.instruction, hidden=task.user_hidden) if user_model else None
    return run_agent_fidelity(
        world, real, agent, task, model, user=user, headers=headers, allow_drift=args.allow_drift,
        allow_writes=args.allow_writes, grader=grader,
    )  # fmt: skip


def register(sub: Any) -> None:
    p = sub.add_parser(
        "fidelity", help="compare a world's simulation with the real server it stands for, or with its declarations"
    )
    p.add_argument("world", metavar="WORLD", help="a world folder, or a world name in --worlds-dir")
    p.add_argument(
        "--real",
        nargs="?",
        const="",
        metavar="URL",
        help="the real server: a streamable HTTP URL, or `--real -- COMMAND ARGS...` (stdio; `--real` may be left out)",
    )
    p.add_argument(
        "--header",
        action="append",
        type=http_header,
        metavar="NAME:VALUE",
        help="HTTP header for --real URL (repeatable)",
    )
    p.add_argument("--calls", metavar="FILE", help='JSONL: one {"tool", "arguments"} a line')
    p.add_argument(
        "--against-declarations",
        action="store_true",
        help="no real server: score the simulation of the world without its declarations against their exact"
        " answers and state changes (tools not declared exactly are skipped)",
    )
    p.add_argument(
        "--calls-from",
        choices=["examples", "tasks"],
        help="with --against-declarations, instead of --calls: the tool calls of the world's examples, or each"
        " task's expected actions from its starting state",
    )
    p.add_argument("--agent", metavar="SPEC", help="instead of --calls: the built-in agent's model (backend SPEC)")
    p.add_argument("--task", metavar="ID", help="the world's task the --agent runs on the real server")
    p.add_argument("--user", metavar="SPEC", help="user-simulator model for a task with hidden user facts")
    p.add_argument("--max-turns", type=positive, default=10, help="agent model calls (default 10)")
    p.add_argument("--backend", metavar="SPEC", help="the simulator's model (backend SPEC)")
    add_model_flags(p)
    p.add_argument("--grade", metavar="SPEC", help="a model that grades each simulated step (5 dimensions, 1-5)")
    p.add_argument("--report", metavar="FILE", help="write the JSON report here")
    p.add_argument(
        "--min-agreement",
        type=number(0, 1, what="a share"),
        metavar="X",
        help="exit 1 when the agreement is under X (0-1)",
    )
    p.add_argument("--allow-drift", action="store_true", help="go on when the world's tools differ from the real ones")
    p.add_argument(
        "--allow-writes",
        action="store_true",
        help="run calls of tools not annotated readOnlyHint on the real server (refused without it)",
    )
    add_worlds_dir(p)
    p.set_defaults(func=_fidelity, command_after_dashes=[])  # `-- COMMAND ARGS...`: the real server over stdio
