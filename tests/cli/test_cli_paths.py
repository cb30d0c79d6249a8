"""Advertised CLI paths run as users run them: `simia` as a subprocess, in a temp dir, models scripted."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from simia.server.inprocess import free_port
from simia.testing.processes import serve_process

pytestmark = [pytest.mark.processes, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "fixtures" / "mock_script.json"
AGENT = [
    {
        "match": "Set the milk",
        "data": {"message": "", "tool_calls": [{"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}]},
    },
    {"data": {"message": "Done: the milk is at 4 litres.", "tool_calls": []}},
]
PASS = {
    "data": {
        "criteria": [{"criterion": "milk set to 4", "passed": True, "evidence": "set_quantity call 1"}],
        "reasoning": "The agent set the milk to 4.",
        "reward": 1,
    }
}


def simia(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simia.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


@contextmanager
def serving(*args: str, cwd: Path) -> Iterator[str]:
    """`simia serve ARGS` on a free port; yields its URL once healthy."""
    with serve_process("--log-level", "warning", *args, cwd=cwd) as server:
        yield server.url


def test_rollout_works_for_a_world_that_exists_only_on_the_server(tmp_path: Path) -> None:
    worlds = tmp_path / "server" / "worlds"
    shutil.copytree(ROOT / "tool_specs" / "mock", worlds / "pantry")
    spec = yaml.safe_load((worlds / "pantry" / "world.yaml").read_text())
    (worlds / "pantry" / "world.yaml").write_text(yaml.safe_dump({**spec, "name": "pantry"}))
    (tmp_path / "agent.json").write_text(json.dumps(AGENT))
    (tmp_path / "judge.json").write_text(json.dumps([PASS]))
    client_dir = tmp_path / "elsewhere"  # no tool_specs here: the client cannot load the world itself
    client_dir.mkdir()
    with serving(
        "--worlds-dir",
        str(worlds),
        "--backend",
        f"scripted:{SCRIPT}",
        "--judge-backend",
        f"scripted:{tmp_path / 'judge.json'}",
        "--db",
        str(tmp_path / "server" / "s.db"),
        cwd=tmp_path / "server",
    ) as url:
        done = simia(
            "rollout",
            "--server",
            url,
            "--world",
            "pantry",
            "--tasks",
            "restock_milk",
            "--agent",
            f"scripted:{tmp_path / 'agent.json'}",
            "--out",
            "runs",
            cwd=client_dir,
        )
    assert done.returncode == 0, done.stderr
    [result] = [json.loads(line) for line in (client_dir / "runs" / "results.jsonl").read_text().splitlines()]
    assert (result["status"], result["reward"], result["training_reward"], result["tool_calls"]) == (
        "judged",
        1,
        1.0,
        1,
    )
    assert done.stdout.splitlines()[1].split() == ["restock_milk", "1", "1", "0", "0", "1.00"]


def test_rollout_fails_with_exit_code_when_nothing_succeeded(tmp_path: Path) -> None:
    (tmp_path / "agent.json").write_text(json.dumps(AGENT))
    dead = f"http://127.0.0.1:{free_port()}"
    unreachable = simia(
        "rollout", "--server", dead, "--world", "mock", "--agent", f"scripted:{tmp_path / 'agent.json'}", cwd=tmp_path
    )
    assert unreachable.returncode == 2
    assert unreachable.stderr.startswith(f"error: simia server at {dead} did not answer")
    assert not (tmp_path / "rollouts").exists() or not any((tmp_path / "rollouts").iterdir())
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps([{"raise": "rejected", "message": "HTTP 400: model gone"}]))
    all_failed = simia(
        "rollout",
        "--world",
        "mock",
        "--tasks",
        "restock_milk",
        "--n",
        "2",
        "--retries",
        "0",
        "--agent",
        f"scripted:{tmp_path / 'agent.json'}",
        "--sim-backend",
        f"scripted:{broken}",
        "--worlds-dir",
        str(ROOT / "tool_specs"),
        "--out",
        "out",
        cwd=tmp_path,
    )
    assert all_failed.returncode == 1
    assert "error: no episode was judged" in all_failed.stderr
    assert all_failed.stdout.splitlines()[1].split()[:5] == ["restock_milk", "2", "0", "2", "0"]


def test_an_agent_whose_model_fails_is_an_agent_failure(tmp_path: Path) -> None:
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps([{"raise": "rejected", "message": "HTTP 400: bad request"}]))
    run = simia(
        "rollout",
        "--world",
        "mock",
        "--tasks",
        "restock_milk",
        "--agent",
        f"scripted:{agent}",
        "--sim-backend",
        f"scripted:{SCRIPT}",
        "--worlds-dir",
        str(ROOT / "tool_specs"),
        "--out",
        "out",
        cwd=tmp_path,
    )
    assert run.returncode == 1
    [result] = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert (result["status"], result["stop"]) == ("agent_failed", "agent_error")
    assert result["error"].startswith("the agent's model failed")
    assert run.stdout.splitlines()[1].split()[:5] == ["restock_milk", "1", "0", "0", "1"]


def test_ctrl_c_stops_a_rollout_and_keeps_what_finished(tmp_path: Path) -> None:
    """Docs, rollouts: Ctrl-C stops and keeps what finished. The rollout caught the interrupt itself, so the command
    printed its table as if done and exited 0 or 1; and the in-process server, which took Ctrl-C for itself,
    stopped under runs that then failed as the environment's."""
    (tmp_path / "agent.json").write_text(json.dumps(AGENT))
    command = [sys.executable, "-m", "simia.cli", "rollout", "--world", "mock", "--n", "200", "--concurrency", "2"]
    command += ["--agent", f"scripted:{tmp_path / 'agent.json'}", "--sim-backend", f"scripted:{SCRIPT}", "--out", "out"]
    results = tmp_path / "out" / "results.jsonl"
    with subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as run:
        for _ in range(1200):  # until the first runs are written (at most 60 s)
            if results.is_file() and len(results.read_text().splitlines()) >= 3:
                break
            try:
                run.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                continue
            break
        assert run.poll() is None, "the rollout ended before it was interrupted"
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=60)
    kept = [json.loads(line) for line in results.read_text().splitlines()]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert run.returncode == 130, (out, err)
    assert f"interrupted: {len(kept)} finished run(s) are kept" in err
    assert 3 <= len(kept) < 800 and summary["interrupted"] is True
    assert {r["status"] for r in kept} == {"judged"}  # none failed against a server stopped under it


