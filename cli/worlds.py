"""`simia validate` and `simia worlds`: check world folders, list the valid ones."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from simia.sim.world import load_worlds

from ._common import add_worlds_dir, load_world_set

__all__ = ["register"]


def _validate(args: argparse.Namespace) -> int:
    report = load_worlds(args.paths)
    for name, world in report.worlds.items():
        user = f", {len(world.user_tools)} user tools" if world.user_tools else ""
        print(f"ok    {name}  ({world.source}: {len(world.tools)} tools{user}, {len(world.tasks)} tasks)")
    problems = 0
    for error in report.errors:
        print(f"FAIL  {error.world}" + (f"  ({error.source})" if error.source else ""), file=sys.stderr)
        for issue in error.issues:
            print(f"  - {issue}", file=sys.stderr)
            problems += 1
    for path in report.empty:
        print(f"FAIL  {path}: no world here (a world is a folder with world.yaml, or pass a folder of them)",
              file=sys.stderr)  # fmt: skip
    if not report.worlds and not report.errors:
        return 1
    if report.empty and not problems:
        print(f"{len(report.empty)} path(s) held no world", file=sys.stderr)
        return 1
    if problems:
        print(f"{problems} problem(s) in {len(report.errors)} world(s)", file=sys.stderr)
        return 1
    return 0


def _worlds(args: argparse.Namespace) -> int:
    worlds = load_world_set(args)
    rows = [("NAME", "TITLE", "TOOLS", "TASKS")]
    rows += [(w.name, w.title, str(len(w.tools)), str(len(w.tasks))) for w in worlds.values()]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("validate", help="validate world folders; non-zero exit with file and field on error")
    p.add_argument("paths", nargs="+", metavar="PATH", help="a world folder or a folder of worlds")
    p.set_defaults(func=_validate)

    p = sub.add_parser("worlds", help="list worlds and their tools")
    add_worlds_dir(p)
    p.set_defaults(func=_worlds)
