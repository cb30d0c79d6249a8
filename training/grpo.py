"""GRPO with TRL where the environment is a simia server and the reward is its judge's verdict.

Each rollout is an episode: `reset(**row)` forks the group's snapshot episode (GRPO
groups start from one state), the world's tools (as the server describes them) are methods
of the environment (built from their JSON schemas) that call the episode over MCP, and the
reward function `simia_env_reward` ends each episode through `/end` with the policy's whole
conversation as the transcript: the verdict's training reward, or None (masked) for judge
errors, infrastructure failures and fabricated transcripts, never a silent 0.

    simia serve --backend openai:gpt-5.4-mini &
    python -m simia.training.grpo --server http://127.0.0.1:8765 --world retail --model embedded \
        --max-steps 10 --output-dir ckpt/
"""

from __future__ import annotations

import asyncio
import inspect
import json
import keyword
import os
import re
import sys
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import mcp_types as types
from simia.clients.api import SimiaClient, SyncSimiaClient
from simia.clients.prompt import agent_system_prompt
from simia.clients.user import UserSimulator
from simia.sim.backends import Backend, resolve_backend
from simia.sim.wire import WorldInfo
from simia.sim.world import ToolSpec, openai_tool, openai_tool_call

from . import models
from ._config import parse_config

__all__ = [
    "GRPORun",
    "environment_class",
    "main",
    "multi_turn_rollout_func",
    "simia_env_reward",
    "simia_reward",
    "task_dataset",
    "train",
    "trl_batch_size",
]

T = TypeVar("T")

_PY = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


@dataclass
class GRPORun:
    """Fields of one GRPO run (YAML `--config` and `--field value` set them).

    Attributes:
        server: base URL of a running `simia serve`.
        world: the world whose tasks are the prompts.
        tasks: `all` or comma-separated task ids.
        model: a Hugging Face path, a .gguf file, `embedded` (SmolLM2-135M) or `tiny` (random, for tests).
        output_dir: where the checkpoint goes.
        max_steps: optimizer steps.
        num_generations: rollouts per prompt (the GRPO group; they fork one snapshot).
        batch_size: completions per device step, a multiple of num_generations (default: num_generations).
        learning_rate: AdamW learning rate.
        max_completion_length: tokens per completion (use >= 160 so tool results are not dropped).
        max_tool_calling_iterations: tool rounds per rollout.
        beta: KL coefficient (0 skips the reference model: cheaper on CPU).
        token: bearer token for the server.
        user: backend SPEC of the user simulator; set it to train multi-turn episodes through `rollout_func`.
        base_url: server URL of the user simulator's model for `openai-compatible:` (vLLM, SGLang, ...).
        max_turns: policy turns per multi-turn episode.
        seed: random seed.
        shuffle: shuffle the task prompts.
        save: write the final model.
    """

    server: str = "http://127.0.0.1:8765"
    world: str = "mock"
    tasks: str = "all"
    model: str = "embedded"
    output_dir: str = "checkpoints/grpo"
    max_steps: int = 2
    num_generations: int = 2
    batch_size: int | None = None
    learning_rate: float = 1e-5
    max_completion_length: int = 256
    max_tool_calling_iterations: int = 4
    beta: float = 0.0
    token: str | None = None
    user: str | None = None
    base_url: str | None = None
    max_turns: int = 4
    seed: int = 0
    shuffle: bool = True
    save: bool = True


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


def environment_class(server: str, world: WorldInfo, token: str | None = None) -> type:
    """The environment class TRL's `environment_factory` instantiates: one instance per rollout."""
    snapshots: dict[str, str] = {}  # group key -> the episode every rollout of that group forks
    lock = threading.Lock()

    class SimiaEnvironment:
        """A simia episode as a TRL environment."""

        def __init__(self) -> None:
            self.episode_id: str | None = None
            self.mcp_url: str | None = None

        def reset(self, **row: Any) -> str | None:
            task = row.get("task")
            key = str(row.get("group") or task)
            with SyncSimiaClient(server, token=token, timeout=120) as api, lock:
                base = snapshots.get(key)
                if base is None:
                    base = snapshots[key] = api.create(world.name, task=task).id
                episode = api.fork(base, step=0)
            self.episode_id, self.mcp_url = episode.id, episode.mcp_url
            return None

        async def _call(self, name: str, arguments: dict[str, Any]) -> str:
            assert self.mcp_url is not None, "reset() opens the episode first"
            async with SimiaClient(server, token=token, timeout=120) as api, api.mcp(self.mcp_url) as session:
                result = await session.call_tool(name, arguments)
            return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))

        def _end(self, transcript: list[dict[str, Any]] | None, tokens: dict[str, Any] | None = None) -> float | None:
            """End the episode with the policy's conversation (and token data); the verdict's training reward
            (None: masked). Private: TRL exposes every public method as a tool."""
            if self.episode_id is None:
                return None
            with SyncSimiaClient(server, token=token) as api:
                verdict = api.end(self.episode_id, transcript=transcript, tokens=tokens).verdict
            return verdict.training_reward() if verdict is not None else None

    for tool in world.tool_specs():
        setattr(SimiaEnvironment, _identifier(tool.name), _tool_method(tool))
    return SimiaEnvironment


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


def task_dataset(world: WorldInfo, tasks: str = "all", repeat: int = 8) -> Any:
    """Prompts from the world's tasks: the agent system prompt under its policy, the instruction as user turn."""
    from datasets import Dataset  # optional extra (train)

    chosen = world.tasks if tasks == "all" else [t for t in world.tasks if t.id in set(tasks.split(","))]
    if not chosen:
        raise ValueError(f"no tasks selected from {world.name!r}: {tasks!r}")
    system = agent_system_prompt(world.policy)
    rows = [
        {
            "prompt": [{"role": "system", "content": system}, {"role": "user", "content": t.instruction}],
            "task": t.id,
            "group": t.id,
        }
        for t in chosen
    ]
    return Dataset.from_list(rows * repeat)


