"""The Open Reward Standard's wire, as simia serves it (server/ors.py): the request bodies and the task spec, the
answers (`RunToolOutput`, `ToolOutput` with a call's shaped reward, `GroupScore`) built from episodes and
verdicts, and the SSE stream that carries a call's answer. Shapes as the `openreward` package's reference server
defines them."""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from simia.sim.perturbation import Perturbation
from simia.sim.records import EpisodeRecord, EventRecord
from simia.sim.verdict import ProgressStep, Verdict, masked_why
from simia.sim.wire import META_EPISODE, META_ERROR_CODE, META_ERROR_KIND, META_INJECTED, META_SEQ, Seed
from simia.sim.world import openai_tool_call
from starlette.requests import Request
from starlette.responses import StreamingResponse

from ._body import read_body
from .errors import BadRequest
from .requests import refuse_duplicate_keys
from .step_rewards import META_PROGRESS

__all__ = [
    "PING_SECONDS",
    "Candidate",
    "CreateSession",
    "ScoreGroup",
    "SplitQuery",
    "TaskAt",
    "TaskRange",
    "TaskSpec",
    "ToolCall",
    "answer_stream",
    "infra",
    "masked_why",
    "openai_transcript",
    "parse",
    "problems",
    "refused",
    "request_key",
    "sse",
    "sse_event",
    "success",
    "text_block",
    "tool_output",
    "verdict_json",
    "verdict_output",
]

PING_SECONDS = 10.0
"""How often a stream that waits for its answer sends an SSE comment (the `openreward` client's read timeout is
30 s)."""
M = TypeVar("M", bound=BaseModel)


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskSpec(Body):
    """What an ORS session is created from: a task of the world (as `/tasks` lists it), or an episode to fork.

    Attributes:
        id: the task's id (`instruction` and `user_hidden` are listed with it, and ignored when sent back).
        seed: the episode's seed (replayable simulator answers and injected faults).
        perturbation: faults to inject into a share of the calls (overrides the world's setting).
        group: sessions with the same group key (and task and seed) form a GRPO group: the first one's
            episode is the group's snapshot, and each later one forks it at its start.
        fork, step: fork this episode (of the same principal) after `step` (default: its last step).
    """

    id: str | None = Field(default=None, min_length=1)
    instruction: str | None = None
    user_hidden: str | None = None
    split: str | None = None
    seed: Seed | None = None
    perturbation: Perturbation | None = None
    group: str | None = Field(default=None, min_length=1, max_length=256)
    fork: str | None = Field(default=None, min_length=1)
    step: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_source(self) -> TaskSpec:
        if self.fork is None and self.id is None:
            raise ValueError("a task spec names a task (`id`) or an episode to fork (`fork`)")
        if self.fork is not None and (self.id, self.seed, self.perturbation, self.group) != (None,) * 4:
            raise ValueError("a fork takes its task, seed and perturbation from its parent: give `fork` and `step`")
        if self.step is not None and self.fork is None:
            raise ValueError("`step` is the step of the episode to fork: give `fork` with it")
        return self


class SplitQuery(Body):
    split: str


class TaskAt(Body):
    split: str
    index: int


class TaskRange(Body):
    split: str
    start: int | None = None
    stop: int | None = None


class CreateSession(Body):
    env_name: str | None = None
    task_spec: dict[str, Any] | None = None
    split: str | None = None
    index: int | None = None
    toolset_name: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> CreateSession:
        if (self.task_spec is not None) == (self.split is not None and self.index is not None):
            raise ValueError("give either task_spec or both split and index")
        if (self.split is None) != (self.index is None):
            raise ValueError("split and index go together")
        return self


class ToolCall(Body):
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    task_id: str | None = Field(default=None, min_length=1, max_length=200)


class Candidate(Body):
    messages: list[dict[str, Any]]
    metadata: dict[str, Any] | None = None


class ScoreGroup(Body):
    candidates: list[Candidate] = Field(min_length=1, max_length=1024)
    task_id: str | None = None


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def success(output: dict[str, Any]) -> str:
    return json.dumps({"ok": True, "output": output})


def refused(reason: Literal["not_found", "input_validation", "episode_finished"], error: str) -> str:
    return json.dumps({"ok": False, "error": error, "reason": reason})


def infra(text: str, code: str, episode_id: str | None) -> str:
    """An infrastructure failure: a tool answer marked `infra` (the episode's verdict will be masked), not an
    error of the agent's."""
    meta = {META_ERROR_KIND: "infra", META_ERROR_CODE: code, "is_error": True}
    if episode_id is not None:
        meta[META_EPISODE] = episode_id
    return success({"blocks": [text_block(text)], "metadata": meta, "reward": None, "finished": False})


