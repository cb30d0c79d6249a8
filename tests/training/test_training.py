"""Training on CPU: SFT and GRPO steps with a tiny random Llama (`slow`) and SmolLM2-135M (`local_model`, smoke)."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl", reason="needs the `train` extra")

from simia.clients.api import SyncSimiaClient
from simia.sim import load_worlds
from simia.sim.backends import FunctionBackend
from simia.sim.wire import WorldInfo
from simia.training import grpo, models
from simia.training.export import export
from simia.training.grpo import GRPORun, environment_class, task_dataset
from simia.training.grpo import train as grpo_train
from simia.training.sft import SFTRun, load_sft_dataset
from simia.training.sft import train as sft_train

ROOT = Path(__file__).resolve().parents[2]
WORLDS = load_worlds([ROOT / "tool_specs"]).worlds
MOCK = WORLDS["mock"]


@pytest.fixture
def server(threaded_mock_server: str) -> str:
    return threaded_mock_server


def served(server: str, name: str = "mock") -> WorldInfo:
    """The world as the server describes it (what the trainer gets)."""
    with SyncSimiaClient(server) as api:
        return next(w for w in api.worlds() if w.name == name)


Acts = Callable[[str, int], list[tuple[str, dict[str, Any]]]]
"""(task, how many resets came before) -> the tool calls an environment makes right after its reset."""


def _run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine to completion from sync code, whether or not this thread runs an event loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def acting_environments(acts: Acts) -> Callable[..., type]:
    """An `environment_class` whose environments make `acts(task, n)` tool calls through their own tool methods
    (the ones TRL calls for the policy's tool calls) right after `reset`: a stand-in for a policy that calls the
    tools, since a random tiny model never writes a valid tool call."""

    def make(server: str, world: WorldInfo, token: str | None = None, **options: Any) -> type:
        base = environment_class(server, world, token, **options)
        resets = itertools.count()

        class Acting(base):  # type: ignore[valid-type,misc]
            def reset(self, **row: Any) -> str | None:
                observation: str | None = super().reset(**row)
                for name, arguments in acts(str(row.get("task")), next(resets)):
                    _run(getattr(self, name)(**arguments))
                return observation

        return Acting

    return make


def ended_episodes(server: str) -> dict[str, list[tuple[int, int | None]]]:
    """Task -> (tool calls, the judge's reward) of each ended episode, sorted."""
    with SyncSimiaClient(server) as api:
        ended = api.list_episodes(status="ended")
    out: dict[str, list[tuple[int, int | None]]] = {}
    for episode in ended:
        out.setdefault(str(episode.task), []).append((episode.calls, episode.reward))
    return {task: sorted(runs, key=lambda r: (r[0], -1 if r[1] is None else r[1])) for task, runs in out.items()}


async def sft_dataset(tmp_path: Path) -> Path:
    from tests_helpers import make_db  # type: ignore[import-not-found]

    await make_db(tmp_path / "s.db")
    await export(tmp_path / "s.db", "hf", tmp_path / "sft", WORLDS)
    return tmp_path / "sft"


@pytest.mark.local_model  # the embedded model's tokenizer, read from its GGUF (seconds)
def test_the_tool_template_renders_tool_calls_and_masks_only_assistant_turns() -> None:
    tokenizer = models.load_tokenizer("embedded")
    messages = [
        {"role": "system", "content": "You manage a pantry."},
        {"role": "user", "content": "Set milk to 4."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}}
            ],
        },
        {"role": "tool", "content": '{"name": "milk", "qty": 4}'},
        {"role": "assistant", "content": "Done."},
    ]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "set_quantity",
                "description": "Set a quantity.",
                "parameters": MOCK.tools[2].input_schema,
            },
        }
    ]
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    assert '<tool_call>\n{"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}\n</tool_call>' in text
    assert "set_quantity" in text.split("<|im_start|>user")[0]  # the tools are declared in the system turn
    out = tokenizer.apply_chat_template(messages, tools=tools, return_dict=True, return_assistant_tokens_mask=True)
    mask, ids = out["assistant_masks"], out["input_ids"]
    trained = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert "Done." in trained and "set_quantity" in trained
    assert "Set milk to 4." not in trained and '"qty": 4}' not in trained.split("</tool_call>")[-1]


@pytest.mark.slow  # trains with torch and TRL (seconds of CPU)
def test_sft_steps_on_a_tiny_model_lower_the_loss(tmp_path: Path) -> None:
    from tests_helpers import make_db

    asyncio.run(make_db(tmp_path / "s.db"))
    asyncio.run(export(tmp_path / "s.db", "hf", tmp_path / "sft", WORLDS))
    assert len(load_sft_dataset(str(tmp_path / "sft"))) == 1
    result = sft_train(
        SFTRun(
            dataset=str(tmp_path / "sft"),
            model="tiny",
            output_dir=str(tmp_path / "ckpt"),
            max_steps=4,
            batch_size=1,
            learning_rate=1e-3,
        )
    )
    losses = result["losses"]
    assert len(losses) == 4 and all(loss == loss for loss in losses) and losses[-1] < losses[0]
    assert (tmp_path / "ckpt" / "config.json").is_file()


