"""`simia import seeds FILE... --out DIR`: worlds from public tool-use datasets (APIGen-MT, xLAM, Hermes, ToolACE,
glaive, Nemotron, Toucan, OpenAI chat logs), one world per tool set, its seeds as examples and tasks.

A thin wrapper over `simia.sim.importers.seeds.import_seeds`: it checks the flags, runs the import and prints what
it read per file, the worlds it wrote, and the records it skipped counted by reason (all of it is also in
DIR/seeds_report.json, and each world's own conversions in its import_report.json). docs/seeds.md has the formats.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from simia.sim.errors import ImportSourceError, WorldError, WorldExistsError
from simia.sim.importers import NGRAM, SEED_FORMATS, EvalSet, SeedsImport, import_seeds

from ._common import CliError, existing_file, whole, writable_dir

__all__ = ["register_seeds"]

_SHOWN = 30  # worlds and skip reasons printed; seeds_report.json has them all


def register_seeds(sub: Any) -> None:
    """Add `seeds` to the sub-commands of `simia import` (`sub` is its `add_subparsers()` action)."""
    s = sub.add_parser(
        "seeds",
        help="import seed datasets (APIGen-MT, xLAM, Hermes, ToolACE, glaive, Nemotron, Toucan, OpenAI chat): one "
        "world per tool set, the seeds as its examples and tasks",
        description="simia import seeds FILE... --out DIR [--format auto|" + "|".join(SEED_FORMATS[1:]) + "] "
        "[--max-examples N] [--exclude FILE] [--force]. Records are streamed (a file of millions imports in bounded "
        "memory); each record skipped is counted with its reason. docs/seeds.md says what each format's records hold.",
    )
    s.add_argument("files", nargs="+", metavar="FILE", help="JSONL, JSON (one array) or Parquet files; .gz is read too")
    s.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="folder of worlds to write into (one world per tool set)"
    )
    s.add_argument(
        "--format",
        choices=SEED_FORMATS,
        default="auto",
        help="the records' format (auto: told from each file's first record; apigen is sharegpt, nemotron is openai)",
    )
    s.add_argument(
        "--max-examples",
        type=whole(0, 1000),
        default=3,
        metavar="N",
        help="seeds kept as each world's examples, the simulator's style guide (3); every seed is a task",
    )
    s.add_argument(
        "--exclude",
        metavar="FILE",
        help=f"an evaluation set (JSONL, JSON or Parquet of instructions or conversations: a benchmark's test split): "
        f"a seed whose user turns share a run of {NGRAM} words with it is skipped and counted (decontamination)",
    )
    s.add_argument("--force", action="store_true", help="replace world folders that already exist (all of each)")
    s.set_defaults(func=_import_seeds)


def _import_seeds(args: argparse.Namespace) -> int:
    for file in args.files:
        existing_file(file, "seed file", "give JSONL, JSON or Parquet files: simia import seeds FILE... --out DIR")
    out = writable_dir(args.out, "--out")
    try:
        exclude = EvalSet.load(args.exclude) if args.exclude else None
        result = import_seeds(
            args.files,
            out,
            fmt=args.format,
            force=args.force,
            max_examples=args.max_examples,
            progress=_progress,
            exclude=exclude,
        )
    except (ImportSourceError, WorldExistsError) as exc:
        raise CliError(str(exc)) from None
    except WorldError as exc:  # a converter bug, not the user's: say what the loader found
        first = exc.issues[0] if exc.issues else exc
        raise CliError(f"an imported world does not validate, nothing written: {first}") from None
    _print_files(result, sys.stdout if result.worlds else sys.stderr)
    if not result.worlds:
        _print_skipped(result, sys.stderr)
        raise CliError(
            f"none of the {result.records} record(s) became a seed, nothing written: see the reasons above "
            "(docs/seeds.md says what each format's records need)"
        )
    print(f"wrote {len(result.worlds)} world(s) to {out} ({result.seeds} seed(s)):")
    width = max(len(w.name) for w in result.worlds[:_SHOWN])
    for world in result.worlds[:_SHOWN]:
        counts = f"{world.tools:>3} tool(s)  {world.seeds:>6} seed(s)  {world.examples} example(s)"
        print(f"  {world.name:<{width}}  {counts}")
    if len(result.worlds) > _SHOWN:
        print(f"  ... {len(result.worlds) - _SHOWN} more in {result.report}")
    _print_skipped(result, sys.stdout)
    print(f"report: {result.report} (each world's conversions: WORLD/import_report.json)")
    print(f"next: simia validate {out}  |  simia serve --worlds-dir {out}")
    return 0


def _progress(file: str, records: int) -> None:
    print(f"{file}: {records:,} records read", file=sys.stderr)


def _print_files(result: SeedsImport, stream: TextIO) -> None:
    print(f"read {result.records} record(s) from {len(result.files)} file(s):", file=stream)
    width = max(len(f.path) for f in result.files)
    for f in result.files:
        print(f"  {f.path:<{width}}  {f.format:<8}  {f.records:>7} record(s)  {f.seeds:>7} seed(s)", file=stream)


def _print_skipped(result: SeedsImport, stream: TextIO) -> None:
    if not result.skipped:
        print("skipped nothing", file=stream)
        return
    total = sum(s.count for s in result.skipped)
    print(f"skipped {total} record(s):", file=stream)
    for skipped in result.skipped[:_SHOWN]:
        print(f"  {skipped.count:>7}  {skipped.reason}  (first: {skipped.first})", file=stream)
    if len(result.skipped) > _SHOWN:
        print(f"  ... {len(result.skipped) - _SHOWN} more reasons in the report", file=stream)
