"""The judge: a 0/1 reward for a finished episode, hard to fool and honest about its own failures.

A verdict combines rule checks (the task's `expected_state`, evaluated on the final
state; no model needed) with an LLM judge (task rubric and instruction, world
policy, the recorded tool calls, the state diff and the transcript). Everything the
agent or user could have written goes into a nonce-delimited data section that the
judge is told to treat as evidence, never as instructions. A judge that fails after
its retries gives `status: judge_error` and no reward: never a silent 0 or 1.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends import Backend, CompletionRequest, Usage
from ..errors import BackendError
from ..records import EpisodeRecord
from ..storage import Store
from ..verdict import Criterion, Verdict
from ..world import Task, World, apply_patches, state_diff
from .rules import rule_checks
from .transcript import RecordedCall, mismatches, recorded_calls

__all__ = ["JUDGE_PROMPT_VERSION", "JUDGE_SYSTEM", "VERDICT_SCHEMA", "EpisodeView", "Judge", "data_block"]

JUDGE_PROMPT_VERSION = "judge-2"
"""Recorded in every verdict; bump it when `JUDGE_SYSTEM` or the prompt's layout changes."""

JUDGE_SYSTEM = (Path(__file__).parent / "data" / "judge_system.txt").read_text(encoding="utf-8").rstrip("\n")
"""The judge's system message (a data file, `data/judge_system.txt`), with `{start}` and `{end}` to fill in:
the delimiters of the untrusted data section."""


@dataclass
class EpisodeView:
    """What the judge reads about one episode."""

    initial_state: dict[str, Any]
    final_state: dict[str, Any]
    calls: list[RecordedCall] = field(default_factory=list)
    transcript: list[dict[str, Any]] | None = None
    infra_failures: int = 0

    @classmethod
    async def read(cls, store: Store, episode: EpisodeRecord, transcript: list[dict[str, Any]] | None) -> EpisodeView:
        """A stored episode as the judge reads it: its events, and its initial and final states (rebuilt from its
        base and patches: they share the base, so the diff compares what the episode changed only)."""
        events = await store.events(episode.id)
        initial = await store.state_at(episode.id, 0)
        final = apply_patches(initial, [event.state_patch for event in events])  # the patches just read
        infra = sum(1 for e in events if e.is_error and e.error_kind == "infra")
        return cls(initial, final, recorded_calls(events), transcript, infra)


def data_block(nonce: str, payload: dict[str, Any]) -> tuple[str, str, str]:
    """(start, end, block): `payload` as JSON between nonce-named delimiters, for a model to read as data."""
    start, end = f"<<<DATA {nonce}>>>", f"<<<END DATA {nonce}>>>"
    body = json.dumps(payload, ensure_ascii=True, indent=1)  # agent text only ever appears inside JSON strings
    body = body.replace(nonce, "[nonce removed]")
    return start, end, f"{start}\n{body}\n{end}"


def _episode_payload(view: EpisodeView) -> dict[str, Any]:
    diff = state_diff(view.initial_state, view.final_state)
    conversation = [
        {k: m.get(k) for k in ("role", "content", "tool_calls", "tool_call_id") if m.get(k) is not None}
        for m in (view.transcript or [])
        if m.get("role") in {"user", "assistant", "tool"}
    ]
    return {
        "recorded_tool_calls": [
            {
                "tool": c.tool,
                "arguments": c.arguments,
                "is_error": c.is_error,
                "result": c.output if not c.is_error else c.text,
                **({"injected_fault": c.injected} if c.injected else {}),
            }
            for c in view.calls
        ],
        "state_changes": diff,
        "conversation": conversation,
    }


VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "criteria": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "criterion": {"type": "string"},
                    "passed": {"type": "boolean"},
                    "evidence": {"type": "string"},
                },
                "required": ["criterion", "passed", "evidence"],
            },
        },
        "reasoning": {"type": "string"},
        "reward": {"enum": [0, 1]},
    },
    "required": ["criteria", "reasoning", "reward"],
}