def trl_batch_size(run: GRPORun) -> int:
    """The per-device batch TRL gets: `batch_size`, or `num_generations` when unset; TRL needs a multiple of
    `num_generations` (every group complete in one batch), so anything else is refused with the fix."""
    size = run.batch_size if run.batch_size is not None else run.num_generations
    if run.num_generations < 2:
        raise ValueError(f"--num-generations must be at least 2 (GRPO compares a group), got {run.num_generations}")
    if size % run.num_generations:
        fixed = -(-size // run.num_generations) * run.num_generations
        raise ValueError(
            f"--batch-size {size} is not a multiple of --num-generations {run.num_generations}; "
            f"use --batch-size {fixed} (or leave it unset)"
        )
    return size


def train(
    run: GRPORun, world: WorldInfo, *, model: Any = None, tokenizer: Any = None, user_backend: Backend | None = None
) -> dict[str, Any]:
    """Run GRPO against `run.server`; returns the rewards TRL logged and where the checkpoint went."""
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]  # optional extra (train)

    batch_size = trl_batch_size(run)
    if model is None:
        model, tokenizer = models.tiny_model() if run.model == "tiny" else models.load_model(run.model)
    models.generation_template(tokenizer)
    config = GRPOConfig(
        output_dir=run.output_dir,
        max_steps=run.max_steps,
        learning_rate=run.learning_rate,
        per_device_train_batch_size=batch_size,
        num_generations=run.num_generations,
        max_completion_length=run.max_completion_length,
        max_tool_calling_iterations=run.max_tool_calling_iterations,
        beta=run.beta,
        seed=run.seed,
        shuffle_dataset=run.shuffle,
        logging_steps=1,
        bf16=False,
        fp16=False,
        activation_checkpointing=False,
        use_cpu=True,
        save_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
    )
    if user_backend is not None:  # multi-turn episodes with a simulated user, through rollout_func
        rollout = multi_turn_rollout_func(
            run.server,
            world,
            user_backend,
            max_turns=run.max_turns,
            max_new_tokens=run.max_completion_length,
            token=run.token,
        )
        trainer = GRPOTrainer(
            model=model,
            args=config,
            processing_class=tokenizer,
            reward_funcs=[simia_reward],
            train_dataset=task_dataset(world, run.tasks),
            rollout_func=rollout,
        )
    else:
        trainer = GRPOTrainer(
            model=model,
            args=config,
            processing_class=tokenizer,
            reward_funcs=[simia_env_reward],
            train_dataset=task_dataset(world, run.tasks),
            environment_factory=environment_class(run.server, world, run.token),
        )
    trainer.train()
    logs = trainer.state.log_history
    rewards = [entry["reward"] for entry in logs if "reward" in entry]
    if run.save:
        trainer.save_model(run.output_dir)
        tokenizer.save_pretrained(run.output_dir)
    return {"rewards": rewards, "steps": trainer.state.global_step, "output_dir": run.output_dir, "log": logs}


class _Loop:
    """A background event loop for the async parts (MCP calls, the user simulator) of a sync rollout_func."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="simia-rollout-loop").start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)


def multi_turn_rollout_func(
    server: str,
    world: WorldInfo,
    user_backend: Backend,
    *,
    max_turns: int = 4,
    max_new_tokens: int = 128,
    token: str | None = None,
) -> Any:
    """A TRL `rollout_func` for multi-turn episodes with a simulated user.

    Per prompt: fork the task's snapshot episode, then alternate policy generation, tool calls
    over MCP and user-simulator turns. Returns prompt ids, completion ids (policy tokens and
    environment tokens interleaved), `env_mask` (1 on policy tokens, 0 on tool results and user
    turns), no logprobs (TRL recomputes them), and `simia_reward` (the judge's verdict, None when
    masked). Each episode is ended with its transcript and token data, so `simia export --format rl`
    has what token-level RL frameworks consume.
    """
    tools_schema = [openai_tool(t) for t in world.tool_specs()]
    by_instruction = {t.instruction: t for t in world.tasks}
    env = environment_class(server, world, token)
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
                calls = []
                for block in _TOOL_CALL.findall(text):
                    try:
                        call = json.loads(block)
                        calls.append({"name": str(call["name"]), "arguments": dict(call.get("arguments") or {})})
                    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                        continue
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
        return out

    return rollout_func


def simia_reward(completions: list[Any], simia_reward: list[float | None], **kwargs: Any) -> list[float | None]:
    """The reward function for `multi_turn_rollout_func`: the judge's verdicts it collected (None is masked)."""
    return simia_reward


def main(argv: list[str] | None = None) -> int:
    """`python -m simia.training.grpo`: the world and its tasks come from the server (any world it serves)."""
    run = parse_config(GRPORun, argv, description=__doc__ or "")
    try:
        trl_batch_size(run)
        user = resolve_backend(run.user, base_url=run.base_url, env=os.environ) if run.user is not None else None
        with SyncSimiaClient(run.server, token=run.token) as api:
            worlds = {w.name: w for w in api.worlds()}
    except Exception as exc:  # the entry point: one line, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    world = worlds.get(run.world)
    if world is None:
        print(
            f"error: {run.server} does not serve world {run.world!r}; it serves: {', '.join(worlds)}", file=sys.stderr
        )
        return 2
    result = train(run, world, user_backend=user)
    print(json.dumps({k: v for k, v in result.items() if k != "log"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
