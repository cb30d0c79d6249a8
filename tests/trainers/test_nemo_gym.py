"""NeMo Gym resource servers at `/nemo-gym/{world}` with verifiers' released `NeMoGymTaskset` (verifiers 0.4.0 in
its own venv, `vf-eval` and its plain chat harness, a scripted tool-calling model) against a live `simia serve`: the
page's dataset recipe, config and command as written, every reward the stored verdict's training reward; then the
protocol's bad input, retries and repeats over HTTP and MCP, and what is stored for each."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
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

from chat_model import ChatModel  # type: ignore[import-not-found]
from live import PASS, Served, run_command, serve_scripted  # type: ignore[import-not-found]
from live import page_block as live_page_block  # type: ignore[import-not-found]
from live import page_command as live_page_command  # type: ignore[import-not-found]

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "trainers" / "nemo-gym.md"
ADAPTERS = ROOT / "training" / "adapters"
# verifiers' venv, shared with test_verifiers.py (the same pins, so one build); `uv` runs verifiers' harnesses.
PACKAGES = ["verifiers==0.4.0", "uv", "-e", str(ADAPTERS / "client"), "-e", str(ADAPTERS / "verifiers")]
DOC_URL = "http://127.0.0.1:8765"
ALICE, BOB = "alice-secret", "bob-secret"
MODEL_KEY = "FAKE_MODEL_KEY"
JUDGE = [{"match": "# Rubric", "data": PASS}]
"""A judge that passes every rubric: the task's rule checks decide the reward."""


def page_block(lang: str, first_line: str = "") -> str:
    return live_page_block(PAGE, lang, first_line)


def page_command(start: str) -> list[str]:
    return live_page_command(PAGE, start)


@contextlib.asynccontextmanager
async def simia(tmp_path: Path) -> AsyncIterator[Served]:
    """`simia serve` on the mock world with a scripted simulator and judge, and two principals' tokens."""
    tokens = ("--token-for", f"alice={ALICE}", "--token-for", f"bob={BOB}")
    async with serve_scripted(tmp_path, JUDGE, *tokens) as url:
        yield Served(url, token=ALICE)


async def run(words: list[str], cwd: Path, timeout: float = 600) -> str:
    """Run a command in verifiers' venv (`python` and `vf-eval` are the venv's); its output."""
    python = await asyncio.to_thread(trainer_venv, "verifiers", PACKAGES)
    tools = {"python": str(python), "vf-eval": str(python.parent / "vf-eval")}
    env = {**os.environ, MODEL_KEY: "fake", "SIMIA_TOKEN": ALICE, "PATH": f"{python.parent}:{os.environ['PATH']}"}
    out, err = await run_command([tools.get(w, w) for w in words], cwd, env, timeout)
    return out + err


def traces(root: Path) -> list[dict[str, Any]]:
    """Every trace `vf-eval` wrote under `root` (`outputs/<run>/traces.jsonl`), one per rollout."""
    found = []
    for file in root.glob("outputs/*/traces.jsonl"):
        for line in file.read_text(encoding="utf-8").splitlines():
            episode = json.loads(line)
            assert episode["ok"], episode["errors"]
            found += episode["traces"]
    return found


