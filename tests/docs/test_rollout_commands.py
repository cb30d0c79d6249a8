"""The commands that run agents (Agents and trainers, the README's 30-second example), run as written: the
built-in agent on every task with `simia rollout`, and the pydantic-ai recipe."""

from __future__ import annotations

import ast
import json
import shutil

import pytest
from doc_commands import PYDANTIC_AI, ROLLOUT_AGENTS, ROOT, SERVE_RUNS_DB  # type: ignore[import-not-found]
from doc_sandbox import Sandbox, jsonl  # type: ignore[import-not-found]

pytestmark = pytest.mark.processes  # each runs a command as a subprocess


async def test_rollout_runs_every_task_and_writes_results(sandbox: Sandbox) -> None:
    """Agents and trainers: `simia serve ... &` then `simia rollout ... --n 8 --concurrency 16 --max-turns 12
    --out runs/`. Changed: `--world retail` -> `--world mock` (the fake simulates the mock world flawlessly,
    `mock_world_answer`; its agent solves the mock tasks), `--port P` and its URL."""
    async with sandbox.serve(SERVE_RUNS_DB):
        done = await sandbox.run(ROLLOUT_AGENTS, replace={"--world retail": "--world mock"})
    assert done.code == 0, done
    results = jsonl(sandbox.cwd / "runs" / "results.jsonl")
    tasks = {"restock_milk", "count_apples", "no_bananas", "weekly_restock"}
    assert sorted((r["task"], r["status"], r["training_reward"]) for r in results) == sorted(
        (task, "judged", 1.0) for task in tasks for _ in range(8)
    )
    summary = json.loads((sandbox.cwd / "runs" / "summary.json").read_text())
    assert summary["runs"] == 32 and summary["judged"] == 32, summary
    table = done.out.splitlines()
    assert table[0].split() == ["TASK", "RUNS", "JUDGED", "INFRA", "AGENT-FAIL", "MEAN", "REWARD"]
    assert sorted(line.split() for line in table[1:5]) == sorted([t, "8", "8", "0", "0", "1.00"] for t in tasks)
    assert sorted(table[6:10]) == [  # eight attempts per task: pass^k, interval and flips
        f"{t}  n=8  mean 1.00 [0.68, 1.00]  pass^1..8 {' '.join(['1.00'] * 8)}  flips 0.00" for t in sorted(tasks)
    ]
    assert table[-1] == "results: runs/results.jsonl (appended, every run)  summary: runs/summary.json (this run)"
    assert set(sandbox.roles()) == {"simulator", "agent", "user", "judge"}


async def test_the_pydantic_ai_recipe_runs_on_an_openai_model(sandbox: Sandbox) -> None:
    """The README's 30-second example (also in Getting started and Agents and trainers):
    `python examples/pydantic_ai_agent.py http://127.0.0.1:8765 openai:gpt-5.4-mini`,
    examples/ copied into the temp dir, against `simia serve --backend openai:gpt-5.4-mini --db runs.db &`.
    Changed: `--port P` and its URL; pydantic-ai's `openai:` models speak the Responses API, which the fake
    provider gets here (`responses_api`). The recipe uses the mock world: it sets the milk to 4."""
    pytest.importorskip("pydantic_ai", reason="install the `recipes` extra")
    shutil.copytree(ROOT / "examples", sandbox.cwd / "examples")
    async with sandbox.serve(SERVE_RUNS_DB):
        done = await sandbox.run(PYDANTIC_AI)
    assert done.code == 0, done
    printed = ast.literal_eval(done.out.strip())
    assert printed["milk"] == 4, done
    assert printed["output"] == 'The pantry answered: {"name":"milk","qty":4}', done
    assert set(sandbox.roles()) == {"simulator", "agent"}  # the recipe ends no episode: no judge
