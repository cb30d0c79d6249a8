"""The values the client hands back: a world with its tasks, an episode, a tool result and an ended episode's
verdict, read from the server's JSON (unknown fields are kept in `raw`, so a newer server never breaks them).

`training_reward(verdict)` is simia's one rule for the reward a trainer may learn from
(`simia.sim.verdict.Verdict.training_reward`, restated here because this package cannot import simia; a test
holds the two equal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Ended", "Episode", "Task", "ToolResult", "World", "training_reward"]


def training_reward(verdict: dict[str, Any] | None) -> float | None:
    """The reward a trainer may learn from, or None to mask the sample.

    Masked: no verdict, judge errors and unjudged episodes (no score exists), episodes with an infrastructure
    failure (the environment went wrong, not the policy) and transcripts that fabricate tool calls or results.
    A plain 0 is a real score and is kept.
    """
    if not verdict:
        return None
    reward = verdict.get("reward")
    if verdict.get("status", "ok") != "ok" or reward is None:
        return None
    if verdict.get("infra_failures") or verdict.get("fabricated"):
        return None
    return float(reward)


@dataclass(frozen=True)
class Task:
    """One task of a world: what the user wants (`instruction`) and what only the simulated user knows."""

    id: str
    instruction: str
    user_hidden: str | None = None


@dataclass(frozen=True)
class World:
    """A served world: its policy, its tools in MCP's wire shape, and its tasks (never rubrics)."""

    name: str
    policy: str
    tools: list[dict[str, Any]]
    tasks: list[Task]
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, data: dict[str, Any]) -> World:
        tasks = [Task(str(t["id"]), str(t.get("instruction", "")), t.get("user_hidden")) for t in data.get("tasks", [])]
        return cls(str(data["name"]), str(data.get("policy") or ""), list(data.get("tools") or []), tasks, data)

    def task(self, task_id: str) -> Task:
        """The task `task_id`.

        Raises:
            KeyError: the world has no such task (the message lists the ones it has).
        """
        for task in self.tasks:
            if task.id == task_id:
                return task
        known = ", ".join(t.id for t in self.tasks) or "(none)"
        raise KeyError(f"world {self.name!r} has no task {task_id!r}; its tasks: {known}")


@dataclass(frozen=True)
class Episode:
    """An episode as `POST /v1/episodes` (or `/fork`) answered: its id and its own MCP URL."""

    id: str
    world: str
    task: str | None
    seed: int | None
    mcp_url: str
    group_id: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Episode:
        return cls(
            str(data["id"]),
            str(data["world"]),
            data.get("task"),
            data.get("seed"),
            str(data["mcp_url"]),
            data.get("group_id"),
            data,
        )


@dataclass(frozen=True)
class ToolResult:
    """One answered tool call.

    Attributes:
        text: the result's text (what the policy reads, and what the transcript's `tool` message carries).
        structured: the tool's structured output, when it succeeded.
        is_error: the call failed (a bad call of the model, a simulated tool error, or the environment's failure).
        error_kind: `agent` (the model's mistake: learn from it) or `infra` (the environment's: the episode's
            reward will be masked), None when the call succeeded.
        error_code: the tool's documented error code, or a generic one (`unknown_tool`, `invalid_arguments`, ...).
        seq: the call's number in the episode (a resent call answers with the number it was committed under).
        injected: the kind of a fault the environment injected on purpose (perturbation mode), else None.
    """

    text: str
    structured: dict[str, Any] | None = None
    is_error: bool = False
    error_kind: str | None = None
    error_code: str | None = None
    seq: int | None = None
    injected: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, result: dict[str, Any]) -> ToolResult:
        meta = result.get("_meta") or {}
        texts = [str(c.get("text", "")) for c in result.get("content") or [] if c.get("type") == "text"]
        return cls(
            "\n".join(texts),
            result.get("structuredContent"),
            bool(result.get("isError", False)),
            meta.get("simia/error_kind"),
            meta.get("simia/error_code"),
            meta.get("simia/seq"),
            meta.get("simia/injected"),
            result,
        )


@dataclass(frozen=True)
class Ended:
    """An ended episode: its verdict and the reward to train on.

    Attributes:
        id: the episode.
        verdict: the judge's verdict as the server sent it (`reward`, `status`, `reasons`, `rule_checks`, ...).
        reward: the verdict's raw 0/1 reward (None when nothing could be scored).
        training_reward: the reward a trainer may learn from, None to mask the sample (`training_reward()`).
    """

    id: str
    verdict: dict[str, Any]
    reward: int | None
    training_reward: float | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Ended:
        verdict = dict(data.get("verdict") or {})
        return cls(str(data["id"]), verdict, verdict.get("reward"), training_reward(verdict), data)
