"""simia's TRL environment keyed by world: `environment_factory` and `environments_dataset` against a live server
(in a background thread), each environment owning its reward (`get_reward`: the stored verdict's training reward),
and the TRL page's snippets as written, training one GRPO step on a tiny random model."""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

pytest.importorskip("trl", reason="needs the `train` extra")

from simia.sim import load_worlds
from simia.sim.verdict import Verdict
from simia.training import grpo_env, models
from simia.training.grpo_env import environment_factory, environments_dataset
from simia.training.grpo_rewards import simia_env_reward

ROOT = Path(__file__).resolve().parents[2]
MOCK = load_worlds([ROOT / "tool_specs"]).worlds["mock"]
DOC_SIMIA = "http://127.0.0.1:8765"
MILK_4 = {"name": "milk", "qty": 4}


@pytest.fixture
def server(threaded_mock_server: str) -> str:
    return threaded_mock_server


def stored_reward(server: str, episode_id: str) -> float | None:
    verdict = httpx.get(f"{server}/v1/episodes/{episode_id}").json()["verdict"]
    return Verdict.model_validate(verdict).training_reward()


def _run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine to completion from sync code, whether or not this thread runs an event loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def test_the_factory_keys_environments_by_world_and_each_owns_the_stored_verdicts_reward(server: str) -> None:
    factory = environment_factory(server)
    assert list(factory) == ["mock"] and callable(factory["mock"].get_reward)
    done, idle = factory["mock"](), factory["mock"]()
    for env in (done, idle):
        env.reset(task="restock_milk", group="g")
    _run(done.set_quantity(**MILK_4))
    rewards = [done.get_reward(), idle.get_reward()]
    assert rewards == [1.0, 0.0]
    assert [stored_reward(server, env.episode_id) for env in (done, idle)] == rewards
    assert done.get_reward() is None  # this rollout's reward was given: never counted twice

    judged_first = factory["mock"]()  # a reward function that ends with the transcript comes first
    judged_first.reset(task="restock_milk", group="g")
    prompt = [{"role": "user", "content": "Set the milk to 4 litres."}]
    assert simia_env_reward([prompt], [[{"role": "assistant", "content": "Done."}]], [judged_first]) == [0.0]
    assert judged_first.get_reward() is None

    with pytest.raises(ValueError, match=r"does not serve 'retail'; it serves: mock"):
        environment_factory(server, ["mock", "retail"])


def test_the_dataset_routes_every_row_to_its_world_by_the_environment_column(server: str) -> None:
    rows = environments_dataset(server, ["mock"], repeat=2)
    assert len(rows) == 8 and set(rows["environment"]) == {"mock"}  # 4 tasks, twice
    assert rows[0]["task"] == "restock_milk" and rows[0]["prompt"][-1] == {
        "role": "user",
        "content": "Set the milk to 4 litres.",
    }


def python_blocks(page: str) -> list[str]:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


@pytest.mark.slow  # trains with torch and TRL (seconds of CPU)
def test_the_trl_pages_factory_trains_a_grpo_step_scored_by_get_reward(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TRL page, "simia's environment, keyed by world", its two blocks as written: changed are the server's URL,
    the model (a random 2-layer Llama: a random policy never writes a valid tool call, so the first rollout's
    environment makes the call for it) and GRPOConfig (CPU settings, 1 step, a group of 2). TRL routes the row
    by its `environment`, and scores each rollout with the environment's `get_reward`: the stored verdict's."""
    resets = itertools.count()
    plain = grpo_env.environment_class

    def acting(server: str, world: Any, token: str | None = None, **options: Any) -> type:
        base = plain(server, world, token, **options)

        class Acting(base):  # type: ignore[valid-type,misc]
            def reset(self, **row: Any) -> str | None:
                observation: str | None = super().reset(**row)
                if next(resets) == 0:
                    _run(self.set_quantity(**MILK_4))
                return observation

        Acting.__name__ = base.__name__
        return Acting

    monkeypatch.setattr(grpo_env, "environment_class", acting)
    wiring, training = python_blocks("trainers/trl.md")[:2]
    model, tokenizer = models.tiny_model()
    models.generation_template(tokenizer)
    cpu = dict(
        output_dir=str(tmp_path / "g"), max_steps=1, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=160, max_tool_calling_iterations=2, beta=0.0, shuffle_dataset=False, logging_steps=1,
        bf16=False, fp16=False, activation_checkpointing=False, use_cpu=True, save_strategy="no", report_to=[],
        dataloader_num_workers=0,
    )  # fmt: skip
    namespace: dict[str, Any] = {"model": model, "tokenizer": tokenizer, "CPU": cpu}
    exec(wiring.replace(DOC_SIMIA, server), namespace)
    args = "args=GRPOConfig(num_generations=4, max_completion_length=512, max_tool_calling_iterations=8)"
    assert '    model="Qwen/Qwen3-0.6B",\n' in training and args in training
    training = training.replace('model="Qwen/Qwen3-0.6B",', "model=model, processing_class=tokenizer,")
    exec(training.replace(args, "args=GRPOConfig(**CPU)"), namespace)
    logs = namespace["trainer"].state.log_history
    [step] = [entry for entry in logs if "reward" in entry]
    assert step["reward"] == 0.5 and step["rewards/simia_mock/mean"] == 0.5
    episodes = httpx.get(f"{server}/v1/episodes", params={"status": "ended"}).json()["episodes"]
    assert sorted((e["task"], e["calls"], e["reward"]) for e in episodes) == [
        ("restock_milk", 0, 0),
        ("restock_milk", 1, 1),
    ]
