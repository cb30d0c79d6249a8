"""`simia export`: logged episodes as training data (OpenAI, Hugging Face, ShareGPT, Hermes, RL rows)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from simia.training.export import FORMATS, export, parse_since

from ._common import CliError, add_worlds_dir, existing_file, load_world_set

__all__ = ["register"]


def _export(args: argparse.Namespace) -> int:
    existing_file(args.db, "database", "pass --db PATH (the file `simia serve --db` wrote)")
    try:
        since = parse_since(args.since)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    out = Path(args.out)
    if out.is_dir() and not (args.format == "hf" and out.suffix != ".parquet"):
        raise CliError(f"--out {args.out!r} is a folder; give a file path for --format {args.format}")
    if not out.parent.exists():
        raise CliError(f"--out {args.out!r}: folder {str(out.parent)!r} does not exist; create it first")
    worlds = load_world_set(args)
    report = asyncio.run(
        export(
            args.db,
            args.format,
            out,
            worlds,
            world=args.world,
            task=args.task,
            min_reward=args.min_reward,
            status=args.status,
            since=since,
            injected=args.injected,
        )
    )
    print(report.render())
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("export", help="export logged episodes for SFT and RL")
    p.add_argument("--db", default="simia.db", metavar="PATH", help="database of the episodes (default: simia.db)")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--out", required=True, metavar="PATH", help="output file (JSONL), or folder / .parquet for hf")
    p.add_argument("--world", help="only this world")
    p.add_argument("--task", help="only this task")
    p.add_argument(
        "--min-reward", type=float, help="only episodes whose training reward is at least this (masked ones never)"
    )
    p.add_argument("--status", choices=["active", "ended", "abandoned"], help="only episodes with this status")
    p.add_argument("--since", metavar="WHEN", help="only episodes created since (ISO date or epoch seconds)")
    p.add_argument(
        "--injected",
        choices=["include", "drop"],
        default="include",
        help="episodes with faults injected by a perturbation: include (default) or drop",
    )
    add_worlds_dir(p)
    p.set_defaults(func=_export)
