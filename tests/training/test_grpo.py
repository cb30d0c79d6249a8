"""GRPO end to end with an LLM judge: the tool calls the policy writes reach the server through TRL's tool loop,
its whole conversation reaches the judge (a model served by the fake provider whose verdict depends on what the
policy said), and a run leaves none of the episodes it opened active. On TRL's reward path: progress gives a group
whose outcomes are all 0 a signal (non-zero advantages), and a step whose judge failed every call says so."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl", reason="needs the `train` extra")

from simia.cli._common import in_process_server
from simia.clients.api import SyncSimiaClient
from simia.sim import load_worlds
from simia.sim.backends import FunctionBackend, ScriptedBackend, resolve_backend
from simia.sim.wire import WorldInfo
from simia.testing import FakeProvider, mock_world_answer
from simia.training import models
from simia.training.grpo import GRPORun, environment_class
from simia.training.grpo import train as grpo_train

ROOT = Path(__file__).resolve().parents[2]
MOCK = load_worlds([ROOT / "tool_specs"]).worlds["mock"]
CONFIRMED = "Done: the milk is at 4 litres."
DENIED = "Sorry, I could not change the milk."
CALL = {"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}
APPLES_6 = {"name": "set_quantity", "arguments": {"name": "apple", "qty": 6}}


DATA = re.compile(r"<<<(?:END )?DATA \w+>>>\n?")
"""The delimiters of the judge prompt's data section."""


def conversation(said: str) -> list[dict[str, Any]]:
    """The conversation of a rollout whose policy set the milk and then said `said`, as the judge reads it."""
    call = {
        "id": "call_2",
        "type": "function",
        "function": {"name": "set_quantity", "arguments": json.dumps(CALL["arguments"])},
    }
    return [
        {"role": "user", "content": "Set the milk to 4 litres."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": json.dumps(CALL["arguments"]), "tool_call_id": "call_2"},
        {"role": "assistant", "content": said},
    ]


def judge_answer(body: dict[str, Any]) -> dict[str, Any]:
    """The judge model: reward 1 when the policy told the user the milk is at 4 litres, else 0 (the rule check,
    milk at 4, holds either way: only the conversation tells the two apart)."""
    episode = json.loads(DATA.split(body["messages"][-1]["content"])[1])
    said = [m.get("content") or "" for m in episode["conversation"] if m["role"] == "assistant"]
    confirmed = CONFIRMED in said
    criterion = {"criterion": "confirms the milk is at 4", "passed": confirmed, "evidence": said[-1] if said else ""}
    return {
        "criteria": [criterion],
        "reasoning": "confirmed" if confirmed else "no confirmation",
        "reward": int(confirmed),
    }


@contextlib.asynccontextmanager
async def judged_mock_server(db: Path, provider: FakeProvider) -> AsyncIterator[str]:
    """A simia server of the `mock` world (its flawless simulator) whose judge is a model the fake provider serves."""
    async with provider.running() as fake:
        judge = resolve_backend("openai-compatible:judge", base_url=fake.base_url, env={})
        try:
            async with in_process_server({"mock": MOCK}, FunctionBackend(mock_world_answer), db, judge) as url:
                yield url
        finally:
            await judge.aclose()


@contextlib.contextmanager
def in_background(server: contextlib.AbstractAsyncContextManager[str]) -> Iterator[str]:
    """Enter `server` on an event loop of its own thread (a trainer's code is synchronous); yields its URL."""
    box: dict[str, str] = {}
    ready, stop = threading.Event(), threading.Event()

    async def hold() -> None:
        async with server as url:
            box["url"] = url
            ready.set()
            await asyncio.to_thread(stop.wait)

    thread = threading.Thread(target=asyncio.run, args=(hold(),), daemon=True)
    thread.start()
    try:
        assert ready.wait(60), "the server did not start"
        yield box["url"]
    finally:
        stop.set()
        thread.join(30)


def served(server: str) -> WorldInfo:
    with SyncSimiaClient(server) as api:
        return next(w for w in api.worlds() if w.name == "mock")


def scripted_policy(said: list[str], calls: list[dict[str, Any] | None] | None = None) -> tuple[Any, Any]:
    """The tiny random Llama, writing what a policy that uses the tools writes (a random one never does): on its
    first turn the batch's i-th rollout writes a `<tool_call>` of `calls[i]` (default: set_quantity of the milk;
    None: no call, `said[i]` at once), then, once the tool has answered, `said[i]`. Its tokens go through TRL as
    the model's own: parsed for tool calls, then trained on."""
    import torch

    model, tokenizer = models.tiny_model()
    first = [CALL] * len(said) if calls is None else calls

    def generate(input_ids: Any, **_: Any) -> Any:
        rows = []
        for i, ids in enumerate(input_ids.tolist()):
            call = first[i]
            answered = "<tool_response>" in tokenizer.decode(ids) or call is None
            text = said[i] if answered else f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
            rows.append(ids + tokenizer(text + tokenizer.eos_token, add_special_tokens=False)["input_ids"])
        width = max(map(len, rows))
        return torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in rows])

    model.generate = generate
    return model, tokenizer


def one_step(server: str, tmp_path: Path, tasks: str = "restock_milk", **options: Any) -> GRPORun:
    """One GRPO step on `tasks`: two generations of the tiny model, nothing saved."""
    return GRPORun(
        server=server,
        world="mock",
        tasks=tasks,
        model="tiny",
        max_steps=1,
        num_generations=2,
        max_completion_length=160,
        output_dir=str(tmp_path / "g"),
        save=False,
        **options,
    )