@pytest.mark.slow  # imports transformers (and torch) for TRL's schema helper: seconds
async def test_the_environment_exposes_world_tools_and_returns_the_judges_reward(server: str) -> None:
    from transformers.utils import get_json_schema

    cls = environment_class(server, served(server))
    schema = get_json_schema(cls.set_quantity)["function"]
    assert schema["name"] == "set_quantity" and schema["parameters"]["required"] == ["name", "qty"]
    assert schema["parameters"]["properties"]["qty"]["type"] == "integer"
    env = cls()
    await asyncio.to_thread(env.reset, task="restock_milk", group="g1")
    assert json.loads(await env.set_quantity(name="milk", qty=4)) == {"name": "milk", "qty": 4}
    assert await asyncio.to_thread(env._end, None) == 1.0
    other = cls()
    await asyncio.to_thread(other.reset, task="restock_milk", group="g1")
    assert other.episode_id != env.episode_id
    assert await asyncio.to_thread(other._end, None) == 0.0  # nothing done: the rule check fails
    import httpx2 as httpx

    async with httpx.AsyncClient(base_url=server) as http:
        episodes = (await http.get("/v1/episodes")).json()["episodes"]
    forks = [e for e in episodes if e["parent_id"]]
    assert [(e["id"], e["parent_id"]) for e in forks] == [(other.episode_id, env.episode_id)]  # one snapshot a group


MILK_4 = ("set_quantity", {"name": "milk", "qty": 4})
APPLES_5 = ("set_quantity", {"name": "apple", "qty": 5})


@pytest.mark.parametrize(
    ("task", "calls", "reward"),
    [
        ("restock_milk", [MILK_4], 1.0),
        ("restock_milk", [], 0.0),
        ("restock_milk", [("set_quantity", {"name": "milk", "qty": 3})], 0.0),
        ("count_apples", [("get_item", {"name": "apple"}), APPLES_5], 1.0),
        ("count_apples", [("get_item", {"name": "apple"})], 0.0),  # counted, never topped up
        ("count_apples", [MILK_4], 0.0),
        ("count_apples", [APPLES_5, MILK_4], 0.0),  # the right call, and a change nobody asked for
        ("no_bananas", [("set_quantity", {"name": "banana", "qty": 6})], 1.0),  # refused: item_not_found
        ("no_bananas", [("set_quantity", {"name": "apple", "qty": 6})], 0.0),
        ("no_bananas", [MILK_4], 0.0),
    ],
)
async def test_every_mock_tasks_reward_depends_on_what_the_environment_was_asked_to_do(
    server: str, task: str, calls: list[tuple[str, dict[str, Any]]], reward: float
) -> None:
    env = environment_class(server, served(server))()
    await asyncio.to_thread(env.reset, task=task, group=task)
    for name, arguments in calls:
        await getattr(env, name)(**arguments)
    assert await asyncio.to_thread(env._end, None) == reward


