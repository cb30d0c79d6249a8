"""Simia-SFT: amplify a few seed trajectories into many, with an LLM playing the whole episode.

Stages (each drop is counted with its reason in `synth_report.json`):
  (a) pre-filter: an LLM checks each seed for completeness, logic and format;
  (b) amplification: one LLM call writes a whole new trajectory (user turns, reasoning, tool
      calls, simulated tool outputs) from the tools, the policy and one reference seed,
      sampled at temperature for diversity, `n` per seed;
  (c) rule post-processing: JSON repair of arguments, drop calls to unknown tools and
      arguments that break `inputSchema`, unify the format (ids pairing calls and results),
      drop near-duplicates.
`via_server` instead produces trajectories by real rollouts against the simulated server.
Re-running skips finished work (`synth_state.jsonl`).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import json_repair
from simia.clients.api import SimiaClient
from simia.clients.prompt import agent_system_prompt
from simia.clients.rollout import RolloutConfig, rollout
from simia.sim.backends import Backend, CompletionRequest, Usage
from simia.sim.errors import BackendError
from simia.sim.world import World, check_tool_calls, openai_tool_call, world_card

from .export import openai_record

__all__ = ["SynthConfig", "SynthReport", "load_seeds", "repair_json", "synthesize", "synthesize_via_server"]

SEED_CHECK = {
    "type": "object",
    "properties": {
        "complete": {"type": "boolean"},
        "logical": {"type": "boolean"},
        "format_ok": {"type": "boolean"},
        "reason": {"type": "string"},
    },
    "required": ["complete", "logical", "format_ok", "reason"],
}
TRAJECTORY = {
    "type": "object",
    "properties": {
        "messages": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "role": {"enum": ["user", "assistant", "tool"]},
                    "content": {"type": "string"},
                    "tool_calls": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"name": {"type": "string"}, "arguments": {}},
                            "required": ["name", "arguments"],
                        },
                    },
                },
                "required": ["role", "content"],
            },
        },
    },
    "required": ["messages"],
}


@dataclass
class SynthConfig:
    """One `simia synth` run.

    Attributes:
        n: new trajectories per seed.
        out: folder for synth.jsonl (kept records), synth_state.jsonl (resume) and synth_report.json.
        concurrency: LLM calls in flight.
        temperature: sampling temperature of amplification (diversity).
        prefilter: run the LLM pre-filter on seeds.
        dedup_threshold: Jaccard similarity of 5-gram shingles above which a trajectory is a near-duplicate.
        max_tokens: cap on each generated trajectory.
    """

    n: int = 4
    out: Path = Path("synth")
    concurrency: int = 4
    temperature: float = 1.0
    prefilter: bool = True
    dedup_threshold: float = 0.9
    max_tokens: int = 2048


@dataclass
class SynthReport:
    seeds: int = 0
    prefilter_dropped: dict[str, str] = field(default_factory=dict)
    generated: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    kept: int = 0
    repaired: int = 0
    skipped_done: int = 0
    usage: Usage = field(default_factory=Usage)
    """What this run's model calls cost (pre-filter and amplification)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "seeds": self.seeds,
            "prefilter_dropped": self.prefilter_dropped,
            "generated": self.generated,
            "dropped": dict(self.dropped),
            "repaired_arguments": self.repaired,
            "kept": self.kept,
            "skipped_already_done": self.skipped_done,
            "usage": self.usage.as_dict(),
        }

    def render(self) -> str:
        drops = ", ".join(f"{k} {v}" for k, v in sorted(self.dropped.items())) or "none"
        return (
            f"seeds {self.seeds} (pre-filter dropped {len(self.prefilter_dropped)}), generated {self.generated}, "
            f"dropped: {drops}; kept {self.kept} (arguments repaired in {self.repaired}); "
            f"{self.skipped_done} already done\n{self.usage.describe()}"
        )


