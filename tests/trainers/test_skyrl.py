"""simia-skyrl in SkyRL's own venv (the released skyrl-gym) against a live `simia serve`: the SkyRL page's dataset
command and check script as written (their URL replaced), through `skyrl_gym.make`; the step rewards of a task
with weighted and forbidden checks; then bad input (a call that does not parse, an unknown tool, bad arguments),
what is stored for it, and a misconfigured environment."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from simia.testing import mock_world_answer
from simia.testing.trainer_venvs import trainer_venv

sys.path.insert(0, str(Path(__file__).parent))
from live import PASS, Served, json_lines, page_block, run_command, serve_faked  # type: ignore[import-not-found]
from live import page_command as live_page_command  # type: ignore[import-not-found]

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.timeout(1200)]  # the first test builds the venv

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "trainers" / "skyrl.md"
ADAPTERS = ROOT / "training" / "adapters"
# editable: the venv is keyed by its pins, so it must see the adapters' code as it is now
PACKAGES = ["skyrl-gym==0.4.0", "-e", str(ADAPTERS / "client"), "-e", f"{ADAPTERS / 'skyrl'}[parquet]"]
DOC_URL = "http://127.0.0.1:8765"
"""The server URL the page uses; each test's own server replaces it."""


def fake_answer(body: dict[str, Any]) -> dict[str, Any]:
    """A flawless simulator of the mock world, and a judge that passes every rubric: the rules decide."""
    name = (body.get("response_format") or {}).get("json_schema", {}).get("name")
    return PASS if name == "verdict" else mock_world_answer(body)


def page_python(first_line: str) -> str:
    return page_block(PAGE, "python", first_line)


def page_command(start: str) -> list[str]:
    return live_page_command(PAGE, start)


@contextlib.asynccontextmanager
async def simia(tmp_path: Path) -> AsyncIterator[Served]:
    async with serve_faked(tmp_path, fake_answer) as url:
        yield Served(url)


async def run(words: list[str], tmp_path: Path, timeout: float = 180) -> list[dict[str, Any]]:
    """Run a command in SkyRL's venv (`python` is the venv's); the JSON objects it printed, one a line."""
    python = await asyncio.to_thread(trainer_venv, "skyrl", PACKAGES)
    command = [str(python) if w == "python" else w for w in words]
    out, _ = await run_command(command, tmp_path, dict(os.environ), timeout)
    return json_lines(out)


async def test_the_pages_dataset_and_check_play_a_rewarded_and_an_unrewarded_episode_with_the_stored_rewards(
    tmp_path: Path,
) -> None:
    """SkyRL page, "The dataset" and "Check the wiring on CPU", as written (the URL replaced): the rows of the mock
    world's tasks, two of them played through `skyrl_gym.make`; the reward each last step carries is its stored
    verdict's training reward, 1.0 where the rules hold and 0.0 where they do not, and the step before it the
    shaped reward its verdict lists for its call (1.0 for setting the milk, 0.0 for a read)."""
    (tmp_path / "check_skyrl.py").write_text(page_python("# check_skyrl.py"), encoding="utf-8")
    dataset = [w.replace(DOC_URL, "{server}") for w in page_command("python -m simia_skyrl.dataset")]
    async with simia(tmp_path) as served:
        await run([w.replace("{server}", served.url) for w in dataset], tmp_path)
        printed = await run(page_command("python check_skyrl.py"), tmp_path)
        assert [(p["task"], p["rewards"]) for p in printed] == [
            ("restock_milk", [1.0, 1.0]),
            ("count_apples", [0.0, 0.0]),
        ]
        for played in printed:
            assert await served.stored_reward(played["episode"]) == played["rewards"][-1]
            detail = await served.episode(played["episode"])
            assert [s["reward"] for s in detail["verdict"]["progress"]["steps"]] == played["rewards"][:-1]
            assert detail["status"] == "ended" and detail["verdict"]["fabricated"] is False
            assert detail["transcript"][0]["role"] == "system" and "<tools>" in detail["transcript"][0]["content"]
        [apples, *_] = (await served.episode(printed[1]["episode"]))["verdict"]["rule_checks"]
        assert (apples["pointer"], apples["actual"], apples["passed"]) == ("/items/apple/qty", 3, False)


