"""The stored records: an episode and one of its tool calls (an event), as every store keeps them.

Plain dataclasses shared by the store implementations, the server and the exports;
`EventRecord.counts_as_call` is the one rule for which events count as calls. An episode's state is not in its
record as stored: it is a base state, kept once for every episode that starts from it, and patches (the episode's
`base_patches`, then its events' `state_patch`), which `StatePath` lists and `Store.state_at` applies.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pydantic_core import to_json

from .verdict import Verdict

__all__ = [
    "BUDGET_CODES",
    "REFUSED_ARGUMENTS",
    "EpisodeRecord",
    "EventRecord",
    "PastCall",
    "Progress",
    "StatePath",
    "result_text",
]

BUDGET_CODES = frozenset({"budget_calls", "budget_tokens"})
"""The error codes of a call an episode's budget refused: such a call never ran, so it is not a call."""
REFUSED_ARGUMENTS = "simia/refused_arguments"
"""The one member of a refused call's stored arguments when they could not be kept (over the size or depth limit,
NaN): a note of what was refused stands for them."""


_unicode_json = json.JSONEncoder(ensure_ascii=False).encode
_ascii_json = json.JSONEncoder().encode


def result_text(output: Any, *, ascii: bool = False) -> str:
    """The text of a simulated successful result: its output as JSON (a string output as itself, as an API that
    answers a bare string sends it), which the agent reads beside the structured output. Stores keep an event's
    text only when it is not this (most are), so a call's output is stored once. `ascii`: non-ASCII characters
    escaped as `\\uXXXX`, as Python's `json.dumps` writes them by default (a world's `simulator.ascii_json`)."""
    if isinstance(output, str):
        return output
    return _ascii_json(output) if ascii else _unicode_json(output)


@dataclass
class EpisodeRecord:
    """One episode as stored.

    Attributes:
        initial_state, state: the states at its start and after its last event, when the record holds them (a
            record just created, or a live episode's); None in a record read from a store, which never loads
            states with an episode (`Store.state_at` rebuilds one).
        base_hash: the digest of the base state its initial state was made from (`Store.put_base`); "" until
            the store that creates the episode sets it.
        base_patches: the RFC 6902 patches, in order, that turn the base into its initial state: a task's
            `initial_state_patch`; for a fork, its parent's base patches and then the parent's event patches up
            to the fork step.
    """

    id: str
    world: str
    world_hash: str
    initial_state: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    base_hash: str = ""
    base_patches: list[list[dict[str, Any]]] = field(default_factory=list)
    task: str | None = None
    seed: int | None = None
    principal: str = ""
    status: str = "active"
    seq: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    parent_id: str | None = None
    fork_step: int | None = None
    group_id: str | None = None
    verdict: Verdict | None = None
    perturbation: dict[str, Any] | None = None
    transcript: list[dict[str, Any]] | None = None
    tokens: dict[str, Any] | None = None
    status_reason: str | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    ended_at: float | None = None

    def advance(self, event: EventRecord, new_state: dict[str, Any] | None) -> None:
        """Apply a committed event to this record, as the store's commit did (`EventRecord.counter_deltas`)."""
        calls, prompt, completion, cost = event.counter_deltas()
        self.seq = event.seq
        self.calls += calls
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.cost_usd += cost
        self.updated_at = event.created_at
        if new_state is not None:
            self.state = new_state

    def summary(self) -> dict[str, Any]:
        """The JSON shape of an episode in lists (no state, events or transcript)."""
        return {
            "id": self.id,
            "world": self.world,
            "task": self.task,
            "seed": self.seed,
            "status": self.status,
            "status_reason": self.status_reason,
            "steps": self.seq,
            "calls": self.calls,
            "usage": {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "cost_usd": round(self.cost_usd, 6),
            },
            "parent_id": self.parent_id,
            "fork_step": self.fork_step,
            "group_id": self.group_id,
            "perturbation": self.perturbation,
            "reward": self.verdict.reward if self.verdict is not None else None,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "ended_at": self.ended_at,
        }


