"""ART rollouts of simia episodes: scenarios from a world's tasks, and `rollout(model, scenario)`.

A rollout creates the scenario's episode, then lets the model call the episode's tools through ART's OpenAI
client (`model.openai_client()`, the tools as OpenAI function tools; a model that writes its calls as text is
parsed too): each call runs on the episode over MCP and its result goes back to the model as a `tool` message,
until the model answers without a call or runs out of turns. The episode is then ended with the transcript and
judged, and the trajectory's reward is the verdict's training reward. Rollouts given the same `group` start from
one snapshot: the first creates the episode, the others fork it at step 0 (a GRPO group, one `group_id` in
simia's exports).

A verdict that is masked (a judge error, an infrastructure failure, a fabricated transcript) has no reward to
learn from: the rollout raises `RewardMasked`, which ART's `gather_trajectory_groups(..., max_exceptions=N)`
records in the group's `exceptions` and leaves out of training, never a made-up 0.
"""

from __future__ import annotations

import asyncio
from typing import Any

import art
from pydantic import BaseModel
from simia_env_client import (
    AsyncEnvClient,
    AsyncRollout,
    Episode,
    SimiaEnvError,
    World,
    openai_tools,
    select_tasks,
    task_messages,
)

__all__ = ["RewardMasked", "Scenario", "SimiaEnv"]


class RewardMasked(SimiaEnvError):
    """The episode's verdict has no reward a trainer may use (its reasons are in the message)."""

    def __init__(self, episode: str, reasons: list[str]) -> None:
        super().__init__(f"simia episode {episode}: the reward is masked ({'; '.join(reasons) or 'no verdict'})")
        self.episode, self.reasons = episode, reasons


class Scenario(BaseModel):
    """One task of a world, as a rollout plays it: its id, the user's instruction and the episode's seed."""

    world: str
    task: str
    instruction: str
    seed: int | None = None


class SimiaEnv:
    """A simia server's world, for ART rollouts (see the module docstring).

    Args:
        server: the simia server, e.g. `http://127.0.0.1:8765`.
        world: the world the scenarios come from.
        token: its bearer token, when it was started with `--token`.
        max_turns: model turns per rollout before the episode is ended anyway.
        perturbation: `{"rate", "kinds"}`: faults injected into the episodes' calls, replayed by seed.
    """

    def __init__(
        self,
        server: str,
        world: str,
        *,
        token: str | None = None,
        max_turns: int = 10,
        perturbation: dict[str, Any] | None = None,
    ) -> None:
        self.client = AsyncEnvClient(server, token=token)
        self.world_name = world
        self.max_turns = max_turns
        self.perturbation = perturbation
        self._world: World | None = None
        self._heads: dict[str, asyncio.Future[str]] = {}

    async def __aenter__(self) -> SimiaEnv:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    async def world(self) -> World:
        """The world (policy, tools, tasks), read from the server once."""
        if self._world is None:
            self._world = await self.client.world(self.world_name)
        return self._world

    async def scenarios(self, tasks: str = "all", seed: int | None = None) -> list[Scenario]:
        """One scenario per selected task (`all`, or ids separated by commas), each with `seed`."""
        world = await self.world()
        chosen = select_tasks(world, tasks)
        return [Scenario(world=world.name, task=t.id, instruction=t.instruction, seed=seed) for t in chosen]

    async def _episode(self, scenario: Scenario, group: str | None) -> Episode:
        if group is None:
            return await self.client.create(
                scenario.world, scenario.task, scenario.seed, perturbation=self.perturbation
            )  # fmt: skip
        head = self._heads.get(group)
        if head is not None:
            return await self.client.fork(await head, step=0)
        self._heads[group] = future = asyncio.get_running_loop().create_future()
        try:
            episode = await self.client.create(
                scenario.world, scenario.task, scenario.seed, perturbation=self.perturbation
            )  # fmt: skip
        except BaseException as exc:
            del self._heads[group]
            future.set_exception(exc)
            future.exception()  # retrieved: the group's other rollouts raise it themselves
            raise
        future.set_result(episode.id)
        return episode

    async def rollout(
        self, model: art.Model[Any, Any], scenario: Scenario, *, group: str | None = None
    ) -> art.Trajectory:
        """Play one episode of `scenario` with `model` and return its trajectory, rewarded by the verdict.

        Args:
            group: rollouts with the same key start from one snapshot (the first one's episode, forked).

        Raises:
            RewardMasked: the verdict has no usable reward (ART drops the trajectory; see the module docstring).
        """
        world = await self.world()
        tools: list[Any] = openai_tools(world.tools)  # OpenAI's typed dicts, as plain JSON
        episode = await self._episode(scenario, group)
        rollout = AsyncRollout(self.client, episode, task_messages(world, scenario.task))
        messages: list[Any] = list(rollout.transcript)  # what the model reads: its own messages, as it wrote them
        trajectory = art.Trajectory(
            messages_and_choices=list(messages),
            tools=tools,
            metadata={"simia_episode": episode.id, "simia_task": scenario.task},
        )
        openai = model.openai_client()
        for _ in range(self.max_turns):
            completion = await openai.chat.completions.create(
                model=model.get_inference_name(), messages=messages, tools=tools
            )  # fmt: skip
            choice = completion.choices[0]
            trajectory.messages_and_choices.append(choice)
            message = choice.message.model_dump(exclude_none=True)
            messages.append(message)
            turn = await rollout.act(message)
            if turn.done:
                break
            observations: list[Any] = turn.observations
            messages += observations
            trajectory.messages_and_choices.extend(observations)
        ended = await rollout.finish()
        if ended.training_reward is None:
            raise RewardMasked(ended.id, list(ended.verdict.get("reasons") or []))
        trajectory.reward = ended.training_reward
        trajectory.metrics["simia_turns"] = rollout.turns
        return trajectory