STEP_REWARDS = """
import json, sys
import skyrl_gym
from simia_skyrl import register

register()
extras = {"world": "mock", "task": sys.argv[2], "max_turns": int(sys.argv[3])}
env = skyrl_gym.make("simia", env_config={"server": sys.argv[1]}, extras=extras)
_, info = env.init([{"role": "user", "content": "Weekly restock: apples to 6, milk to 2, rice stays at 2."}])
steps = []
for action in sys.argv[4:]:
    step = env.step(action)
    steps.append({"reward": step["reward"], "done": step["done"], "progress": step["metadata"]["progress"]})
metrics = env.get_metrics()
env.close()
print(json.dumps({"episode": info["episode"], "steps": steps, "metrics": metrics}))
"""


def call(name: str, qty: int) -> str:
    return f'<tool_call>{{"name": "set_quantity", "arguments": {{"name": "{name}", "qty": {qty}}}}}</tool_call>'


async def test_each_step_returns_its_turns_shaped_rewards_and_the_last_the_outcome(tmp_path: Path) -> None:
    """weekly_restock weighs the apples 2, milk and rice 1 (the rice holds at the start: progress 0.25) and forbids
    emptying the rice. Setting the apples earns 0.5; a turn that empties the rice (-0.75: a kept check broken, a
    forbidden state reached) and sets the milk (+0.25) earns their sum, -0.5; restoring the rice earns 0.75; the
    answer gets the outcome, 0.0 (the rice was emptied on the way: a policy violation fails the episode). Each
    turn's reward is the sum its verdict's progress steps list for its calls, and the step rewards sum to the
    progress made (1.0 - 0.25). In no_bananas every check holds at the start: a last turn (the turn limit) that
    changes the milk breaks one (progress 1.0 to 0.5), and its step returns the outcome 0.0 plus its -0.5."""
    script = tmp_path / "step_rewards.py"
    script.write_text(STEP_REWARDS, encoding="utf-8")
    turns = [call("apple", 6), call("rice", 0) + call("milk", 2), call("rice", 2), "Apples 6, milk 2, rice 2."]
    async with simia(tmp_path) as served:
        [out] = await run(["python", str(script), served.url, "weekly_restock", "10", *turns], tmp_path)
        steps = (await served.episode(out["episode"]))["verdict"]["progress"]["steps"]
        [undone] = await run(["python", str(script), served.url, "no_bananas", "1", call("milk", 3)], tmp_path)
    assert out["steps"] == [
        {"reward": 0.5, "done": False, "progress": 0.75},
        {"reward": -0.5, "done": False, "progress": 0.25},
        {"reward": 0.75, "done": False, "progress": 1.0},
        {"reward": 0.0, "done": True, "progress": None},
    ]
    by_turn = [[1], [2, 3], [4]]
    listed = {s["seq"]: s["reward"] for s in steps}
    assert [sum(listed[seq] for seq in seqs) for seqs in by_turn] == [s["reward"] for s in out["steps"][:-1]]
    assert (out["metrics"]["shaped_reward"], out["metrics"]["reward"]) == (0.75, 0.0)
    assert undone["steps"] == [{"reward": -0.5, "done": True, "progress": 0.5}]