@dataclass
class EventRecord:
    """One tool call of an episode, as committed."""

    tool: str
    arguments: dict[str, Any]
    output: Any  # an object; any JSON value where a tool without an outputSchema answered one (None on error)
    text: str
    is_error: bool
    error_code: str | None = None
    error_kind: str | None = None
    state_patch: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    latency_ms: float = 0.0
    model: str = ""
    detail: str = ""
    request_key: str | None = None
    seq: int = 0
    created_at: float = field(default_factory=time.time)
    injected: str | None = None  # the kind of an injected fault (simia.sim.engine.faults), else None
    source: str = "simulated"  # "real": answered by the world's real server (a tool with `route: real`)
    side: str = "agent"  # "user": a call of the user's own tool (a dual-control world's `user_tools`)

    @property
    def counts_as_call(self) -> bool:
        """Whether the event is a call: one a budget refused (`BUDGET_CODES`) never ran, so it is not."""
        return self.error_code not in BUDGET_CODES

    def counter_deltas(self) -> tuple[int, int, int, float]:
        """What the event adds to its episode's counters: (calls, prompt tokens, completion tokens, cost USD).
        The one definition of that arithmetic: stores apply it in their commit, `EpisodeRecord.advance` in
        memory."""
        usage = self.usage
        return (
            1 if self.counts_as_call else 0,
            usage.get("prompt_tokens", 0),
            usage.get("completion_tokens", 0),
            usage.get("cost_usd") or 0.0,
        )

    @cached_property
    def past(self) -> PastCall:
        """The event as the simulator's window shows it (made once: it stays in several windows)."""
        return PastCall(self.tool, self.arguments, self.text if self.is_error else self.output, self.is_error)

    def public(self) -> dict[str, Any]:
        """The event as the HTTP API returns it (developer detail included, request key not)."""
        return {
            "seq": self.seq,
            "tool": self.tool,
            "arguments": self.arguments,
            "output": self.output,
            "text": self.text,
            "is_error": self.is_error,
            "error_code": self.error_code,
            "error_kind": self.error_kind,
            "state_patch": self.state_patch,
            "usage": self.usage,
            "latency_ms": round(self.latency_ms, 2),
            "model": self.model,
            "detail": self.detail,
            "time": self.created_at,
            "injected": self.injected,
            "source": self.source,
            "side": self.side,
        }


@dataclass(frozen=True)
class StatePath:
    """How to rebuild an episode's state at a step (`Store.state_path`): the base, then these patches in order."""

    base_hash: str
    """The digest of the base state (`Store.base` reads it)."""
    patches: list[list[dict[str, Any]]]
    """The episode's `base_patches`, then the non-empty `state_patch` of each of its events up to the step."""


@dataclass
class Progress:
    """Where an episode's committed log stands (`Store.progress`), with the events a copy at an earlier `seq`
    lacks: a replica catches its cached copy up by applying them instead of reading the whole episode again."""

    seq: int
    status: str
    events: list[EventRecord]
    """The events after the asked `seq`, oldest first, at most the asked number (all of them when
    `seq - asked <= len(events)`)."""


@dataclass(frozen=True)
class PastCall:
    """One earlier call of the episode, as the simulator sees it in its window."""

    tool: str
    arguments: dict[str, Any]
    output: Any
    is_error: bool

    @cached_property
    def line(self) -> str:
        """The call as a window line, rendered once (a call appears in the windows of many later calls)."""
        outcome = "ERROR " if self.is_error else ""
        return f"{self.tool} {_short(self.arguments, 200)} -> {outcome}{_short(self.output, 160)}"


def _short(value: Any, limit: int) -> str:
    text = to_json(value, fallback=str).decode()
    return text if len(text) <= limit else text[: limit - 3] + "..."
