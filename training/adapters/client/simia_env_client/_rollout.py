"""A rollout: one episode driven turn by turn by a policy that writes text, as verl's and SkyRL's loops do.

Each turn of the model is parsed (`parse_tool_calls`); every call that parsed goes to the episode, and the turn's
observations are the results (a call that did not parse gets its problem back and reaches no server). The
transcript, the OpenAI chat messages the judge reads, holds only what really happened: the prompt, what the model
said, the calls the server executed and the results it returned. A turn without a call is the model's answer;
`finish` ends the episode with the transcript and returns the verdict.

    with EnvClient(url) as client:
        rollout = Rollout.start(client, world, "restock_milk")
        turn = rollout.act('<tool_call>{"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}</tool_call>')
        rollout.act("Done: milk is at 4.")
        ended = rollout.finish()  # ended.training_reward
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._client import AsyncEnvClient, EnvClient
from ._prompts import task_messages
from ._wire import Ended, Episode, ToolResult, World
from .parsing import ParsedTurn, parse_openai_message, parse_tool_calls

__all__ = ["AsyncRollout", "Rollout", "Turn"]


@dataclass(frozen=True)
class Turn:
    """One model turn and what the environment answered.

    Attributes:
        parsed: the turn's text, calls and problems.
        results: one result per parsed call, in order.
        observations: what the model reads next, as chat messages (`role` `tool`): each result's text, then
            each problem of a call that did not parse.
        done: the turn is the model's answer (no call, none attempted): the rollout should `finish`.
    """

    parsed: ParsedTurn
    results: list[ToolResult] = field(default_factory=list)
    observations: list[dict[str, str]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.parsed.is_answer


def _assistant(parsed: ParsedTurn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content or None}
    if parsed.calls:
        message["tool_calls"] = [c.openai() for c in parsed.calls]
    elif message["content"] is None:
        message["content"] = ""
    return message


def _record(transcript: list[dict[str, Any]], parsed: ParsedTurn, results: list[ToolResult]) -> Turn:
    """Add the turn to the transcript and make its observations."""
    transcript.append(_assistant(parsed))
    transcript += [
        {"role": "tool", "tool_call_id": call.id, "content": result.text}
        for call, result in zip(parsed.calls, results, strict=True)
    ]
    observations = [
        {"role": "tool", "tool_call_id": call.id, "content": result.text}
        for call, result in zip(parsed.calls, results, strict=True)
    ]
    observations += [
        {"role": "tool", **({"tool_call_id": p.id} if p.id else {}), "content": f"Error: {p.message}"}
        for p in parsed.problems
    ]
    return Turn(parsed, results, observations)


class _Base:
    def __init__(self, episode: Episode, messages: list[dict[str, Any]]) -> None:
        self.episode = episode
        self.transcript: list[dict[str, Any]] = list(messages)
        """The conversation so far, as OpenAI chat messages (what `finish` sends the judge)."""
        self.turns = 0
        self.ended: Ended | None = None

    def _parse(self, turn: str | dict[str, Any] | ParsedTurn) -> ParsedTurn:
        self.turns += 1
        if isinstance(turn, ParsedTurn):
            return turn
        if isinstance(turn, dict):
            return parse_openai_message(turn, id_prefix=f"call_{self.turns}")
        return parse_tool_calls(turn, id_prefix=f"call_{self.turns}")


class Rollout(_Base):
    """One episode driven by a policy's text turns, synchronously (see the module docstring).

    Args:
        client: the server's client.
        episode: the episode to drive.
        messages: the prompt the policy was given (its first messages in the transcript).
    """

    def __init__(self, client: EnvClient, episode: Episode, messages: list[dict[str, Any]]) -> None:
        super().__init__(episode, messages)
        self.client = client

    @classmethod
    def start(
        cls,
        client: EnvClient,
        world: World,
        task: str,
        seed: int | None = None,
        *,
        fork_of: str | None = None,
        perturbation: dict[str, Any] | None = None,
        tools_in_prompt: bool = False,
    ) -> Rollout:
        """A new episode of `task` (or a fork of the episode `fork_of`, from its last step), with its prompt.

        Args:
            tools_in_prompt: the prompt lists the tools itself (`tools_prompt`), for templates that cannot.
        """
        if fork_of is not None:
            episode = client.fork(fork_of)
        else:
            episode = client.create(world.name, task, seed, perturbation=perturbation)
        return cls(client, episode, task_messages(world, task, tools_in_prompt=tools_in_prompt))

    def act(self, turn: str | dict[str, Any] | ParsedTurn) -> Turn:
        """Run one model turn (its text, an OpenAI assistant message with native `tool_calls`, or a turn parsed
        already): its calls on the episode, recorded in the transcript."""
        parsed = self._parse(turn)
        results = [self.client.call_tool(self.episode, c.name, c.arguments) for c in parsed.calls]
        return _record(self.transcript, parsed, results)

    def finish(self, tokens: dict[str, Any] | None = None) -> Ended:
        """End the episode with the transcript (and the token data, if any) and return its verdict; a second
        call returns the same verdict."""
        if self.ended is None:
            self.ended = self.client.end(self.episode.id, self.transcript, tokens)
        return self.ended


class AsyncRollout(_Base):
    """`Rollout` for asynchronous loops (verl's agent loops, ART's rollouts).

    Args:
        client: the server's client.
        episode: the episode to drive.
        messages: the prompt the policy was given (its first messages in the transcript).
    """

    def __init__(self, client: AsyncEnvClient, episode: Episode, messages: list[dict[str, Any]]) -> None:
        super().__init__(episode, messages)
        self.client = client

    @classmethod
    async def start(
        cls,
        client: AsyncEnvClient,
        world: World,
        task: str,
        seed: int | None = None,
        *,
        fork_of: str | None = None,
        perturbation: dict[str, Any] | None = None,
        tools_in_prompt: bool = False,
    ) -> AsyncRollout:
        """A new episode of `task` (or a fork of `fork_of`), with its prompt (see `Rollout.start`)."""
        if fork_of is not None:
            episode = await client.fork(fork_of)
        else:
            episode = await client.create(world.name, task, seed, perturbation=perturbation)
        return cls(client, episode, task_messages(world, task, tools_in_prompt=tools_in_prompt))

    async def act(self, turn: str | dict[str, Any] | ParsedTurn) -> Turn:
        """Run one model turn (its text, an OpenAI assistant message with native `tool_calls`, or a turn parsed
        already): its calls on the episode, recorded in the transcript."""
        parsed = self._parse(turn)
        results = [await self.client.call_tool(self.episode, c.name, c.arguments) for c in parsed.calls]
        return _record(self.transcript, parsed, results)

    async def finish(self, tokens: dict[str, Any] | None = None) -> Ended:
        """End the episode and return its verdict (see `Rollout.finish`)."""
        if self.ended is None:
            self.ended = await self.client.end(self.episode.id, self.transcript, tokens)
        return self.ended
