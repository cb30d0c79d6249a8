"""OpenEnv at `/openenv/{world}` with openenv's own released clients (openenv 0.10.0, in its own venv) against a live
`simia serve`: the page's `MCPToolClient` and `GenericEnvClient` snippets as written (one rewarded episode, one
not, each reward the stored verdict's training reward), then retries, bad input, another principal and the
WebSocket's auth, and what is stored for each."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from simia.sim.verdict import Verdict
from simia.testing.trainer_venvs import trainer_venv

sys.path.insert(0, str(Path(__file__).parent))
from live import PASS, Served, json_lines, page_blocks, run_command, serve_scripted  # type: ignore[import-not-found]
from live import page_block as live_page_block  # type: ignore[import-not-found]

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "trainers" / "openenv.md"
PACKAGES = ["openenv==0.10.0"]
DOC_URL = "http://127.0.0.1:8765"
ALICE, BOB = "alice-secret", "bob-secret"
JUDGE = [{"match": "# Rubric", "data": PASS}]
"""A judge that passes every rubric: the task's rule checks decide the reward."""


def page_python(first_line: str) -> str:
    return live_page_block(PAGE, "python", first_line)


def page_commands(start: str) -> list[list[str]]:
    """The words of each of the page's bash commands that start with `start`."""
    found = []
    for body in page_blocks(PAGE, "bash"):
        found += [shlex.split(line, comments=True) for line in body.splitlines() if line.startswith(start)]
    assert found, f"{PAGE.name} shows no command starting {start!r} any more"
    return found


@contextlib.asynccontextmanager
async def simia(tmp_path: Path) -> AsyncIterator[Served]:
    """`simia serve` on the mock world with a scripted simulator and judge, and two principals' tokens."""
    tokens = ("--token-for", f"alice={ALICE}", "--token-for", f"bob={BOB}")
    async with serve_scripted(tmp_path, JUDGE, *tokens) as url:
        yield Served(url, token=ALICE)


async def run(words: list[str], cwd: Path, token: str | None = ALICE, timeout: float = 300) -> list[dict[str, Any]]:
    """Run a command in openenv's venv (`python` is the venv's); the JSON objects it printed, one a line."""
    python = await asyncio.to_thread(trainer_venv, "openenv", PACKAGES)
    command = [str(python) if w == "python" else w for w in words]
    env = {k: v for k, v in os.environ.items() if k != "SIMIA_TOKEN"} | ({"SIMIA_TOKEN": token} if token else {})
    out, _ = await run_command(command, cwd, env, timeout)
    return json_lines(out)


async def test_the_pages_mcp_tool_client_snippet_gets_a_rewarded_and_an_unrewarded_episode_with_the_stored_rewards(
    tmp_path: Path,
) -> None:
    """OpenEnv page, "A rollout with `MCPToolClient`", as written: reset, list_tools and call_tool over the session's
    JSON-RPC, a `CallToolAction` and the end action over its WebSocket; the reward each run prints is its stored
    verdict's training reward, and each episode holds the two calls it made."""
    (tmp_path / "openenv_episode.py").write_text(page_python("# openenv_episode.py"), encoding="utf-8")
    commands = page_commands("python openenv_episode.py")
    assert [c[-1] for c in commands] == ["restock_milk", "count_apples"]
    async with simia(tmp_path) as served:
        printed = [(await run([w.replace(DOC_URL, served.url) for w in c], tmp_path))[-1] for c in commands]
        assert [(p["reward"], p["done"]) for p in printed] == [(1.0, True), (0.0, True)]
        for run_ in printed:
            assert run_["reward"] == await served.stored_reward(run_["episode_id"])
            detail = await served.episode(run_["episode_id"])
            assert [(e["tool"], e["arguments"]) for e in detail["events"]] == [
                ("list_items", {}),
                ("set_quantity", {"name": "milk", "qty": 4}),
            ]
            assert detail["status"] == "ended" and detail["seed"] == 7


async def test_the_pages_generic_env_client_snippet_runs_one_episode_over_the_websocket(tmp_path: Path) -> None:
    """OpenEnv page, "Dicts over the WebSocket", as written: the end action's transcript is stored, the reward is
    the stored verdict's."""
    (tmp_path / "openenv_ws.py").write_text(page_python("# openenv_ws.py"), encoding="utf-8")
    async with simia(tmp_path) as served:
        [printed] = await run(["python", "openenv_ws.py", f"{served.url}/openenv/mock", "restock_milk"], tmp_path)
        detail = await served.episode(printed["episode_id"])
    assert (printed["reward"], printed["done"]) == (1.0, True)
    assert printed["reward"] == Verdict.model_validate(detail["verdict"]).training_reward()
    assert detail["transcript"] == [{"role": "assistant", "content": "Milk set to 4."}]
    assert [e["tool"] for e in detail["events"]] == ["set_quantity"]


