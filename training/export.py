"""Exports of logged episodes for training, each record checked before it is written.

Formats:
  openai    OpenAI fine-tuning JSONL: `messages` (tool calls with JSON-string arguments) and `tools`
  hf        a Hugging Face `datasets` dataset (save_to_disk folder, or `.parquet`) with `messages` and
            `tools` columns exactly as TRL's SFTTrainer takes them (arguments as objects)
  sharegpt  `conversations` with from human/gpt/function_call/observation, plus `system` and `tools`
            (Simia's released SFT format; LLaMA-Factory's `sharegpt`)
  hermes    Hermes function calling: `<tools>` in the system turn, `<tool_call>` / `<tool_response>` turns
  rl        one JSON line per episode with its verdict, reward (null when masked: with include_masked only),
            group and fork lineage, messages, tools and token data when the episode has them, ordered by group,
            and the dense rewards of a task with checks: `step_rewards`, one per assistant turn of `messages`
            (`turn_rewards`), and `progress` (Phi at the start and the end, gamma)
An episode whose verdict is masked (`Verdict.training_reward()` is None: a judge error, an infrastructure
failure, a fabricated transcript), or that has no verdict at all (still active, or never judged), never becomes a
record unless asked for (`include_masked`, `--include-masked`: then `rl` rows carry it with `masked: true` and a
null reward); it is reported as skipped with why, as is one below `min_reward`. A record
whose tool calls do not pair with their results, or whose client transcript claims tool calls or results the
server never produced, is reported with its reasons and skipped, never silently written (`rl` rows keep fabricated
ones when masked ones are included); so is an SFT record whose tool calls break the tool's `inputSchema` or call a
tool the world lacks (an `rl` row keeps them: they are the agent's mistakes, which its reward judges).

Each record is built from the world as it was served to its episode, read from the database
(`simia.sim.storage.EpisodeWorlds`): a world folder is needed only for episodes logged before the database kept
worlds, and a folder's world that differs from the stored one is reported and not used.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simia.clients.prompt import agent_system_prompt
from simia.sim.errors import SimiaError
from simia.sim.judging import fabricated_claims, recorded_calls
from simia.sim.records import EpisodeRecord, EventRecord
from simia.sim.storage import EpisodeWorlds, open_store, unmatched_filter
from simia.sim.verdict import ProgressCurve, outcome
from simia.sim.world import World, check_tool_calls, openai_tool, openai_tool_call

__all__ = [
    "FORMATS",
    "ExportReport",
    "NothingToExport",
    "check_transcript",
    "export",
    "hermes_record",
    "hf_row",
    "openai_record",
    "parse_since",
    "sharegpt_record",
    "transcript_of",
    "turn_rewards",
]

FORMATS = ("openai", "hf", "sharegpt", "hermes", "rl")
BELOW_MIN_REWARD = "below --min-reward"


class NothingToExport(SimiaError):
    """A `world` or `task` filter names what no episode of the database has (a misspelt name, another database)."""


def _args_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def transcript_of(
    episode: EpisodeRecord, events: list[EventRecord], world: World | None = None
) -> list[dict[str, Any]]:
    """The episode's transcript, or one rebuilt from its events when the client sent none."""
    if episode.transcript:
        return [dict(m) for m in episode.transcript]
    messages: list[dict[str, Any]] = [{"role": "system", "content": agent_system_prompt(world.policy if world else "")}]
    task = world.task(episode.task) if world and episode.task else None
    if task is not None:
        messages.append({"role": "user", "content": task.instruction})
    for event in events:
        if not event.counts_as_call:
            continue
        call_id = f"call_{event.seq}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [openai_tool_call(call_id, event.tool, event.arguments)],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": event.text})
    return messages


