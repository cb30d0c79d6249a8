"""GRPO rewards: what a rollout's reward is made of (`RewardMix`: the verdict's outcome, its progress, its process
score, or a weighted mix of them), the reward functions TRL calls, and the warning of a step whose every reward was
masked, its reasons counted.

Each rollout's episode is ended with the policy's conversation as an OpenAI transcript and scored from its verdict.
The terms: `outcome` is `Verdict.training_reward()` (1 or 0); `progress` is the progress the episode ended at,
Phi(end) of `Verdict.progress` (1 for a full solution; with gamma 1 the shaped step rewards sum to it less Phi(start),
which is the same for every rollout of a group, so GRPO's advantages are the same either way); `process` is the mean
of the process judge's step rewards (useful 1, neutral 0, harmful -1; `simia serve --process-judge`). A reward is
None (masked by TRL, never a silent 0) when `training_reward()` masks the episode, in every mix, and when a term it
weighs is missing (a task without checks has no progress; an episode the process judge did not score, no process
score).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simia.sim.verdict import Outcome, Verdict, outcome, tally
from simia.sim.world import openai_tool_call

__all__ = [
    "REWARDS",
    "TERMS",
    "RewardMix",
    "openai_transcript",
    "report_masked",
    "simia_env_reward",
    "simia_reward",
]

log = logging.getLogger("simia.training.grpo")

TERMS = ("outcome", "progress", "process")
"""What a GRPO reward can weigh, from an episode's verdict."""

REWARDS = (*TERMS, "mix")
"""The values of `--reward`: one term alone, or `mix` (the weighted sum `--reward-weights` names)."""

NO_ENVIRONMENT = Outcome("masked", "no episode")
"""The outcome of a rollout TRL gave no environment."""


def _progress(verdict: Verdict) -> float | str:
    return verdict.progress.end if verdict.progress is not None else "no progress (task without checks)"


def _process(verdict: Verdict) -> float | str:
    scores = verdict.process
    if scores is None:
        return "no process score (serve with --process-judge)"
    if scores.status != "ok":
        return "process judge error"
    rewards = scores.rewards
    return math.fsum(rewards) / len(rewards) if rewards else 0.0


_TERM: dict[str, Callable[[Verdict], float | str]] = {
    "outcome": lambda v: v.training_reward() or 0.0,  # read only where it is not None
    "progress": _progress,
    "process": _process,
}


@dataclass(frozen=True)
class RewardMix:
    """The weight of each term in a rollout's reward (`--reward`, `--reward-weights`).

    Attributes:
        weights: term -> weight, each term of `TERMS`; a term left out weighs 0.
    """

    weights: Mapping[str, float]

    @classmethod
    def parse(cls, reward: str = "outcome", weights: str = "") -> RewardMix:
        """The mix `--reward REWARD --reward-weights WEIGHTS` names.

        Args:
            reward: a term of `TERMS` (its weight 1), or `mix`.
            weights: with `mix`, `term=weight,...` (e.g. `outcome=1,progress=0.5`): weights are numbers >= 0,
                at least one above 0.

        Raises:
            ValueError: an unknown reward or term, a weight that is not a number >= 0, weights without `mix` or
                `mix` without weights; the message names the fix.
        """
        if reward not in REWARDS:
            raise ValueError(f"--reward {reward!r} is not one of {', '.join(REWARDS)}")
        if reward != "mix":
            if weights:
                raise ValueError(f"--reward-weights weighs the terms of --reward mix; use --reward mix (not {reward})")
            return cls({reward: 1.0})
        if not weights.strip():
            raise ValueError("--reward mix needs --reward-weights, e.g. --reward-weights outcome=1,progress=0.5")
        parsed: dict[str, float] = {}
        for part in weights.split(","):
            term, _, text = part.partition("=")
            term = term.strip()
            if term not in TERMS:
                raise ValueError(f"--reward-weights: unknown term {term!r} in {part!r}; terms: {', '.join(TERMS)}")
            try:
                weight = float(text)
            except ValueError:
                raise ValueError(f"--reward-weights: {part!r} needs a number after '=' ({term}=0.5)") from None
            if not (math.isfinite(weight) and weight >= 0):
                raise ValueError(f"--reward-weights: the weight of {term} must be a number >= 0, got {text.strip()}")
            parsed[term] = weight
        if not any(parsed.values()):
            raise ValueError(f"--reward-weights {weights!r}: give at least one term a weight above 0")
        return cls(parsed)

    def score(self, verdict: Verdict | None) -> tuple[float | None, Outcome]:
        """The rollout's reward from its verdict (None: masked), and its outcome (masked with the reason)."""
        seen = outcome(verdict, unjudged="no verdict")
        if verdict is None or seen.kind == "masked":
            return None, seen
        total = []
        for term, weight in self.weights.items():
            if weight:
                value = _TERM[term](verdict)
                if isinstance(value, str):
                    return None, Outcome("masked", value)
                total.append(weight * value)
        return math.fsum(total), seen