WEBSOCKET_CHECKS = r"""
import json, sys
from openenv.core.generic_client import GenericEnvClient

url, token = sys.argv[1], sys.argv[2]
auth = {"Authorization": f"Bearer {token}"}
with GenericEnvClient(base_url=url, headers=auth).sync() as env:
    reset = env.reset(task="restock_milk", seed=3, not_a_reset_argument=1)
    call = {"type": "call_tool", "tool_name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}
    first = env.step({**call, "metadata": {"request_id": "r1"}})
    again = env.step({**call, "metadata": {"request_id": "r1"}})
    unknown = env.step({"type": "call_tool", "tool_name": "fly", "arguments": {}})
    bad = env.step({"type": "call_tool", "tool_name": "set_quantity", "arguments": {"name": "milk", "qty": "four"}})
    try:
        env.step({"type": "jump"})
    except RuntimeError as exc:
        malformed = str(exc)
    state = env.state()
    end = env.step({"type": "end"})
    end_again = env.step({"type": "end"})
    try:
        env.step(call)
    except RuntimeError as exc:
        after_end = str(exc)
    print(json.dumps({
        "episode_id": reset.observation["episode_id"],
        "seqs": [first.observation["result"]["meta"]["simia/seq"], again.observation["result"]["meta"]["simia/seq"]],
        "unknown": unknown.observation["error"], "bad": bad.observation["error"]["error_type"],
        "malformed": malformed, "state": state, "rewards": [end.reward, end_again.reward],
        "verdicts_equal": end.observation["verdict"] == end_again.observation["verdict"], "after_end": after_end,
    }))
try:
    GenericEnvClient(base_url=url).sync().reset()
except Exception as exc:
    print(json.dumps({"no_token": type(exc).__name__}))
"""


async def test_over_the_websocket_a_resent_call_runs_once_and_bad_actions_are_protocol_errors(tmp_path: Path) -> None:
    """`GenericEnvClient`: a call resent with its `request_id` answers the committed event (one event); an unknown
    tool is `tool_not_found` and bad arguments `invalid_args` (both recorded, as the agent's mistakes); a malformed
    action is a `VALIDATION_ERROR`; ending twice answers one verdict (the episode's `ended_at` unchanged); a call
    after the end is refused and stores nothing; without a token the handshake is refused."""
    (tmp_path / "checks.py").write_text(WEBSOCKET_CHECKS, encoding="utf-8")
    async with simia(tmp_path) as served:
        [checks, no_token] = await run(["python", "checks.py", f"{served.url}/openenv/mock", ALICE], tmp_path)
        detail = await served.episode(checks["episode_id"])
        ended_at = detail["ended_at"]
    assert checks["seqs"] == [1, 1]
    assert checks["unknown"]["error_type"] == "tool_not_found" and "fly" in checks["unknown"]["message"]
    assert checks["bad"] == "invalid_args"
    assert "VALIDATION_ERROR" in checks["malformed"] and "list_tools, call_tool" in checks["malformed"]
    assert checks["state"] == {"episode_id": checks["episode_id"], "step_count": 3}
    assert checks["rewards"] == [1.0, 1.0] and checks["verdicts_equal"]
    assert "ended" in checks["after_end"] and "EXECUTION_ERROR" in checks["after_end"]
    assert [(e["tool"], e["error_code"]) for e in detail["events"]] == [
        ("set_quantity", None),
        ("fly", "unknown_tool"),
        ("set_quantity", "invalid_arguments"),
    ]
    assert detail["seed"] == 3 and ended_at is not None
    assert Verdict.model_validate(detail["verdict"]).training_reward() == 1.0
    assert no_token == {"no_token": "ConnectionError"}


