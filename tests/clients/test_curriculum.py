"""The curriculum reads recorded verdicts from a real SQLite store and plans the next groups near a pass rate of
one half; `simia rollout --curriculum` runs that plan and shows groups without a signal as wasted compute."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from simia.cli import main
from simia.clients.curriculum import CurriculumTask, TaskHistory, plan, read_history
from simia.sim.records import EpisodeRecord
from simia.sim.storage import Store, open_store
from simia.sim.verdict import Verdict

ROOT = Path(__file__).resolve().parents[2]


async def record_group(store: Store, task: str, name: str, rewards: list[int]) -> None:
    """A GRPO group: a root episode and forks of it at step 0, ended with these rewards."""
    state = {"items": {"milk": {"qty": 0}}}
    for i, reward in enumerate(rewards):
        root = i == 0
        episode = EpisodeRecord(
            id=f"{name}-{i}",
            world="mock",
            world_hash="h",
            initial_state=state,
            state=state,
            task=task,
            group_id=None if root else f"{name}-0",
            parent_id=None if root else f"{name}-0",
            fork_step=None if root else 0,
        )
        await store.create_episode(episode)
        await store.set_status(episode.id, "ended", verdict=Verdict(reward=reward))


async def seeded(path: Path) -> Store:
    """easy: 40 passes, hard: 40 failures (5 groups of 8 each), half: 8 of 16 (2 groups, both varied, plus one
    group of 4 failures), twice: 2 passes (not forked), and one episode of an unjudged task."""
    store = open_store(path)
    for g in range(5):
        await record_group(store, "easy", f"easy{g}", [1] * 8)
        await record_group(store, "hard", f"hard{g}", [0] * 8)
    for g in range(2):
        await record_group(store, "half", f"half{g}", [1, 0] * 4)
    await record_group(store, "half", "half-flat", [0] * 4)
    await record_group(store, "twice", "twice-a", [1])
    await record_group(store, "twice", "twice-b", [1])
    return store


async def test_the_curriculum_picks_tasks_near_a_pass_rate_of_one_half_from_recorded_history(tmp_path: Path) -> None:
    store = await seeded(tmp_path / "history.db")
    try:
        history = await read_history(store, "mock")
    finally:
        await store.close()
    assert history == {
        "easy": TaskHistory("easy", judged=40, passed=40, groups=5, varied=0, wasted=40),
        "hard": TaskHistory("hard", judged=40, passed=0, groups=5, varied=0, wasted=40),
        "half": TaskHistory("half", judged=20, passed=8, groups=3, varied=2, wasted=4),
        "twice": TaskHistory("twice", judged=2, passed=2),
    }
    assert history["easy"].weight == pytest.approx(0.32, abs=0.01)  # 40 of 40: confidently easy
    assert history["twice"].weight == 1.0  # 2 of 2 is no proof: one half is still in its interval
    curriculum = plan(["easy", "half", "hard", "twice", "untried"], history, 20)
    planned = {t.history.task: t.groups for t in curriculum.tasks}
    assert planned == {"easy": 2, "half": 6, "hard": 2, "twice": 5, "untried": 5}
    assert curriculum.tasks[-1] == CurriculumTask(TaskHistory("untried"), 5)
    assert curriculum.attempts(8) == {"easy": 16, "half": 48, "hard": 16, "twice": 40, "untried": 40}


def test_rollout_with_a_curriculum_runs_the_planned_groups_and_reports_the_wasted_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    out.mkdir()

    async def seed() -> None:
        store = await seeded(out / "simia.db")
        for g in range(10):  # restock_milk: confidently solved; weekly_restock: near one half
            await record_group(store, "restock_milk", f"milk{g}", [1] * 8)
        for g in range(3):
            await record_group(store, "weekly_restock", f"weekly{g}", [1, 0] * 4)
        await store.close()

    asyncio.run(seed())
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps([{"match": "", "data": {"message": "Done.", "tool_calls": [], "done": True}}]))
    args = ["rollout", "--world", "mock", "--tasks", "all", "--n", "2", "--curriculum", "--out", str(out)]
    args += ["--agent", f"scripted:{agent}", "--user", f"scripted:{agent}"]
    args += ["--sim-backend", f"scripted:{ROOT / 'tests' / 'fixtures' / 'mock_script.json'}"]
    assert main([*args, "--worlds-dir", str(ROOT / "tool_specs")]) == 0
    printed = capsys.readouterr().out.replace(str(out), "runs").splitlines()
    page = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8").split("### A curriculum", 1)[1]
    shown = page.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    assert printed[: len(shown)] == shown  # the plan as the Agents page shows it
    rows = {line.split()[0]: line.split() for line in printed[2:6]}
    assert rows["restock_milk"][1:] == ["80", "1.00", "[0.95,", "1.00]", "0.17", "10", "0/10", "(0%)", "80", "0"]
    assert rows["weekly_restock"][1:] == ["24", "0.50", "[0.31,", "0.69]", "1.00", "3", "3/3", "(100%)", "0", "1"]
    assert printed[6] == "recorded groups without a signal (wasted compute): 10 of 13"
    planned = {row["task"]: row["planned"] for row in json.loads((out / "curriculum.json").read_text())}
    ran = [json.loads(line)["task"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert planned == {"restock_milk": 0, "count_apples": 2, "no_bananas": 1, "weekly_restock": 1}
    assert {task: ran.count(task) for task in planned} == {task: 2 * n for task, n in planned.items()}


async def test_the_history_reads_every_page_of_a_large_store(tmp_path: Path) -> None:
    store = open_store(tmp_path / "big.db")
    try:
        for g in range(63):  # 504 episodes: more than one page (PAGE_LIMIT 500)
            await record_group(store, "half", f"g{g}", [1, 0] * 4 if g % 3 else [1] * 8)
        history = await read_history(store, "mock")
    finally:
        await store.close()
    assert history == {"half": TaskHistory("half", judged=504, passed=336, groups=63, varied=42, wasted=168)}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--server", "http://127.0.0.1:9", "--curriculum"],
            "error: --curriculum with --server reads the server's recorded episodes: pass its database, "
            "--curriculum PATH|URL (what `simia serve --db` writes)",
        ),
        (
            ["--curriculum", "nowhere.db"],
            "error: --curriculum 'nowhere.db': no database there; pass the file `simia serve --db` wrote "
            "(or its postgresql:// URL)",
        ),
    ],
)
def test_a_curriculum_without_a_history_to_read_is_a_clean_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["rollout", "--world", "mock", *flags]) == 2
    assert capsys.readouterr().err.strip() == message
