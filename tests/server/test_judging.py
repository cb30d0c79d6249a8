"""Verdicts through the server: /end judges and stores, `simia judge` re-judges; hidden task text never leaks."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client
from simia.cli import main
from simia.sim.backends import FunctionBackend, ScriptedBackend
from simia.sim.judging import Judge
from simia.sim.verdict import Verdict

ROOT = Path(__file__).resolve().parents[2]
PASS = {
    "criteria": [{"criterion": "milk set to 4", "passed": True, "evidence": "call 1"}],
    "reasoning": "Milk was set to 4.",
    "reward": 1,
}


async def test_end_returns_and_stores_the_verdict_with_transcript_mismatches(make_server: Any) -> None:
    judge = Judge(ScriptedBackend([PASS], model="judge-model", when_exhausted="repeat"))
    async with make_server(judge=judge) as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
        async with Client(episode["mcp_url"]) as client:
            await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
        transcript = [
            {"role": "user", "content": "Set the milk to 4 litres."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "set_quantity", "arguments": json.dumps({"name": "milk", "qty": 4})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"name": "milk", "qty": 4})},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "get_item", "arguments": json.dumps({"name": "rice"})},
                    }
                ],
            },
            {"role": "assistant", "content": "Done, milk is at 4."},
        ]
        ended = (await http.post(f"/v1/episodes/{episode['id']}/end", json={"transcript": transcript})).json()
        stored = (await http.get(f"/v1/episodes/{episode['id']}")).json()
    verdict = ended["verdict"]
    assert (verdict["reward"], verdict["status"], verdict["checks"]) == (1, "ok", ["rules", "llm"])
    assert verdict["rule_checks"] == [{"pointer": "/items/milk/qty", "expected": 4, "actual": 4, "passed": True}]
    assert verdict["judge_model"] == "judge-model" and verdict["criteria"] == PASS["criteria"]
    assert verdict["transcript_mismatches"] == [
        'the transcript claims call 2 get_item {"name": "rice"}, never executed'
    ]
    assert stored["verdict"] == verdict and stored["transcript"] == transcript and stored["reward"] == 1


async def test_a_verdict_stands_ending_again_with_another_transcript_is_refused(make_server: Any) -> None:
    """An agent whose transcript was flagged as fabricated cannot end again with a clean one and be rewarded."""
    judge = Judge(ScriptedBackend([PASS], model="judge-model", when_exhausted="repeat"))
    claims = [
        {"role": "user", "content": "Set the milk to 4 litres."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "set_quantity", "arguments": '{"name": "milk"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"name": "milk", "qty": 4}'},
        {"role": "assistant", "content": "Done, milk is at 4."},
    ]
    clean = [claims[0], {"role": "assistant", "content": "I could not do it."}]
    async with make_server(judge=judge) as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
        end = f"/v1/episodes/{episode['id']}/end"
        first = (await http.post(end, json={"transcript": claims})).json()
        same = await http.post(end, json={"transcript": claims})
        empty = await http.post(end, json={})
        other = await http.post(end, json={"transcript": clean})
        tokens = await http.post(end, json={"tokens": {"prompt_ids": [1], "completion_ids": [2]}})
        stored = (await http.get(f"/v1/episodes/{episode['id']}")).json()
        silent = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
        await http.post(f"/v1/episodes/{silent['id']}/end", json={})
        late = await http.post(f"/v1/episodes/{silent['id']}/end", json={"transcript": clean})
        metrics = (await http.get("/metrics")).text
    assert first["verdict"]["fabricated"] is True and first["verdict"]["reward"] == 0
    assert (same.status_code, empty.status_code) == (200, 200)
    assert same.json()["verdict"] == empty.json()["verdict"] == first["verdict"]
    assert same.json()["ended_at"] == first["ended_at"]
    assert (other.status_code, other.json()["error"]["code"]) == (409, "conflict")
    message = other.json()["error"]["message"]
    assert message.startswith(f"episode {episode['id']} is already ended, with other transcript: its verdict stands")
    assert f"simia judge {episode['id']} --db DB" in message
    assert tokens.status_code == 409 and "without tokens" in tokens.json()["error"]["message"]
    assert (stored["transcript"], stored["verdict"], stored["tokens"]) == (claims, first["verdict"], None)
    assert late.status_code == 409 and "already ended, without transcript" in late.json()["error"]["message"]
    assert "simia_judged_episodes_total 2.0" in metrics  # two episodes judged once each, however often ended
    usage = first["verdict"]["usage"]
    [prompt] = [
        line.split()[-1] for line in metrics.splitlines() if line.startswith('simia_judge_tokens_total{kind="prompt"}')
    ]
    assert usage["prompt_tokens"] > 0 and float(prompt) > usage["prompt_tokens"]  # both verdicts' prompts


async def test_a_task_with_rules_only_is_judged_without_a_model(make_server: Any) -> None:
    async with make_server(judge=Judge(None)) as server, httpx.AsyncClient(base_url=server.url) as h:
        episode = (await h.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
        ended = (await h.post(f"/v1/episodes/{episode['id']}/end", json={})).json()
    assert ended["verdict"]["reward"] == 0 and ended["verdict"]["checks"] == ["rules"]
    assert ended["verdict"]["reasons"] == ["rule /items/milk/qty: expected 4, found 0"]


def test_simia_judge_rejudges_stored_episodes(
    make_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def record() -> tuple[dict[str, Any], str]:
        async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
            episode = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
            async with Client(episode["mcp_url"]) as client:
                await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
            await http.post(f"/v1/episodes/{episode['id']}/end", json={})
            return episode, server.store.path

    episode, db = asyncio.run(record())
    script = tmp_path / "judge.json"
    script.write_text(json.dumps([PASS]))
    assert main(["judge", episode["id"], "--db", db, "--backend", f"scripted:{script}"]) == 0
    line = json.loads(capsys.readouterr().out.strip())
    assert (line["id"], line["reward"], line["status"]) == (episode["id"], 1, "ok")
    assert main(["judge", "ep_nope", "--db", db, "--backend", "none"]) == 1


async def test_hidden_task_text_never_reaches_tool_outputs_errors_or_tools_list(
    make_server: Any, tmp_path: Path
) -> None:
    """A simulator that echoes everything it sees into its outputs still cannot leak the task's secrets."""
    canary = "CANARY-7f3a9c"
    worlds = tmp_path / "worlds"
    shutil.copytree(ROOT / "tool_specs" / "mock", worlds / "mock")
    task = {
        "id": "secret",
        "instruction": "Set the milk to 4.",
        "user_hidden": f"My PIN is {canary}.",
        "rubric": f"Grade with {canary} in mind.",
        "expected_state": {"/items/milk/qty": 4},
    }
    (worlds / "mock" / "tasks.jsonl").write_text(json.dumps(task) + "\n")

    def leaky(request: Any) -> dict[str, Any]:
        seen = json.dumps(request.messages)
        if "Call: get_item" in seen:
            return {
                "is_error": True,
                "error_code": "item_not_found",
                "message": seen[-3000:],
                "output": None,
                "state_patch": [],
            }
        return {
            "is_error": False,
            "error_code": None,
            "message": "ok",
            "output": {"name": seen[:5000], "qty": 1},
            "state_patch": [],
        }

    backend = FunctionBackend(leaky)
    async with make_server(backend=backend, worlds_dir=worlds) as server, httpx.AsyncClient(base_url=server.url) as h:
        episode = (await h.post("/v1/episodes", json={"world": "mock", "task": "secret"})).json()
        async with Client(episode["mcp_url"]) as client:
            listed = await client.list_tools()
            results = [
                await client.call_tool("set_quantity", {"name": "milk", "qty": 4}),
                await client.call_tool("get_item", {"name": "milk"}),
                await client.call_tool("get_item", {"name": canary[:3]}),
            ]
        stored = (await h.get(f"/v1/episodes/{episode['id']}")).json()
    seen = json.dumps([listed.model_dump(mode="json"), *[r.model_dump(mode="json") for r in results], stored["events"]])
    assert backend.requests and canary not in json.dumps([r.messages for r in backend.requests])
    assert canary not in seen