async def test_the_pages_recipe_config_and_command_score_each_row_with_its_stored_training_reward(
    tmp_path: Path,
) -> None:
    """NeMo Gym page, "A rollout with verifiers' `NeMoGymTaskset`", as written (the URLs, the model endpoint and
    the bearer token replaced): one rollout per mock task, seeded by `/seed_session`, its tools the episode's MCP
    URL, scored by `/verify`. The reward verifiers records is each episode's stored training reward: 1 for the
    milk task the scripted model does, 0 for the two it does not."""
    (tmp_path / "rows.py").write_text(page_block("python", "# rows.py"), encoding="utf-8")
    async with simia(tmp_path) as served, ChatModel().running() as model:
        recipe = (tmp_path / "rows.py").read_text(encoding="utf-8").replace(DOC_URL, served.url)
        (tmp_path / "rows.py").write_text(recipe, encoding="utf-8")
        assert "4 rows: rows.jsonl" in await run(["python", "rows.py"], tmp_path, timeout=60)  # the mock tasks
        config = (
            page_block("toml")
            .replace("https://api.openai.com/v1", model.base_url)
            .replace('"OPENAI_API_KEY"', f'"{MODEL_KEY}"')
            .replace(DOC_URL, served.url)
        )
        token = f'headers = {{Authorization = "Bearer {ALICE}"}}'  # as the page says, for a server with tokens
        config = config.replace('nemo-gym/mock"\n', f'nemo-gym/mock"\n{token}\n')
        (tmp_path / "eval.toml").write_text(config, encoding="utf-8")
        await run(page_command("vf-eval"), tmp_path)
        found = traces(tmp_path)
        scored = {}
        for trace in found:
            info = trace["info"]["nemo_gym"]
            detail = await served.episode(info["episode_id"])
            stored = Verdict.model_validate(detail["verdict"]).training_reward()
            assert trace["rewards"]["nemo_gym"]["score"] == stored
            assert detail["transcript"][0] == {"role": "user", "content": trace["task"]["data"]["prompt"][0]["content"]}
            assert [(e["tool"], e["arguments"]) for e in detail["events"]] == [
                ("set_quantity", {"name": "milk", "qty": 4})
            ]
            assert (detail["seed"], info["transcript_mismatches"], info["fabricated"]) == (1, [], False)
            scored[detail["task"]] = stored
    assert scored == {"restock_milk": 1.0, "count_apples": 0.0, "no_bananas": 0.0, "weekly_restock": 0.0}
    assert model.requests and all(r.get("tools") for r in model.requests)


def response(*items: dict[str, Any]) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": "completed", "output": list(items)}


def call(call_id: str, name: str, arguments: dict[str, Any], output: str) -> list[dict[str, Any]]:
    return [
        {"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(arguments)},
        {"type": "function_call_output", "call_id": call_id, "output": output},
    ]


ROW = {"task": "restock_milk", "agent_ref": {"name": "simia"}, "responses_create_params": {"input": "Milk to 4."}}
SAY = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}