def turn_rewards(
    transcript: list[dict[str, Any]], events: list[EventRecord], progress: ProgressCurve | None
) -> list[float] | None:
    """The shaped reward of each assistant turn of `transcript`, in order: the sum of the progress rewards of the
    calls it made (0 for a turn without calls); None when the episode has no progress curve (no checks).

    The transcript's tool calls pair with the calls the server executed in order, as the judge pairs them
    (`recorded_calls`); a call the server never ran (a fabricated one) earns nothing."""
    if progress is None:
        return None
    by_seq = {step.seq: step.reward for step in progress.steps}
    rewards = iter([by_seq.get(e.seq, 0.0) for e in events if e.counts_as_call])
    return [
        math.fsum(next(rewards, 0.0) for _ in m.get("tool_calls") or [])
        for m in transcript
        if m.get("role") == "assistant"
    ]


def check_transcript(
    world: World, transcript: list[dict[str, Any]], events: list[EventRecord] | None = None, *, sft: bool = True
) -> list[str]:
    """Why a transcript is unfit for training (empty when it is fit): tool calls that do not pair with results,
    results or calls the server never produced (when its `events` are given), and for SFT formats tool calls that
    do not fit the world's tools and no assistant turn to learn from (RL keeps an agent's bad calls: its reward
    judges them)."""
    problems = check_tool_calls(transcript, {t.name: t for t in world.tools}, fit=sft)
    if events is not None:
        calls = recorded_calls(events)
        problems += [f"fabricated: {claim}" for claim in fabricated_claims(transcript, calls)]
    if sft and not any(m.get("role") == "assistant" for m in transcript):
        problems.append("no assistant turn to train on")
    return problems


