"""What the judges read about one episode: its calls, states, transcript and events, and how they become data.

`EpisodeView` gathers a stored episode (or a hand-built one: the adversarial set's cases); `data_block` wraps
what an agent or user could have written as JSON between nonce-named delimiters, and `episode_payload` is the
outcome judge's and the process judge's shared account of the episode inside it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..records import EpisodeRecord, EventRecord
from ..storage import Store
from ..world import apply_patches, state_diff
from .transcript import RecordedCall, recorded_calls

__all__ = ["EpisodeView", "call_data", "data_block", "episode_payload"]


@dataclass
class EpisodeView:
    """What the judge reads about one episode; `events` is None for a view made of two states alone (no
    per-call history: no progress curve)."""

    initial_state: dict[str, Any]
    final_state: dict[str, Any]
    calls: list[RecordedCall] = field(default_factory=list)
    transcript: list[dict[str, Any]] | None = None
    infra_failures: int = 0
    events: list[EventRecord] | None = None

    @classmethod
    async def read(cls, store: Store, episode: EpisodeRecord, transcript: list[dict[str, Any]] | None) -> EpisodeView:
        """A stored episode as the judge reads it: its events, and its initial and final states (rebuilt from its
        base and patches: they share the base, so the diff compares what the episode changed only)."""
        events = await store.events(episode.id)
        initial = await store.state_at(episode.id, 0)
        final = apply_patches(initial, [event.state_patch for event in events])  # the patches just read
        infra = sum(1 for e in events if e.is_error and e.error_kind == "infra")
        return cls(initial, final, recorded_calls(events), transcript, infra, events)


def data_block(nonce: str, payload: dict[str, Any]) -> tuple[str, str, str]:
    """(start, end, block): `payload` as JSON between nonce-named delimiters, for a model to read as data."""
    start, end = f"<<<DATA {nonce}>>>", f"<<<END DATA {nonce}>>>"
    body = json.dumps(payload, ensure_ascii=True, indent=1)  # agent text only ever appears inside JSON strings
    body = body.replace(nonce, "[nonce removed]")
    return start, end, f"{start}\n{body}\n{end}"


def call_data(call: RecordedCall) -> dict[str, Any]:
    """One recorded call as the judges read it: tool, arguments, whether it failed, and its result."""
    return {
        "tool": call.tool,
        "arguments": call.arguments,
        "is_error": call.is_error,
        "result": call.output if not call.is_error else call.text,
        **({"injected_fault": call.injected} if call.injected else {}),
    }


def episode_payload(view: EpisodeView) -> dict[str, Any]:
    """The episode as the judges read it inside the data section: the recorded calls, the state's changes and
    the conversation (chat fields only)."""
    conversation = [
        {k: m.get(k) for k in ("role", "content", "tool_calls", "tool_call_id") if m.get(k) is not None}
        for m in (view.transcript or [])
        if m.get("role") in {"user", "assistant", "tool"}
    ]
    return {
        "recorded_tool_calls": [call_data(c) for c in view.calls],
        "state_changes": state_diff(view.initial_state, view.final_state),
        "conversation": conversation,
    }
