"""`open_store` picks a store from a `--db` target; the response cache has one home for its SQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from simia.sim.errors import StoreConfigError
from simia.sim.records import BUDGET_CODES, EventRecord
from simia.sim.storage import PgStore, SqliteCache, SqliteStore, open_store


@pytest.mark.parametrize("form", ["path", "str", "url"])
async def test_a_path_or_a_sqlite_url_opens_a_sqlite_store_on_that_file(tmp_path: Path, form: str) -> None:
    db = tmp_path / "s.db"
    target = {"path": db, "str": str(db), "url": f"sqlite:///{db}"}[form]
    store = open_store(target, synchronous="NORMAL")
    assert isinstance(store, SqliteStore) and store.path == str(db)
    assert await store.integrity_check() == "ok"
    await store.close()
    assert db.is_file()


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+psycopg"])
async def test_a_postgres_url_opens_a_postgres_store(pg_url: str, scheme: str) -> None:
    url = pg_url.replace("postgresql://", f"{scheme}://", 1)
    store = open_store(url)
    assert isinstance(store, PgStore) and store.path == url
    assert await store.integrity_check() == "ok"
    await store.close()


@pytest.mark.parametrize("url", ["postgresql://u:secret@127.0.0.1:1/simia", "postgres://u:secret@nowhere.invalid/x"])
def test_an_unreachable_postgres_is_one_line_without_the_password(url: str) -> None:
    with pytest.raises(StoreConfigError, match=r"^cannot connect to Postgres at postgres(ql)?://u:\*\*\*@") as caught:
        open_store(url)
    assert "secret" not in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("url", ["mysql://db/simia", "sqlite://relative.db"])
def test_any_other_url_is_refused_with_the_forms_that_work(url: str) -> None:
    with pytest.raises(StoreConfigError, match=r"pass a SQLite file path or sqlite:///PATH"):
        open_store(url)


async def test_an_answer_the_store_caches_is_what_the_replay_cache_reads(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = open_store(db)
    data = {"output": {"name": "café", "qty": 4}, "is_error": False, "state_patch": []}
    await store.put("k1", "r1", data, "scripted")
    assert await store.get("k1") == data and await store.get("k2") is None
    await store.close()
    replay = SqliteCache(db, readonly=True)
    assert await replay.get("k1") == data
    assert await replay.get_replay("r1") == data
    replay.close()


def test_a_call_a_budget_refused_is_not_a_call() -> None:
    def event(code: str | None) -> EventRecord:
        return EventRecord(tool="t", arguments={}, output=None, text="", is_error=code is not None, error_code=code)

    assert [event(code).counts_as_call for code in sorted(BUDGET_CODES)] == [False, False]
    assert [event(code).counts_as_call for code in (None, "item_not_found", "budget_exceeded")] == [True, True, True]
