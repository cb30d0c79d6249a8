"""The built-in agent: any backend SPEC driving an episode over real MCP with the official SDK client.

Every backend answers the same structured action, `{"message", "tool_calls": [{"name",
"arguments"}]}`, whose schema is built from the episode's `tools/list` (each call's
arguments constrained by that tool's `inputSchema`); the transcript is recorded in
OpenAI chat format, tool calls with ids. The loop runs model -> tool calls -> results
-> model until the agent answers without tool calls, the user ends, or `max_turns`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp import Client
from simia.sim.backends import Backend, CompletionRequest, ToolRequest, Usage
from simia.sim.backends.actions import action_schema
from simia.sim.errors import BackendError
from simia.sim.wire import META_EPISODE, META_ERROR_CODE, META_ERROR_KIND
from simia.sim.world import openai_tool, openai_tool_call

from .prompt import agent_system_prompt
from .user import UserSimulator

__all__ = ["Agent", "EpisodeRun", "action_schema"]


@dataclass
class EpisodeRun:
    """The outcome of one agent run against one episode."""

    transcript: list[dict[str, Any]]
    turns: int = 0
    tool_calls: int = 0
    stop: str = ""  # answered | user_done | max_turns | infra_error | agent_error
    infra_error: str = ""  # the environment failed: a tool result marked infra
    agent_error: str = ""  # the agent's (or user's) model failed, or the agent produced nothing usable
    usage: Usage = field(default_factory=Usage)
    episode_id: str = ""


class Agent:
    """A tool-calling agent backed by any simia backend.

    Args:
        backend: the policy model.
        max_turns: model calls per episode before the run stops.
        temperature: sampling temperature of the policy.
        native_tools: use the provider's own tool calling when the backend has it (OpenAI, Anthropic);
            otherwise, and for the embedded model, the structured action constrained by `action_schema`.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        max_turns: int = 10,
        temperature: float = 0.7,
        max_tokens: int = 512,
        native_tools: bool = True,
    ) -> None:
        self.backend = backend
        self.native_tools = native_tools
        self.max_turns = max_turns
        self.temperature = temperature
        self.max_tokens = max_tokens

    async def run(
        self,
        episode: str | Client,
        *,
        instruction: str,
        policy: str = "",
        user: UserSimulator | None = None,
        seed: int | None = None,
    ) -> EpisodeRun:
        """Run one episode: `episode` is an episode's MCP URL or an open SDK `Client` on it
        (`SimiaClient.mcp(episode)` gives one that carries the bearer token). With `seed`, every model
        request carries a seed derived from it (turn by turn), where the provider accepts one."""
        if isinstance(episode, Client):
            return await self._run(episode, instruction, policy, user, seed)
        async with Client(episode) as client:
            return await self._run(client, instruction, policy, user, seed)

    async def _run(
        self, client: Client, instruction: str, policy: str, user: UserSimulator | None, seed: int | None
    ) -> EpisodeRun:
        run = EpisodeRun(transcript=[])
        try:
            await self._loop(client, instruction, policy, user, run, seed)
        except BackendError as exc:  # the policy's or the user's model, after its own retries
            run.stop, run.agent_error = "agent_error", f"the agent's model failed: {exc}"
            return run
        said = any(m.get("role") == "assistant" and (m.get("content") or "").strip() for m in run.transcript)
        if run.tool_calls == 0 and not said and run.stop != "infra_error":
            run.stop, run.agent_error = "agent_error", "the agent's model produced no tool call and no message"
        return run

    async def _loop(
        self,
        client: Client,
        instruction: str,
        policy: str,
        user: UserSimulator | None,
        run: EpisodeRun,
        seed: int | None,
    ) -> None:
        listed = await client.list_tools()
        tools = listed.tools
        schema = action_schema(tools)
        native = bool(getattr(self.backend, "supports_tools", False)) and self.native_tools
        function_tools = [openai_tool(t) for t in tools]
        run.transcript.append({"role": "system", "content": agent_system_prompt(policy, None if native else tools)})
        if listed.meta:
            run.episode_id = str(listed.meta.get(META_EPISODE, ""))
        view: list[dict[str, Any]] = [dict(run.transcript[0])]  # what the model reads (plain roles)
        first = await user.start(instruction) if user else instruction
        run.usage = run.usage + (user.usage if user else Usage())
        run.transcript.append({"role": "user", "content": first})
        view.append({"role": "user", "content": first})
        calls_made = 0
        while run.turns < self.max_turns:
            run.turns += 1
            turn_seed = None if seed is None else seed * 1_000 + run.turns
            if native:  # the provider's own tool calling, on the OpenAI-format transcript itself
                completion = await self.backend.complete_tools(
                    ToolRequest(
                        messages=run.transcript,
                        tools=function_tools,
                        max_tokens=self.max_tokens,
                        temperature=self.temperature,
                        seed=turn_seed,
                    )
                )
            else:
                completion = await self.backend.complete(
                    CompletionRequest(
                        messages=view,
                        schema=schema,
                        schema_name="agent_action",
                        max_tokens=self.max_tokens,
                        temperature=self.temperature,
                        seed=turn_seed,
                    )
                )
            run.usage = run.usage + completion.usage
            message = str(completion.data.get("message") or "")
            calls = [c for c in completion.data.get("tool_calls") or [] if isinstance(c, dict)]
            view.append({"role": "assistant", "content": json.dumps(completion.data, ensure_ascii=False)})
            if not calls:
                run.transcript.append({"role": "assistant", "content": message})
                if user is None:
                    run.stop = "answered"
                    break
                reply, done = await user.reply(message)
                run.usage = run.usage + user.take_usage()
                if done:
                    run.stop = "user_done"
                    if reply:
                        run.transcript.append({"role": "user", "content": reply})
                    break
                run.transcript.append({"role": "user", "content": reply})
                view.append({"role": "user", "content": reply})
                continue
            entries = []
            for call in calls:
                calls_made += 1
                entries.append(
                    openai_tool_call(f"call_{calls_made}", str(call.get("name")), call.get("arguments") or {})
                )
            run.transcript.append({"role": "assistant", "content": message or None, "tool_calls": entries})
            results = []
            for entry, call in zip(entries, calls, strict=True):
                result = await client.call_tool(str(call.get("name")), dict(call.get("arguments") or {}))
                text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
                run.transcript.append({"role": "tool", "tool_call_id": entry["id"], "content": text})
                results.append(f"Result of {entry['id']} {call.get('name')}: {text}")
                run.tool_calls += 1
                meta = result.meta or {}
                if result.is_error and meta.get(META_ERROR_KIND) == "infra":
                    run.infra_error = f"{meta.get(META_ERROR_CODE)}: {text}"
            view.append({"role": "user", "content": "\n".join(results)})
            if run.infra_error:
                run.stop = "infra_error"
                break
        else:
            run.stop = "max_turns"
