"""`simia synth`: Simia-SFT amplification of seed trajectories (or collection by rollouts via a server)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from simia.clients.api import ServerUnreachable, SimiaApiError, SimiaClient
from simia.sim.backends import BatchBackend
from simia.sim.errors import ImportSourceError
from simia.sim.importers import NGRAM, EvalSet, drop_overlapping
from simia.training.synth import SynthConfig, SynthReport, load_seeds, synthesize, synthesize_via_server

from ._common import (
    CliError,
    add_batch_flags,
    add_model_flags,
    add_worlds_dir,
    backend,
    batch_summary,
    batched,
    bearer_token,
    finite,
    http_url,
    load_world_set,
    number,
    one_world,
    positive,
    writable_dir,
)

__all__ = ["register"]

MAX_TRAJECTORIES = 100_000
"""Trajectories one run may plan: every job is planned up front, so a huge `--n` would fill the memory first."""


async def _served_world(server: str, world: str, token: str | None) -> None:
    """Ask `--via-server` for the world before anything is written: an unreachable server is bad input."""
    async with SimiaClient(server, token=token) as api:
        await api.world(world)


def _synth(args: argparse.Namespace) -> int:
    world = one_world(load_world_set(args), args.world)
    if not 0.0 <= args.dedup_threshold <= 1.0:
        raise CliError(f"--dedup-threshold is a Jaccard similarity from 0 to 1, got {args.dedup_threshold}")
    seeds = []
    if not args.via_server:
        try:
            seeds = load_seeds(world, args.seeds)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        except RecursionError:
            raise CliError(f"--seeds {args.seeds!r}: a line's JSON is nested too deeply to read") from None
        if not seeds and args.seeds:
            raise CliError(f'--seeds {args.seeds!r} holds no seeds; give one {{"messages": [...]}} a line')
        if not seeds:
            raise CliError(f"no seeds: {world.name!r} has no examples/; pass --seeds FILE.jsonl")
    evals, excluded = _excluded(args.exclude, seeds)
    if seeds and len(excluded) == len(seeds):
        raise CliError(f"every seed overlaps --exclude {args.exclude!r}; nothing to amplify")
    seeds = [seed for seed in seeds if seed["id"] not in excluded]
    planned = args.n * (len(seeds) if not args.via_server else len(world.tasks))
    if planned > MAX_TRAJECTORIES:
        raise CliError(f"--n {args.n} plans {planned} trajectories; one run does at most {MAX_TRAJECTORIES}")
    if args.batch and args.via_server:
        raise CliError("--batch amplifies seeds; --via-server runs rollouts, whose calls cannot wait: drop one of them")
    out = writable_dir(args.out, "--out")
    model = batched(backend(args.backend, args, max_concurrency=args.concurrency), args, out / "batch_journal.json")
    config = SynthConfig(
        n=args.n,
        out=out,
        concurrency=model.max_concurrency if args.batch else args.concurrency,  # a batch gathers every request
        temperature=args.temperature,
        prefilter=not args.no_prefilter,
        dedup_threshold=args.dedup_threshold,
    )
    if args.via_server:
        try:
            asyncio.run(_served_world(args.via_server, world.name, args.token))
            report = asyncio.run(
                synthesize_via_server(
                    world, args.via_server, model, model, config, min_reward=args.min_reward, token=args.token
                )
            )
        except (ServerUnreachable, SimiaApiError) as exc:
            raise CliError(str(exc)) from None
    else:
        report = asyncio.run(synthesize(world, seeds, model, config))
    if evals is not None:
        _decontaminated(report, config.out, evals, excluded)
    print(report.render())
    if isinstance(model, BatchBackend):
        print(batch_summary(model))
    print(f"records: {config.out / 'synth.jsonl'}  report: {config.out / 'synth_report.json'}")
    return 0


EXCLUDED = "overlaps_exclude"
"""The drop reason of a generated trajectory whose user turns overlap `--exclude`."""


def _excluded(path: str | None, seeds: list[dict[str, Any]]) -> tuple[EvalSet | None, dict[str, str]]:
    """The evaluation set `--exclude` names (None without it), and the seeds that overlap it (id -> why)."""
    if path is None:
        return None, {}
    try:
        evals = EvalSet.load(path)
    except ImportSourceError as exc:
        raise CliError(f"--exclude: {exc}") from None
    excluded = {}
    for seed in seeds:
        shared = evals.conversation_overlap(seed["messages"])
        if shared:
            excluded[seed["id"]] = f"overlaps the evaluation set (--exclude): a user turn shares {shared!r}"
    return evals, excluded


def _decontaminated(report: SynthReport, out: Path, evals: EvalSet, excluded: dict[str, str]) -> None:
    """Drop the kept records whose user turns overlap the evaluation set, count them and the excluded seeds in the
    report, and write it again. (After the run, over the whole records file: a record an earlier run of this --out
    kept is checked too.)"""
    dropped = drop_overlapping(out / "synth.jsonl", evals)
    report.seeds += len(excluded)
    report.prefilter_dropped.update(excluded)
    if dropped:
        report.dropped[EXCLUDED] += dropped
        report.kept -= min(dropped, report.kept)
    (out / "synth_report.json").write_text(json.dumps(report.as_dict(), indent=1))


def register(sub: Any) -> None:
    p = sub.add_parser("synth", help="Simia-SFT: amplify seed trajectories into many (or collect via rollouts)")
    p.add_argument("--world", required=True)
    p.add_argument("--seeds", metavar="FILE", help='JSONL of {"messages": [...]} (default: the world\'s examples/)')
    p.add_argument("--n", type=positive, default=4, help="new trajectories per seed (or rollouts per task) (4)")
    p.add_argument("--backend", metavar="SPEC", help="the generating model (backend SPEC)")
    add_model_flags(p)
    add_batch_flags(p, journal="OUT/batch_journal.json")
    p.add_argument("--out", default="synth", type=Path, metavar="DIR", help="output folder (default: synth)")
    p.add_argument("--concurrency", type=positive, default=4)
    p.add_argument("--temperature", type=_temperature, default=1.0, help="sampling temperature, 0 to 2 (1)")
    p.add_argument("--no-prefilter", action="store_true", help="skip the LLM pre-filter of seeds")
    p.add_argument("--dedup-threshold", type=float, default=0.9, help="near-duplicate Jaccard threshold (0.9)")
    p.add_argument(
        "--exclude",
        metavar="FILE",
        help=f"an evaluation set (JSONL, JSON or Parquet of instructions or conversations: a benchmark's test split): "
        f"seeds and trajectories whose user turns share a run of {NGRAM} words with it are dropped and counted",
    )
    p.add_argument(
        "--via-server", type=http_url, metavar="URL", help="produce trajectories by rollouts against this simia server"
    )
    p.add_argument("--token", type=bearer_token, help="--via-server: bearer token for the server")
    p.add_argument(
        "--min-reward",
        type=number(0, 1, what="a reward"),
        default=1.0,
        help="--via-server: keep episodes with this reward (from 0 to 1; default 1)",
    )
    add_worlds_dir(p)
    p.set_defaults(func=_synth)


def _temperature(text: str) -> float:
    value = finite(text)
    if not 0.0 <= value <= 2.0:
        raise argparse.ArgumentTypeError(f"a sampling temperature is from 0 to 2, got {text}")
    return value
