"""The wire: simia's HTTP API bodies and MCP `_meta` keys, defined once for the server and its clients.

The server parses requests into these models and renders answers from them; the
typed client (`simia.clients.api`) parses the same answers into the same classes,
so the two cannot drift. Requests forbid unknown fields; answers ignore fields a
newer server may add.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .perturbation import Perturbation
from .verdict import Verdict
from .world.model import Task, ToolSpec

__all__ = [
    "META_EPISODE",
    "META_ERROR_CODE",
    "META_ERROR_KIND",
    "META_INJECTED",
    "META_PROGRESS",
    "META_REWARD",
    "META_SEQ",
    "SEED_LIMIT",
    "CreateEpisode",
    "EndEpisode",
    "EndedEpisode",
    "Episode",
    "EpisodeDetail",
    "EpisodeList",
    "ErrorBody",
    "ErrorDetail",
    "Event",
    "ForkEpisode",
    "Health",
    "Seed",
    "TaskInfo",
    "TokenData",
    "UsageTotals",
    "WorldInfo",
    "WorldList",
]

SEED_LIMIT = 2**62
"""An episode's seed lies within +-this: it is stored as a 64-bit integer, and a call's seed is derived from it."""
Seed = Annotated[int, Field(ge=-SEED_LIMIT, le=SEED_LIMIT)]
"""An episode's seed, as every protocol that creates episodes takes it."""

META_EPISODE = "simia/episode"
"""`_meta` key of every MCP result and `tools/list` answer: the episode id."""
META_SEQ = "simia/seq"
"""`_meta` key of a tool result: the event's sequence number in its episode."""
META_ERROR_KIND = "simia/error_kind"
"""`_meta` key of an error result: `agent` (a bad call, learn from it) or `infra` (retry on a fresh episode)."""
META_ERROR_CODE = "simia/error_code"
"""`_meta` key of an error result: one of the tool's documented codes or a small generic set."""
META_INJECTED = "simia/injected"
"""`_meta` key of a result a perturbation changed: the fault's kind (`simia.sim.engine.faults`)."""
META_REWARD = "simia/reward"
"""`_meta` key of a committed call's result, for a task with checks: the call's shaped reward (the progress its
state change made on the task's checks, `ProgressStep.reward`); absent for an episode without checks."""
META_PROGRESS = "simia/progress"
"""`_meta` key beside `META_REWARD`: the progress (Phi, 0 to 1) after the call (`ProgressStep.progress`)."""


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CreateEpisode(_Request):
    """`POST /v1/episodes`: start an episode of a world, optionally for one of its tasks."""

    world: str = Field(min_length=1, max_length=200, description="A world name from GET /v1/worlds.")
    task: str | None = Field(default=None, max_length=1024, description="A task id of that world.")
    seed: Seed | None = Field(default=None, description="Makes the simulation reproducible (answers are cached).")
    perturbation: Perturbation | None = Field(
        default=None, description="Inject realistic faults at this rate (overrides the world's setting)."
    )


class ForkEpisode(_Request):
    """`POST /v1/episodes/{id}/fork`: a new episode from the state after `step` (default: the last)."""

    step: int | None = Field(default=None, ge=0, le=2**62)


TokenId = Annotated[int, Field(ge=0, lt=2**31)]
"""A token id: an index into a vocabulary (every tokenizer's fits in 31 bits)."""


class TokenData(_Request):
    """Token-level RL data of an episode: the policy's prompt and completion ids, with 0 in `env_mask` on
    environment tokens (tool results, user turns), and optional logprobs, one per completion token."""

    prompt_ids: list[TokenId]
    completion_ids: list[TokenId]
    env_mask: list[int] | None = None
    logprobs: list[float] | None = None

    @model_validator(mode="after")
    def _aligned(self) -> TokenData:
        n = len(self.completion_ids)
        if self.env_mask is not None and (len(self.env_mask) != n or not set(self.env_mask) <= {0, 1}):
            raise ValueError(f"env_mask must be {n} values of 0 or 1, one per completion token")
        if self.logprobs is not None and len(self.logprobs) != n:
            raise ValueError(f"logprobs must have {n} values, one per completion token (or be omitted)")
        return self


class EndEpisode(_Request):
    """`POST /v1/episodes/{id}/end`: close the episode; the transcript (OpenAI chat messages) lets the judge
    read what the agent said."""

    transcript: list[dict[str, Any]] | None = None
    tokens: TokenData | None = None

    @model_validator(mode="after")
    def _messages(self) -> EndEpisode:
        for i, message in enumerate(self.transcript or []):
            problem = _message_problem(message)
            if problem:
                raise ValueError(f"transcript[{i}]{problem} (an OpenAI chat message)")
        return self


_TOOL_CALL = '{"id": "...", "type": "function", "function": {"name": "...", "arguments": "{...}"}}'


def _message_problem(message: dict[str, Any]) -> str:
    """What makes `message` no OpenAI chat message (empty when it is one): the shapes the judge and the exports
    read, so that a stored transcript never breaks them later. NaN and Infinity are refused too: JSON has
    neither, and the store would keep them as null."""
    role = message.get("role")
    if not isinstance(role, str):
        return " needs a string 'role'"
    if role not in _ROLES:
        return f".role is {_short(role)}; a role is one of {', '.join(_ROLES)}"
    content = message.get("content")
    if not (content is None or isinstance(content, str) or _all(content, dict)):
        return ".content must be a string, a list of content parts (objects) or null"
    calls = message.get("tool_calls")
    if calls is not None and not _all(calls, dict):
        return f".tool_calls must be a list of tool calls {_TOOL_CALL}"
    for j, call in enumerate(calls or []):
        function = call.get("function")
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments"), str | dict)
            or not isinstance(call.get("id", ""), str | None)
        ):
            return f".tool_calls[{j}] must be {_TOOL_CALL} (arguments a JSON string or an object)"
    if not isinstance(message.get("tool_call_id"), str | None):
        return ".tool_call_id must be a string"
    if not _finite(message):
        return " holds NaN or Infinity, which JSON does not have"
    return ""


