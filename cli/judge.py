"""`simia judge`: re-judge stored episodes (against the worlds the database recorded), or measure the judge on the
adversarial transcript set."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from simia.sim.backends import BatchBackend, Usage
from simia.sim.judging import Judge, rejudge, run_adversarial
from simia.sim.storage import EpisodeWorlds
from simia.sim.verdict import Verdict, outcome

from ._common import (
    CliError,
    add_batch_flags,
    add_model_flags,
    add_worlds_dir,
    backend,
    batch_summary,
    batched,
    load_world_set,
    open_db,
)

__all__ = ["register"]


def _judge(args: argparse.Namespace) -> int:
    if args.batch and (args.adversarial or args.backend == "none"):
        raise CliError("--batch re-judges stored episodes with a judge model; drop --batch for this run")
    model = backend(args.backend, args) if args.backend != "none" else None
    if model is not None:
        model = batched(model, args, Path("judge_batch_journal.json"))
    judge = Judge(model)
    if args.adversarial:
        worlds = load_world_set(args)
        if "mock" not in worlds:
            raise CliError("the adversarial set runs on the bundled mock world; pass --worlds-dir with it")
        report = asyncio.run(run_adversarial(judge, worlds["mock"]))
        print(report.render(model.spec if model else "rules only"))
        return 0
    if not args.episodes:
        raise CliError("give EPISODE_ID... to re-judge (from --db), or --adversarial")
    folders = load_world_set(args) if args.worlds_dir else None
    store = open_db(args.db, must_exist=True)

    async def run() -> int:
        failures, usage = 0, Usage()
        worlds = EpisodeWorlds(store, folders)
        try:
            concurrency = model.max_concurrency if isinstance(model, BatchBackend) else 1
            async for episode_id, judged in rejudge(judge, store, worlds, args.episodes, concurrency=concurrency):
                if isinstance(judged, Verdict):
                    usage = usage + Usage.from_dict(judged.usage)
                    shown = judged.model_dump(include={"reward", "status", "reasons"})
                    print(json.dumps({"id": episode_id, "outcome": str(outcome(judged)), **shown}))
                else:
                    print(f"{episode_id}: {judged}", file=sys.stderr)
                    failures += 1
        finally:
            await store.close()
        for note in worlds.notes():
            print(note, file=sys.stderr)
        if model is not None:
            print(f"judge: {usage.describe()}", file=sys.stderr)
        if isinstance(model, BatchBackend):
            print(batch_summary(model), file=sys.stderr)
        return 1 if failures else 0

    return asyncio.run(run())


def register(sub: Any) -> None:
    p = sub.add_parser("judge", help="re-judge stored episodes, or run the adversarial judge set")
    p.add_argument("episodes", nargs="*", metavar="EPISODE_ID")
    p.add_argument(
        "--adversarial",
        action="store_true",
        help="run the adversarial transcript set and print the judge's false-positive rate",
    )
    p.add_argument(
        "--backend",
        metavar="SPEC",
        help="judge model (default: local, or openai/anthropic when their key is set); 'none': rules only",
    )
    add_model_flags(p)
    add_batch_flags(p, journal="judge_batch_journal.json")
    p.add_argument("--db", default="simia.db", metavar="PATH", help="database of the episodes (default: simia.db)")
    add_worlds_dir(p)
    p.set_defaults(func=_judge)
