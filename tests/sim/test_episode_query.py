"""Browsing episodes through the store: filters, sorts, pages, error counts, task statistics, read-only opening."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from simia.sim.errors import StoreConfigError, StoreUnavailable
from simia.sim.records import EpisodeRecord, EventRecord
from simia.sim.storage import EpisodeQuery, SqliteStore, Store, TaskStats, open_store
from simia.sim.storage import queries as episode_query
from simia.sim.verdict import Verdict


def episode(episode_id: str, task: str, created: float, **fields: object) -> EpisodeRecord:
    state = {"items": {"milk": {"qty": 0}}}
    return EpisodeRecord(
        id=episode_id,
        world="mock",
        world_hash="h",
        initial_state=state,
        state=state,
        task=task,
        created_at=created,
        updated_at=created,
        **fields,  # type: ignore[arg-type]
    )


def call(name: str, *, kind: str | None = None) -> EventRecord:
    return EventRecord(
        tool="get_item",
        arguments={"name": name},
        output=None if kind else {"name": name, "qty": 1},
        text=f"No item named {name}." if kind else "ok",
        is_error=kind is not None,
        error_kind=kind,
        error_code="item_not_found" if kind else None,
        usage={"prompt_tokens": 10, "completion_tokens": 5},
    )


async def filled(target: str) -> Store:
    """a (pass), b (fail), c (active, two errors), d (another principal, pass); created in that order, in a new
    database on either engine (`db_target`: SQLite, then Postgres)."""
    store = open_store(target)
    await store.create_episode(episode("a", "restock", 100.0))
    await store.create_episode(episode("b", "restock", 200.0, group_id="g1"))
    await store.create_episode(episode("c", "count", 300.0, group_id="g1", parent_id="b", fork_step=0))
    await store.create_episode(episode("d", "restock", 400.0, principal="bob"))
    await store.commit_event("a", call("Oat Milk"))
    await store.commit_event("c", call("ghost", kind="agent"))
    await store.commit_event("c", call("milk", kind="infra"))
    await store.commit_event("c", call("bread"))
    await store.set_status("a", "ended", verdict=Verdict(reward=1))
    await store.set_status("b", "ended", verdict=Verdict(reward=0))
    await store.set_status("d", "ended", verdict=Verdict(reward=1))
    return store


async def test_the_newest_page_of_a_principals_episodes_comes_first_with_counts_and_error_kinds(
    db_target: str,
) -> None:
    store = await filled(db_target)
    page = await store.query_episodes(EpisodeQuery(principal="", limit=2))
    assert [r.id for r in page.rows] == ["c", "b"] and page.total == 3
    c = page.rows[0]
    assert (c.calls, c.agent_errors, c.infra_errors, c.prompt_tokens, c.reward) == (3, 1, 1, 30, None)
    assert (c.group_id, c.parent_id, c.fork_step) == ("g1", "b", 0)
    second = await store.query_episodes(EpisodeQuery(principal="", limit=2, offset=2))
    assert [r.id for r in second.rows] == ["a"]
    await store.close()


@pytest.mark.parametrize(
    ("query", "ids"),
    [
        (EpisodeQuery(reward="1"), ["d", "a"]),
        (EpisodeQuery(reward="0"), ["b"]),
        (EpisodeQuery(reward="none"), ["c"]),
        (EpisodeQuery(status="active"), ["c"]),
        (EpisodeQuery(task="count"), ["c"]),
        (EpisodeQuery(group="g1"), ["c", "b"]),
        (EpisodeQuery(text="oat milk"), ["a"]),  # case-insensitive, in the arguments
        (EpisodeQuery(text="no item named ghost"), ["c"]),  # in an error's text
        (EpisodeQuery(text="100%_"), []),  # LIKE wildcards are taken literally
        (EpisodeQuery(sort="reward", descending=False), ["b", "d", "a", "c"]),  # unjudged last, ties newest first
        (EpisodeQuery(sort="calls"), ["c", "a", "d", "b"]),  # ties: newest first
        (EpisodeQuery(sort="time", descending=False), ["a", "b", "c", "d"]),
    ],
)
async def test_filters_and_sorts_select_and_order_the_expected_episodes(
    db_target: str, query: EpisodeQuery, ids: list[str]
) -> None:
    store = await filled(db_target)
    page = await store.query_episodes(query)
    assert [r.id for r in page.rows] == ids
    assert page.total == len(ids) and page.text_scan_complete
    await store.close()


async def test_the_text_filter_reads_only_the_newest_events_and_says_so(
    db_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await filled(db_target)
    monkeypatch.setattr(episode_query, "TEXT_SCAN_LIMIT", 2)
    monkeypatch.setattr("simia.sim.storage.sqlite.TEXT_SCAN_LIMIT", 2)
    monkeypatch.setattr("simia.sim.storage.postgres.TEXT_SCAN_LIMIT", 2)
    old = await store.query_episodes(EpisodeQuery(text="oat milk"))  # event 1 of 4: outside the newest 2
    new = await store.query_episodes(EpisodeQuery(text="bread"))
    assert (old.rows, old.text_scan_complete) == ([], False)
    assert [r.id for r in new.rows] == ["c"]
    await store.close()


async def test_a_fork_group_is_its_root_and_its_forks_and_the_root_counts_them(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    await store.create_episode(episode("root", "restock", 100.0))
    await store.create_episode(episode("lone", "restock", 150.0))
    for i, step in enumerate((1, 2)):
        await store.create_episode(
            episode(f"f{i}", "restock", 200.0 + i, group_id="root", parent_id="root", fork_step=step)
        )
    page = await store.query_episodes(EpisodeQuery(group="root", sort="group"))
    assert [(r.id, r.forks) for r in page.rows] == [("f1", 0), ("f0", 0), ("root", 2)]
    everyone = await store.query_episodes(EpisodeQuery(sort="group"))
    assert [r.id for r in everyone.rows] == ["f1", "f0", "root", "lone"]  # a group's episodes side by side
    await store.close()


async def test_task_statistics_count_judged_and_passed_episodes(db_target: str) -> None:
    store = await filled(db_target)
    stats = await store.task_stats(principal="")
    assert [(s.world, s.task, s.episodes, s.judged, s.passed) for s in stats] == [
        ("mock", "count", 1, 0, 0),
        ("mock", "restock", 2, 2, 1),
    ]
    everyone = await store.task_stats()
    assert [(s.task, s.episodes, s.passed) for s in everyone] == [("count", 1, 0), ("restock", 3, 2)]
    await store.close()


def test_pass_hat_k_and_the_wilson_interval() -> None:
    stats = TaskStats("w", "t", episodes=5, judged=4, passed=3)
    assert stats.ks == [1, 2, 4]
    assert stats.pass_hat(1) == 0.75
    assert stats.pass_hat(2) == 0.5  # C(3,2)/C(4,2) = 3/6
    assert stats.pass_hat(4) == 0.0
    low, high = stats.interval() or (0.0, 0.0)
    assert round(low, 3) == 0.301 and round(high, 3) == 0.954
    assert TaskStats("w", "t", episodes=2, judged=0, passed=0).interval() is None
    with pytest.raises(ValueError, match="pass\\^8 needs at least 8"):
        stats.pass_hat(8)


def test_a_bad_sort_or_limit_is_refused_with_the_allowed_values() -> None:
    with pytest.raises(ValueError, match="unknown sort 'size'; one of time, world"):
        EpisodeQuery(sort="size")
    with pytest.raises(ValueError, match=r"limit must be 1\.\.500"):
        EpisodeQuery(limit=0)


async def test_a_read_only_store_reads_and_refuses_every_write(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await (await filled(str(path))).close()
    before = path.read_bytes()
    store = open_store(path, read_only=True)
    assert (await store.query_episodes(EpisodeQuery())).total == 4
    assert (await store.get_episode("a")) is not None
    with pytest.raises(StoreUnavailable, match="readonly"):  # SQLite's refusal, as for a read-only disk
        await store.set_status("a", "active")
    await store.close()
    assert path.read_bytes() == before


async def test_an_older_database_gets_its_reward_column_from_the_stored_verdicts(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    await (await filled(str(path))).close()
    with sqlite3.connect(path) as conn:  # as an older simia wrote it: no reward column
        conn.execute("DROP INDEX episodes_principal_task")
        conn.execute("DROP INDEX episodes_task")
        conn.execute("ALTER TABLE episodes DROP COLUMN reward")
        conn.execute("PRAGMA user_version = 0")  # before schema versions were kept
    with pytest.raises(StoreConfigError, match=r"older simia .*simia db migrate --db"):
        SqliteStore(path, read_only=True)
    store = SqliteStore(path)
    assert [r.id for r in (await store.query_episodes(EpisodeQuery(reward="1"))).rows] == ["d", "a"]
    verdict = json.loads(sqlite3.connect(path).execute("SELECT verdict FROM episodes WHERE id = 'a'").fetchone()[0])
    assert verdict["reward"] == 1
    await store.close()
