"""The built-in agent, user simulator and `rollout` against a real server over HTTP, with scripted models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from simia.clients.agent import Agent
from simia.clients.api import SimiaApiError, SimiaClient
from simia.clients.rollout import RolloutConfig, rollout, select_tasks
from simia.sim import load_world
from simia.sim.backends import CompletionRequest, FunctionBackend, ScriptedBackend
from simia.sim.errors import BackendRejected
from simia.sim.judging import Judge
from simia.sim.wire import TaskInfo
from simia.testing.mock_world import mock_world_answer

ROOT = Path(__file__).resolve().parents[2]
MOCK = load_world(ROOT / "tool_specs" / "mock")


def agent_policy(request: CompletionRequest) -> dict[str, Any]:
    """A competent scripted agent: read the milk, set it to 4, then answer."""
    last = str(request.messages[-1]["content"])
    if last.startswith("Result of") and "set_quantity" in last:
        return {"message": "Done: the milk is at 4 litres now.", "tool_calls": []}
    if last.startswith("Result of"):
        return {"message": "", "tool_calls": [{"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}]}
    if "how many" in last.lower():
        return {"message": "Let me check.", "tool_calls": [{"name": "get_item", "arguments": {"name": "milk"}}]}
    return {"message": "", "tool_calls": [{"name": "get_item", "arguments": {"name": "milk"}}]}


def user_policy(request: CompletionRequest) -> dict[str, Any]:
    last = str(request.messages[-1]["content"])
    if "greets you" in last:
        return {"message": "Hi! Please set the milk to 4 litres.", "done": False}
    return {"message": "Thanks, that's all.", "done": True}


async def test_agent_and_user_complete_a_multi_turn_task_and_get_a_verdict(make_server: Any, tmp_path: Path) -> None:
    task = MOCK.task("restock_milk")
    assert task is not None
    multi_turn = task.model_copy(update={"user_hidden": "You need it for pancakes."})
    world = MOCK.model_copy(update={"tasks": [multi_turn]})
    user_backend = FunctionBackend(user_policy)
    async with make_server(judge=Judge(None)) as server:
        config = RolloutConfig(server=server.url, world=world, tasks=[TaskInfo.of(multi_turn)], out=tmp_path)
        summary = await rollout(config, FunctionBackend(agent_policy), user_backend)
    [result] = summary.results
    assert (result.status, result.reward, result.stop) == ("judged", 1, "user_done")
    roles = [m["role"] for m in result.transcript]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "user"]
    assert result.transcript[1]["content"] == "Hi! Please set the milk to 4 litres."
    call = result.transcript[4]["tool_calls"][0]
    assert call["id"] == "call_2" and json.loads(call["function"]["arguments"]) == {"name": "milk", "qty": 4}
    assert result.transcript[5] == {"role": "tool", "tool_call_id": "call_2", "content": '{"name": "milk", "qty": 4}'}
    assert "You need it for pancakes." in user_backend.requests[0].messages[0]["content"]  # hidden facts: user only
    saved = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert saved[0]["episode_id"] == result.episode_id and saved[0]["reward"] == 1


async def test_a_single_turn_task_needs_no_user_simulator(make_server: Any) -> None:
    async with make_server() as server:
        async with __import__("httpx2").AsyncClient() as http:
            episode = (await http.post(f"{server.url}/v1/episodes", json={"world": "mock"})).json()
        run = await Agent(FunctionBackend(agent_policy)).run(episode["mcp_url"], instruction="Set the milk to 4.")
    assert run.stop == "answered" and run.tool_calls == 2
    assert run.transcript[-1] == {"role": "assistant", "content": "Done: the milk is at 4 litres now."}


async def test_rollout_accounts_for_every_episode_and_retries_infra_failures(make_server: Any, tmp_path: Path) -> None:
    calls = 0

    def flaky_simulator(request: CompletionRequest) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise BackendRejected("HTTP 400: injected failure")
        return mock_world_answer(request)

    async with make_server(backend=FunctionBackend(flaky_simulator), judge=Judge(None)) as server:
        config = RolloutConfig(
            server=server.url,
            world=MOCK,
            tasks=select_tasks(MOCK, "restock_milk"),
            n=20,
            concurrency=8,
            out=tmp_path,
            retries=2,
        )
        summary = await rollout(config, FunctionBackend(agent_policy), None)
    assert len(summary.results) == 20 and {r.attempt for r in summary.results} == set(range(20))
    assert all(r.status == "judged" and r.reward == 1 for r in summary.results)
    assert sum(r.infra_retries for r in summary.results) == 1  # the injected failure was retried on a fresh episode
    assert len({r.episode_id for r in summary.results}) == 20
    table = summary.table().splitlines()
    assert table[1].split() == ["restock_milk", "20", "20", "0", "0", "1.00"]


async def test_a_persistent_infra_failure_is_reported_apart_and_the_episode_kept(
    make_server: Any, tmp_path: Path
) -> None:
    broken = ScriptedBackend([{"raise": "rejected", "message": "HTTP 400: model gone"}], when_exhausted="repeat")
    async with make_server(backend=broken, judge=Judge(None)) as server:
        config = RolloutConfig(
            server=server.url,
            world=MOCK,
            tasks=select_tasks(MOCK, "restock_milk"),
            n=2,
            concurrency=2,
            out=tmp_path,
            retries=1,
        )
        summary = await rollout(config, FunctionBackend(agent_policy), None)
    assert [r.status for r in summary.results] == ["infra_failed", "infra_failed"]
    assert all(r.infra_retries == 1 and r.error.startswith("backend_error") for r in summary.results)
    written = json.loads((tmp_path / "summary.json").read_text())
    assert (written["runs"], written["infra_failed"], written["judged"]) == (2, 2, 0)


def test_tasks_are_selected_by_all_id_or_file(tmp_path: Path) -> None:
    assert [t.id for t in select_tasks(MOCK, "all")] == ["restock_milk", "count_apples", "no_bananas", "weekly_restock"]
    listing = tmp_path / "tasks.txt"
    listing.write_text('no_bananas\n{"id": "count_apples"}\n')
    assert [t.id for t in select_tasks(MOCK, str(listing))] == ["no_bananas", "count_apples"]
    with pytest.raises(ValueError, match="neither 'all', a task id"):
        select_tasks(MOCK, "fly")


def test_the_rollout_command_serves_in_process_and_writes_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simia.cli import main

    agent = tmp_path / "agent.json"
    agent.write_text(
        json.dumps(
            [
                {
                    "match": "Set the milk",
                    "data": {
                        "message": "",
                        "tool_calls": [{"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}],
                    },
                },
                {"data": {"message": "Done.", "tool_calls": []}},
            ]
        )
    )
    out = tmp_path / "out"
    assert (
        main(
            [
                "rollout",
                "--world",
                "mock",
                "--tasks",
                "restock_milk",
                "--agent",
                f"scripted:{agent}",
                "--user",
                f"scripted:{agent}",
                "--sim-backend",
                f"scripted:{ROOT / 'tests/fixtures/mock_script.json'}",
                "--worlds-dir",
                str(ROOT / "tool_specs"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    [result] = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    # the in-process judge is the scripted simulator, which cannot answer as a judge: judge_error, no reward
    assert (result["status"], result["reward"], result["verdict_status"], result["tool_calls"]) == (
        "judged",
        None,
        "judge_error",
        1,
    )
    assert capsys.readouterr().out.splitlines()[1].split() == ["restock_milk", "1", "1", "0", "0", "-"]
    assert main(["rollout", "--world", "mock", "--agent", "opnai:x", "--out", str(out)]) == 2
    assert "Did you mean 'openai'" in capsys.readouterr().err


def test_task_stats_give_pass_k_a_wilson_interval_and_verdict_flips() -> None:
    from simia.clients.rollout import RunResult, Summary, TaskStats

    def run(attempt: int, reward: float | None, status: str = "judged") -> RunResult:
        return RunResult("t", attempt, f"ep{attempt}", status, training_reward=reward)  # type: ignore[arg-type]

    runs = [run(3, 1.0), run(0, 1.0), run(1, 0.0), run(2, 1.0), run(4, None, "infra_failed")]
    stats = TaskStats.of("t", runs)
    assert (stats.n, stats.mean) == (4, 0.75)
    assert stats.pass_k == [0.75, 0.5, 0.25, 0.0]  # C(3,k)/C(4,k)
    assert stats.flips == 2 / 3  # in attempt order 1, 0, 1, 1: two of three neighbours differ
    assert stats.ci95 is not None and round(stats.ci95[0], 3) == 0.301 and round(stats.ci95[1], 3) == 0.954
    all_pass = TaskStats.of("t", [run(i, 1.0) for i in range(3)])
    assert (all_pass.pass_k, all_pass.flips) == ([1.0, 1.0, 1.0], 0.0)
    assert TaskStats.of("t", [run(0, None)]).line() == "t  no usable rewards"
    table = Summary(results=runs).table().splitlines()
    assert table[-1] == "t  n=4  mean 0.75 [0.30, 0.95]  pass^1..4 0.75 0.50 0.25 0.00  flips 0.67"


async def test_a_seeded_rollout_forwards_seeds_to_every_agent_and_user_model_call(
    make_server: Any, tmp_path: Path
) -> None:
    task = MOCK.task("restock_milk")
    assert task is not None
    multi_turn = task.model_copy(update={"user_hidden": "You need it for pancakes."})
    agent, user = FunctionBackend(agent_policy), FunctionBackend(user_policy)
    async with make_server(judge=Judge(None)) as server:
        tasks = [TaskInfo.of(multi_turn)]
        config = RolloutConfig(server=server.url, world=MOCK, tasks=tasks, out=tmp_path, seed=11)
        await rollout(config, agent, user)
    seeds = [r.seed for r in agent.requests]
    assert None not in seeds and len(set(seeds)) == len(seeds) == 3  # one per turn, each different
    assert None not in [r.seed for r in user.requests]


def test_the_cost_line_sums_the_agent_and_user_usage_per_episode() -> None:
    from simia.clients.rollout import RunResult, Summary
    from simia.sim.backends import Usage

    spent = Usage(prompt_tokens=2_000, completion_tokens=100, cost_usd=0.004, calls=4, cached_tokens=1_500)
    runs = [RunResult("t", i, f"e{i}", "judged", usage=spent.as_dict()) for i in range(2)]
    summary = Summary(results=runs)
    assert summary.cost_line() == (
        "agent and user models: 8 model calls: input 4,000 tokens (3,000 cached), output 200; "
        "$0.0080 ($1.00 per 1,000 model calls); $0.0040 per episode"
    )
    assert summary.counts()["agent_usage"]["cached_tokens"] == 3_000


async def test_a_world_the_server_lacks_is_named_with_the_closest_one_it_serves(make_server: Any) -> None:
    async with make_server() as server, SimiaClient(server.url) as api:
        with pytest.raises(SimiaApiError) as info:
            await api.world("mokc")
    assert info.value.message == (
        "the server does not serve world 'mokc' (did you mean 'mock'?); it serves: mock, retail"
    )
