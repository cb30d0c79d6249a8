"""simia-art in ART's own venv (the released openpipe-art, 0.5.23 on Python 3.12, else 0.5.18 on 3.11) against a
live `simia serve`: the ART page's rollouts as written (their URLs replaced), a non-trainable `art.Model` pointed
at a fake OpenAI-compatible policy server that emits native tool calls; then bad input, a masked verdict, and
what is stored for each."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from simia.testing import FakeProvider, FakeReply, mock_world_answer
from simia.testing.trainer_venvs import python_for, trainer_venv

sys.path.insert(0, str(Path(__file__).parent))
from live import PASS, Served, json_lines, page_blocks, run_command, serve_faked  # type: ignore[import-not-found]

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.timeout(1200)]  # the first test builds the venv

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "trainers" / "art.md"
ADAPTERS = ROOT / "training" / "adapters"
# editable: the venv is keyed by its pins, so it must see the adapters' code as it is now
LOCAL = ["-e", str(ADAPTERS / "client"), "-e", str(ADAPTERS / "art")]
DOC_SIMIA, DOC_MODEL = "http://127.0.0.1:8765", "http://127.0.0.1:8000/v1"
"""The URLs the page uses; each test's own servers replace them."""


def art_venv() -> Path:
    """ART's venv: 0.5.23 on a Python 3.12 where this machine has one, else 0.5.18 (the newest for 3.11)."""
    py312 = python_for("3.12")
    if py312 is not None:
        return trainer_venv("art", ["openpipe-art==0.5.23", *LOCAL], python=py312)
    return trainer_venv("art", ["openpipe-art==0.5.18", *LOCAL], python=sys.executable)


def fake_answer(body: dict[str, Any]) -> dict[str, Any]:
    """A flawless simulator of the mock world, except that reading the rice breaks the tool's output schema (an
    infrastructure failure, after simia's retries), and a judge that passes every rubric: the rules decide."""
    name = (body.get("response_format") or {}).get("json_schema", {}).get("name")
    if name == "verdict":
        return PASS
    prompt = str(body["messages"][1]["content"])
    if "Call: get_item" in prompt and '"rice"' in prompt.split("Arguments: ", 1)[1].split("\n", 1)[0]:
        return {"is_error": False, "error_code": None, "message": "ok", "output": {"rice": "?"}, "state_patch": []}
    return mock_world_answer(body)


def policy(body: dict[str, Any]) -> dict[str, Any]:
    """The policy the fake model server plays, with native tool calls: it sets the milk when asked to, and only
    reads the apples when asked to count them (never topping them up)."""
    messages = body["messages"]
    instruction = next(m["content"] for m in messages if m["role"] == "user")
    if any(m["role"] == "tool" for m in messages):
        return {"message": "The milk is at 4 litres now." if "milk" in instruction else "You have 3 apples."}
    arguments = {"name": "milk", "qty": 4} if "milk" in instruction else {"name": "apple"}
    return {"message": "", "tool_calls": [{"name": "set_quantity" if "milk" in instruction else "get_item",
                                           "arguments": arguments}]}  # fmt: skip


