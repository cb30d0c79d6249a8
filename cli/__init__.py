"""The `simia` command line, the composition root: the only package that imports every layer.

One module per command (or command group); each parses its flags, calls library functions and
prints their results. Environment variables are read at the edges only: here (API keys, SIMIA_DB_URL)
and in the training scripts (`python -m simia.training.sft|grpo`, and `training.models`: SIMIA_CACHE, the
libraries' quiet settings). Bad input is a
`CliError`: one line on stderr saying what is wrong and how to fix it, exit code 2, nothing written.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from . import bootstrap, db, demo, export, fidelity, importer, judge, rollout, serve, synth, view, worlds
from ._common import CliError

__all__ = ["CliError", "build_parser", "main"]


def _takes_command_after_dashes(parser: argparse.ArgumentParser, name: str) -> bool:
    """Whether command `name` reads everything after `--` as a command to start (its default says so)."""
    for action in parser._subparsers._group_actions if parser._subparsers else []:
        choices = getattr(action, "choices", None) or {}
        if name in choices:
            return choices[name].get_default("command_after_dashes") is not None
    return False


class _NotJsonRpcOnStdout(logging.Filter):
    """The MCP SDK's stdio client logs a traceback for every line a server writes to stdout that is not JSON-RPC
    (a print, a banner) and goes on: one line that says what happened, and how the server should log, is enough."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.getMessage().startswith("Failed to parse JSONRPC message"):
            record.msg = (
                "the MCP server wrote a line on stdout that is not JSON-RPC (skipped): a stdio server logs to stderr"
            )
            record.args, record.exc_info, record.exc_text = (), None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simia", description="Simulated MCP tool environments for agent training.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (worlds, serve, judge, rollout, export, synth, demo, importer, bootstrap, fidelity, view, db):
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    tail: list[str] = []
    if "--" in words and _takes_command_after_dashes(parser, words[0]):  # `... -- COMMAND ARGS`: a stdio server
        words, tail = words[: words.index("--")], words[words.index("--") + 1 :]
    args = parser.parse_args(words)
    stdio_log = logging.getLogger("mcp.client.stdio")  # commands that start stdio servers: import, serve, fidelity
    if not any(isinstance(f, _NotJsonRpcOnStdout) for f in stdio_log.filters):
        stdio_log.addFilter(_NotJsonRpcOnStdout())
    if tail:
        args.command_after_dashes = tail
    try:
        code: int = args.func(args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.filename is None:
            raise
        # a path the system refused (not writable, gone, a device): say which and why, without a traceback
        print(f"error: {exc.filename}: {exc.strerror or exc}; check the path and its permissions", file=sys.stderr)
        return 2
    return code