async def test_a_failure_simia_did_not_foresee_is_a_recorded_infra_call_that_masks_the_reward(
    make_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the simulator (here: building the call's state fails) reaches the agent as a clean infra error and
    is committed as an event, so the episode is not judged as the agent's failure."""
    from simia.sim.engine import simulator

    def broken(world: Any, state: Any) -> Any:
        raise RuntimeError("a bug in slicing")

    monkeypatch.setattr(simulator, "_current", broken)
    async with make_server(judge=Judge(None)) as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
        async with Client(episode["mcp_url"]) as client:
            result = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
        ended = (await http.post(f"/v1/episodes/{episode['id']}/end", json={})).json()
        stored = (await http.get(f"/v1/episodes/{episode['id']}")).json()
        metrics = (await http.get("/metrics")).text
    assert result.is_error and result.content[0].text == "Internal error in the tool simulator. Try again."
    assert result.meta and (result.meta["simia/error_kind"], result.meta["simia/error_code"]) == (
        "infra",
        "internal_error",
    )
    [event] = stored["events"]
    assert (event["tool"], event["arguments"], event["error_kind"]) == (
        "set_quantity",
        {"name": "milk", "qty": 4},
        "infra",
    )
    verdict = Verdict.model_validate(ended["verdict"])
    assert verdict.infra_failures == 1 and verdict.training_reward() is None  # masked, not the agent's 0
    assert verdict.mask_reason() == "infrastructure failure"
    assert "simia_tool_errors_total{" in metrics and 'code="internal_error"' in metrics
