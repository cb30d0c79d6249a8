"""Cost per simulated call at list prices, cache-aware: simia's state-as-memory prompt against Simia-style history
replay on the same retail episode, and the share of simia's input a provider's cache serves across parallel episodes.

Every figure comes from real requests: the simulator (`Simulator.step`, its real prompt) and the real OpenAI and
Anthropic backends send their real request bodies over HTTP to the fake provider with its emulated prompt caches
(`simia.testing.fake_cache.PromptCache`: OpenAI's automatic prefix cache per `prompt_cache_key`, Anthropic's
breakpoint cache with each model's minimum length), the backends read cached and cache-write tokens from the usage
the fake reports, as they do from the providers', and `simia.sim.backends._pricing.Pricing` prices them at
`genai-prices`' list and cache rates. Output tokens are a quarter of each answer's JSON characters (the fake's count),
for both approaches. Token counts are the fake's (a quarter of the request's characters), the same for both.

- **One episode** (`_retail_episode`: the retail world, every tool model-answered): the cost of call 5, 10, 25, 50
  and 100 for simia, simia without any prompt cache (the zero of caching), and Simia-style history replay, which
  resends the whole trajectory each call (`history_parts`) with the same system prompt. Replay is append-only, so a
  provider caches nearly all of it: on OpenAI by itself, on Anthropic with one breakpoint on the last block (the API
  takes at most 4), from which the API, and the fake, look back up to 20 blocks for the previous call's end.
- **Parallel episodes** (1,000, 5 calls each, 64 at a time, each starting at a different point of the call pattern
  and from its own state, `own_state`): the cached share of simia's input tokens across all of them, and their mean
  cost per call. No episode's prompt repeats another's past the world's prefix: a lower bound, since the tiny world's
  episodes would otherwise repeat each other's calls word for word (as the rollouts of one task's GRPO group do).
- **Prompt layout**: the stable prefix share of simia's prompt (its messages' text repeated from the start by the
  next call, as bench/prompt_size.py measures it) and its prompt tokens at call 50 against history replay's.

Targets: simia <= 0.5 of history replay at call 50 and <= 1.0 at call 10; cached share >= 0.85 across 1,000
episodes; stable prefix share >= 0.90; prompt tokens at call 50 <= 0.15 of replay's. Each is printed beside its
figure, met or not; the bench exits 0 either way.

    python bench/cost.py [--quick]

`--quick` (a few seconds) runs one model per provider, 50 calls and 20 parallel episodes of 3 calls: the call-50
targets keep their meaning, the cached share across episodes does not.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _retail_episode import answer, episode_calls, history_parts, prefix_share, retail_world
from simia.sim.backends import Backend, CompletionRequest, RetryPolicy, Usage, resolve_backend
from simia.sim.backends._pricing import Pricing
from simia.sim.engine import Simulator, Step, ToolCall, system_prompt
from simia.sim.records import PastCall
from simia.sim.world import World
from simia.testing.fake_cache import PromptCache
from simia.testing.fake_provider import FakeProvider, FakeReply
from simia.testing.mock_world import message_text

AT = (5, 10, 25, 50, 100)
PARALLEL, PARALLEL_CALLS, AT_ONCE = 1_000, 5, 64
REPLAY_SCHEMA = {
    "type": "object",
    "properties": {"is_error": {"type": "boolean"}, "output": {}},
    "required": ["is_error", "output"],
}
"""Replay's answer: the tool's response, one schema for every call (Simia's environment model answers in text)."""


@dataclass(frozen=True)
class Model:
    """A model at list prices; `cache_min` is the shortest prefix Anthropic caches for it (Anthropic's docs)."""

    provider: str
    name: str
    cache_min: int = 1_024

    def backend(self, fake: FakeProvider) -> Backend:
        url = fake.base_url if self.provider == "openai" else fake.anthropic_url
        env = {"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}
        return resolve_backend(
            f"{self.provider}:{self.name}", base_url=url, env=env, retry=RetryPolicy(), max_concurrency=AT_ONCE
        )

    def fake(self, answer: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> FakeProvider:
        return FakeProvider(answer, prompt_cache=PromptCache(anthropic_min=self.cache_min))


MODELS = [
    Model("openai", "gpt-4.1-mini"),
    Model("openai", "gpt-5.4-mini"),
    Model("anthropic", "claude-sonnet-4-6", 1_024),
    Model("anthropic", "claude-haiku-4-5", 4_096),
]


@dataclass(frozen=True)
class Call:
    """One model call: its tokens as the provider reported them, and its list price with and without the cache."""

    prompt: int
    cached: int
    written: int
    completion: int
    cost: float
    uncached: float


def priced(model: Model, usage: Usage, completion: int) -> Call:
    pricing = Pricing(model.name, provider_id=model.provider)
    cached = pricing.usage(
        usage.prompt_tokens, completion, cached=usage.cached_tokens, cache_write=usage.cache_write_tokens
    )
    plain = pricing.usage(usage.prompt_tokens, completion)
    assert cached.cost_usd is not None and plain.cost_usd is not None, f"genai-prices has no price for {model.name}"
    return Call(
        usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens, completion, cached.cost_usd, plain.cost_usd
    )


def output_tokens(data: dict[str, Any]) -> int:
    return len(json.dumps(data)) // 4


def user_text(body: dict[str, Any]) -> str:
    """The simulator's user message in an OpenAI or Anthropic request body."""
    return message_text(next(m["content"] for m in body["messages"] if m["role"] == "user"))


def prompt_text(body: dict[str, Any]) -> str:
    """An OpenAI request's messages as the model reads them (the text prompt_size.py measures)."""
    return "\n".join(str(m["content"]) for m in body["messages"])


@dataclass
class Answers:
    """The fake provider's answers to simia's requests, each answer's output tokens kept in request order."""

    completion: list[int] = field(default_factory=list)

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        data = answer(user_text(body))
        self.completion.append(output_tokens(data))
        return data


async def run_episode(
    sim: Simulator, world: World, calls: Sequence[ToolCall], state: dict[str, Any] | None = None
) -> list[Step]:
    """Simulate `calls` as one episode from `state` (the world's initial state by default), its state and window
    carried from call to call as the server does."""
    state = world.initial_state if state is None else state
    window: list[PastCall] = []
    steps: list[Step] = []
    for call in calls:
        step = await sim.step(world, state, window, call)
        assert not step.is_error and step.attempts == 1, step.detail or step.text
        steps.append(step)
        window.append(PastCall(step.tool, step.arguments, step.output, step.is_error))
        state = step.state
    return steps


def own_state(world: World, episode: int) -> dict[str, Any]:
    """The world's initial state with the first user's street number set to `episode`: every episode's prompts
    differ from the state's first record on, so no episode serves another an identical call."""
    state = copy.deepcopy(world.initial_state)
    state["users"]["mia_lee_1021"]["address"]["address1"] = f"{episode + 1} Elm Street"
    return state


async def simia_episode(model: Model, world: World, n: int) -> tuple[list[Call], list[Step], list[str]]:
    """One episode of `n` calls: each call priced, the steps, and each request's prompt text."""
    answers = Answers()
    async with model.fake(answers).running() as fake:
        backend = model.backend(fake)
        steps = await run_episode(Simulator(backend), world, episode_calls(n))
        await backend.aclose()
    calls = [priced(model, s.usage, c) for s, c in zip(steps, answers.completion, strict=True)]
    return calls, steps, [prompt_text(body) for body in fake.requests]


async def replay_episode(model: Model, world: World, steps: Sequence[Step]) -> list[Call]:
    """The same episode simulated Simia's way: each call resends the whole history, answered with simia's output."""
    system = {"role": "system", "content": system_prompt(world)}
    calls = []
    async with model.fake().running() as fake:
        backend = model.backend(fake)
        for k, step in enumerate(steps):
            parts = history_parts(steps[:k], ToolCall(step.tool, step.arguments))
            blocks: list[dict[str, Any]] = [{"type": "text", "text": part} for part in parts]
            if model.provider == "anthropic":  # one breakpoint, on the last block (see the docstring)
                blocks[-1]["cache_control"] = {"type": "ephemeral"}
            reply = {"is_error": step.is_error, "output": step.output}
            fake.script(FakeReply(answer=reply))
            request = CompletionRequest([system, {"role": "user", "content": blocks}], REPLAY_SCHEMA, "tool_response")
            completion = await backend.complete(request)
            calls.append(priced(model, completion.usage, output_tokens(reply)))
        await backend.aclose()
    return calls


async def parallel_episodes(model: Model, world: World, episodes: int, n: int) -> tuple[float, float]:
    """(cached share of simia's input tokens, mean cost per call) over `episodes` episodes of `n` calls, run
    `AT_ONCE` at a time against one provider cache."""
    answers = Answers()
    gate = asyncio.Semaphore(AT_ONCE)
    async with model.fake(answers).running() as fake:
        backend = model.backend(fake)
        sim = Simulator(backend)

        async def one(start: int) -> list[Step]:
            async with gate:
                return await run_episode(sim, world, episode_calls(n, start), own_state(world, start))

        steps = [s for ran in await asyncio.gather(*(one(e) for e in range(episodes))) for s in ran]
        await backend.aclose()
    total = sum((s.usage for s in steps), Usage())
    # The mean call priced (genai-prices' long-context tiers would misprice the sum as one call).
    calls = len(steps)
    mean = Usage(
        total.prompt_tokens // calls, 0, None, 1, total.cached_tokens // calls, total.cache_write_tokens // calls
    )
    return total.cached_tokens / total.prompt_tokens, priced(model, mean, sum(answers.completion) // calls).cost


def verdict(value: float, target: float, most: bool) -> str:
    met = value <= target if most else value >= target
    return f"(target {'<=' if most else '>='} {target:g}: {'met' if met else 'NOT met'})"


async def main(quick: bool) -> None:
    world = retail_world()
    at = [k for k in AT if k <= 50] if quick else list(AT)
    episodes, each = (20, 3) if quick else (PARALLEL, PARALLEL_CALLS)
    models = [MODELS[0], MODELS[2]] if quick else MODELS  # quick: one model per provider
    prompts: list[str] = []
    call50: dict[str, tuple[int, int]] = {}
    lines: list[str] = []
    for model in models:
        simia, steps, texts = await simia_episode(model, world, at[-1])
        replay = await replay_episode(model, world, steps)
        prompts = prompts or texts
        call50.setdefault(model.provider, (simia[49].prompt, replay[49].prompt))
        print(f"\n{model.provider}:{model.name}  (USD per call at list prices; cached: share of the call's input)")
        heads = ("call", 5), ("simia", 10), ("cached", 7), ("uncached", 10), ("replay", 10), ("cached", 7), ("ratio", 7)
        print(" ".join(f"{name:>{width}}" for name, width in heads))
        for k in at:
            ours, theirs = simia[k - 1], replay[k - 1]
            print(
                f"{k:>5} {ours.cost:>10.6f} {ours.cached / ours.prompt:>7.2f} {ours.uncached:>10.6f} "
                f"{theirs.cost:>10.6f} {theirs.cached / theirs.prompt:>7.2f} {ours.cost / theirs.cost:>7.3f}"
            )
        share, per_call = await parallel_episodes(model, world, episodes, each)
        print(
            f"{episodes:,} parallel episodes of {each} calls: {share:.3f} of input cached, {per_call:.6f} USD per call"
        )
        for k, target in ((50, 0.5), (10, 1.0)):
            ratio = simia[k - 1].cost / replay[k - 1].cost
            lines.append(
                f"ratio simia / history replay at call {k}, {model.name}: {ratio:.3f}   {verdict(ratio, target, True)}"
            )
        lines.append(
            f"cached share of simia's input tokens across {episodes:,} episodes, {model.name}: {share:.3f}   "
            f"{verdict(share, 0.85, False)}"
        )
    print("\nTargets (cache-aware, measured above):")
    print("\n".join(lines))
    stable = prefix_share(prompts)
    print(f"stable prefix share of simia's prompt: {stable:.3f}   {verdict(stable, 0.90, False)}")
    for provider, (ours, theirs) in call50.items():
        print(
            f"prompt tokens at call 50, simia / history replay ({provider} request): {ours:,} / {theirs:,} = "
            f"{ours / theirs:.3f}   {verdict(ours / theirs, 0.15, True)}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="cost per simulated call, simia vs history replay, cache-aware")
    parser.add_argument(
        "--quick", action="store_true", help="one model per provider, 50 calls, 20 parallel episodes (seconds)"
    )
    asyncio.run(main(parser.parse_args().quick))
