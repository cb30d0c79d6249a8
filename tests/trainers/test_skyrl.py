"""simia-skyrl in SkyRL's own venv (the released skyrl-gym) against a live `simia serve`: the SkyRL page's dataset
command and check script as written (their URL replaced), through `skyrl_gym.make`; then bad input (a call that
does not parse, an unknown tool, bad arguments), what is stored for it, and a misconfigured environment."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from simia.sim.verdict import Verdict
from simia.testing import FakeProvider, mock_world_answer
from simia.testing.processes import serve_process
from simia.testing.trainer_venvs import trainer_venv

pytestmark = [pytest.mark.processes, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "trainers" / "skyrl.md"
ADAPTERS = ROOT / "training" / "adapters"
# editable: the venv is keyed by its pins, so it must see the adapters' code as it is now
PACKAGES = ["skyrl-gym==0.4.0", "-e", str(ADAPTERS / "client"), "-e", f"{ADAPTERS / 'skyrl'}[parquet]"]
DOC_URL = "http://127.0.0.1:8765"
"""The server URL the page uses; each test's own server replaces it."""
PASS = {
    "criteria": [{"criterion": "the rubric", "passed": True, "evidence": "the recorded calls"}],
    "reasoning": "The rule checks decide.",
    "reward": 1,
}


def fake_answer(body: dict[str, Any]) -> dict[str, Any]:
    """A flawless simulator of the mock world, and a judge that passes every rubric: the rules decide."""
    name = (body.get("response_format") or {}).get("json_schema", {}).get("name")
    return PASS if name == "verdict" else mock_world_answer(body)


def page_python(first_line: str) -> str:
    """The page's ```python block that starts with `first_line`."""
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(encoding="utf-8"), flags=re.M | re.S)
    return next(b for b in blocks if b.startswith(first_line))


def page_command(start: str) -> list[str]:
    """The words of the page's bash command that starts with `start` (continuations joined)."""
    for body in re.findall(r"^```bash\n(.*?)^```", PAGE.read_text(encoding="utf-8"), flags=re.M | re.S):
        for line in body.replace("\\\n", " ").splitlines():
            if line.startswith(start):
                return shlex.split(line, comments=True)
    raise AssertionError(f"{PAGE.name} shows no command starting {start!r} any more")


@dataclass
class Served:
    url: str

    async def episode(self, episode_id: str) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=self.url) as http:
            answer = await http.get(f"/v1/episodes/{episode_id}")
        assert answer.status_code == 200, answer.text
        detail: dict[str, Any] = answer.json()
        return detail

    async def stored_reward(self, episode_id: str) -> float | None:
        """The stored verdict's training reward (what the trainer must receive)."""
        return Verdict.model_validate((await self.episode(episode_id))["verdict"]).training_reward()


@contextlib.asynccontextmanager
async def simia(tmp_path: Path) -> AsyncIterator[Served]:
    async with FakeProvider(fake_answer).running() as fake:
        args = ["--world", "mock", "--db", str(tmp_path / "simia.db"), "--log-level", "warning"]
        async with serve_process(*args, "--backend", "openai-compatible:fake", "--base-url", fake.base_url) as server:
            yield Served(server.url)


async def run(words: list[str], tmp_path: Path, timeout: float = 180) -> list[dict[str, Any]]:
    """Run a command in SkyRL's venv (`python` is the venv's); the JSON objects it printed, one a line."""
    python = await asyncio.to_thread(trainer_venv, "skyrl", PACKAGES)
    command = [str(python) if w == "python" else w for w in words]
    proc = await asyncio.create_subprocess_exec(
        *command, cwd=tmp_path, env=dict(os.environ), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out.decode()[-3000:]}\n{err.decode()[-5000:]}"
    return [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]


async def test_the_pages_dataset_and_check_play_a_rewarded_and_an_unrewarded_episode_with_the_stored_rewards(
    tmp_path: Path,
) -> None:
    """SkyRL page, "The dataset" and "Check the wiring on CPU", as written (the URL replaced): the rows of the mock
    world's tasks, two of them played through `skyrl_gym.make`; the reward each last step carries is its stored
    verdict's training reward, 1.0 where the rules hold and 0.0 where they do not."""
    (tmp_path / "check_skyrl.py").write_text(page_python("# check_skyrl.py"), encoding="utf-8")
    dataset = [w.replace(DOC_URL, "{server}") for w in page_command("python -m simia_skyrl.dataset")]
    async with simia(tmp_path) as served:
        await run([w.replace("{server}", served.url) for w in dataset], tmp_path)
        printed = await run(page_command("python check_skyrl.py"), tmp_path)
        assert [(p["task"], p["reward"]) for p in printed] == [("restock_milk", 1.0), ("count_apples", 0.0)]
        for played in printed:
            assert await served.stored_reward(played["episode"]) == played["reward"]
            detail = await served.episode(played["episode"])
            assert detail["status"] == "ended" and detail["verdict"]["fabricated"] is False
            assert detail["transcript"][0]["role"] == "system" and "<tools>" in detail["transcript"][0]["content"]
        [apples, *_] = (await served.episode(printed[1]["episode"]))["verdict"]["rule_checks"]
        assert (apples["pointer"], apples["actual"], apples["passed"]) == ("/items/apple/qty", 3, False)


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
