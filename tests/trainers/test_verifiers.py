"""simia-verifiers in verifiers' own venv (the released verifiers 0.4.0, with the adapter and simia-env-client as
the page installs them) against a live `simia serve`: the page's `vf-eval` command as written (the URLs and the
model endpoint replaced: a scripted tool-calling model) with verifiers' plain chat harness; every reward verifiers
records is its episode's stored training reward, and a masked verdict fails the rollout instead of scoring 0."""

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
from simia.sim.verdict import Verdict
from simia.testing.trainer_venvs import trainer_venv

sys.path.insert(0, str(Path(__file__).parent))

from chat_model import ChatModel  # type: ignore[import-not-found]
from live import PASS, Served, run_command, serve_scripted  # type: ignore[import-not-found]
from live import page_command as live_page_command  # type: ignore[import-not-found]

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "trainers" / "verifiers.md"
ADAPTERS = ROOT / "training" / "adapters"
# Editable: the venv is keyed by its pins (test_nemo_gym.py shares it), so it must see the adapters as they are now.
PACKAGES = ["verifiers==0.4.0", "uv", "-e", str(ADAPTERS / "client"), "-e", str(ADAPTERS / "verifiers")]
DOC_URL = "http://127.0.0.1:8765"
TOKEN = "alice-secret"
MODEL_KEY = "FAKE_MODEL_KEY"


def page_command(start: str) -> list[str]:
    return live_page_command(PAGE, start)


@contextlib.asynccontextmanager
async def simia(tmp_path: Path, judge: list[dict[str, Any]]) -> AsyncIterator[Served]:
    """`simia serve` on the mock world with a scripted simulator, the scripted `judge`, and a token."""
    async with serve_scripted(tmp_path, judge, "--token", TOKEN) as url:
        yield Served(url, token=TOKEN)


def eval_command(served: Served, model: ChatModel, *extra: str) -> list[str]:
    """The page's command, against the test's server and model."""
    words = [w.replace(DOC_URL, served.url) for w in page_command("vf-eval simia-verifiers")]
    words = [
        model.base_url if w == "https://api.openai.com/v1" else MODEL_KEY if w == "OPENAI_API_KEY" else w for w in words
    ]
    return [*words, "--no-rich", *extra]


async def run(words: list[str], cwd: Path, timeout: float = 600) -> None:
    """Run a command in verifiers' venv (`vf-eval` is the venv's), with simia's token where the page says."""
    python = await asyncio.to_thread(trainer_venv, "verifiers", PACKAGES)
    tools = {"vf-eval": str(python.parent / "vf-eval")}
    env = {**os.environ, MODEL_KEY: "fake", "SIMIA_TOKEN": TOKEN, "PATH": f"{python.parent}:{os.environ['PATH']}"}
    await run_command([tools.get(w, w) for w in words], cwd, env, timeout)


def rollouts(root: Path) -> list[dict[str, Any]]:
    """Every episode record `vf-eval` wrote under `root` (`outputs/<run>/traces.jsonl`), one per rollout."""
    return [
        json.loads(line)
        for file in root.glob("outputs/*/traces.jsonl")
        for line in file.read_text(encoding="utf-8").splitlines()
    ]


def test_the_page_installs_the_packages_the_tests_venv_holds() -> None:
    """The page's install line names what the tests install (there editable, so the cached venv sees edits)."""
    installed = [p if not p.startswith("/") else str(Path(p).relative_to(ROOT)) for p in PACKAGES if p != "-e"]
    assert page_command("pip install") == ["pip", "install", *installed]
    assert installed == ["verifiers==0.4.0", "uv", "training/adapters/client", "training/adapters/verifiers"]


async def test_the_pages_vf_eval_command_scores_each_rollout_with_its_stored_training_reward(tmp_path: Path) -> None:
    """verifiers page, "Run it", as written: one rollout per mock task, each an episode created by the task's setup,
    its tools proxied by `SimiaToolset`, the reward the episode's stored training reward: 1 for the milk task the
    scripted model does, 0 for the two it does not. The transcript the judge read is the rollout's, with no
    mismatch against the calls the server ran."""
    async with simia(tmp_path, [{"match": "# Rubric", "data": PASS}]) as served, ChatModel().running() as model:
        await run(eval_command(served, model), tmp_path)
        scored = {}
        for rollout in rollouts(tmp_path):
            assert rollout["ok"], rollout["errors"]
            [trace] = rollout["traces"]
            episode_id = trace["info"]["simia"]["episode_id"]
            detail = await served.episode(episode_id)
            stored = Verdict.model_validate(detail["verdict"]).training_reward()
            assert trace["rewards"]["simia"]["score"] == stored
            assert trace["info"]["simia"]["verdict"] == detail["verdict"]
            assert detail["verdict"]["transcript_mismatches"] == []
            assert [(e["tool"], e["arguments"]) for e in detail["events"]] == [
                ("set_quantity", {"name": "milk", "qty": 4})
            ]
            assert [m["role"] for m in detail["transcript"]] == ["system", "user", "assistant", "tool", "assistant"]
            assert "# Policy" in detail["transcript"][0]["content"]
            scored[detail["task"]] = stored
    assert scored == {"restock_milk": 1.0, "count_apples": 0.0, "no_bananas": 0.0, "weekly_restock": 0.0}
    assert {tool["function"]["name"] for tool in model.requests[0]["tools"]} == {
        "list_items",
        "get_item",
        "set_quantity",
    }


async def test_a_masked_verdict_fails_the_rollout_instead_of_scoring_it(tmp_path: Path) -> None:
    """A judge that answers nothing usable (a `judge_error` verdict after its retries) leaves the reward masked:
    the rollout's scoring fails with the reasons, no score is recorded, and the episode keeps its verdict."""
    broken = [{"match": "# Rubric", "data": {"not": "a verdict"}}]
    async with simia(tmp_path, broken) as served, ChatModel().running() as model:
        await run(eval_command(served, model, "--env.taskset.tasks", '["restock_milk"]'), tmp_path)
        [rollout] = rollouts(tmp_path)
        [trace] = rollout["traces"]
        detail = await served.episode(trace["info"]["simia"]["episode_id"])
    assert detail["verdict"]["status"] == "judge_error"
    assert Verdict.model_validate(detail["verdict"]).training_reward() is None
    assert not rollout["ok"] and "no usable reward" in json.dumps(trace["errors"]), trace["errors"]
    assert trace["rewards"]["simia"] is None
