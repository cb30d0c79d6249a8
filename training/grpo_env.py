"""The GRPO environment: a TRL environment class built from a world's tools, one instance per rollout, each
a simia episode of its group's snapshot (the first rollout's episode, whose step 0 the others fork: every
rollout ends, so no episode stays open), with the tools as methods that call it over MCP; and TRL's
`environment_factory` keyed by world, whose environments own their reward (`get_reward`: the judge's verdict)."""

from __future__ import annotations

import inspect
import json
import keyword
import re
import threading
from collections.abc import Sequence
from typing import Any

import mcp_types as types
from simia.clients.api import SimiaClient, SyncSimiaClient
from simia.sim.verdict import Outcome
from simia.sim.wire import WorldInfo
from simia.sim.world import ToolSpec

from .grpo_dataset import task_dataset
from .grpo_rewards import OUTCOME, RewardMix

__all__ = ["environment_class", "environment_factory", "environments_dataset"]

_PY = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


def _identifier(name: str) -> str:
    ident = re.sub(r"\W", "_", name)
    return f"{ident}_" if keyword.iskeyword(ident) or not ident or ident[0].isdigit() else ident


def _tool_method(tool: ToolSpec) -> Any:
    """A method whose signature and docstring carry the tool's JSON schema (TRL builds tool schemas from them)."""
    props: dict[str, Any] = tool.input_schema.get("properties") or {}
    required = set(tool.input_schema.get("required") or [])
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    doc_args = []
    for name, schema in props.items():
        kind = schema.get("type") if isinstance(schema, dict) else None
        hint: Any = _PY.get(kind if isinstance(kind, str) else "string", str)
        if name not in required:
            hint = hint | None
        annotations[name] = hint
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=hint,
                default=inspect.Parameter.empty if name in required else None,
            )
        )
        text = " ".join(str(schema.get("description") or name).split()) if isinstance(schema, dict) else name
        if isinstance(schema, dict) and "enum" in schema:
            text += f" (choices: {json.dumps(schema['enum'])})"
        doc_args.append(f"    {name}: {text}")

    async def method(self: Any, **kwargs: Any) -> str:
        arguments = {k: v for k, v in kwargs.items() if v is not None}
        return str(await self._call(tool.name, arguments))

    description = " ".join((tool.description or tool.title or tool.name).split())
    method.__name__ = _identifier(tool.name)
    method.__qualname__ = f"SimiaEnvironment.{method.__name__}"
    method.__doc__ = description + ("\n\nArgs:\n" + "\n".join(doc_args) if doc_args else "")
    method.__annotations__ = {**annotations, "return": str}
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    return method


