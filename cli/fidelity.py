"""`simia fidelity`: run one call sequence on the real server and on the world's simulation, and compare."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from simia.clients.fidelity import load_calls, run_fidelity
from simia.sim.loader import load_world

from ._common import CliError, add_model_flags, add_worlds_dir, backend, load_world_set

__all__ = ["register"]


def _fidelity(args: argparse.Namespace) -> int:
    path = Path(args.world)
    world = load_world(path) if (path / "world.yaml").is_file() else load_world_set(args, quiet=True).get(args.world)
    if world is None:
        raise CliError(f"{args.world!r} is neither a world folder (with world.yaml) nor a world in --worlds-dir")
    if args.real and args.command_after_dashes:
        raise CliError("give the real server once: --real URL, or -- COMMAND ARGS... (stdio)")
    real: str | list[str] = args.real or args.command_after_dashes
    if not real:
        raise CliError("say where the real server is: --real URL, or -- COMMAND ARGS... (stdio)")
    try:
        calls = load_calls(args.calls, world)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    headers = dict(h.split(":", 1) for h in args.header or [])
    model = backend(args.backend, args)
    try:
        report = asyncio.run(run_fidelity(world, real, calls, model, headers=headers, allow_drift=args.allow_drift))
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:  # the real server: unreachable, or died mid-run
        raise CliError(f"the real server failed: {type(exc).__name__}: {exc}") from None
    print(report.render())
    if args.report:
        Path(args.report).write_text(json.dumps(report.as_dict(), indent=1, default=str) + "\n")
        print(f"report: {args.report}")
    if args.min_agreement is not None and report.agreement() < args.min_agreement:
        print(f"agreement {report.agreement():.2f} is under --min-agreement {args.min_agreement}")
        return 1
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("fidelity", help="compare a world's simulation with the real server it stands for")
    p.add_argument("world", metavar="WORLD", help="a world folder, or a world name in --worlds-dir")
    p.add_argument(
        "--real",
        nargs="?",
        const="",
        metavar="URL",
        help="the real server: a streamable HTTP URL, or `--real -- COMMAND ARGS...` (stdio; `--real` may be left out)",
    )
    p.add_argument("--header", action="append", metavar="K:V", help="HTTP header for --real URL (repeatable)")
    p.add_argument("--calls", required=True, metavar="FILE", help='JSONL: one {"tool", "arguments"} a line')
    p.add_argument("--backend", metavar="SPEC", help="the simulator's model (backend SPEC)")
    add_model_flags(p)
    p.add_argument("--report", metavar="FILE", help="write the JSON report here")
    p.add_argument("--min-agreement", type=float, metavar="X", help="exit 1 when the agreement is under X (0-1)")
    p.add_argument("--allow-drift", action="store_true", help="go on when the world's tools differ from the real ones")
    add_worlds_dir(p)
    p.set_defaults(func=_fidelity, command_after_dashes=[])  # `-- COMMAND ARGS...`: the real server over stdio
