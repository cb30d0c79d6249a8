"""The Open Reward Standard listener (`simia serve --ors-port`) against the real `openreward` client and TRL's
`OpenRewardSpec`, each in a venv of its own, and a live server whose model is a fake provider: the docs pages'
snippets as written (their URL replaced), then bad input, retries and isolation over raw HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from simia.cli import main
from simia.server.inprocess import free_port
from simia.sim.verdict import Verdict
from simia.testing import FakeProvider, FakeReply
from simia.testing.processes import serve_process
from simia.testing.trainer_venvs import trainer_venv

sys.path.insert(0, str(Path(__file__).parent))
from live import json_lines, page_blocks, rules_decide, run_command  # type: ignore[import-not-found]

SPAWNS = (pytest.mark.processes, pytest.mark.slow)


def spawns(test: Any) -> Any:
    """Marks a test that starts `simia serve` and a trainer's client."""
    for mark in SPAWNS:
        test = mark(test)
    return test


ROOT = Path(__file__).resolve().parents[2]
OPENREWARD = ["openreward==0.1.167"]
TRL_ORS = ["torch==2.13.0", "trl==1.16.0", "openreward==0.1.167"]  # torch first: the CPU build on local disk
DOC_ORS = "http://127.0.0.1:8766"
"""The ORS URL the pages' snippets use; each test's own server replaces it."""
TOKEN, OTHER = "ors-secret-token", "another-principals-token"
TEST_TASK = {
    "id": "restock_milk_test",
    "instruction": "Set the milk to 4 litres.",
    "split": "test",
    "expected_state": {"/items/milk/qty": 4},
}


def python_blocks(page: str) -> list[str]:
    """The ```python blocks of a docs page, in order."""
    return page_blocks(ROOT / "docs" / page)


@dataclass
class Served:
    api: str
    ors: str
    fake: FakeProvider
    process: subprocess.Popen[bytes]

    def judged(self) -> int:
        """How many verdicts the judge was asked for."""
        return sum(
            1
            for b in self.fake.requests
            if (b.get("response_format") or {}).get("json_schema", {}).get("name") == "verdict"
        )

    async def episode(self, episode_id: str, token: str = TOKEN) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=self.api, headers={"Authorization": f"Bearer {token}"}) as http:
            answer = await http.get(f"/v1/episodes/{episode_id}")
        assert answer.status_code == 200, answer.text
        detail: dict[str, Any] = answer.json()
        return detail

    async def stored_reward(self, episode_id: str) -> float | None:
        """The stored verdict's training reward (what a trainer must receive)."""
        verdict = (await self.episode(episode_id))["verdict"]
        return Verdict.model_validate(verdict).training_reward()


@contextlib.asynccontextmanager
async def simia(tmp_path: Path) -> AsyncIterator[Served]:
    """`simia serve --ors-port P` on the mock world (plus a task of the `test` split), two tokens, and the fake
    provider as its model (simulator and judge)."""
    worlds = tmp_path / "worlds"
    shutil.copytree(ROOT / "tool_specs" / "mock", worlds / "mock")
    with (worlds / "mock" / "tasks.jsonl").open("a", encoding="utf-8") as tasks:
        tasks.write(json.dumps(TEST_TASK) + "\n")
    ors_port = free_port()
    async with FakeProvider(rules_decide).running() as fake:
        args = ["--worlds-dir", str(worlds), "--world", "mock", "--db", str(tmp_path / "ors.db")]
        args += ["--backend", "openai-compatible:fake", "--base-url", fake.base_url, "--log-level", "warning"]
        args += ["--ors-port", str(ors_port), "--token", TOKEN, "--token", OTHER]
        async with serve_process(*args) as server:
            yield Served(server.url, f"http://127.0.0.1:{ors_port}", fake, server.process)


async def run_python(python: Path, code: str, tmp_path: Path, *, timeout: float = 180) -> list[dict[str, Any]]:
    """Run `code` with `python` (a trainer's venv) and return the JSON objects it printed, one a line."""
    script = tmp_path / f"client_{abs(hash(code))}.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "OPENREWARD_API_KEY": TOKEN, "OPENREWARD_DISABLE_UPDATE_CHECK": "1", "HF_HUB_OFFLINE": "1"}
    out, _ = await run_command([str(python), str(script)], tmp_path, env, timeout)
    return json_lines(out)


