"""`simia judge`: re-judge stored episodes, or measure the judge on the adversarial transcript set."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from simia.sim.judging import Judge, rejudge, run_adversarial
from simia.sim.verdict import Verdict

from ._common import CliError, add_model_flags, add_worlds_dir, backend, load_world_set, open_db

__all__ = ["register"]


def _judge(args: argparse.Namespace) -> int:
    model = backend(args.backend, args) if args.backend != "none" else None
    judge = Judge(model)
    worlds = load_world_set(args)
    if args.adversarial:
        if "mock" not in worlds:
            raise CliError("the adversarial set runs on the bundled mock world; pass --worlds-dir with it")
        report = asyncio.run(run_adversarial(judge, worlds["mock"]))
        print(report.render(model.spec if model else "rules only"))
        return 0
    if not args.episodes:
        raise CliError("give EPISODE_ID... to re-judge (from --db), or --adversarial")
    store = open_db(args.db, must_exist=True)

    async def run() -> int:
        failures = 0
        try:
            async for episode_id, outcome in rejudge(judge, store, worlds, args.episodes):
                if isinstance(outcome, Verdict):
                    print(json.dumps({"id": episode_id, **outcome.model_dump(include={"reward", "status", "reasons"})}))
                else:
                    print(f"{episode_id}: {outcome}", file=sys.stderr)
                    failures += 1
        finally:
            await store.close()
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
    p.add_argument("--db", default="simia.db", metavar="PATH", help="database of the episodes (default: simia.db)")
    add_worlds_dir(p)
    p.set_defaults(func=_judge)
