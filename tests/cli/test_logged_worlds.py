"""A log stands on its own: `simia export` and `simia judge` read the world an episode ran against from the database.

Real processes: `simia serve` runs a world from its own folder, `simia rollout` plays episodes against it, then
the folder is edited or deleted and the readers run as subprocesses in a folder with no worlds of that name.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx2 as httpx
import pytest
import yaml
from simia.sim import load_world
from simia.sim.storage import open_store, short_hash
from simia.testing.processes import serve_process

pytestmark = pytest.mark.processes
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "fixtures" / "mock_script.json"
AGENT = [
    {
        "match": "Set the milk",
        "data": {"message": "", "tool_calls": [{"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}]},
    },
    {"match": "Result of", "data": {"message": "Done: the milk is at 4 litres.", "tool_calls": []}},
]
JUDGE = [{"match": "", "data": {"criteria": [], "reasoning": "The agent set the milk to 4.", "reward": 1}}]
OLD = "Set an item's quantity (the version the episodes ran against)."


def simia(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simia.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def pantry(folder: Path, description: str) -> Path:
    """The mock world as `pantry` (a name no bundled world has), its set_quantity described as `description`."""
    shutil.copytree(ROOT / "tool_specs" / "mock", folder / "pantry", dirs_exist_ok=True)
    spec = yaml.safe_load((folder / "pantry" / "world.yaml").read_text())
    for tool in spec["tools"]:
        if tool["name"] == "set_quantity":
            tool["description"] = description
    (folder / "pantry" / "world.yaml").write_text(yaml.safe_dump({**spec, "name": "pantry"}))
    return folder


@pytest.fixture
def logged(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two judged episodes of `pantry` in runs.db, played by `simia rollout` against `simia serve`; returns the
    worlds folder, the database and a folder with no world folders to run the readers in."""
    worlds = pantry(tmp_path / "worlds", OLD)
    (tmp_path / "agent.json").write_text(json.dumps(AGENT))
    (tmp_path / "judge.json").write_text(json.dumps(JUDGE))
    db = tmp_path / "runs.db"
    serve = ["--worlds-dir", str(worlds), "--backend", f"scripted:{SCRIPT}", "--db", str(db), "--log-level", "warning"]
    with serve_process(*serve, "--judge-backend", f"scripted:{tmp_path / 'judge.json'}", cwd=tmp_path) as server:
        done = simia(
            "rollout", "--server", server.url, "--world", "pantry", "--tasks", "restock_milk", "--n", "2",
            "--agent", f"scripted:{tmp_path / 'agent.json'}", "--out", str(tmp_path / "runs"), cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return worlds, db, elsewhere


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def set_quantity_description(record: dict[str, object]) -> str:
    tools = record["tools"]
    assert isinstance(tools, list)
    return next(t["function"]["description"] for t in tools if t["function"]["name"] == "set_quantity")


def test_export_and_judge_work_on_a_database_whose_world_folders_were_deleted(logged: tuple[Path, Path, Path]) -> None:
    worlds, db, elsewhere = logged
    shutil.rmtree(worlds)
    out = elsewhere / "sft.jsonl"
    done = simia("export", "--db", str(db), "--format", "openai", "--out", str(out), cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == (f"wrote 2 record(s) to {out}; skipped 0\n", "")
    assert [set_quantity_description(r) for r in records(out)] == [OLD, OLD]
    episode_id = records(elsewhere.parent / "runs" / "results.jsonl")[0]["episode_id"]
    (elsewhere / "judge.json").write_text(json.dumps(JUDGE))
    judged = simia("judge", str(episode_id), "--db", str(db), "--backend", "scripted:judge.json", cwd=elsewhere)
    assert judged.returncode == 0, judged.stderr
    assert json.loads(judged.stdout) == {
        "id": episode_id,
        "outcome": "rewarded",
        "reward": 1,
        "status": "ok",
        "reasons": ["The agent set the milk to 4."],
    }
    view = (sys.executable, "-m", "simia.cli", "view")
    with serve_process("--db", str(db), command=view, cwd=elsewhere) as viewer:
        page = httpx.get(f"{viewer.url}/ui/worlds/pantry")
    assert page.status_code == 200 and OLD.replace("'", "&#x27;") in page.text  # its tools, from the database


def test_a_world_edited_after_the_run_is_reported_and_the_export_uses_the_served_version(
    logged: tuple[Path, Path, Path],
) -> None:
    worlds, db, elsewhere = logged
    pantry(worlds, "Set an item's quantity (edited after the run).")
    edited = load_world(worlds / "pantry").content_hash

    async def served() -> str:
        store = open_store(db)
        try:
            return {e.world_hash for e in await store.list_episodes()}.pop()
        finally:
            await store.close()

    ran = asyncio.run(served())
    assert ran != edited
    out = elsewhere / "sft.jsonl"
    done = simia(
        "export", "--db", str(db), "--format", "openai", "--out", str(out), "--worlds-dir", str(worlds), cwd=elsewhere
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        f"warning: world 'pantry' in --worlds-dir (hash {short_hash(edited)}) differs from the one 2 episode(s) ran "
        f"against (hash {short_hash(ran)}); used the version stored in the database\n"
    )
    assert [set_quantity_description(r) for r in records(out)] == [OLD, OLD]