def venv(name: str, packages: Sequence[str]) -> Path:
    return trainer_venv(name, list(packages))


@spawns
async def test_the_openreward_client_runs_the_docs_rollouts_and_receives_the_stored_verdicts_rewards(
    tmp_path: Path,
) -> None:
    """ORS page, "A rollout with the `openreward` client", as written (its URL replaced): two sessions of the first
    train task, one that sets the milk and one that only reads it; the reward each terminal answer carries is
    the stored verdict's training reward."""
    python = await asyncio.to_thread(venv, "openreward", OPENREWARD)
    [snippet, _] = python_blocks("trainers/ors.md")
    async with simia(tmp_path) as served:
        printed = await run_python(python, snippet.replace(DOC_ORS, served.ors), tmp_path)
        assert [(p["reward"], p["finished"]) for p in printed] == [(1.0, True), (0.0, True)]
        for rollout in printed:
            assert await served.stored_reward(rollout["episode"]) == rollout["reward"]
            detail = await served.episode(rollout["episode"])
            assert (detail["task"], detail["status"]) == ("restock_milk", "ended")
            assert detail["transcript"][-1] == {"role": "assistant", "content": "The milk is at 4 litres now."}
        assert served.judged() == 2


CLIENT_CHECKS = """
import asyncio, json, os
from openreward.api.environments.client import AsyncEnvironmentsAPI, Task
from openreward.api.errors import ToolCallError

async def reason(session, name, arguments):
    try:
        await session.call_tool(name, arguments)
    except ToolCallError as exc:
        return exc.reason
    return "ok"

async def main():
    async with AsyncEnvironmentsAPI(base_url="ORS", api_key=os.environ["OPENREWARD_API_KEY"]) as api:
        env = api.get("mock")
        out = {"splits": await env.list_splits(), "test": [t.task_spec for t in await env.list_tasks("test")]}
        out["num_train"] = await env.num_tasks("train")
        out["tools"] = [t.name for t in await env.list_tools()]
        out["terminal"] = (await env.terminal_tool()).name
        async with env.session(split="train", index=0) as session:
            out["unknown_tool"] = await reason(session, "no_such_tool", {})
            out["bad_arguments"] = await reason(session, "set_quantity", {"name": "milk"})
            done = await session.call_tool("set_quantity", {"name": "milk", "qty": 4})
            progress = done.metadata["simia/progress"]
            out["call"] = [done.blocks[0].text, done.metadata["simia/seq"], done.reward, done.finished, progress]
            first = await session.call_terminal_tool("Done.")
            again = await session.call_terminal_tool("Done, again.")
            out["ends"] = [[e.reward, e.finished, e.metadata["simia/episode"]] for e in (first, again)]
            out["after_end"] = await reason(session, "get_item", {"name": "milk"})
        spec = {"id": "restock_milk_test", "seed": 7, "group": "g1"}
        episodes = []
        for _ in range(2):
            task = Task(server_name="mock", environment_name="mock", task_spec=spec, namespace=None)
            async with env.session(task=task) as session:
                call = await session.call_tool("set_quantity", {"name": "milk", "qty": 4})
                end = await session.call_terminal_tool("Done.")
                episodes.append([call.reward, end.reward, end.metadata["simia/episode"]])
        out["group"] = episodes
        try:
            await env.list_tasks("nope")
        except Exception as exc:
            out["bad_split"] = str(exc)
    print(json.dumps(out))

asyncio.run(main())
"""