def openai_record(world: World, transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """One OpenAI fine-tuning record: `messages` (tool calls with JSON-string arguments) and `tools`."""
    messages = []
    for m in transcript:
        entry = {k: m[k] for k in ("role", "content", "tool_calls", "tool_call_id") if k in m}
        if entry.get("role") == "assistant" and entry.get("tool_calls"):
            entry["tool_calls"] = [
                {**c, "function": {**c["function"], "arguments": _args_text(c["function"]["arguments"])}}
                for c in entry["tool_calls"]
            ]
        messages.append(entry)
    return {"messages": messages, "tools": [openai_tool(t) for t in world.tools]}


def hf_row(world: World, transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """A row for TRL: arguments as objects (chat templates expect dicts; a string would be double-encoded)."""
    record = openai_record(world, transcript)
    for message in record["messages"]:
        for call in message.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        if message.get("content") is None:
            message["content"] = ""
    if not record["messages"] or record["messages"][0]["role"] != "system":  # templates insert their own otherwise
        record["messages"].insert(0, {"role": "system", "content": agent_system_prompt(world.policy)})
    return record


def sharegpt_record(world: World, transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """ShareGPT / APIGen-MT style, as in Simia's released SFT data."""
    system = next((str(m.get("content") or "") for m in transcript if m["role"] == "system"), "")
    system = system or agent_system_prompt(world.policy)
    conversations = []
    for m in transcript:
        if m["role"] == "user":
            conversations.append({"from": "human", "value": str(m.get("content") or "")})
        elif m["role"] == "assistant" and m.get("tool_calls"):
            for call in m["tool_calls"]:
                fn = call["function"]
                args = json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) else fn["arguments"]
                conversations.append(
                    {"from": "function_call", "value": json.dumps({"name": fn["name"], "arguments": args})}
                )
        elif m["role"] == "assistant":
            conversations.append({"from": "gpt", "value": str(m.get("content") or "")})
        elif m["role"] == "tool":
            conversations.append({"from": "observation", "value": str(m.get("content") or "")})
    tools = [{"name": t.name, "description": t.description or "", "parameters": t.input_schema} for t in world.tools]
    return {"conversations": conversations, "system": system, "tools": json.dumps(tools)}


def hermes_record(world: World, transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Hermes function-calling format (NousResearch): tags in the text, ready for LLaMA-Factory."""
    system = next((str(m.get("content") or "") for m in transcript if m["role"] == "system"), "")
    system = system or agent_system_prompt(world.policy)
    tools = "\n".join(json.dumps(openai_tool(t)) for t in world.tools)
    turns = [
        {
            "from": "system",
            "value": f"{system}\n\nYou may call functions. Available tools:\n<tools>\n{tools}\n"
            '</tools>\nFor each call return <tool_call>{"name": ..., "arguments": '
            "...}</tool_call>.",
        }
    ]
    for m in transcript:
        if m["role"] == "user":
            turns.append({"from": "human", "value": str(m.get("content") or "")})
        elif m["role"] == "assistant":
            parts = [str(m["content"])] if m.get("content") else []
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                args = json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) else fn["arguments"]
                parts.append(f"<tool_call>\n{json.dumps({'name': fn['name'], 'arguments': args})}\n</tool_call>")
            turns.append({"from": "gpt", "value": "\n".join(parts)})
        elif m["role"] == "tool":
            turns.append({"from": "tool", "value": f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"})
    return {"conversations": turns}


@dataclass
class ExportReport:
    """What an export wrote and skipped, and where the worlds of its episodes came from.

    Attributes:
        written: records written.
        skipped: `{"episode", "problems"}` of each episode left out, with why (masked or not judged, below
            `min_reward`, injected faults, a transcript unfit for training).
        path: where the records went.
        notes: world versions served from a folder instead of the database, differing folders, and episodes
            left out because their world is nowhere (by world name and count: `EpisodeWorlds.notes`); the
            command prints them as warnings.
    """

    written: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    path: str = ""
    notes: list[str] = field(default_factory=list)

    def reasons(self) -> Counter[str]:
        """Skipped episodes by why, in a few words: `masked (not judged)`, `below --min-reward`, `injected faults`,
        `unfit for training` (a transcript the checks refused)."""
        return Counter(_reason(s["problems"][0]) if s["problems"] else "unfit for training" for s in self.skipped)

    def render(self) -> str:
        why = ", ".join(f"{reason} {n}" for reason, n in self.reasons().most_common())
        lines = [
            f"wrote {self.written} record(s) to {self.path}; skipped {len(self.skipped)}" + (f": {why}" if why else "")
        ]
        lines += [f"  skipped {s['episode']}: {'; '.join(s['problems'][:3])}" for s in self.skipped]
        return "\n".join(lines)


def _reason(problem: str) -> str:
    """A skipped episode's first problem, in the few words `ExportReport.reasons` counts it by."""
    if problem.startswith("masked ("):
        return problem.split(";", 1)[0].split(":", 1)[0].removesuffix(")") + ")"
    if problem.startswith("training reward ") and f" {BELOW_MIN_REWARD} " in problem:
        return BELOW_MIN_REWARD
    if problem.startswith("injected faults"):
        return "injected faults"
    return "unfit for training"


def parse_since(value: str | None) -> float | None:
    """`--since`: epoch seconds or an ISO date/time (UTC unless it says otherwise); ValueError says the forms."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"--since {value!r} is not a date: give an ISO date or time (2026-11-30, 2026-11-30T12:00) or epoch seconds"
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()


async def export(
    db: str | Path,
    fmt: str,
    out: str | Path,
    worlds: Mapping[str, World] | None = None,
    *,
    include_masked: bool = False,
    world: str | None = None,
    task: str | None = None,
    min_reward: float | None = None,
    status: str | None = None,
    since: float | None = None,
    injected: str = "include",
) -> ExportReport:
    """Export matching episodes of `db` to `out` in `fmt`; returns what was written and skipped (with reasons).

    Args:
        worlds: worlds of the folders the user named (`--worlds-dir`): checked against the stored world each
            episode ran against (a difference is reported, the stored one used), and used for episodes logged
            before the database kept worlds. None: the default world folder, for those episodes only.
        include_masked: keep episodes whose verdict is masked (`Verdict.training_reward()` is None) or that have
            none (still active, or never judged).
        min_reward: leave out (reported as skipped) episodes whose training reward is below this, masked ones too.
        injected: `drop` leaves out episodes with faults injected by a perturbation (`include` keeps them:
            they teach an agent to handle rate limits, timeouts and partial results).
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    store = open_store(db)
    found = EpisodeWorlds(store, worlds)
    try:
        episodes = await store.list_episodes(world=world, task=task, status=status, since=since, limit=10_000_000)
        if not episodes and (world is not None or task is not None):
            named = {name: [t.id for t in spec.tasks] for name, spec in (worlds or {}).items()}
            why = unmatched_filter(await store.task_stats(), world, task, named)
            if why is not None:
                raise NothingToExport(f"{why} in {db}: check the name")
        report = ExportReport(path=str(out))
        rows: list[dict[str, Any]] = []
        for episode in sorted(episodes, key=lambda e: (e.task or "", e.group_id or e.id, e.created_at)):
            reward = episode.verdict.training_reward() if episode.verdict is not None else None
            if reward is None and not include_masked:  # no verdict (still active, never ended) is masked too
                report.skipped.append({"episode": episode.id, "problems": [_masked(episode)]})
                continue
            if min_reward is not None and (reward is None or reward < min_reward):
                shown = "masked" if reward is None else f"{reward:g}"
                why = f"training reward {shown} is {BELOW_MIN_REWARD} {min_reward:g}"
                report.skipped.append({"episode": episode.id, "problems": [why]})
                continue
            spec = await found.world_of(episode)
            if spec is None:
                continue  # counted by world in the notes
            events = await store.events(episode.id)
            faults = sorted({e.injected for e in events if e.injected})
            if faults and injected == "drop":
                report.skipped.append({"episode": episode.id, "problems": [f"injected faults: {', '.join(faults)}"]})
                continue
            transcript = transcript_of(episode, events, spec)
            problems = check_transcript(spec, transcript, events, sft=fmt != "rl")
            if fmt == "rl":
                problems = [p for p in problems if not p.startswith("fabricated: ")]  # kept, masked by the verdict
            if problems:
                report.skipped.append({"episode": episode.id, "problems": problems})
                continue
            rows.append(_row(fmt, spec, episode, transcript, events))
    finally:
        await store.close()
    _write(fmt, rows, Path(out))
    report.written = len(rows)
    report.notes = found.notes()
    return report


def _masked(episode: EpisodeRecord) -> str:
    """Why an episode without a usable reward is left out, and the flag that keeps it."""
    if episode.verdict is None:
        state = "the episode is still active: end it to judge it" if episode.status == "active" else episode.status
        return f"masked (not judged: {state}); pass --include-masked to export it"
    return f"{outcome(episode.verdict)}; pass --include-masked to export it"


def _row(
    fmt: str, world: World, episode: EpisodeRecord, transcript: list[dict[str, Any]], events: list[EventRecord]
) -> dict[str, Any]:
    if fmt == "openai":
        return openai_record(world, transcript)
    if fmt == "hf":
        return hf_row(world, transcript)
    if fmt == "sharegpt":
        return sharegpt_record(world, transcript)
    if fmt == "hermes":
        return hermes_record(world, transcript)
    verdict = episode.verdict
    reward = verdict.training_reward() if verdict is not None else None
    progress = verdict.progress if verdict is not None else None
    sources = Counter(e.source for e in events)  # "real": answered by the world's real server (`route: real`)
    return {
        "episode_id": episode.id,
        "world": episode.world,
        "task": episode.task,
        "group": episode.group_id or episode.id,
        "parent_id": episode.parent_id,
        "fork_step": episode.fork_step,
        "reward": reward,
        "masked": reward is None,
        "outcome": str(outcome(verdict)),
        "verdict_status": verdict.status if verdict is not None else None,
        "status": episode.status,
        **openai_record(world, transcript),
        "step_rewards": turn_rewards(transcript, events, progress),
        "progress": None
        if progress is None
        else {"start": progress.start, "end": progress.end, "gamma": progress.gamma},
        **({"tokens": episode.tokens} if getattr(episode, "tokens", None) else {}),
        **({"sources": dict(sources)} if sources["real"] else {}),
    }


def _write(fmt: str, rows: Iterable[dict[str, Any]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "hf":
        from datasets import Dataset  # optional extra (train)

        dataset = Dataset.from_list(list(rows), on_mixed_types="use_json")
        if out.suffix == ".parquet":
            dataset.to_parquet(str(out))
        else:
            dataset.save_to_disk(str(out))
        return
    with out.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