def load_seeds(world: World, path: str | Path | None = None) -> list[dict[str, Any]]:
    """Seed trajectories: the world's examples, or a JSONL file of {"messages": [...]} (optional "id")."""
    if path is None:
        return [{"id": e.name or f"example{i}", "messages": e.messages} for i, e in enumerate(world.examples)]
    file = Path(path)
    if not file.is_file():
        raise ValueError(f'no seeds file at {str(path)!r}; pass --seeds FILE.jsonl (one {{"messages": [...]}} a line)')
    seeds = []
    for i, line in enumerate(file.read_text(encoding="utf-8", errors="replace").splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            messages = row["messages"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f'{path}:{i + 1}: expected a JSON object with "messages" (OpenAI chat messages)') from None
        if not isinstance(messages, list):
            raise ValueError(f'{path}:{i + 1}: "messages" must be a list of OpenAI chat messages')
        seeds.append({"id": str(row.get("id", f"seed{i}")), "messages": messages})
    return seeds


def repair_json(text: str) -> tuple[Any, bool]:
    """Parse model-written JSON, repairing what models get wrong (fences, trailing commas, quotes, Python literals).

    The repair is json-repair's parser, which knows strings from syntax: the text inside a
    string is never rewritten (`"None left"` stays as written).

    Returns:
        (value, whether a repair was needed).

    Raises:
        ValueError: nothing in the text could be read as JSON.
    """
    try:
        return json.loads(text), False
    except json.JSONDecodeError:
        pass
    value = json_repair.repair_json(text, return_objects=True, skip_json_loads=True)
    if value == "":  # json-repair's answer when it finds no JSON value in the text
        raise ValueError(f"arguments are not JSON even after repair: {text[:80]!r}")
    return value, True


def _shingles(text: str, k: int = 5) -> set[str]:
    words = re.findall(r"\w+", text.lower())
    return {" ".join(words[i : i + k]) for i in range(max(1, len(words) - k + 1))}


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def _unify(messages: list[dict[str, Any]], report: SynthReport) -> list[dict[str, Any]]:
    """Generated messages -> OpenAI format: ids pair each call with the next tool result; arguments repaired."""
    out: list[dict[str, Any]] = []
    open_ids: list[str] = []
    counter = 0
    repaired = False
    for m in messages:
        role, content = m.get("role"), m.get("content") or ""
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                counter += 1
                call = call.get("function", call)  # OpenAI-format calls nest name/arguments under "function"
                args = call.get("arguments", {})
                if isinstance(args, str):
                    args, fixed = repair_json(args)
                    repaired |= fixed
                calls.append(openai_tool_call(f"call_{counter}", str(call.get("name")), args))
                open_ids.append(f"call_{counter}")
            out.append({"role": "assistant", "content": content or None, "tool_calls": calls})
        elif role == "tool":
            out.append(
                {"role": "tool", "tool_call_id": open_ids.pop(0) if open_ids else "unpaired", "content": content}
            )
        else:
            out.append({"role": role, "content": content})
    report.repaired += int(repaired)
    return out


class _State:
    def __init__(self, out: Path) -> None:
        self.path = out / "synth_state.jsonl"
        self.done: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.done[row["key"]] = row

    def record(self, key: str, **outcome: Any) -> None:
        row = {"key": key, **outcome}
        self.done[key] = row
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


async def synthesize(world: World, seeds: list[dict[str, Any]], backend: Backend, config: SynthConfig) -> SynthReport:
    """Run the three stages; kept records are OpenAI fine-tuning records in `out/synth.jsonl`."""
    config.out.mkdir(parents=True, exist_ok=True)
    state, report = _State(config.out), SynthReport(seeds=len(seeds))
    semaphore = asyncio.Semaphore(config.concurrency)
    card = world_card(world)
    tools = {t.name: t for t in world.tools}
    kept_path = config.out / "synth.jsonl"
    kept_shingles = [
        _shingles(json.dumps(json.loads(line)["messages"]))
        for line in (kept_path.read_text().splitlines() if kept_path.is_file() else [])
        if line.strip()
    ]
    lock = asyncio.Lock()

    async def ask(
        messages: list[dict[str, Any]], schema: dict[str, Any], name: str, temperature: float
    ) -> dict[str, Any]:
        async with semaphore:
            completion = await backend.complete(
                CompletionRequest(
                    messages=messages,
                    schema=schema,
                    schema_name=name,
                    max_tokens=config.max_tokens,
                    temperature=temperature,
                )
            )
        report.usage = report.usage + completion.usage
        return completion.data

    async def prefilter(seed: dict[str, Any]) -> bool:
        key = f"prefilter:{seed['id']}"
        if key not in state.done:
            text = json.dumps(seed["messages"], ensure_ascii=False)
            try:
                verdict = await ask(
                    [
                        {"role": "system", "content": card + "\n\nYou review training trajectories."},
                        {
                            "role": "user",
                            "content": "Is this trajectory complete (the request is "
                            "resolved), logical (calls and results are consistent) and well formatted?"
                            f"\n\n{text}",
                        },
                    ],
                    SEED_CHECK,
                    "seed_check",
                    0.0,
                )
                ok = all(bool(verdict.get(k)) for k in ("complete", "logical", "format_ok"))
                state.record(key, ok=ok, reason=str(verdict.get("reason", "")))
            except BackendError as exc:
                state.record(key, ok=False, reason=f"pre-filter failed: {exc}")
        entry = state.done[key]
        if not entry["ok"]:
            report.prefilter_dropped[seed["id"]] = entry["reason"]
        return bool(entry["ok"])

    async def amplify(seed: dict[str, Any], i: int) -> None:
        key = f"{seed['id']}:{i}"
        if key in state.done:
            report.skipped_done += 1
            return
        prompt = (
            f'{card}\n\n# Output format\nOne JSON object {{"messages": [...]}}: user turns, assistant turns '
            "(with reasoning in content and tool_calls [{name, arguments}]), and a tool turn with the tool's "
            "realistic output after every call, consistent with the world.\n\n# Reference trajectory\n"
            f"{json.dumps(seed['messages'], ensure_ascii=False)}\n\n# Your task\nWrite a NEW trajectory "
            f"(variation {i + 1} of {config.n}): a different user, request and path through the tools."
        )
        try:
            data = await ask(
                [
                    {"role": "system", "content": "You write realistic agent trajectories."},
                    {"role": "user", "content": prompt},
                ],
                TRAJECTORY,
                "trajectory",
                config.temperature,
            )
        except BackendError as exc:
            report.dropped["generation_error"] += 1
            state.record(key, outcome="generation_error", reason=str(exc))
            return
        report.generated += 1
        outcome, reason = await _post_process(key, data, tools, world, config, kept_path, kept_shingles, report, lock)
        state.record(key, outcome=outcome, reason=reason)

    kept_seeds = [s for s in seeds if not config.prefilter or await prefilter(s)]
    jobs = [amplify(seed, i) for seed in kept_seeds for i in range(config.n)]
    for done, job in enumerate(asyncio.as_completed(jobs), start=1):
        await job
        print(f"\rsynth [{done}/{len(jobs)}] kept {report.kept}", end="", file=sys.stderr, flush=True)
    if jobs:
        print(file=sys.stderr)
    (config.out / "synth_report.json").write_text(json.dumps(report.as_dict(), indent=1))
    return report


async def _post_process(
    key: str,
    data: dict[str, Any],
    tools: dict[str, Any],
    world: World,
    config: SynthConfig,
    kept_path: Path,
    kept_shingles: list[set[str]],
    report: SynthReport,
    lock: asyncio.Lock,
) -> tuple[str, str]:
    try:
        messages = _unify(list(data.get("messages") or []), report)
    except ValueError as exc:
        report.dropped["invalid_json_arguments"] += 1
        return "invalid_json_arguments", str(exc)
    problems = check_tool_calls(messages, tools)
    if problems:
        kind = (
            "unknown_tool"
            if any("not in tools" in p for p in problems)
            else "schema_violation"
            if any("inputSchema" in p for p in problems)
            else "unpaired_calls"
        )
        report.dropped[kind] += 1
        return kind, problems[0]
    if not any(m["role"] == "assistant" for m in messages) or not any(m["role"] == "user" for m in messages):
        report.dropped["incomplete"] += 1
        return "incomplete", "no user or no assistant turn"
    async with lock:
        shingles = _shingles(json.dumps(messages))
        if any(_jaccard(shingles, other) >= config.dedup_threshold for other in kept_shingles):
            report.dropped["near_duplicate"] += 1
            return "near_duplicate", "too similar to a kept trajectory"
        kept_shingles.append(shingles)
        record = openai_record(world, [{"role": "system", "content": agent_system_prompt(world.policy)}, *messages])
        with kept_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"key": key, **record}, ensure_ascii=False) + "\n")
        report.kept += 1
    return "kept", ""