OUTCOME = RewardMix({"outcome": 1.0})
"""The default reward: the verdict's training reward, unchanged."""


def report_masked(outcomes: Sequence[Outcome], step: int | None = None) -> str | None:
    """Warn (logger `simia.training.grpo`) when every reward of a GRPO step was masked, with the reasons counted
    (TRL itself says only that a row had no reward); returns the message, or None when some reward was usable."""
    if not outcomes or any(o.kind != "masked" for o in outcomes):
        return None
    where = f"GRPO step {step}" if step is not None else "a GRPO step"
    message = f"{where}: all {len(outcomes)} rewards were masked, so it learns nothing: {tally(outcomes)}"
    log.warning(message)
    return message


def _reported(outcomes: Sequence[Outcome], kwargs: Mapping[str, Any]) -> None:
    """The step's masked share as a TRL metric (`masked`), and the warning when all were."""
    if callable(log_metric := kwargs.get("log_metric")):
        log_metric("masked", sum(o.kind == "masked" for o in outcomes) / max(len(outcomes), 1))
    state = kwargs.get("trainer_state")
    report_masked(outcomes, state.global_step + 1 if state is not None else None)


def openai_transcript(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A TRL conversation (tool-call arguments as objects, tool turns by name) as an OpenAI transcript: calls
    get ids, tool turns the id of the call they answer, arguments become JSON strings."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for message in messages:
        entry: dict[str, Any] = {k: message[k] for k in ("role", "content") if k in message}
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                fn = call.get("function", call)
                call_id = str(call.get("id") or f"call_{len(pending) + len(out)}")
                calls.append(openai_tool_call(call_id, str(fn.get("name")), fn.get("arguments", {})))
                pending.append(call_id)
            entry["tool_calls"] = calls
        if message.get("role") == "tool":
            entry["tool_call_id"] = message.get("tool_call_id") or (pending.pop(0) if pending else "unpaired")
        out.append(entry)
    return out


def simia_env_reward(
    prompts: list[Any], completions: list[Any], environments: list[Any] | None = None, **kwargs: Any
) -> list[float | None]:
    """TRL reward function for `environment_factory` rollouts: ends each episode with the prompt and the
    policy's completion (its messages, tool calls and tool results) as the transcript, so the judge reads
    what the policy said; returns the rewards of the environments' `RewardMix` (None is masked by TRL), and
    warns when every one was masked."""
    rewards: list[float | None] = []
    outcomes: list[Outcome] = []
    for prompt, completion, env in zip(prompts, completions, environments or [None] * len(prompts), strict=True):
        if env is None:
            rewards.append(None)
            outcomes.append(NO_ENVIRONMENT)
            continue
        messages = [*prompt, *completion] if isinstance(completion, list) else [*prompt]
        if not isinstance(completion, list):
            messages.append({"role": "assistant", "content": str(completion)})
        rewards.append(env._end(openai_transcript(messages)))
        outcomes.append(env.outcome)
    _reported(outcomes, kwargs)
    return rewards


def simia_reward(
    completions: list[Any],
    simia_reward: list[float | None],
    simia_outcome: list[Outcome] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """The reward function for `multi_turn_rollout_func`: the rewards it collected (None is masked), with the
    warning when every one was masked."""
    _reported(simia_outcome or [], kwargs)
    return simia_reward