@pytest.mark.slow  # trains with torch and TRL (seconds of CPU)
def test_grpo_steps_log_the_judges_reward_of_what_each_rollout_did(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one group per step, in dataset order: restock_milk's group, then count_apples's. The random tiny policy never
    # writes a valid tool call; the first restock_milk rollout's environment makes the right one for it
    def acts(task: str, n: int) -> list[tuple[str, dict[str, Any]]]:
        return [MILK_4] if (task, n) == ("restock_milk", 0) else []

    monkeypatch.setattr(grpo, "environment_class", acting_environments(acts))
    run = GRPORun(
        server=server,
        world="mock",
        tasks="restock_milk,count_apples",
        model="tiny",
        max_steps=2,
        num_generations=2,
        batch_size=2,
        max_completion_length=160,
        output_dir=str(tmp_path / "g"),
        save=False,
        shuffle=False,
    )
    result = grpo_train(run, served(server))
    # step 1: one of restock_milk's two rollouts set the milk; step 2: count_apples needs the apples topped up and
    # nobody did (before issue 17 it needed nothing and every rollout scored 1)
    assert result["steps"] == 2 and result["rewards"] == [0.5, 0.0]
    assert ended_episodes(server) == {"restock_milk": [(0, 0), (1, 1)], "count_apples": [(0, 0), (0, 0)]}
    assert len(task_dataset(served(server), "restock_milk,count_apples")) == 16


@pytest.mark.slow
@pytest.mark.local_model  # SmolLM2's weights, from the embedded GGUF
def test_sft_smoke_on_smollm2_from_the_gguf(tmp_path: Path) -> None:
    from tests_helpers import make_db

    asyncio.run(make_db(tmp_path / "s.db"))
    asyncio.run(export(tmp_path / "s.db", "hf", tmp_path / "sft", WORLDS))
    model, tokenizer = models.load_model("embedded")  # converted once to a cached fp32 folder
    assert sum(p.numel() for p in model.parameters()) > 100_000_000
    result = sft_train(
        SFTRun(
            dataset=str(tmp_path / "sft"),
            model="embedded",
            output_dir=str(tmp_path / "c"),
            max_steps=2,
            batch_size=1,
            learning_rate=1e-4,
            save=False,
        ),
        model=model,
        tokenizer=tokenizer,
    )
    losses: list[Any] = result["losses"]
    assert len(losses) == 2 and all(0 < loss < 20 for loss in losses) and losses[1] < losses[0]


@pytest.mark.slow
@pytest.mark.local_model  # SmolLM2's weights, from the embedded GGUF
def test_grpo_smoke_on_smollm2(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def acts(task: str, n: int) -> list[tuple[str, dict[str, Any]]]:
        return [APPLES_5] if n == 0 else []  # the first rollout's environment tops the apples up

    monkeypatch.setattr(grpo, "environment_class", acting_environments(acts))
    run = GRPORun(
        server=server,
        world="mock",
        tasks="count_apples",
        model="embedded",
        max_steps=1,
        num_generations=2,
        batch_size=2,
        max_completion_length=160,
        output_dir=str(tmp_path / "g"),
        save=False,
    )
    result = grpo_train(run, served(server))
    # the trainer logged the mean of the judge's verdicts on its two episodes; the acting rollout is rewarded
    # (SmolLM2 would have to undo its call to change that)
    verdicts = [reward for _, reward in ended_episodes(server)["count_apples"]]
    assert result["steps"] == 1 and len(verdicts) == 2 and None not in verdicts and 1 in verdicts
    assert result["rewards"] == [sum(r or 0 for r in verdicts) / 2]


@pytest.mark.slow  # trains with torch and TRL (seconds of CPU)
def test_the_multi_turn_rollout_func_trains_with_a_simulated_user_and_keeps_token_data(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx2 as httpx
    from simia.sim.backends import CompletionRequest

    def user(request: CompletionRequest) -> dict[str, Any]:
        turn = sum(1 for m in request.messages if m["role"] == "assistant")
        return {"message": "Could you check the apples again?", "done": turn >= 2}

    def acts(task: str, n: int) -> list[tuple[str, dict[str, Any]]]:
        return [APPLES_5] if n == 0 else []  # the first rollout's environment tops the apples up

    monkeypatch.setattr(grpo, "environment_class", acting_environments(acts))
    task = MOCK.task("count_apples")
    assert task is not None and task.user_hidden  # a multi-turn task
    run = GRPORun(
        server=server,
        world="mock",
        tasks="count_apples",
        model="tiny",
        max_steps=1,
        num_generations=2,
        batch_size=2,
        max_completion_length=24,
        max_turns=3,
        output_dir=str(tmp_path / "g"),
        save=False,
    )
    result = grpo_train(run, served(server), user_backend=FunctionBackend(user))
    # the judge's verdicts reached the trainer: one rollout topped the apples up, the random policy did not
    assert result["steps"] == 1 and result["rewards"] == [0.5]
    assert ended_episodes(server) == {"count_apples": [(0, 0), (1, 1)]}  # the rollout that acted was rewarded
    with httpx.Client(base_url=server) as http:
        ended = [e for e in http.get("/v1/episodes", params={"status": "ended"}).json()["episodes"]]
        episode = http.get(f"/v1/episodes/{ended[0]['id']}").json()
    roles = [m["role"] for m in episode["transcript"]]
    assert roles[:2] == ["system", "user"] and "assistant" in roles
    rows = asyncio.run(_rl_rows(tmp_path, server))
    tokens = rows[0]["tokens"]
    assert len(tokens["completion_ids"]) == len(tokens["env_mask"]) and 1 in tokens["env_mask"]
    assert 0 in tokens["env_mask"]  # the user's turns are environment tokens


async def _rl_rows(tmp_path: Path, server: str) -> list[dict[str, Any]]:
    db = tmp_path / "t.db"  # threaded_mock_server's database
    await export(db, "rl", tmp_path / "rl.jsonl", WORLDS)
    return [json.loads(line) for line in (tmp_path / "rl.jsonl").read_text().splitlines() if '"tokens"' in line]