@pytest.mark.slow  # trains with torch and TRL (seconds of CPU)
def test_grpo_rewards_what_the_policy_said_and_did_as_an_llm_judge_reads_it(tmp_path: Path) -> None:
    provider = FakeProvider(judge_answer)
    with in_background(judged_mock_server(tmp_path / "t.db", provider)) as server:
        model, tokenizer = scripted_policy([CONFIRMED, DENIED])
        run = one_step(server, tmp_path)
        result = grpo_train(run, served(server), model=model, tokenizer=tokenizer)
        with SyncSimiaClient(server) as api:
            episodes = [api.get(e.id) for e in api.list_episodes()]
    # both rollouts made the call the policy wrote and set the milk (the rule check holds for both); the judge
    # rewarded the one whose policy said so
    assert result["steps"] == 1 and result["rewards"] == [0.5]
    calls = [("set_quantity", CALL["arguments"])]
    outcomes = sorted(
        (
            e.status,
            [(ev.tool, ev.arguments) for ev in e.events],
            e.state["items"]["milk"]["qty"],
            (e.transcript or [{}])[-1].get("content"),
            e.reward,
        )
        for e in episodes
    )
    assert outcomes == [("ended", calls, 4, CONFIRMED, 1), ("ended", calls, 4, DENIED, 0)]
    read = [json.loads(DATA.split(r["messages"][-1]["content"])[1])["conversation"] for r in provider.requests]
    assert sorted(read, key=lambda c: c[-1]["content"]) == [conversation(CONFIRMED), conversation(DENIED)]


def test_a_groups_rollouts_leave_no_episode_open_once_each_has_ended(threaded_mock_server: str) -> None:
    server = threaded_mock_server
    cls = environment_class(server, served(server))
    rollouts = [cls() for _ in range(3)]
    for env in rollouts:
        env.reset(task="restock_milk", group="g1")
    first = rollouts[0].episode_id
    with SyncSimiaClient(server) as api:
        lineage = sorted((e.id == first, e.parent_id, e.fork_step) for e in api.list_episodes())
    assert lineage == [(False, first, 0), (False, first, 0), (True, None, None)]  # the others fork the first's step 0
    for env in rollouts:
        env._end(None)
    later = cls()  # the group's rollouts of a later step fork the first's step 0 too, though it has ended
    later.reset(task="restock_milk", group="g1")
    later._end(None)
    with SyncSimiaClient(server) as api:
        assert [e.id for e in api.list_episodes(status="active")] == []
        ended = api.list_episodes(status="ended")
    assert sorted((e.parent_id, e.calls) for e in ended if e.id != first) == [(first, 0)] * 3


@pytest.mark.slow  # trains with torch and TRL (seconds of CPU)
@pytest.mark.parametrize(
    ("reward", "logged"),
    [
        ("outcome", {"reward": 0.0, "reward_std": 0.0, "frac_reward_zero_std": 1.0}),  # no signal: advantages 0
        ("progress", {"reward": 0.5, "reward_std": pytest.approx(0.3536, abs=1e-4), "frac_reward_zero_std": 0.0}),
    ],
)
def test_progress_gives_a_group_whose_outcome_rewards_are_all_0_non_zero_advantages(
    threaded_mock_server: str, tmp_path: Path, reward: str, logged: dict[str, Any]
) -> None:
    # weekly_restock wants the apples at 6 and the milk at 2: the first rollout's policy sets the apples only
    # (outcome 0, progress 3/4), the second's does nothing (outcome 0, progress 1/4: the rice it keeps)
    server = threaded_mock_server
    model, tokenizer = scripted_policy(["Done.", "Done."], [APPLES_6, None])
    run = one_step(server, tmp_path, "weekly_restock", reward=reward)
    result = grpo_train(run, served(server), model=model, tokenizer=tokenizer)
    step = result["log"][0]
    assert {k: step[k] for k in logged} == logged  # TRL zeroes the advantages of a group whose rewards do not vary
    with SyncSimiaClient(server) as api:
        ended = sorted((e.calls, e.reward) for e in api.list_episodes(status="ended"))
    assert ended == [(0, 0), (1, 0)]


@pytest.mark.slow  # trains with torch and TRL (seconds of CPU)
def test_a_grpo_step_whose_judge_failed_every_call_says_every_reward_was_masked_and_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    down = ScriptedBackend([{"raise": "rejected", "message": "the judge model is down"}], when_exhausted="repeat")
    server_up = in_process_server({"mock": MOCK}, FunctionBackend(mock_world_answer), tmp_path / "t.db", down)
    with in_background(server_up) as server, caplog.at_level(logging.WARNING):
        model, tokenizer = scripted_policy([CONFIRMED, DENIED])
        run = one_step(server, tmp_path)
        result = grpo_train(run, served(server), model=model, tokenizer=tokenizer)
    said = [r.getMessage() for r in caplog.records if r.name == "simia.training.grpo"]
    assert said == [
        "GRPO step 1: all 2 rewards were masked, so it learns nothing: "
        "rewarded 0  unrewarded 0  masked 2 (judge error 2)"
    ]
    assert (result["rewards"], result["log"][0]["masked"]) == ([None], 1.0)  # TRL logs the reward of no reward as None
