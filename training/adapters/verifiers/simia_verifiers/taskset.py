"""The taskset: a world's tasks from a running `simia serve`, each rollout an episode of it.

`load` reads the world's tasks (`GET /v1/worlds`) and shows each with simia's agent system prompt under the world's
policy; `setup` opens the rollout's episode with the task and seed; the agent's tools are the episode's, through
`SimiaToolset`; the reward ends the episode with the rollout's transcript and is the judge's verdict's training
reward (a masked verdict fails the rollout's scoring, never a made-up 0).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field
from simia_env_client import EnvClient, agent_system_prompt
from verifiers.v1.dialects.chat import message_to_wire

from simia_verifiers.state import SimiaState
from simia_verifiers.toolset import SimiaToolset

__all__ = ["SimiaConfig", "SimiaData", "SimiaTask", "SimiaTaskConfig", "SimiaTaskset", "chat_transcript"]


class SimiaTaskConfig(vf.TaskConfig):
    server: str = "http://127.0.0.1:8765"
    """simia's base URL (`simia serve`)."""

    token_var: str = "SIMIA_TOKEN"
    """The environment variable with simia's bearer token (unset: no token)."""

    seed: int | None = None
    """Seeds every episode (the same start and simulated answers for a task's rollouts)."""

    perturbation: dict[str, Any] | None = None
    """Injected faults, as `POST /v1/episodes` takes them: `{"rate": 0.2, "kinds": [...]}`."""

    request_timeout: float = Field(600.0, gt=0)
    """Seconds for each request to simia (ending an episode runs the judge)."""


class SimiaConfig(vf.TasksetConfig):
    world: str = "retail"
    """The world (`GET /v1/worlds`)."""

    tasks: list[str] = Field(default_factory=list)
    """Task ids to run (empty: every task of the world)."""

    tools: vf.SharedToolsetConfig = vf.SharedToolsetConfig()
    task: SimiaTaskConfig = SimiaTaskConfig()


class SimiaData(vf.TaskData):
    world: str
    task: str
    """The simia task id."""


class SimiaTask(vf.Task[SimiaData, SimiaState, SimiaTaskConfig]):
    async def setup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        state = trace.state
        state.server = self.config.server.rstrip("/")
        state.token_var = self.config.token_var
        state.request_timeout = self.config.request_timeout
        async with state.client() as client:
            episode = await client.create(
                self.data.world, self.data.task, self.config.seed, perturbation=self.config.perturbation
            )
        state.episode = episode.raw
        trace.info["simia"] = {"episode_id": episode.id}

    @vf.reward(weight=1.0)
    async def simia(self, trace: vf.Trace) -> float:
        state = trace.state
        episode = state.simia_episode
        async with state.client() as client:
            ended = await client.end(episode.id, chat_transcript(trace.messages, state.tool_names))
        trace.info["simia"] = {"episode_id": episode.id, "verdict": ended.verdict}
        if ended.training_reward is None:
            raise RuntimeError(
                f"simia episode {episode.id} has no usable reward (verdict {ended.verdict.get('status')}: "
                f"{ended.verdict.get('reasons')}); drop this rollout"
            )
        trace.record_metric("simia_infra_failures", float(ended.verdict.get("infra_failures") or 0))
        return ended.training_reward


class SimiaTaskset(vf.Taskset[SimiaTask, SimiaConfig]):
    @classmethod
    def toolsets(cls, config: SimiaConfig) -> list[vf.Toolset]:
        return [SimiaToolset(config.tools)]

    def load(self) -> Iterator[SimiaTask]:
        task_config = self.config.task
        token = os.environ.get(task_config.token_var) or None
        with EnvClient(task_config.server, token=token, timeout=task_config.request_timeout) as client:
            world = client.world(self.config.world)
        for task_id in self.config.tasks or [t.id for t in world.tasks]:
            task = world.task(task_id)  # KeyError names the world's tasks
            data = SimiaData(
                id=task.id,
                name=f"{world.name}:{task.id}",
                prompt=task.instruction,
                system_prompt=agent_system_prompt(world.policy),
                world=world.name,
                task=task.id,
            )
            yield SimiaTask(data, task_config)


def chat_transcript(messages: list[Any], tool_names: list[str]) -> list[dict[str, Any]]:
    """The rollout's messages as OpenAI chat messages, with tool names as the world has them (a harness may
    prefix them, `mcp__server__name`): the judge compares the transcript's calls with the calls the episode ran."""
    known = sorted(tool_names, key=len, reverse=True)
    transcript = []
    for message in messages:
        wire = message_to_wire(message)
        for call in wire.get("tool_calls") or []:
            function = call.get("function") or {}
            name = function.get("name")
            if isinstance(name, str) and name not in tool_names:
                function["name"] = next((t for t in known if name.endswith(f"__{t}")), name)
        transcript.append({k: v for k, v in wire.items() if k in ("role", "content", "tool_calls", "tool_call_id")})
    return transcript