def environment_class(
    server: str,
    world: WorldInfo,
    token: str | None = None,
    *,
    owns_reward: bool = False,
    reward: RewardMix = OUTCOME,
) -> type:
    """The environment class TRL's `environment_factory` instantiates: one instance per rollout.

    Args:
        server: base URL of a running `simia serve`.
        world: the world, as the server describes it.
        token: bearer token for the server.
        owns_reward: give the class `get_reward()` (TRL then scores each rollout with it, and needs no
            `reward_funcs`).
        reward: what a rollout's reward is made of (default: the verdict's training reward).
    """
    firsts: dict[str, str] = {}  # group key -> its first rollout's episode, whose step 0 the others fork
    lock = threading.Lock()

    class SimiaEnvironment:
        """A simia episode as a TRL environment."""

        def __init__(self) -> None:
            self.episode_id: str | None = None
            self.mcp_url: str | None = None
            self.reward: float | None = None
            self.outcome = Outcome("masked", "not ended")
            self._ended = False

        def reset(self, **row: Any) -> str | None:
            task = row.get("task")
            key = str(row.get("group") or task)
            with SyncSimiaClient(server, token=token, timeout=120) as api, lock:
                first = firsts.get(key)
                if first is None:  # the group's snapshot is its first rollout: no episode is left open after it
                    episode = api.create(world.name, task=task)
                    firsts[key] = episode.id
                else:
                    episode = api.fork(first, step=0)
            self.episode_id, self.mcp_url = episode.id, episode.mcp_url
            self.reward, self._ended = None, False
            return None

        async def _call(self, name: str, arguments: dict[str, Any]) -> str:
            assert self.mcp_url is not None, "reset() opens the episode first"
            async with SimiaClient(server, token=token, timeout=120) as api, api.mcp(self.mcp_url) as session:
                result = await session.call_tool(name, arguments)
            return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))

        def _end(self, transcript: list[dict[str, Any]] | None, tokens: dict[str, Any] | None = None) -> float | None:
            """End the episode with the policy's conversation (and token data); the reward of its verdict
            (None: masked, `outcome` says why). Private: TRL exposes every public method as a tool."""
            if self.episode_id is None:
                return None
            with SyncSimiaClient(server, token=token) as api:
                verdict = api.end(self.episode_id, transcript=transcript, tokens=tokens).verdict
            self.reward, self.outcome = reward.score(verdict)
            self._ended = True
            return self.reward

    def get_reward(self: Any) -> float | None:
        """The rollout's reward, owned by the environment: ends the episode and returns its verdict's reward
        (`reward`'s mix; None: masked). The judge reads the calls the server recorded and the final state (TRL does not
        show an environment the policy's messages: `simia_env_reward` ends with them as the transcript). None
        when a reward function ended this rollout already, so one reward is never counted twice."""
        if self._ended:
            return None
        reward: float | None = self._end(None)
        return reward

    if owns_reward:
        SimiaEnvironment.get_reward = get_reward  # type: ignore[attr-defined]
    SimiaEnvironment.__name__ = SimiaEnvironment.__qualname__ = f"simia_{_identifier(world.name)}"
    for tool in world.tool_specs():
        setattr(SimiaEnvironment, _identifier(tool.name), _tool_method(tool))
    return SimiaEnvironment


def _served(server: str, worlds: Sequence[str] | None, token: str | None) -> list[WorldInfo]:
    """The worlds `server` serves, by name (default: all of them)."""
    with SyncSimiaClient(server, token=token) as api:
        served = {w.name: w for w in api.worlds()}
    names = list(worlds) if worlds is not None else list(served)
    unknown = [n for n in names if n not in served]
    if unknown:
        raise ValueError(f"{server} does not serve {', '.join(map(repr, unknown))}; it serves: {', '.join(served)}")
    return [served[n] for n in names]


def environment_factory(
    server: str, worlds: Sequence[str] | None = None, token: str | None = None, *, reward: RewardMix = OUTCOME
) -> dict[str, type]:
    """TRL's `environment_factory` for several worlds: world name -> its environment class, each owning its reward
    (`get_reward`, so `GRPOTrainer` needs no `reward_funcs`). TRL routes each dataset row to the environment its
    `environment` column names (`environments_dataset` writes it).

    Args:
        server: base URL of a running `simia serve`.
        worlds: the worlds to train on (default: every world the server serves).
        token: bearer token for the server.
        reward: what a rollout's reward is made of (`RewardMix`; default: the verdict's training reward).

    Raises:
        ValueError: the server does not serve one of `worlds`.
    """
    served = _served(server, worlds, token)
    return {w.name: environment_class(server, w, token, owns_reward=True, reward=reward) for w in served}


def environments_dataset(
    server: str, worlds: Sequence[str] | None = None, token: str | None = None, *, tasks: str = "all", repeat: int = 8
) -> Any:
    """The prompts of several worlds' tasks (`task_dataset`'s rows, `repeat` times each), each with its
    `environment` column: the dataset `environment_factory` routes."""
    from datasets import concatenate_datasets  # optional extra (train)

    parts = []
    for world in _served(server, worlds, token):
        rows = task_dataset(world, tasks, repeat)
        parts.append(rows.add_column("environment", [world.name] * len(rows)))
    return concatenate_datasets(parts)