def completion(content: str | None, calls: tuple[tuple[str, str], ...] = ()) -> FakeReply:
    """A raw chat completion (arguments exactly as given, valid JSON or not)."""
    tool_calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
        for i, (name, arguments) in enumerate(calls)
    ]
    message = {"role": "assistant", "content": content, **({"tool_calls": tool_calls} if tool_calls else {})}
    body = {
        "id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "policy",
        "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }  # fmt: skip
    return FakeReply(body=json.dumps(body))


@dataclass
class WithPolicy(Served):
    """A live `simia serve`, and the fake server that plays the policy."""

    model: FakeProvider = field(kw_only=True)


@contextlib.asynccontextmanager
async def simia(tmp_path: Path) -> AsyncIterator[WithPolicy]:
    """`simia serve` on the mock world (the fake provider as its simulator and judge), and the policy's server."""
    async with serve_faked(tmp_path, fake_answer) as url, FakeProvider(policy).running() as model:
        yield WithPolicy(url, model=model)


async def run_python(code: str, tmp_path: Path, *args: str, timeout: float = 240) -> list[dict[str, Any]]:
    """Run `code` in ART's venv; the JSON objects it printed, one a line."""
    python = await asyncio.to_thread(art_venv)
    script = tmp_path / "rollouts.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    out, _ = await run_command([str(python), str(script), *args], tmp_path, env, timeout)
    return json_lines(out)


async def test_the_pages_rollouts_play_a_rewarded_and_an_unrewarded_group_with_the_stored_rewards(
    tmp_path: Path,
) -> None:
    """ART page, "Rollouts", as written (its URLs replaced): two groups of two rollouts by a non-trainable
    `art.Model`; each trajectory's reward is its stored verdict's training reward (1.0 where the rules hold,
    0.0 where they do not), and each group's second episode is a fork of its first."""
    [snippet] = page_blocks(PAGE)
    async with simia(tmp_path) as served:
        code = snippet.replace(DOC_SIMIA, served.url).replace(DOC_MODEL, served.model.base_url)
        printed = await run_python(code, tmp_path)
        assert [(p["task"], p["reward"]) for p in printed] == [
            ("restock_milk", 1.0),
            ("restock_milk", 1.0),
            ("count_apples", 0.0),
            ("count_apples", 0.0),
        ]
        for played in printed:
            assert await served.stored_reward(played["episode"]) == played["reward"]
            detail = await served.episode(played["episode"])
            assert detail["verdict"]["fabricated"] is False and detail["verdict"]["transcript_mismatches"] == []
            assert [m["role"] for m in detail["transcript"]] == ["system", "user", "assistant", "tool", "assistant"]
        for group in (printed[0:2], printed[2:4]):  # whichever rollout of a group starts first creates its episode
            details = [await served.episode(p["episode"]) for p in group]
            [head] = [d for d in details if d["parent_id"] is None]
            [fork] = [d for d in details if d["parent_id"] is not None]
            assert (fork["parent_id"], fork["fork_step"], fork["group_id"]) == (head["id"], 0, head["id"])
        for request in served.model.requests:
            assert [t["function"]["name"] for t in request["tools"]] == ["list_items", "get_item", "set_quantity"]


BAD_INPUT = """
import asyncio, json, sys
import art
from simia_art import RewardMasked, SimiaEnv

async def main():
    model = art.Model(name="policy", project="simia-test", inference_base_url=sys.argv[2], inference_api_key="x")
    async with SimiaEnv(sys.argv[1], "mock", max_turns=6) as env:
        [milk] = await env.scenarios(tasks="restock_milk", seed=5)
        bad = await env.rollout(model, milk)
        [apples] = await env.scenarios(tasks="count_apples")
        groups = await art.gather_trajectory_groups([art.TrajectoryGroup([env.rollout(model, apples)])],
                                                    max_exceptions=1)
    history = [m if isinstance(m, dict) else {"choice": m.message.model_dump(exclude_none=True)}
               for m in bad.messages_and_choices]
    print(json.dumps({"episode": bad.metadata["simia_episode"], "reward": bad.reward, "history": history,
                      "masked": [[e.type, e.message] for e in groups[0].exceptions],
                      "kept": len(groups[0].trajectories)}))

asyncio.run(main())
"""


async def test_bad_calls_are_tool_results_the_model_reads_and_a_masked_verdict_is_left_out(tmp_path: Path) -> None:
    """Native tool calls whose arguments are not JSON get their problem back under their own id and reach no
    server; an unknown tool and bad arguments get simia's error results (recorded as the agent's); the answer
    ends the episode, judged 0.0 and not masked. A simulator failure masks the next rollout's verdict: it raises
    `RewardMasked`, and ART's gather keeps it as the group's exception, no trajectory."""
    async with simia(tmp_path) as served:
        served.model.script(
            completion(None, (("set_quantity", '{"name": "milk", "qty": 4'),)),
            completion(None, (("restock", '{"item": "milk"}'), ("set_quantity", '{"name": "milk", "qty": "four"}'))),
            completion("I could not set the milk."),
            completion(None, (("get_item", '{"name": "rice"}'),)),
            completion("Something went wrong."),
        )
        [out] = await run_python(BAD_INPUT, tmp_path, served.url, served.model.base_url)
        assert out["reward"] == 0.0 and await served.stored_reward(out["episode"]) == 0.0
        tools = [m for m in out["history"] if m.get("role") == "tool"]
        assert [m["tool_call_id"] for m in tools] == ["call_0", "call_0", "call_1"]
        assert tools[0]["content"].startswith("Error: tool call 1: the arguments of set_quantity are not valid JSON")
        assert tools[1]["content"] == "Unknown tool 'restock'. Available tools: list_items, get_item, set_quantity."
        assert tools[2]["content"].startswith("Invalid arguments for set_quantity: $.qty")
        detail = await served.episode(out["episode"])
        assert (detail["seed"], detail["task"]) == (5, "restock_milk")
        assert [(e["tool"], e["error_kind"], e["error_code"]) for e in detail["events"]] == [
            ("restock", "agent", "unknown_tool"),
            ("set_quantity", "agent", "invalid_arguments"),
        ]
        assert detail["verdict"]["transcript_mismatches"] == []
        [(kind, message)] = out["masked"]
        assert "simia_art.rollout.RewardMasked" in kind and "the reward is masked" in message and out["kept"] == 0
        masked_id = message.split("simia episode ", 1)[1].split(":", 1)[0]
        assert await served.stored_reward(masked_id) is None
        assert (await served.episode(masked_id))["verdict"]["infra_failures"] == 1