async def test_bad_input_repeats_and_other_principals_get_protocol_errors_and_nothing_is_stored(tmp_path: Path) -> None:
    """The protocol's bad input: an unknown task, or a row without `responses_create_params`, opens nothing; an
    unknown tool and bad arguments are the tool's `isError` results (recorded); `/verify` without the cookie, or
    with a malformed response, is a 400 and leaves the episode open; bob cannot verify alice's episode (404); a
    second `/verify` with another response is a 409 (judged once, the first transcript kept); a call after the end is
    refused; a transcript that claims a call the server never ran is a 422, never a 0."""
    async with simia(tmp_path) as served, served.http() as alice, served.http(BOB) as bob:
        base = f"{served.url}/nemo-gym/mock"
        unknown_task = await alice.post(f"{base}/seed_session", json={**ROW, "task": "nope"})
        no_params = await alice.post(f"{base}/seed_session", json={"task": "restock_milk"})
        bad_seed = await alice.post(f"{base}/seed_session", json={**ROW, "seed": True})
        assert await served.episodes() == []

        seeded = await alice.post(f"{base}/seed_session", json=ROW)
        episode_id, url_path = seeded.json()["episode_id"], seeded.json()["mcp"]["url_path"]
        cookies = {"Cookie": f"simia_episode={seeded.cookies['simia_episode']}"}  # sent by hand: each request says
        alice.cookies.clear()  # whether it carries the rollout's cookie
        assert seeded.json()["mcp"] == {"url_path": f"../../episodes/{episode_id}/mcp", "headers": {}}
        transport = streamable_http_client(f"{base}/{url_path}", http_client=alice)  # joined as NeMo Gym clients do
        async with Client(transport) as mcp:
            unknown_tool = await mcp.call_tool("fly", {})
            bad_arguments = await mcp.call_tool("set_quantity", {"name": "milk", "qty": "four"})
            done = await mcp.call_tool("set_quantity", {"name": "milk", "qty": 4})
            good = response(
                *call("c0", "fly", {}, unknown_tool.content[0].text),
                *call("c1", "set_quantity", {"name": "milk", "qty": "four"}, bad_arguments.content[0].text),
                *call("c2", "set_quantity", {"name": "milk", "qty": 4}, done.content[0].text),
                SAY,
            )  # every call the rollout made, as the Responses API lists them
            no_cookie = await alice.post(f"{base}/verify", json={**ROW, "response": good})
            malformed = await alice.post(f"{base}/verify", json={**ROW, "response": {"output": "no"}}, headers=cookies)
            bad_item = response({"type": "function_call", "call_id": "c1", "name": "set_quantity", "arguments": {}})
            malformed_item = await alice.post(f"{base}/verify", json={**ROW, "response": bad_item}, headers=cookies)
            still_open = await served.episode(episode_id)
            bobs = await bob.post(f"{base}/verify", json={**ROW, "response": good}, headers=cookies)
            verified = await alice.post(f"{base}/verify", json={**ROW, "response": good}, headers=cookies)
            ended = await served.episode(episode_id)
            other = response(SAY)
            again = await alice.post(f"{base}/verify", json={**ROW, "response": other}, headers=cookies)
            after_end = await mcp.call_tool("get_item", {"name": "milk"})
        final = await served.episode(episode_id)

        fabricating = await alice.post(f"{base}/seed_session", json=ROW)
        claims = response(*call("c9", "set_quantity", {"name": "milk", "qty": 4}, '{"name": "milk", "qty": 4}'))
        masked = await alice.post(f"{base}/verify", json={**ROW, "response": claims})  # the cookie from the jar
        masked_episode = await served.episode(fabricating.json()["episode_id"])

    assert (unknown_task.status_code, no_params.status_code, bad_seed.status_code) == (404, 400, 400)
    assert "responses_create_params" in no_params.json()["error"]["message"]
    assert (unknown_tool.is_error, bad_arguments.is_error, done.is_error) == (True, True, False)
    assert (unknown_tool.meta or {})["simia/error_code"] == "unknown_tool"
    assert (bad_arguments.meta or {})["simia/error_code"] == "invalid_arguments"
    assert (no_cookie.status_code, malformed.status_code, malformed_item.status_code) == (400, 400, 400)
    assert "simia_episode" in no_cookie.json()["error"]["message"]
    assert "response.output[0]" in malformed_item.json()["error"]["message"]
    assert (still_open["status"], still_open["transcript"], still_open["verdict"]) == ("active", None, None)
    assert bobs.status_code == 404
    answer = verified.json()
    assert verified.status_code == 200 and answer["reward"] == 1.0, verified.text
    assert answer["reward"] == Verdict.model_validate(ended["verdict"]).training_reward()
    assert (answer["agent_ref"], answer["responses_create_params"], answer["response"]) == (
        ROW["agent_ref"],
        ROW["responses_create_params"],
        good,
    )
    assert answer["rule_checks"] == [{"pointer": "/items/milk/qty", "expected": 4, "actual": 4, "passed": True}]
    transcript = ended["transcript"]
    assert [m["role"] for m in transcript] == ["user", *["assistant", "tool"] * 3, "assistant"]
    assert transcript[5]["tool_calls"] == [
        {
            "id": "c2",
            "type": "function",
            "function": {"name": "set_quantity", "arguments": '{"name": "milk", "qty": 4}'},
        }
    ]
    assert transcript[6] == {"role": "tool", "tool_call_id": "c2", "content": done.content[0].text}
    assert (transcript[0], transcript[-1]) == (
        {"role": "user", "content": "Milk to 4."},
        {"role": "assistant", "content": "Done."},
    )
    assert ended["verdict"]["transcript_mismatches"] == []
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"  # judged once, on the first
    assert (final["verdict"], final["transcript"], final["ended_at"]) == (
        ended["verdict"],
        ended["transcript"],
        ended["ended_at"],
    )
    assert after_end.is_error and "ended" in after_end.content[0].text
    assert [e["tool"] for e in final["events"]] == ["fly", "set_quantity", "set_quantity"]
    assert masked.status_code == 422 and masked.json()["error"]["code"] == "reward_masked"
    assert masked_episode["status"] == "ended" and masked_episode["verdict"]["fabricated"] is True