def test_stdio_with_an_unknown_task_is_a_clean_error(tmp_path: Path) -> None:
    run = simia("serve", "--transport", "stdio", "--world", "mock", "--task", "nope", "--db", "x.db", cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == (
        "error: unknown task 'nope' in world 'mock'; tasks: restock_milk, count_apples, no_bananas, weekly_restock"
    )
    assert not (tmp_path / "x.db").exists()


def grpo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m simia.training.grpo ARGS` as README step 4 runs it (a tiny random model, one step)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "simia.training.grpo", "--model", "tiny", "--max-steps", "1", "--save", "false"]
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_the_readme_grpo_commands_run(tmp_path: Path) -> None:
    pytest.importorskip("trl", reason="needs the train extra")
    (tmp_path / "judge.json").write_text(json.dumps([PASS]))
    user = tmp_path / "user.json"
    user.write_text(json.dumps([{"data": {"message": "Please set the milk to 4 litres.", "done": False}}]))
    with serving(
        "--worlds-dir",
        str(ROOT / "tool_specs"),
        "--world",
        "mock",
        "--backend",
        f"scripted:{SCRIPT}",
        "--judge-backend",
        f"scripted:{tmp_path / 'judge.json'}",
        "--db",
        str(tmp_path / "s.db"),
        cwd=tmp_path,
    ) as url:
        common = ("--server", url, "--world", "mock", "--tasks", "restock_milk", "--output-dir", "ckpt")
        refused = grpo(*common, "--num-generations", "4", "--batch-size", "6", cwd=tmp_path)
        single = grpo(*common, "--num-generations", "4", "--max-completion-length", "32", cwd=tmp_path)
        multi = grpo(
            *common, "--user", f"scripted:{user}", "--max-turns", "2", "--max-completion-length", "16", cwd=tmp_path
        )
    assert refused.returncode == 2
    assert "--batch-size 6 is not a multiple of --num-generations 4; use --batch-size 8" in refused.stderr
    assert single.returncode == 0, single.stderr[-2000:]
    assert json.loads(single.stdout.splitlines()[-1])["steps"] == 1
    assert multi.returncode == 0, multi.stderr[-2000:]
    assert json.loads(multi.stdout.splitlines()[-1])["steps"] == 1
    with sqlite3.connect(tmp_path / "s.db") as db:
        transcripts = [
            # every rollout's episode (a group's first is its snapshot, the others fork it): each has a transcript
            json.loads(t)
            for (t,) in db.execute("SELECT transcript FROM episodes WHERE transcript IS NOT NULL")
        ]
    assert len(transcripts) == 4 + 2 and all(t and t[0]["role"] == "system" for t in transcripts)
    assert all(any(m["role"] == "assistant" for m in t) for t in transcripts)  # the judge read what the policy said