_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
"""The roles of OpenAI chat messages."""


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


def _all(value: Any, kind: type) -> bool:
    return isinstance(value, list) and all(isinstance(item, kind) for item in value)


def _finite(value: Any) -> bool:
    """No NaN or infinite number anywhere inside `value` (walked without recursion: nesting is unbounded)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


class ErrorDetail(_Answer):
    code: str
    message: str


class ErrorBody(_Answer):
    """Every error answer: `{"error": {"code", "message"}}`; the message says what to fix."""

    error: ErrorDetail


class Health(_Answer):
    status: str
    worlds: int


class TaskInfo(_Answer):
    """A task as a rollout harness sees it. `user_hidden` and `user_turns` are for the user simulator the harness
    runs; the rubric, the expected state and the reference's calls and results stay on the server (the judge's
    and the simulator's), never sent: the harness runs the agent too, and the reference holds the answers."""

    id: str
    instruction: str
    user_hidden: str | None = None
    persona: str | None = Field(default=None, description="How its simulated user behaves (a persona name).")
    user_turns: list[str] = Field(
        default_factory=list,
        description="What the user said in the task's reference conversation, in order (its user turns only).",
    )

    @classmethod
    def of(cls, task: Task) -> TaskInfo:
        """What a harness may see of `task` (its reference reduced to the user's own turns)."""
        return cls(
            id=task.id,
            instruction=task.instruction,
            user_hidden=task.user_hidden,
            persona=task.persona,
            user_turns=_user_turns(task.reference or []),
        )


def _user_turns(messages: list[dict[str, Any]]) -> list[str]:
    """The text of each user turn of a conversation in OpenAI chat format (content parts joined), in order."""
    turns: list[str] = []
    for message in messages:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if isinstance(content, str) and content.strip():
            turns.append(content.strip())
    return turns


class WorldInfo(_Answer):
    """A served world: what an agent harness needs to drive episodes of it."""

    name: str
    title: str = ""
    description: str = ""
    version: str = ""
    hash: str = ""
    policy: str = ""
    tools: list[dict[str, Any]] = Field(default_factory=list, description="MCP Tool objects (wire shape).")
    tasks: list[TaskInfo] = Field(default_factory=list)
    mcp_url: str = ""

    def task(self, task_id: str) -> TaskInfo | None:
        return next((t for t in self.tasks if t.id == task_id), None)

    def tool_specs(self) -> list[ToolSpec]:
        """The tools as typed specs (fields a newer server may add are dropped)."""
        known = {f.alias or name for name, f in ToolSpec.model_fields.items()}
        return [ToolSpec.model_validate({k: v for k, v in t.items() if k in known}) for t in self.tools]


class WorldList(_Answer):
    worlds: list[WorldInfo]


class UsageTotals(_Answer):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


class Episode(_Answer):
    """An episode in lists and after create, fork and end."""

    id: str
    world: str
    task: str | None = None
    seed: int | None = None
    status: str
    status_reason: str | None = None
    steps: int = 0
    calls: int = 0
    usage: UsageTotals = Field(default_factory=UsageTotals)
    parent_id: str | None = None
    fork_step: int | None = None
    group_id: str | None = None
    perturbation: dict[str, Any] | None = None
    reward: int | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    ended_at: float | None = None
    mcp_url: str = ""
    user_mcp_url: str | None = Field(
        default=None,
        description="MCP URL of the user's own tools in this episode (a dual-control world's user_tools), for the "
        "user simulator; none when the world has none.",
    )


class EndedEpisode(Episode):
    """The answer of `/end`: the episode with its verdict (None when the server has no judge)."""

    verdict: Verdict | None = None


class Event(_Answer):
    """One committed tool call."""

    seq: int
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    output: Any = None  # an object; any JSON value where a tool without an outputSchema answered one
    text: str = ""
    is_error: bool = False
    error_code: str | None = None
    error_kind: str | None = None
    state_patch: list[dict[str, Any]] = Field(default_factory=list)
    usage: dict[str, Any] = Field(default_factory=dict)
    latency_ms: float = 0.0
    model: str = ""
    detail: str = ""
    time: float = 0.0
    injected: str | None = None
    source: Literal["real", "simulated", "state"] = "simulated"  # state: the tool's grounding answered, no model
    side: Literal["agent", "user"] = "agent"  # user: a call of the user's own tool (the episode's user_mcp_url)


class EpisodeDetail(EndedEpisode):
    """`GET /v1/episodes/{id}`: the episode with its state, events and transcript."""

    state: dict[str, Any] = Field(default_factory=dict)
    initial_state: dict[str, Any] = Field(default_factory=dict)
    events: list[Event] = Field(default_factory=list)
    transcript: list[dict[str, Any]] | None = None
    tokens: dict[str, Any] | None = None


class EpisodeList(_Answer):
    """`GET /v1/episodes`: the caller's episodes, newest first, at most `limit` of them after `offset`."""

    episodes: list[Episode]
    more: bool = False
    """Older episodes match too: ask again with `offset` raised by the number listed."""