def tool_output(event: EventRecord, episode_id: str, step: ProgressStep | None = None) -> dict[str, Any]:
    """A committed call's ToolOutput: its `reward` is the call's shaped reward (`step`: its progress step; None
    when the task has no checks), and the metadata carries the progress after it."""
    meta: dict[str, Any] = {META_EPISODE: episode_id, META_SEQ: event.seq, "is_error": event.is_error}
    if step is not None:
        meta[META_PROGRESS] = step.progress
    if event.is_error:
        meta[META_ERROR_KIND] = event.error_kind or "agent"
        meta[META_ERROR_CODE] = event.error_code or ""
    if event.injected:
        meta[META_INJECTED] = event.injected
    if event.output is not None:
        meta["output"] = event.output
    reward = step.reward if step is not None else None
    return {"blocks": [text_block(event.text)], "metadata": meta, "reward": reward, "finished": False}


def verdict_json(verdict: Verdict | None) -> dict[str, Any] | None:
    return verdict.as_json() if verdict is not None else None


def verdict_output(episode: EpisodeRecord) -> dict[str, Any]:
    """The terminal tool's answer: the verdict's training reward (None: masked), finished."""
    verdict = episode.verdict
    reward = verdict.training_reward() if verdict is not None else None
    if reward is not None:
        text = f"The episode has ended. Reward: {reward:g}."
    else:
        text = f"The episode has ended. No reward: {masked_why(verdict)}."
    if verdict is not None and verdict.reasons:
        text += " " + " ".join(verdict.reasons)
    meta = {META_EPISODE: episode.id, "status": episode.status, "verdict": verdict_json(verdict)}
    return {"blocks": [text_block(text)], "metadata": meta, "reward": reward, "finished": True}


def openai_transcript(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ORS messages (Anthropic-shaped blocks) as an OpenAI transcript: assistant text and tool calls, tool results
    as `tool` turns, other user text as user turns."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        blocks = [b for b in message.get("blocks") or [] if isinstance(b, dict)]
        texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
        if role == "assistant":
            calls = [
                openai_tool_call(str(b.get("id")), str(b.get("name")), b.get("input") or {})
                for b in blocks
                if b.get("type") == "tool_call"
            ]
            entry: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
        elif role in ("user", "system"):
            for b in blocks:
                if b.get("type") == "tool_result":
                    inner = [
                        str(x.get("text", ""))
                        for x in b.get("blocks") or []
                        if isinstance(x, dict) and x.get("type") == "text"
                    ]
                    out.append(
                        {"role": "tool", "tool_call_id": str(b.get("tool_call_id")), "content": "\n".join(inner)}
                    )
            if texts:
                out.append({"role": role, "content": "\n".join(texts)})
    return out


async def parse(request: Request, model: type[M]) -> M:
    """The body as `model`, strictly: a JSON value of the wrong type (`"7"` or `true` for a seed) is refused, never
    converted, and so is a key given twice in one object.

    Raises:
        BadRequest: naming the field (or the repeated key).
    """
    raw = await read_body(request)
    refuse_duplicate_keys(raw)
    try:
        return model.model_validate_json(raw if raw.strip() else b"{}", strict=True)
    except ValidationError as exc:
        raise BadRequest(problems(exc)) from None


def problems(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False)[:5]:
        where = ".".join(str(part) for part in error["loc"]) or "body"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)


def request_key(principal: str, sid: str, task_id: str, name: str, arguments: dict[str, Any]) -> str:
    """The episode call's request key: a resend of the same call (same session, task id or idempotency key, tool
    and arguments) is answered the committed event."""
    try:
        raw = json.dumps([principal, sid, task_id, name, arguments], sort_keys=True, default=str)
    except (ValueError, RecursionError):  # arguments no JSON can carry: the simulator refuses them anyway
        raw = secrets.token_hex(16)
    return hashlib.blake2b(raw.encode(), digest_size=16).hexdigest()


def sse_event(name: str, data: str) -> str:
    return f"event: {name}\ndata: {data}\n\n"


def sse(events: AsyncIterator[str]) -> StreamingResponse:
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)


async def answer_stream(task_id: str, job: asyncio.Task[str]) -> AsyncIterator[str]:
    """ORS's answer stream: the task id (a client that loses the stream resends the request with it), a comment
    every `PING_SECONDS` while the answer is computed, then the answer as one `end` event (the job keeps running
    if the client goes away, so a resend finds its answer)."""
    yield sse_event("task_id", task_id)
    while not job.done():
        await asyncio.wait({job}, timeout=PING_SECONDS)
        if not job.done():
            yield ": ping\n\n"
    if job.cancelled():
        yield sse_event("error", "the call was cancelled (the server is stopping); resend it")
        return
    error = job.exception()
    if error is not None:
        yield sse_event("error", " ".join(str(error).split()) or type(error).__name__)
        return
    yield sse_event("end", job.result())
