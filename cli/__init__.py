"""The `simia` command line, the composition root: the only package that imports every layer.

One module per command (or command group); each parses its flags, calls library functions and
prints their results. Environment variables are read here and nowhere else. Bad input is a
`CliError`: one line on stderr saying what is wrong and how to fix it, exit code 2, nothing written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import demo, export, importer, judge, rollout, serve, synth, worlds
from ._common import CliError

__all__ = ["CliError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simia", description="Simulated MCP tool environments for agent training.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (worlds, serve, judge, rollout, export, synth, demo, importer):
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code
