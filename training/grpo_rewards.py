"""GRPO rewards: the judge's verdict on each episode, ended with the policy's conversation as an OpenAI
transcript; None (masked by TRL) for judge errors, infrastructure failures and fabricated transcripts."""

from __future__ import annotations

from typing import Any

from simia.sim.world import openai_tool_call

__all__ = ["openai_transcript", "simia_env_reward", "simia_reward"]


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
    what the policy said; returns the training rewards (None is masked by TRL)."""
    rewards: list[float | None] = []
    for prompt, completion, env in zip(prompts, completions, environments or [None] * len(prompts), strict=True):
        if env is None:
            rewards.append(None)
            continue
        messages = [*prompt, *completion] if isinstance(completion, list) else [*prompt]
        if not isinstance(completion, list):
            messages.append({"role": "assistant", "content": str(completion)})
        rewards.append(env._end(openai_transcript(messages)))
    return rewards


def simia_reward(completions: list[Any], simia_reward: list[float | None], **kwargs: Any) -> list[float | None]:
    """The reward function for `multi_turn_rollout_func`: the judge's verdicts it collected (None is masked)."""
    return simia_reward
