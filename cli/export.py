"""`simia export`: logged episodes as training data (OpenAI, Hugging Face, ShareGPT, Hermes, RL rows), built from the
worlds as the database recorded them (`--worlds-dir` only for episodes logged before it did)."""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from pathlib import Path
from typing import Any

from simia.training.export import FORMATS, NothingToExport, export, parse_since

from ._common import CliError, add_worlds_dir, load_world_set, number, readable_db

__all__ = ["register"]


FILE_SUFFIXES = {".jsonl", ".json", ".csv", ".txt", ".ndjson", ".arrow"}
"""Suffixes of files an `--out` for `--format hf` (a dataset folder) would not be meant as."""


def _export(args: argparse.Namespace) -> int:
    readable_db(args.db)
    try:
        since = parse_since(args.since)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if since is not None and not math.isfinite(since):
        raise CliError(f"--since {args.since!r} is not a date: give an ISO date or time or epoch seconds")
    out = Path(args.out)
    folder = args.format == "hf" and out.suffix != ".parquet"
    if out.is_dir() and not folder:
        raise CliError(f"--out {args.out!r} is a folder; give a file path for --format {args.format}")
    if out.exists() and not out.is_dir() and folder:
        raise CliError(f"--out {args.out!r} is a file; give a folder (or a .parquet path) for --format hf")
    if folder and not out.exists() and out.suffix.lower() in FILE_SUFFIXES:
        raise CliError(
            f"--out {args.out!r} names a {out.suffix} file, but --format hf writes a dataset folder: give a folder, "
            "or a .parquet path for one file (JSONL: --format openai, sharegpt or hermes)"
        )
    if not out.parent.is_dir():
        what = "is a file" if out.parent.exists() else "does not exist; create it first"
        raise CliError(f"--out {args.out!r}: folder {str(out.parent)!r} {what}")
    worlds = load_world_set(args) if args.worlds_dir else None
    try:
        report = asyncio.run(
            export(
                args.db,
                args.format,
                out,
                worlds,
                include_masked=args.include_masked,
                world=args.world,
                task=args.task,
                min_reward=args.min_reward,
                status=args.status,
                since=since,
                injected=args.injected,
            )
        )
    except NothingToExport as exc:
        raise CliError(str(exc)) from None
    print(report.render())
    for note in report.notes:
        print(note, file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("export", help="export logged episodes for SFT and RL")
    p.add_argument("--db", default="simia.db", metavar="PATH", help="database of the episodes (default: simia.db)")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--out", required=True, metavar="PATH", help="output file (JSONL), or folder / .parquet for hf")
    p.add_argument("--world", help="only this world")
    p.add_argument("--task", help="only this task")
    p.add_argument(
        "--min-reward",
        type=number(0, 1, what="a reward"),
        help="only episodes whose training reward is at least this (0 to 1; masked ones never); the others are "
        "counted as skipped",
    )
    p.add_argument("--status", choices=["active", "ended", "abandoned"], help="only episodes with this status")
    p.add_argument("--since", metavar="WHEN", help="only episodes created since (ISO date or epoch seconds)")
    p.add_argument(
        "--injected",
        choices=["include", "drop"],
        default="include",
        help="episodes with faults injected by a perturbation: include (default) or drop",
    )
    p.add_argument(
        "--include-masked",
        action="store_true",
        help="also export episodes whose reward is masked (judge error, infrastructure failure, fabricated calls)",
    )
    add_worlds_dir(p)
    p.set_defaults(func=_export)