BAD_INPUT = """
import json, sys
import skyrl_gym
from omegaconf import OmegaConf
from simia_skyrl import register

register()
server = sys.argv[1]
extras = {"world": "mock", "task": "restock_milk", "max_turns": 6}
config = OmegaConf.create({"server": server, "perturbation": {"rate": 0.0, "kinds": ["timeout"]}})  # as SkyRL's
env = skyrl_gym.make("simia", env_config=config, extras=extras)
prompt, info = env.init([{"role": "user", "content": "Set the milk to 4 litres."}])
steps = []
for action in [
    '<tool_call>{"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}</tool_call>',
    '<tool_call>{"name": "restock", "arguments": {"item": "milk"}}</tool_call>',
    '<tool_call>{"name": "set_quantity", "arguments": {"name": "milk", "qty": "four"}}</tool_call>',
    "I could not set the milk.",
]:
    step = env.step(action)
    steps.append({"observations": step["observations"], "done": step["done"], "reward": step["reward"],
                  "metadata": step["metadata"]})
env.close()
cut = skyrl_gym.make("simia", env_config={"server": server}, extras=extras)  # SkyRL stops it at a length limit
_, cut_info = cut.init([{"role": "user", "content": "Set the milk to 4 litres."}])
cut.step('<tool_call>{"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}</tool_call>')
cut.close()
errors = {}
for name, make in {
    "no_server": lambda: skyrl_gym.make("simia", env_config={}, extras={"world": "mock", "task": "restock_milk"}),
    "no_task": lambda: skyrl_gym.make("simia", env_config={"server": server}, extras={"world": "mock"}),
}.items():
    try:
        make()
    except ValueError as exc:
        errors[name] = str(exc)
try:
    skyrl_gym.make("simia", env_config={"server": server}, extras={"world": "mock", "task": "x"}).step("hi")
except RuntimeError as exc:
    errors["step_first"] = str(exc)
print(json.dumps({"episode": info["episode"], "cut": cut_info["episode"], "steps": steps, "errors": errors}))
"""


async def test_bad_calls_are_observations_the_model_reads_and_only_executed_calls_are_stored(tmp_path: Path) -> None:
    """A call that does not parse gets its problem back and reaches no server; an unknown tool and bad arguments
    get simia's error results, recorded as the agent's mistakes; the answer ends the episode, judged 0.0 (the
    milk was never set) and unmasked (the transcript holds only what ran); SkyRL's OmegaConf config reaches the
    episode; a trajectory SkyRL stops before it is done is ended by `close`. A missing server or task, or a step
    before init, is an error that says what to do."""
    script = tmp_path / "bad_input.py"
    script.write_text(BAD_INPUT, encoding="utf-8")
    async with simia(tmp_path) as served:
        [out] = await run(["python", str(script), served.url], tmp_path)
        unparsed, unknown, invalid, answer = out["steps"]
        [problem] = unparsed["observations"]
        assert problem["role"] == "user" and "tool call 1 is not valid JSON" in problem["content"]
        assert "<tool_call>{" in problem["content"] and unparsed["metadata"]["tool_calls"] == []
        assert unknown["observations"] == [
            {
                "role": "user",
                "content": "<tool_response>\nUnknown tool 'restock'. Available tools: list_items, get_item, "
                "set_quantity.\n</tool_response>",
            }
        ]
        assert "$.qty" in invalid["observations"][0]["content"] and invalid["metadata"]["tool_errors"] == 1
        assert [s["done"] for s in out["steps"]] == [False, False, False, True]
        assert (answer["reward"], answer["metadata"]["simia_masked"]) == (0.0, False)
        assert await served.stored_reward(out["episode"]) == 0.0
        detail = await served.episode(out["episode"])
        assert [(e["tool"], e["error_kind"], e["error_code"]) for e in detail["events"]] == [
            ("restock", "agent", "unknown_tool"),
            ("set_quantity", "agent", "invalid_arguments"),
        ]
        assert detail["verdict"]["transcript_mismatches"] == []
        assert detail["transcript"][-1] == {"role": "assistant", "content": "I could not set the milk."}
        assert detail["perturbation"] == {"rate": 0.0, "kinds": ["timeout"]}  # SkyRL's config reached simia
        cut = await served.episode(out["cut"])  # closed before it was done: ended and judged, none left open
        assert (cut["status"], cut["verdict"]["reward"]) == ("ended", 1)
    assert "python -m simia_skyrl.dataset" in out["errors"]["no_server"]
    assert "python -m simia_skyrl.dataset" in out["errors"]["no_task"]
    assert "call init(prompt) before step(action)" in out["errors"]["step_first"]
