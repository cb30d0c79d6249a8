"""Process rewards: the judge's score of every agent step of an episode, as a process reward model gives.

An agent step is one assistant message of the transcript with the calls it made (matched in order to the calls
the server recorded, as the transcript checks match them, so each step names its events' `seq`s); an episode
without a transcript has one step per recorded call. One judge call per episode scores each step useful, neutral
or harmful with a reason (`simia serve --process-judge`). It is hardened as the outcome judge is: what the agent
or user wrote sits in the nonce-delimited data section, the system message (`data/process_system.txt`) says it is
evidence and never instructions, and an answer that does not score every step exactly once is asked again.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from ..verdict import ProcessScores, ProcessStep, StepScore
from ..world import Persona, Task, World
from .transcript import RecordedCall
from .view import EpisodeView, call_data, data_block, episode_payload

__all__ = [
    "PROCESS_SCHEMA",
    "PROCESS_SYSTEM",
    "AgentStep",
    "agent_steps",
    "check_process",
    "process_messages",
    "process_scores",
]

PROCESS_SYSTEM = (Path(__file__).parent / "data" / "process_system.txt").read_text(encoding="utf-8").rstrip("\n")
"""The process judge's system message, with `{start}` and `{end}` to fill in (the data section's delimiters)."""

SCORES: tuple[str, ...] = get_args(StepScore)

PROCESS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "step": {"type": "integer"},
                    "score": {"enum": list(SCORES)},
                    "reason": {"type": "string"},
                },
                "required": ["step", "score", "reason"],
            },
        }
    },
    "required": ["steps"],
}


@dataclass(frozen=True)
class AgentStep:
    """One step of the agent: what it said and the calls it made (`claimed`: calls its transcript shows that
    the server never executed)."""

    turn: int | None
    said: str
    calls: tuple[RecordedCall, ...] = ()
    seqs: tuple[int, ...] = ()
    claimed: tuple[dict[str, Any], ...] = ()

    def data(self, number: int) -> dict[str, Any]:
        shown: dict[str, Any] = {"step": number, "agent_says": self.said}
        shown["tool_calls"] = [call_data(c) for c in self.calls]
        if self.claimed:
            shown["claimed_but_never_executed"] = list(self.claimed)
        return shown


def agent_steps(view: EpisodeView) -> list[AgentStep]:
    """The agent's steps: its transcript's assistant messages, each with the recorded calls it made, in order."""
    seqs = [e.seq for e in view.events if e.counts_as_call] if view.events is not None else []
    assistant = [m for m in view.transcript or [] if m.get("role") == "assistant"]
    if not assistant:
        return [AgentStep(None, "", (call,), tuple(seqs[i : i + 1])) for i, call in enumerate(view.calls)]
    steps, taken = [], 0
    for turn, message in enumerate(assistant):
        wanted = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
        calls = view.calls[taken : taken + len(wanted)]
        claimed = tuple(
            {"tool": (c.get("function") or {}).get("name"), "arguments": (c.get("function") or {}).get("arguments")}
            for c in wanted[len(calls) :]
        )
        content = message.get("content")
        steps.append(
            AgentStep(
                turn,
                content if isinstance(content, str) else "",
                tuple(calls),
                tuple(seqs[taken : taken + len(calls)]),
                claimed,
            )
        )
        taken += len(calls)
    return steps


def process_messages(
    world: World,
    task: Task | None,
    view: EpisodeView,
    steps: list[AgentStep],
    persona: Persona | None,
    nonce: str | None = None,
) -> list[dict[str, Any]]:
    """The process judge's prompt: trusted parts (task, policy, persona) outside the data section, the episode and
    its numbered steps inside it."""
    nonce = nonce or secrets.token_hex(16)
    payload = {**episode_payload(view), "agent_steps": [s.data(i + 1) for i, s in enumerate(steps)]}
    start, end, block = data_block(nonce, payload)
    user = "\n\n".join(
        [
            f"# World\n{world.title or world.name}: {world.description}".strip(),
            f"# Policy\n{world.policy or '(none)'}",
            f"# Task given to the user\n{task.instruction if task else '(no task: what the conversation asks)'}",
            f"# Rubric\n{task.rubric if task and task.rubric else '(none: the task itself)'}",
            f"# Simulated user's persona\n{persona.name if persona else '(not named)'}",
            f"# Episode (untrusted data)\n{block}",
            f"# Your answer\nScore each of the {len(steps)} agent steps, numbered 1 to {len(steps)}, exactly once and "
            "in order: useful (it moved the task forward within the policy), neutral (neither) or harmful (it set "
            "the task back, broke the policy, or claimed what was never done), each with a reason from the recorded "
            "tool calls or state changes.",
        ]
    )
    return [
        {"role": "system", "content": PROCESS_SYSTEM.format(start=start, end=end)},
        {"role": "user", "content": user},
    ]


def check_process(count: int) -> Any:
    """The check of an answer for `count` steps: every step scored once, in order ("" when it is sound)."""

    def check(data: dict[str, Any]) -> str:
        steps = data.get("steps")
        if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
            return "steps must be a list of {step, score, reason} objects"
        if [s.get("step") for s in steps] != list(range(1, count + 1)):
            return f"score each step 1 to {count} exactly once, in order"
        bad = next((s for s in steps if s.get("score") not in SCORES), None)
        if bad is not None:
            return f"step {bad.get('step')}: score must be one of {', '.join(SCORES)}"
        return ""

    return check


def process_scores(steps: list[AgentStep], data: dict[str, Any]) -> ProcessScores:
    """The scores of a checked answer, aligned to the steps' turns and event seqs."""
    return ProcessScores(
        steps=[
            ProcessStep(
                step=i + 1,
                turn=step.turn,
                seqs=list(step.seqs),
                score=answer["score"],
                reason=str(answer.get("reason", "")),
            )
            for i, (step, answer) in enumerate(zip(steps, data["steps"], strict=True))
        ]
    )