async def synthesize_via_server(
    world: World,
    server: str,
    agent: Backend,
    user: Backend | None,
    config: SynthConfig,
    *,
    min_reward: float = 1.0,
    max_turns: int = 10,
    token: str | None = None,
) -> SynthReport:
    """Trajectories from real rollouts against the simulated server: each task `n` times, judged episodes whose
    training reward is at least `min_reward` kept (after the same record checks and near-duplicate filter)."""
    config.out.mkdir(parents=True, exist_ok=True)
    async with SimiaClient(server, token=token) as api:
        info = await api.world(world.name)
    run = RolloutConfig(
        server=server,
        world=info,
        tasks=list(info.tasks),
        token=token,
        n=config.n,
        concurrency=config.concurrency,
        max_turns=max_turns,
        out=config.out / "rollouts",
    )
    summary = await rollout(run, agent, user)
    report = SynthReport(seeds=len(world.tasks), generated=len(summary.results))
    kept_path = config.out / "synth.jsonl"
    shingles: list[set[str]] = []
    lock = asyncio.Lock()
    tools = {t.name: t for t in world.tools}
    report.usage = summary.usage()  # the agent's and the user's models: the rollouts' model calls
    kept_path.touch()  # the records file exists, if empty, whatever was kept
    for result in summary.results:
        if result.status != "judged":
            report.dropped[result.status] += 1  # infra_failed, or agent_failed (the agent's own model)
        elif result.training_reward is None or result.training_reward < min_reward:
            report.dropped["low_reward"] += 1
        else:
            body = [m for m in result.transcript if m["role"] != "system"]
            await _post_process(
                f"{result.task}:{result.attempt}",
                {"messages": body},
                tools,
                world,
                config,
                kept_path,
                shingles,
                report,
                lock,
            )
    (config.out / "synth_report.json").write_text(json.dumps(report.as_dict(), indent=1))
    return report
