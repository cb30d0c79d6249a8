"""GRPO with TRL where the environment is a simia server and the reward is its judge's verdict.

Each rollout is an episode: `reset(**row)` forks the group's snapshot episode (GRPO
groups start from one state), the world's tools are methods of the environment (built
from their JSON schemas) that call the episode over MCP with the official SDK client,
and `get_reward` ends the episode through `/end`: the judge's 0/1 reward, or None (masked)
for a `judge_error`, never a silent 0.

    simia serve --backend openai:gpt-5.4-mini &
    python -m simia.training.grpo --world retail --model embedded --max-steps 10 --output-dir ckpt/
"""

from __future__ import annotations

import inspect
import json
import keyword
import re
import threading
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx
import mcp_types as types
from mcp import Client
from simia.sim.world import ToolSpec, World

from . import models
from ._config import parse_config

__all__ = ["GRPORun", "environment_class", "main", "task_dataset", "train"]

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
        batch_size: completions per device step (a multiple of num_generations).
        learning_rate: AdamW learning rate.
        max_completion_length: tokens per completion (use >= 160 so tool results are not dropped).
        max_tool_calling_iterations: tool rounds per rollout.
        beta: KL coefficient (0 skips the reference model: cheaper on CPU).
        token: bearer token for the server.
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
    batch_size: int = 2
    learning_rate: float = 1e-5
    max_completion_length: int = 256
    max_tool_calling_iterations: int = 4
    beta: float = 0.0
    token: str | None = None
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


def environment_class(server: str, world: World, token: str | None = None) -> type:
    """The environment class TRL's `environment_factory` instantiates: one instance per rollout."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    snapshots: dict[str, str] = {}  # group key -> the episode every rollout of that group forks
    lock = threading.Lock()

    class SimiaEnvironment:
        """A simia episode as a TRL environment."""

        def __init__(self) -> None:
            self.episode_id: str | None = None
            self.mcp_url: str | None = None
            self.infra_error = False

        def reset(self, **row: Any) -> str | None:
            task = row.get("task")
            key = str(row.get("group") or task)
            with httpx.Client(base_url=server, headers=headers, timeout=120) as http, lock:
                base = snapshots.get(key)
                if base is None:
                    created = http.post("/v1/episodes", json={"world": world.name, "task": task})
                    created.raise_for_status()
                    base = snapshots[key] = created.json()["id"]
                fork = http.post(f"/v1/episodes/{base}/fork", json={"step": 0})
                fork.raise_for_status()
            episode = fork.json()
            self.episode_id, self.mcp_url, self.infra_error = episode["id"], episode["mcp_url"], False
            return None

        async def _call(self, name: str, arguments: dict[str, Any]) -> str:
            assert self.mcp_url is not None, "reset() opens the episode first"
            async with httpx.AsyncClient(headers=headers, timeout=120) as http:
                from mcp.client.streamable_http import streamable_http_client

                async with Client(streamable_http_client(self.mcp_url, http_client=http)) as client:
                    result = await client.call_tool(name, arguments)
            text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
            if result.is_error and (result.meta or {}).get("simia/error_kind") == "infra":
                self.infra_error = True
            return text

        async def get_reward(self) -> float | None:
            """The judge's reward; None (masked by TRL) for judge errors and infrastructure failures."""
            if self.episode_id is None:
                return None
            async with httpx.AsyncClient(base_url=server, headers=headers, timeout=600) as http:
                ended = await http.post(f"/v1/episodes/{self.episode_id}/end", json={})
            verdict = ended.json().get("verdict") or {} if ended.status_code == 200 else {}
            if self.infra_error or verdict.get("status") != "ok" or verdict.get("reward") is None:
                return None
            return float(verdict["reward"])

    for tool in world.tools:
        setattr(SimiaEnvironment, _identifier(tool.name), _tool_method(tool))
    return SimiaEnvironment


def task_dataset(world: World, tasks: str = "all", repeat: int = 8) -> Any:
    """Prompts from the world's tasks: the policy as system turn, the instruction as user turn."""
    from datasets import Dataset

    chosen = world.tasks if tasks == "all" else [t for t in world.tasks if t.id in set(tasks.split(","))]
    if not chosen:
        raise ValueError(f"no tasks selected from {world.name!r}: {tasks!r}")
    system = f"You are a helpful agent. Use the tools. Follow the policy.\n\n{world.policy}".strip()
    rows = [
        {
            "prompt": [{"role": "system", "content": system}, {"role": "user", "content": t.instruction}],
            "task": t.id,
            "group": t.id,
        }
        for t in chosen
    ]
    return Dataset.from_list(rows * repeat)


def train(run: GRPORun, world: World, *, model: Any = None, tokenizer: Any = None) -> dict[str, Any]:
    """Run GRPO against `run.server`; returns the rewards TRL logged and where the checkpoint went."""
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]

    if model is None:
        model, tokenizer = models.tiny_model() if run.model == "tiny" else models.load_model(run.model)
    models.generation_template(tokenizer)
    config = GRPOConfig(
        output_dir=run.output_dir,
        max_steps=run.max_steps,
        learning_rate=run.learning_rate,
        per_device_train_batch_size=run.batch_size,
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
    trainer = GRPOTrainer(
        model=model,
        args=config,
        processing_class=tokenizer,
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


def main(argv: list[str] | None = None) -> int:
    from simia.sim.loader import default_worlds_dir, load_worlds

    run = parse_config(GRPORun, argv, description=__doc__ or "")
    world = load_worlds([default_worlds_dir()]).get(run.world)
    result = train(run, world)
    print(json.dumps({k: v for k, v in result.items() if k != "log"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