@spawns
async def test_bad_input_gets_ors_answers_and_ending_twice_answers_one_verdict(tmp_path: Path) -> None:
    """With the `openreward` client: the splits (a `test` split where a task declares it), an unknown tool
    (`not_found`), arguments that break the schema (`input_validation`), a call's shaped reward, a second terminal
    call (the same verdict, judged once), a call after the end (`episode_finished`), and a task spec with a seed
    and a group (the second session forks the first one's episode, and its call is rewarded from its start)."""
    python = await asyncio.to_thread(venv, "openreward", OPENREWARD)
    async with simia(tmp_path) as served:
        [out] = await run_python(python, CLIENT_CHECKS.replace('"ORS"', repr(served.ors)), tmp_path)
        assert out["splits"] == ["train", "test"] and out["num_train"] == 4
        assert out["test"] == [{"id": "restock_milk_test", "instruction": "Set the milk to 4 litres."}]
        assert out["tools"] == ["list_items", "get_item", "set_quantity"] and out["terminal"] == "end_episode"
        assert (out["unknown_tool"], out["bad_arguments"], out["after_end"]) == (
            "not_found",
            "input_validation",
            "episode_finished",
        )
        # seq 3: the two refused calls are events; the call's reward is its shaped reward (the one check it made hold)
        assert out["call"] == ['{"name": "milk", "qty": 4}', 3, 1.0, False, 1.0]
        [first, again] = out["ends"]
        assert first == again and first[:2] == [1.0, True]
        assert await served.stored_reward(first[2]) == 1.0
        detail = await served.episode(first[2])
        assert [(e["tool"], e["error_code"]) for e in detail["events"]] == [
            ("no_such_tool", "unknown_tool"),
            ("set_quantity", "invalid_arguments"),
            ("set_quantity", None),
        ]
        [(c1, r1, base), (c2, r2, forked)] = out["group"]
        assert (c1, r1, c2, r2) == (1.0, 1.0, 1.0, 1.0)  # the fork's call is rewarded from the fork's start
        fork = await served.episode(forked)
        assert (fork["parent_id"], fork["group_id"], fork["task"], fork["seed"]) == (base, base, "restock_milk_test", 7)
        assert "Invalid split 'nope'" in out["bad_split"]
        # the model judged one episode, once (the second terminal call read its verdict); the test task has no
        # rubric: its rule checks alone judge it, without a model
        assert served.judged() == 1