async def test_http_routes_answer_bad_input_and_other_principals_with_errors_and_store_nothing(tmp_path: Path) -> None:
    """Over plain HTTP (stateless: steps name their episode): an unknown task or world opens nothing; a malformed
    step is a 400; another principal's episode and session are unknown to bob; JSON-RPC errors are JSON-RPC's."""
    async with simia(tmp_path) as served:
        async with served.http() as alice, served.http(BOB) as bob:
            unknown_task = await alice.post("/openenv/mock/reset", json={"task": "nope"})
            unknown_world = await alice.post("/openenv/nowhere/reset", json={})
            bad_seed = await alice.post("/openenv/mock/reset", json={"seed": "7"})
            assert await served.episodes() == []
            reset = (await alice.post("/openenv/mock/reset", json={"task": "restock_milk"})).json()
            episode_id = reset["observation"]["episode_id"]
            no_action = await alice.post("/openenv/mock/step", json={"episode_id": episode_id})
            step = {"type": "call_tool", "tool_name": "get_item", "arguments": {"name": "milk"}}
            no_episode = await alice.post("/openenv/mock/step", json={"action": step})
            bobs = await bob.post("/openenv/mock/step", json={"episode_id": episode_id, "action": step})
            bobs_state = await bob.get("/openenv/mock/state", params={"episode_id": episode_id})
            session = (await alice.post("/openenv/mock/mcp", json=rpc("openenv/session/create"))).json()["result"]
            bobs_call = await bob.post(
                "/openenv/mock/mcp", json=rpc("tools/call", name="list_items", session_id=session["session_id"])
            )
            json_type = {"content-type": "application/json"}  # another type is a 415 before any parse
            parse_error = await alice.post("/openenv/mock/mcp", content=b"{not json", headers=json_type)
            no_method = await alice.post("/openenv/mock/mcp", json=rpc("tools/fly"))
            tools = await alice.post("/openenv/mock/mcp", json=rpc("tools/list"))
            schema, metadata = await alice.get("/openenv/mock/schema"), await alice.get("/openenv/mock/metadata")
            state = await alice.get("/openenv/mock/state", params={"episode_id": episode_id})
        detail = await served.episode(episode_id)
    assert (unknown_task.status_code, unknown_world.status_code, bad_seed.status_code) == (404, 404, 400)
    assert "restock_milk" in unknown_task.json()["error"]["message"]
    assert reset["observation"]["instruction"] == "Set the milk to 4 litres." and reset["done"] is False
    assert (no_action.status_code, no_episode.status_code) == (400, 400)
    assert "reset first" in no_episode.json()["error"]["message"]
    assert (bobs.status_code, bobs_state.status_code) == (404, 404)
    assert bobs_call.json()["error"]["code"] == -32602 and "Unknown session_id" in bobs_call.json()["error"]["message"]
    assert parse_error.json()["error"]["code"] == -32700 and no_method.json()["error"]["code"] == -32601
    assert [t["name"] for t in tools.json()["result"]["tools"]] == ["list_items", "get_item", "set_quantity"]
    assert schema.status_code == 200 and "call_tool" in json.dumps(schema.json()["action"])
    assert metadata.json()["name"] == "mock"
    assert state.json() == {"episode_id": episode_id, "step_count": 0}
    assert detail["events"] == [] and detail["status"] == "active"


def rpc(method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def test_each_call_step_carries_its_shaped_reward_and_an_episode_opened_elsewhere_is_caught_up(
    tmp_path: Path,
) -> None:
    """restock_milk has one check: a read earns 0.0, the call that sets the milk earns 1.0 (progress 1.0 in the
    metadata), its resend (same `request_id`) the same 1.0 from one event, setting it again 0.0; the end step's
    reward is the outcome. An episode without a task has no step reward (null). An episode created through the
    HTTP API and called over its MCP URL first is read once: the step after that call starts from its progress."""
    get = {"type": "call_tool", "tool_name": "get_item", "arguments": {"name": "milk"}}
    put = {"type": "call_tool", "tool_name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}
    async with simia(tmp_path) as served, served.http() as http:

        async def step(episode_id: str, action: dict[str, Any], request_id: str | None = None) -> dict[str, Any]:
            body = {"episode_id": episode_id, "action": action, **({"request_id": request_id} if request_id else {})}
            answer = await http.post("/openenv/mock/step", json=body)
            assert answer.status_code == 200, answer.text
            return dict(answer.json())

        reset = (await http.post("/openenv/mock/reset", json={"task": "restock_milk"})).json()
        episode_id = reset["observation"]["episode_id"]
        steps = [await step(episode_id, get), await step(episode_id, put, "r1"), await step(episode_id, put, "r1")]
        steps.append(await step(episode_id, put, "r2"))
        end = await step(episode_id, {"type": "end"})
        untasked = (await http.post("/openenv/mock/reset", json={})).json()["observation"]["episode_id"]
        no_checks = await step(untasked, get)
        elsewhere = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
        async with Client(streamable_http_client(elsewhere["mcp_url"], http_client=http)) as client:
            assert not (await client.call_tool("set_quantity", {"name": "milk", "qty": 4})).is_error
        caught_up = await step(elsewhere["id"], get)
        detail = await served.episode(episode_id)
    rewards = [(s["reward"], s["metadata"]["simia/seq"], s["metadata"]["simia/progress"]) for s in steps]
    assert rewards == [(0.0, 1, 0.0), (1.0, 2, 1.0), (1.0, 2, 1.0), (0.0, 3, 1.0)]
    assert (end["reward"], end["done"]) == (1.0, True)
    assert [step["reward"] for step in detail["verdict"]["progress"]["steps"]] == [0.0, 1.0, 0.0]
    assert (no_checks["reward"], "simia/progress" in no_checks["metadata"]) == (None, False)
    assert (caught_up["reward"], caught_up["metadata"]["simia/seq"], caught_up["metadata"]["simia/progress"]) == (
        0.0,
        2,
        1.0,
    )