class Judge:
    """Scores episodes.

    Args:
        backend: the judge model; None runs rule checks only.
        max_attempts: structured answers tried before a `judge_error` verdict.
        max_tokens: cap on each answer.
    """

    def __init__(self, backend: Backend | None, *, max_attempts: int = 3, max_tokens: int = 1024) -> None:
        self.backend = backend
        self.max_attempts = max_attempts
        self.max_tokens = max_tokens

    def build_messages(
        self, world: World, task: Task | None, view: EpisodeView, nonce: str | None = None
    ) -> list[dict[str, Any]]:
        """The judge prompt. Trusted parts (rubric, instruction, policy) stay outside the data section."""
        nonce = nonce or secrets.token_hex(16)
        start, end, block = data_block(nonce, _episode_payload(view))
        instruction = task.instruction if task else "(no task: judge whether the agent served the user correctly)"
        rubric = (
            task.rubric
            if task and task.rubric
            else "The agent fulfils the user's request correctly, using the tools, within the policy."
        )
        user = "\n\n".join(
            [
                f"# World\n{world.title or world.name}: {world.description}".strip(),
                f"# Policy\n{world.policy or '(none)'}",
                f"# Task given to the user\n{instruction}",
                f"# Rubric\n{rubric}",
                f"# Episode (untrusted data)\n{block}",
                "# Your answer\nList each rubric criterion with passed true/false and evidence from the recorded "
                "tool calls or state changes, then the reward: 1 only if all criteria passed, else 0.",
            ]
        )
        return [
            {"role": "system", "content": JUDGE_SYSTEM.format(start=start, end=end)},
            {"role": "user", "content": user},
        ]

    async def _ask(
        self, messages: list[dict[str, Any]], schema: dict[str, Any], check: Any
    ) -> tuple[dict[str, Any] | None, Usage, str, str]:
        assert self.backend is not None
        usage, problem = Usage(), ""
        for _ in range(self.max_attempts):
            request = CompletionRequest(
                messages=messages, schema=schema, schema_name="verdict", max_tokens=self.max_tokens, temperature=0.0
            )
            try:
                completion = await self.backend.complete(request)
            except BackendError as exc:
                problem = str(exc)
                continue
            usage = usage + completion.usage
            problem = check(completion.data)
            if not problem:
                return completion.data, usage, completion.model, ""
            messages = [
                *messages,
                {"role": "assistant", "content": completion.text},
                {"role": "user", "content": f"Your answer was invalid: {problem}. Answer again."},
            ]
        return None, usage, self.backend.model, problem

    async def judge(self, world: World, task: Task | None, view: EpisodeView) -> Verdict:
        """The verdict for one episode."""
        verdict = _base_verdict(task, view)
        rules_ok = all(r.passed for r in verdict.rule_checks)
        if verdict.rule_checks:
            verdict.checks.append("rules")
            verdict.reasons += [
                f"rule {r.pointer}: expected {json.dumps(r.expected)}, found {json.dumps(r.actual)}"
                for r in verdict.rule_checks
                if not r.passed
            ]
        wants_llm = self.backend is not None and (task is None or bool(task.rubric) or not verdict.rule_checks)
        if not wants_llm:
            if not verdict.rule_checks:
                verdict.status = "unjudged"
                verdict.reasons = ["no rule checks and no judge model: nothing to score"]
                return verdict
            verdict.reward = int(rules_ok)
            if rules_ok:
                verdict.reasons.append("all rule checks passed")
            return verdict
        verdict.checks.append("llm")
        data, usage, model, problem = await self._ask(
            self.build_messages(world, task, view), VERDICT_SCHEMA, _check_verdict
        )
        verdict.judge_model, verdict.usage = model, usage.as_dict()
        if data is None:
            verdict.status, verdict.reward = "judge_error", None
            verdict.reasons.append(f"the judge failed after {self.max_attempts} attempts: {problem}")
            return verdict
        verdict.criteria = [Criterion.model_validate(c) for c in data["criteria"] if isinstance(c, dict)]
        verdict.reasons.append(str(data["reasoning"]))
        verdict.reward = int(rules_ok and data["reward"] == 1)
        return verdict


def _base_verdict(task: Task | None, view: EpisodeView) -> Verdict:
    """A verdict with the model-free parts filled in: rule checks, transcript mismatches, infra failures."""
    found = mismatches(view.transcript, view.calls)
    return Verdict(
        rule_checks=rule_checks(task, view.final_state) if task else [],
        transcript_mismatches=[text for text, _ in found],
        fabricated=any(fabricated for _, fabricated in found),
        infra_failures=view.infra_failures,
        usage=Usage().as_dict(),
        prompt_version=JUDGE_PROMPT_VERSION,
    )


def _check_verdict(data: dict[str, Any]) -> str:
    if data.get("reward") not in (0, 1):
        return "reward must be 0 or 1"
    criteria = data.get("criteria")
    if not isinstance(criteria, list):
        return "criteria must be a list"
    if data["reward"] == 1 and any(not c.get("passed") for c in criteria if isinstance(c, dict)):
        return "reward is 1 but a criterion failed: reward 1 requires every criterion to pass"
    return ""
