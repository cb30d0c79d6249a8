"""The multi-turn GRPO rollout: a TRL `rollout_func` that plays each prompt as an episode with a simulated
user (policy generation, tool calls over MCP, user turns) and keeps its token data, with the environment's
tokens masked out of the loss."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from simia.clients.user import UserSimulator
from simia.sim.backends import Backend
from simia.sim.wire import WorldInfo
from simia.sim.world import openai_tool

from .grpo_env import environment_class
from .grpo_rewards import openai_transcript

__all__ = ["multi_turn_rollout_func"]

T = TypeVar("T")

_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)


class _Loop:
    """A background event loop for the async parts (MCP calls, the user simulator) of a sync rollout_func."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="simia-rollout-loop").start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


def _tool_calls(text: str) -> list[dict[str, Any]]:
    """The well-formed `<tool_call>` blocks of a generation as `{"name", "arguments"}` (a broken block is skipped)."""
    calls = []
    for block in _TOOL_CALL.findall(text):
        try:
            call = json.loads(block)
            calls.append({"name": str(call["name"]), "arguments": dict(call.get("arguments") or {})})
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
    return calls


def multi_turn_rollout_func(
    server: str,
    world: WorldInfo,
    user_backend: Backend,
    *,
    max_turns: int = 4,
    max_new_tokens: int = 128,
    token: str | None = None,
    environment: type | None = None,
) -> Any:
    """A TRL `rollout_func` for multi-turn episodes with a simulated user.

    Per prompt: open the task's episode (the environment's `reset`: its group's first creates it, the others
    fork its step 0), then alternate policy generation, tool calls over MCP and user-simulator turns. Returns
    prompt ids, completion ids (policy tokens and environment tokens interleaved), `env_mask` (1 on policy
    tokens, 0 on tool results and user turns), no logprobs (TRL recomputes them), and `simia_reward` (the
    reward of the judge's verdict by the environment's `RewardMix`, None when masked) with `simia_outcome` (each
    rollout's `Outcome`, for the warning of a step whose every reward was masked). Each episode is ended with
    its transcript and token data, so `simia export --format rl` has what token-level RL frameworks consume.

    Args:
        environment: the environment class whose instances hold the episodes (default:
            `environment_class(server, world, token)`).
    """
    tools_schema = [openai_tool(t) for t in world.tool_specs()]
    by_instruction = {t.instruction: t for t in world.tasks}
    env = environment if environment is not None else environment_class(server, world, token)
    loop = _Loop()

    def render(tokenizer: Any, messages: list[dict[str, Any]], generation: bool) -> str:
        return str(
            tokenizer.apply_chat_template(
                messages, tools=tools_schema, tokenize=False, add_generation_prompt=generation
            )
        )

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        import torch  # optional extra (train)

        model, tokenizer = trainer.model, trainer.processing_class
        out: dict[str, Any] = {
            "prompt_ids": [],
            "completion_ids": [],
            "logprobs": None,
            "env_mask": [],
            "simia_reward": [],
            "simia_outcome": [],
        }
        for prompt in prompts:
            messages = [dict(m) for m in prompt]
            task = by_instruction.get(str(messages[-1]["content"]))
            instance = env()
            instance.reset(task=task.id if task else None, group=task.id if task else "free")
            user = (
                UserSimulator(user_backend, instruction=task.instruction, hidden=task.user_hidden)
                if task is not None and user_backend is not None
                else None
            )
            prompt_ids = tokenizer(render(tokenizer, messages, True), add_special_tokens=False)["input_ids"]
            completion: list[int] = []
            mask: list[int] = []
            for _ in range(max_turns):
                inputs = torch.tensor([prompt_ids + completion])
                with torch.no_grad():
                    generated = model.generate(
                        inputs,
                        attention_mask=torch.ones_like(inputs),
                        max_new_tokens=max_new_tokens,
                        do_sample=True,
                        pad_token_id=tokenizer.pad_token_id,
                    )
                new = generated[0, inputs.shape[1] :].tolist()
                completion += new
                mask += [1] * len(new)
                text = tokenizer.decode(new, skip_special_tokens=True)
                calls = _tool_calls(text)
                content = _TOOL_CALL.sub("", text).strip()
                before = render(tokenizer, [*messages, {"role": "assistant", "content": content}], False)
                assistant: dict[str, Any] = {"role": "assistant", "content": content}
                if calls:
                    assistant["tool_calls"] = [
                        {
                            "id": f"call_{len(messages)}_{i}",
                            "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"]},
                        }
                        for i, c in enumerate(calls)
                    ]
                messages.append(assistant)
                env_messages: list[dict[str, Any]] = []
                if calls:
                    for call, entry in zip(calls, assistant["tool_calls"], strict=True):
                        result = loop.run(instance._call(call["name"], call["arguments"]))
                        env_messages.append({"role": "tool", "tool_call_id": entry["id"], "content": result})
                elif user is not None:
                    reply, done = loop.run(user.reply(content))
                    if done:
                        break
                    env_messages.append({"role": "user", "content": reply})
                else:
                    break
                messages += env_messages
                after = render(tokenizer, messages, True)
                env_ids = tokenizer(
                    after[len(before) :] if after.startswith(before) else after, add_special_tokens=False
                )["input_ids"]
                completion += env_ids
                mask += [0] * len(env_ids)
            tokens = {"prompt_ids": prompt_ids, "completion_ids": completion, "env_mask": mask}
            reward = instance._end(openai_transcript(messages), tokens)
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion)
            out["env_mask"].append(mask)
            out["simia_reward"].append(reward)
            out["simia_outcome"].append(instance.outcome)
        return out

    return rollout_func
