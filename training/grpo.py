"""GRPO with TRL where the environment is a simia server and the reward is its judge's verdict.

Each rollout is an episode: `reset(**row)` opens it (the group's first rollout creates it, the others fork its
step 0: GRPO groups start from one state, and no episode is left open), the world's tools (as the server
describes them) are methods of the environment (built from their JSON schemas) that call the episode over MCP,
and the reward function `simia_env_reward` ends each episode through `/end` with the policy's whole
conversation as the transcript: the verdict's training reward, or None (masked) for judge errors,
infrastructure failures and fabricated transcripts, never a silent 0. `--reward` picks what the reward is made
of (`simia.training.grpo_rewards`: the outcome, the progress the episode reached, the process judge's score, or a
weighted mix), and `--curriculum DB` repeats each task's prompt by its recorded pass rate (`simia.clients.curriculum`).

    simia serve --backend openai:gpt-5.4-mini &
    python -m simia.training.grpo --server http://127.0.0.1:8765 --world retail --model embedded \
        --max-steps 10 --output-dir ckpt/
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simia.clients.api import SyncSimiaClient
from simia.clients.curriculum import Curriculum, plan, read_history
from simia.sim.backends import Backend, resolve_backend
from simia.sim.storage import open_store
from simia.sim.wire import WorldInfo

from . import models
from ._config import parse_config
from .grpo_dataset import chosen_tasks, task_dataset
from .grpo_env import environment_class
from .grpo_rewards import RewardMix, simia_env_reward, simia_reward
from .grpo_rollout import multi_turn_rollout_func

__all__ = [
    "GRPORun",
    "RewardMix",
    "environment_class",
    "main",
    "multi_turn_rollout_func",
    "read_curriculum",
    "simia_env_reward",
    "simia_reward",
    "task_dataset",
    "train",
    "trl_batch_size",
]


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
        reward: what a rollout's reward is: outcome (the verdict's training reward), progress (the progress it ended
            at, 1 for a full solution), process (the process judge's mean step score) or mix (`reward_weights`).
        reward_weights: with `reward: mix`, term=weight,... (e.g. outcome=1,progress=0.5); masked as the outcome is.
        curriculum: a simia database (file or postgresql:// URL) whose recorded pass rates share out the prompts,
            most to tasks near one half.
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
    reward: str = "outcome"
    reward_weights: str = ""
    curriculum: str | None = None
    seed: int = 0
    shuffle: bool = True
    save: bool = True

    def __post_init__(self) -> None:
        RewardMix.parse(self.reward, self.reward_weights)  # a bad --reward fails here, naming the fix

    @property
    def reward_mix(self) -> RewardMix:
        """The `RewardMix` of `reward` and `reward_weights`."""
        return RewardMix.parse(self.reward, self.reward_weights)


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


PROMPTS_PER_TASK = 8
"""Dataset rows (GRPO groups) per selected task; a curriculum shares out as many in all."""


def read_curriculum(run: GRPORun, world: WorldInfo) -> Curriculum | None:
    """The plan `run.curriculum`'s recorded episodes of `world` give its selected tasks (`PROMPTS_PER_TASK` groups
    each on average), or None without `--curriculum`.

    Raises:
        ValueError: no database at that path.
    """
    db = run.curriculum
    if db is None:
        return None
    if "://" not in db and not Path(db).is_file():
        raise ValueError(
            f"--curriculum {db!r}: no database there; pass the file `simia serve --db` wrote (or its postgresql:// URL)"
        )
    tasks = [t.id for t in chosen_tasks(world, run.tasks)]

    async def read() -> Curriculum:
        store = open_store(db, read_only=True)
        try:
            return plan(tasks, await read_history(store, world.name), len(tasks) * PROMPTS_PER_TASK)
        finally:
            await store.close()

    return asyncio.run(read())


def train(
    run: GRPORun,
    world: WorldInfo,
    *,
    model: Any = None,
    tokenizer: Any = None,
    user_backend: Backend | None = None,
    curriculum: Curriculum | None = None,
) -> dict[str, Any]:
    """Run GRPO against `run.server`; returns the rewards TRL logged and where the checkpoint went.

    Args:
        curriculum: the plan of the prompts (default: `read_curriculum(run, world)`, None without one: every
            selected task `PROMPTS_PER_TASK` times).
    """
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]  # optional extra (train)

    batch_size = trl_batch_size(run)
    curriculum = curriculum or read_curriculum(run, world)
    rows = curriculum.attempts(1) if curriculum is not None else None
    dataset = task_dataset(world, run.tasks, PROMPTS_PER_TASK, rows=rows)
    environment = environment_class(run.server, world, run.token, reward=run.reward_mix)
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
            environment=environment,
        )
        trainer = GRPOTrainer(
            model=model,
            args=config,
            processing_class=tokenizer,
            reward_funcs=[simia_reward],
            train_dataset=dataset,
            rollout_func=rollout,
        )
    else:
        trainer = GRPOTrainer(
            model=model,
            args=config,
            processing_class=tokenizer,
            reward_funcs=[simia_env_reward],
            train_dataset=dataset,
            environment_factory=environment,
        )
    trainer.train()
    logs = trainer.state.log_history
    rewards = [entry["reward"] for entry in logs if "reward" in entry]
    if run.save:
        trainer.save_model(run.output_dir)
        tokenizer.save_pretrained(run.output_dir)
    return {"rewards": rewards, "steps": trainer.state.global_step, "output_dir": run.output_dir, "log": logs}


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
    try:
        curriculum = read_curriculum(run, world)
    except Exception as exc:  # a database that is not there or not simia's: one line, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if curriculum is not None:
        print(f"curriculum from {run.curriculum}: {PROMPTS_PER_TASK * len(curriculum.tasks)} group(s)")
        print(curriculum.table(), flush=True)
    result = train(run, world, user_backend=user, curriculum=curriculum)
    print(json.dumps({k: v for k, v in result.items() if k != "log"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
