"""`simia bootstrap`: a model drafts the state and tasks of a world that has tools but lacks them, and the
groundings of its tools that declare none (checked against the calls recorded in `--recorded DB`, if given)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from simia.sim.errors import WorldError
from simia.sim.importers import BootstrapConfig, BootstrapReport, bootstrap

from ._common import CliError, add_model_flags, add_worlds_dir, backend, load_world_set, open_db, positive

__all__ = ["register"]


def _folder(args: argparse.Namespace) -> Path:
    """WORLD: a world folder, or the name of a world in --worlds-dir."""
    path = Path(args.world)
    if (path / "world.yaml").is_file():
        return path
    world = load_world_set(args, quiet=True).get(args.world)
    if world is None or not world.source:
        raise CliError(f"{args.world!r} is neither a world folder (with world.yaml) nor a world in --worlds-dir")
    return Path(world.source)


def _bootstrap(args: argparse.Namespace) -> int:
    folder = _folder(args)
    model = backend(args.backend, args)
    config = BootstrapConfig(entities=args.entities, tasks=args.tasks, force=args.force, groundings=args.groundings)
    recorded = open_db(args.recorded, must_exist=True, flag="--recorded") if args.recorded else None

    async def run() -> BootstrapReport:
        try:
            return await bootstrap(folder, model, config, recorded=recorded)
        finally:
            if recorded is not None:
                await recorded.close()

    try:
        report = asyncio.run(run())
    except WorldError as exc:
        problems = "; ".join(str(issue) for issue in exc.issues[:3])
        raise CliError(f"{folder}: the world does not load ({problems}); fix it first (`simia validate`)") from None
    print(report.render())
    print(f"report: {folder / 'bootstrap_report.json'}")
    return 0 if report.state != "dropped" and (report.tasks_written or report.tasks_kept) else 1


def register(sub: Any) -> None:
    p = sub.add_parser("bootstrap", help="draft the state and tasks of a world that has only tools")
    p.add_argument("world", metavar="WORLD", help="a world folder, or a world name in --worlds-dir")
    p.add_argument("--backend", metavar="SPEC", help="the drafting model (backend SPEC)")
    add_model_flags(p)
    p.add_argument("--entities", type=positive, default=3, help="records per collection in the drafted state (3)")
    p.add_argument("--tasks", type=positive, default=5, help="tasks the world should have when done (5)")
    p.add_argument("--force", action="store_true", help="replace hand-written state.json, state_schema and tasks")
    p.add_argument(
        "--no-groundings",
        dest="groundings",
        action="store_false",
        help="do not draft groundings for the tools that declare none (drafted, each is kept only if it runs)",
    )
    p.add_argument(
        "--recorded",
        metavar="DB",
        help="a database of the world's runs (a SQLite file or Postgres URL, as `simia serve --db`): a drafted "
        "grounding must answer the tool's calls recorded there (real-server or declared answers) as recorded",
    )
    add_worlds_dir(p)
    p.set_defaults(func=_bootstrap)
