"""The `simia` command line: thin wrappers over library functions.

Each subcommand parses flags, calls one library function and prints its result;
environment variables are read here and nowhere else.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from simia.sim.loader import default_worlds_dir, load_worlds

__all__ = ["build_parser", "main"]


def _cmd_validate(args: argparse.Namespace) -> int:
    report = load_worlds(args.paths)
    for name, world in report.worlds.items():
        print(f"ok    {name}  ({world.source}: {len(world.tools)} tools, {len(world.tasks)} tasks)")
    problems = 0
    for error in report.errors:
        print(f"FAIL  {error.world}" + (f"  ({error.source})" if error.source else ""), file=sys.stderr)
        for issue in error.issues:
            print(f"  - {issue}", file=sys.stderr)
            problems += 1
    if not report.worlds and not report.errors:
        print("no worlds found (a world is a folder with world.yaml)", file=sys.stderr)
        return 1
    if problems:
        print(f"{problems} problem(s) in {len(report.errors)} world(s)", file=sys.stderr)
        return 1
    return 0


def _cmd_worlds(args: argparse.Namespace) -> int:
    dirs = args.worlds_dir or [default_worlds_dir()]
    report = load_worlds(dirs)
    rows = [("NAME", "TITLE", "TOOLS", "TASKS")]
    rows += [(w.name, w.title, str(len(w.tools)), str(len(w.tasks))) for w in report.worlds.values()]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    for error in report.errors:
        print(f"skipped invalid world {error.world!r}: run `simia validate` for details", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simia", description="Simulated MCP tool environments for agent training.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="validate world folders; non-zero exit with file and field on error")
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a world folder or a folder of worlds")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("worlds", help="list worlds and their tools")
    p.add_argument(
        "--worlds-dir",
        action="append",
        type=Path,
        metavar="DIR",
        help="folder of worlds (repeatable; default: ./tool_specs or the bundled worlds)",
    )
    p.set_defaults(func=_cmd_worlds)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