async def sse_answer(http: httpx.AsyncClient, path: str, body: dict[str, Any], **headers: str) -> tuple[str, Any]:
    """POST an ORS streaming route; (the task id, the `end` event's JSON)."""
    answer = await http.post(path, json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    events = dict(re.findall(r"^event: (\w+)\ndata: (.*)$", answer.text, flags=re.M))
    assert "error" not in events, events
    return events["task_id"], json.loads(events["end"]) if events.get("end") else None


async def open_session(http: httpx.AsyncClient, **create: Any) -> str:
    sid, _ = await sse_answer(http, "/create_session", {})
    answer = await http.post("/create", json=create or {"split": "train", "index": 0}, headers={"X-Session-ID": sid})
    assert answer.status_code == 200, answer.text
    return sid


@spawns
async def test_the_ors_routes_answer_retries_with_the_committed_call_and_keep_principals_apart(tmp_path: Path) -> None:
    """Over raw HTTP: the tool list hides the terminal tool; a call resent with its `task_id` or the same
    `Idempotency-Key` answers the committed call (one event); a key reused for another call, no session header,
    an unknown session and another principal's session are refused; no token is a 401."""
    async with simia(tmp_path) as served:
        mine = httpx.AsyncClient(base_url=served.ors, headers={"X-API-Key": TOKEN}, timeout=30)
        theirs = httpx.AsyncClient(base_url=served.ors, headers={"Authorization": f"Bearer {OTHER}"}, timeout=30)
        async with mine, theirs:
            tools = (await mine.get("/mock/tools")).json()
            assert [t["name"] for t in tools["tools"]] == ["list_items", "get_item", "set_quantity"]
            assert tools["terminal_tool"] == {
                "name": "end_episode",
                "arg": "message",
                "description": "End the episode with the assistant's final message; the judge scores it.",
            }
            assert tools["supports_score_group"] is True
            sid = await open_session(mine)
            call = {"name": "set_quantity", "input": {"name": "milk", "qty": 4}}
            task_id, first = await sse_answer(mine, "/mock/call", call, **{"X-Session-ID": sid})
            _, resent = await sse_answer(mine, "/mock/call", {**call, "task_id": task_id}, **{"X-Session-ID": sid})
            assert resent == first and first["output"]["metadata"]["simia/seq"] == 1
            keyed = {"X-Session-ID": sid, "Idempotency-Key": "k-1"}
            _, once = await sse_answer(mine, "/call", {"name": "get_item", "input": {"name": "milk"}}, **keyed)
            _, twice = await sse_answer(mine, "/call", {"name": "get_item", "input": {"name": "milk"}}, **keyed)
            assert once == twice and once["output"]["metadata"]["simia/seq"] == 2
            reused = await mine.post("/call", json={"name": "list_items", "input": {}}, headers=keyed)
            assert reused.status_code == 400 and "was used for another call" in reused.json()["detail"]
            episode = once["output"]["metadata"]["simia/episode"]
            assert [e["seq"] for e in (await served.episode(episode))["events"]] == [1, 2]

            # a seed no episode can store is refused at /create, as POST /v1/episodes refuses it (it was accepted,
            # and every later call of the session failed as an infrastructure error)
            sid_seed, _ = await sse_answer(mine, "/create_session", {})
            huge = {"env_name": "mock", "task_spec": {"id": "restock_milk_test", "seed": 2**70}}
            too_big = await mine.post("/create", json=huge, headers={"X-Session-ID": sid_seed})
            assert too_big.status_code == 400 and "seed" in too_big.text, too_big.text

            no_header = await mine.post("/mock/call", json=call)
            assert no_header.status_code == 400 and "X-Session-ID" in no_header.json()["detail"]
            unknown = await mine.post("/mock/call", json=call, headers={"X-Session-ID": "not-a-session"})
            assert unknown.status_code == 404
            for path, body in [("/mock/call", call), ("/ping", {}), ("/mock/prompt", None)]:
                if body is None:
                    stolen = await theirs.get(path, headers={"X-Session-ID": sid})
                else:
                    stolen = await theirs.post(path, json=body, headers={"X-Session-ID": sid})
                assert stolen.status_code == 404, (path, stolen.text)
            async with httpx.AsyncClient(base_url=served.ors) as anonymous:
                assert (await anonymous.get("/list_environments")).status_code == 401
            assert (await theirs.get("/list_environments")).json() == ["mock"]

            prompt = (await mine.get("/mock/messages", headers={"X-Session-ID": sid})).json()
            assert [m["role"] for m in prompt] == ["system", "user"]
            assert prompt[1]["blocks"] == [{"type": "text", "text": "Set the milk to 4 litres."}]
            assert prompt[0]["blocks"][0]["text"].startswith("You are a customer service agent")

            other = await open_session(mine)
            _, scored = await sse_answer(
                mine,
                "/mock/score_group",
                {
                    "candidates": [
                        {"messages": [], "metadata": {"sid": sid}},
                        {"messages": [], "metadata": {"sid": other}},
                    ]
                },
                **{"X-Session-ID": sid},
            )
            assert [s["reward"] for s in scored["scores"]] == [1.0, 0.0]
            for score in scored["scores"]:
                assert await served.stored_reward(score["metadata"]["simia/episode"]) == score["reward"]
            third = await open_session(mine)  # deleted mid-rollout: its episode is ended and judged
            _, read = await sse_answer(mine, "/call", {"name": "list_items", "input": {}}, **{"X-Session-ID": third})
            assert (await mine.post("/delete", headers={"X-Session-ID": third})).status_code == 200
            deleted = await served.episode(read["output"]["metadata"]["simia/episode"])
            assert (deleted["status"], deleted["verdict"]["reward"]) == ("ended", 0)
            assert (await mine.post("/ping", headers={"X-Session-ID": third})).status_code == 404
            unnamed = await mine.post(
                "/mock/score_group", json={"candidates": [{"messages": []}]}, headers={"X-Session-ID": sid}
            )
            assert unnamed.status_code == 400 and "names no rollout" in unnamed.json()["detail"]


TRL_DRIVER = """

# -- what GRPOTrainer does with the spec, minus the model: two rollouts of the first task
import json

rows = spec.train_dataset
environments = [spec.environment_factory() for _ in range(2)]
prompts = [env.reset(**rows[0]) for env in environments]  # TRL: reset(**row) per rollout
environments[0].set_quantity(name="milk", qty=4)  # the policy's tool calls, as TRL makes them
environments[1].get_item(name="milk")
completions = [[{"role": "assistant", "content": "The milk is at 4 litres."}] for _ in environments]
rewards = ors_reward(environments=environments, completions=completions, prompts=prompts)
print(json.dumps({
    "columns": sorted(rows.column_names),
    "rows": len(rows),
    "prompt": prompts[0],
    "rewards": rewards,
    "default": spec.reward_funcs(environments=environments),
    "episodes": [env.metadata[-1]["simia/episode"] for env in environments],
    "finished": [env.finished for env in environments],
}))
for env in environments:
    env._close()
"""


@spawns
async def test_trls_openrewardspec_trains_on_the_ors_listener_with_the_stored_verdicts_rewards(tmp_path: Path) -> None:
    """TRL page, `OpenRewardSpec` against simia's ORS listener, as written (its URL replaced), then what
    `GRPOTrainer` does with it: `train_dataset` rows, `environment_factory` instances reset with a row, their
    tool methods called, and the reward function; one rollout sets the milk and one does not, and the rewards
    TRL receives are the stored verdicts' training rewards."""
    python = await asyncio.to_thread(venv, "trl-ors", TRL_ORS)
    [_, _, wiring, _] = python_blocks("trainers/trl.md")
    async with simia(tmp_path) as served:
        [out] = await run_python(python, wiring.replace(DOC_ORS, served.ors) + TRL_DRIVER, tmp_path, timeout=300)
        assert out["rows"] == 4 and {"prompt", "task_index", "id", "instruction"} <= set(out["columns"])
        assert out["prompt"].endswith("[user]\nSet the milk to 4 litres.")
        assert out["rewards"] == out["default"] == [1.0, 0.0] and out["finished"] == [True, True]
        for episode, reward in zip(out["episodes"], out["rewards"], strict=True):
            assert await served.stored_reward(episode) == reward


@spawns
async def test_sigterm_drains_the_ors_listener_with_the_main_one_and_the_process_exits_0(tmp_path: Path) -> None:
    """A call in flight on the ORS port finishes and is answered; a new ORS request gets the drain's 503; both
    listeners stop and the process exits 0."""
    async with simia(tmp_path) as served:
        served.fake.script(FakeReply(delay=1.5))  # the next model answer is slow: the call is in flight
        async with httpx.AsyncClient(base_url=served.ors, headers={"X-API-Key": TOKEN}, timeout=30) as http:
            sid = await open_session(http)
            call = {"name": "get_item", "input": {"name": "milk"}}
            in_flight = asyncio.create_task(sse_answer(http, "/mock/call", call, **{"X-Session-ID": sid}))
            for _ in range(500):  # until the call waits on the model
                if served.fake.requests:
                    break
                await asyncio.sleep(0.02)
            served.process.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            refused = await http.post("/create_session")
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "draining"
            _, answer = await in_flight
            assert answer["ok"] is True and answer["output"]["blocks"][0]["text"] == '{"name": "milk", "qty": 0}'
            start = time.monotonic()
            while served.process.poll() is None:
                assert time.monotonic() - start < 20, "simia serve still running 20 s after SIGTERM"
                await asyncio.sleep(0.05)
            assert served.process.returncode == 0


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["--port", "9999", "--ors-port", "9999"],
            "error: --ors-port 9999 is the --port too: give ORS a port of its own",
        ),
        (["--transport", "stdio", "--world", "mock", "--ors-port", "9998"], "error: --ors-port serves over HTTP"),
        (["--ors-port", "70000"], "a port is 1-65535, got 70000"),
    ],
)
def test_serve_refuses_an_ors_port_it_cannot_serve_before_opening_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    db = tmp_path / "never.db"
    script = ROOT / "tests" / "fixtures" / "mock_script.json"
    try:
        code = main(
            [
                "serve",
                "--worlds-dir",
                str(ROOT / "tool_specs"),
                "--backend",
                f"scripted:{script}",
                "--db",
                str(db),
                *argv,
            ]
        )
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    assert code == 2 and says in capsys.readouterr().err and not db.exists()
