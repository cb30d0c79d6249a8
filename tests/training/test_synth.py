"""`simia synth` (Simia-SFT) on the mock world with a scripted model: every stage, every drop, resumable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simia.sim import load_world
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.training.synth import SynthConfig, load_seeds, repair_json, synthesize

ROOT = Path(__file__).resolve().parents[2]
MOCK = load_world(ROOT / "tool_specs" / "mock")


def traj(user: str, name: str, args: Any, result: str, answer: str) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": user},
            {"role": "assistant", "content": "Let me do that.", "tool_calls": [{"name": name, "arguments": args}]},
            {"role": "tool", "content": result},
            {"role": "assistant", "content": answer},
        ]
    }


VARIATIONS = {
    1: traj(
        "Put apples at 7 please.",
        "set_quantity",
        {"name": "apple", "qty": 7},
        '{"name": "apple", "qty": 7}',
        "Apples are at 7 now.",
    ),
    2: traj("Order more flour.", "order_flour", {}, "ok", "Ordered."),  # unknown tool
    3: traj("Set rice to lots.", "set_quantity", {"name": "rice", "qty": "lots"}, "?", "Done."),  # schema
    4: traj(
        "How much rice is there, I need to cook dinner tonight for six people?",
        "get_item",
        "{'name': 'rice',}",
        '{"name": "rice", "qty": 2}',
        "There are 2 kg of rice.",
    ),  # repairable JSON
    5: traj(
        "Put apples at 7 please.",
        "set_quantity",
        {"name": "apple", "qty": 7},
        '{"name": "apple", "qty": 7}',
        "Apples are at 7 now.",
    ),  # near-duplicate of 1
    6: {
        "messages": [
            {"role": "user", "content": "Set milk to 9."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"name": "set_quantity", "arguments": {"name": "milk", "qty": 9}}],
            },
        ]
    },  # no result
}


def model(request: CompletionRequest) -> dict[str, Any]:
    text = str(request.messages[-1]["content"])
    if request.schema_name == "seed_check":
        bad = "BROKEN SEED" in text
        return {
            "complete": not bad,
            "logical": True,
            "format_ok": True,
            "reason": "the request is never resolved" if bad else "fine",
        }
    variation = int(text.split("(variation ")[1].split(" ")[0])
    return VARIATIONS[variation]


def test_json_repair_fixes_common_faults() -> None:
    assert repair_json('{"a": 1,}') == ({"a": 1}, True)
    assert repair_json("{'a': True}") == ({"a": True}, True)
    assert repair_json('{"a": 1}') == ({"a": 1}, False)


async def test_every_stage_runs_and_drops_are_counted_with_reasons(tmp_path: Path) -> None:
    seeds = load_seeds(MOCK)
    broken = {"id": "broken", "messages": [{"role": "user", "content": "BROKEN SEED: set milk"}]}
    backend = FunctionBackend(model)
    config = SynthConfig(n=6, out=tmp_path, concurrency=3)
    report = await synthesize(MOCK, [*seeds, broken], backend, config)
    assert report.prefilter_dropped == {"broken": "the request is never resolved"}
    assert report.generated == 6 and report.kept == 2 and report.repaired == 1
    assert dict(report.dropped) == {"unknown_tool": 1, "schema_violation": 1, "near_duplicate": 1, "unpaired_calls": 1}
    records = [json.loads(line) for line in (tmp_path / "synth.jsonl").read_text().splitlines()]
    rice = next(r for r in records if "rice" in json.dumps(r))
    call = rice["messages"][2]["tool_calls"][0]
    assert call["id"] == "call_1" and json.loads(call["function"]["arguments"]) == {"name": "rice"}
    assert rice["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": '{"name": "rice", "qty": 2}'}
    assert len(rice["tools"]) == 3
    saved = json.loads((tmp_path / "synth_report.json").read_text())
    assert saved["kept"] == 2 and saved["dropped"]["near_duplicate"] == 1

    calls_before = len(backend.requests)
    again = await synthesize(MOCK, [*seeds, broken], backend, config)
    assert len(backend.requests) == calls_before  # resumable: finished work is skipped, pre-filter included
    assert again.skipped_done == 6 and again.generated == 0
    assert len((tmp_path / "synth.jsonl").read_text().splitlines()) == 2


def agent(request: CompletionRequest) -> dict[str, Any]:
    last = str(request.messages[-1]["content"])
    if last.startswith("Result of"):
        return {"message": "Done.", "tool_calls": []}
    return {"message": "", "tool_calls": [{"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}]}


async def test_via_server_keeps_only_rewarded_rollouts_and_drops_the_rest_as_low_reward(
    make_server: Any, tmp_path: Path
) -> None:
    from simia.sim.judging import Judge
    from simia.training.synth import synthesize_via_server

    async with make_server(judge=Judge(None)) as server:
        report = await synthesize_via_server(
            MOCK, server.url, FunctionBackend(agent), None, SynthConfig(n=2, out=tmp_path, concurrency=2)
        )
    # the agent sets milk to 4 whatever it is asked: only restock_milk's rules hold; count_apples (apples to 5) and
    # no_bananas (change nothing) and weekly_restock (apples 6, milk 2) fail theirs. restock_milk's two runs are
    # identical: one kept, one near-duplicate
    assert report.generated == 8 and report.kept == 1
    assert dict(report.dropped) == {"low_reward": 6, "near_duplicate": 1}
    results = [json.loads(line) for line in (tmp_path / "rollouts" / "results.jsonl").read_text().splitlines()]
    rewards = sorted((r["task"], r["training_reward"]) for r in results)
    assert rewards == [
        ("count_apples", 0.0),
        ("count_apples", 0.0),
        ("no_bananas", 0.0),
        ("no_bananas", 0.0),
        ("restock_milk", 1.0),
        ("restock_milk", 1.0),
        ("weekly_restock", 0.0),
        ("weekly_restock", 0.0),
    ]
    records = [json.loads(line) for line in (tmp_path / "synth.jsonl").read_text().splitlines()]
    assert [r["key"].split(":")[0] for r in records] == ["restock_milk"]
    assert records[0]["messages"][0]["role"] == "system" and len(records[0]["tools"]) == 3
    call = records[0]["messages"][2]["tool_calls"][0]["function"]
    assert (call["name"], json.loads(call["arguments"])) == ("set_quantity", {"name": "milk", "qty": 4})


def mute_agent(request: CompletionRequest) -> dict[str, Any]:
    return {"message": "", "tool_calls": []}  # nothing usable: the agent's own failure, not the environment's


async def test_via_server_counts_an_agents_failures_as_the_agents_and_its_model_calls(
    make_server: Any, tmp_path: Path
) -> None:
    """Runs the agent's model failed are `agent_failed` (they were all `infra_failed`), the rollouts' model calls
    are the report's usage (it said 0 model calls), and the records file exists when nothing was kept."""
    from simia.sim.judging import Judge
    from simia.training.synth import synthesize_via_server

    async with make_server(judge=Judge(None)) as server:
        report = await synthesize_via_server(
            MOCK, server.url, FunctionBackend(mute_agent), None, SynthConfig(n=1, out=tmp_path, concurrency=2)
        )
    results = [json.loads(line) for line in (tmp_path / "rollouts" / "results.jsonl").read_text().splitlines()]
    assert {r["status"] for r in results} == {"agent_failed"}
    assert report.generated == 4 and report.kept == 0 and dict(report.dropped) == {"agent_failed": 4}
    assert report.usage.calls >= 4
    assert (tmp_path / "synth.jsonl").read_text() == ""
    saved = json.loads((tmp_path / "synth_report.json").read_text())
    assert saved["dropped"] == {"agent_failed": 4} and saved["usage"]["calls"] == report.usage.calls
