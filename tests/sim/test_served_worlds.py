"""The worlds a database keeps as they were served (schema version 4), on every engine: each once per content hash,
rebuilt whole for the readers, and the upgrade of a version 3 database whose episodes have none."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import psycopg
from simia.server import ServerSettings
from simia.server.episodes import EpisodeService
from simia.sim import load_world
from simia.sim.backends import FunctionBackend
from simia.sim.engine import Simulator
from simia.sim.records import EpisodeRecord
from simia.sim.storage import EpisodeWorlds, WorldVersion, count_rows, open_store, short_hash
from simia.testing import mock_world_answer

ROOT = Path(__file__).resolve().parents[2]
MOCK = load_world(ROOT / "tool_specs" / "mock")
EDITED = MOCK.model_copy(update={"policy": "A policy written after the episodes ran."})


async def test_a_world_is_stored_once_per_content_hash_and_read_back_as_it_was_served(db_target: str) -> None:
    store = open_store(db_target)
    service = EpisodeService({"mock": MOCK}, Simulator(FunctionBackend(mock_world_answer)), store, ServerSettings())
    try:
        await service.start()
        first = await service.create("mock", task="restock_milk")
        await service.create("mock")
        await service.fork(first.id, step=0, principal="")
    finally:
        await store.close()
    assert count_rows(db_target)["worlds"] == 1
    reader = open_store(db_target)
    try:
        served = await reader.served_world(MOCK.content_hash)
        assert served is not None
        assert served.content_hash == MOCK.content_hash and served.model_dump() == MOCK.model_dump()
        assert served.base_state is await reader.base(MOCK.base_state.digest)  # shared with the rebuilt states
        assert await reader.served_world("not-a-hash") is None
        assert await reader.world_versions() == [WorldVersion("mock", MOCK.content_hash, 3, stored=True)]
    finally:
        await reader.close()


async def test_a_world_with_declared_tools_reads_back_with_the_same_declarations(db_target: str) -> None:
    """Retail's groundings test with `exists` or `equals` and apply effects with or without a value: which fields
    were written is their meaning, and the stored copy keeps it (it once read back as invalid, every field set)."""
    retail = load_world(ROOT / "tool_specs" / "retail")
    store = open_store(db_target)
    try:
        await store.put_base(retail.base_state)
        await store.put_world(retail)
        served = await store.served_world(retail.content_hash)
    finally:
        await store.close()
    assert served is not None and served.content_hash == retail.content_hash
    assert [t.grounding for t in served.tools] == [t.grounding for t in retail.tools]


async def test_a_stored_world_that_no_longer_loads_is_read_as_not_stored(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = open_store(db)
    try:
        await store.put_base(MOCK.base_state)
        await store.put_world(MOCK)
    finally:
        await store.close()
    with contextlib.closing(sqlite3.connect(db)) as raw, raw:
        raw.execute("UPDATE worlds SET world = ?", ('{"name": "mock", "tools": "not a list"}',))
    reader = open_store(db)
    try:
        assert await reader.served_world(MOCK.content_hash) is None
    finally:
        await reader.close()


async def test_a_folder_world_that_differs_from_the_stored_one_is_reported_and_not_used(db_target: str) -> None:
    store = open_store(db_target)
    try:
        await store.put_world(MOCK)
        ran = EpisodeRecord(id="a", world="mock", world_hash=MOCK.content_hash, base_hash=MOCK.base_state.digest)
        await store.create_episode(ran)
        found = EpisodeWorlds(store, {"mock": EDITED})
        world = await found.world_of(ran)
        assert world is not None and world.policy == MOCK.policy
        assert await found.latest() == {"mock": world}
    finally:
        await store.close()
    assert found.notes() == [
        f"warning: world 'mock' in --worlds-dir (hash {short_hash(EDITED.content_hash)}) differs from the one 2 "
        f"episode(s) ran against (hash {short_hash(MOCK.content_hash)}); used the version stored in the database"
    ]  # counted twice: once by the episode read, once by `latest` (the viewer's list)


def downgrade_to_version_3(target: str) -> None:
    """Make a database of today's schema a version 3 one: version 4 only added the `worlds` table."""
    if target.startswith("postgresql://"):
        with psycopg.connect(target) as conn:
            conn.execute("DROP TABLE worlds")
            conn.execute("UPDATE simia_meta SET value = '3' WHERE key = 'schema_version'")
    else:
        with contextlib.closing(sqlite3.connect(target, isolation_level=None)) as conn:
            conn.execute("DROP TABLE worlds")
            conn.execute("PRAGMA user_version = 3")


async def test_a_version_3_database_is_upgraded_and_its_episodes_find_their_world_on_disk_or_are_listed(
    db_target: str,
) -> None:
    store = open_store(db_target)
    try:  # episodes as version 3 wrote them: a world hash and a base, no stored world
        await store.put_base(MOCK.base_state)
        for i, (world, world_hash) in enumerate(
            [("mock", MOCK.content_hash), ("mock", "f" * 64), ("mock", "f" * 64), ("library", "e" * 64)]
        ):
            await store.create_episode(
                EpisodeRecord(id=f"e{i}", world=world, world_hash=world_hash, base_hash=MOCK.base_state.digest)
            )
    finally:
        await store.close()
    downgrade_to_version_3(db_target)
    upgraded = open_store(db_target)
    try:
        assert upgraded.migrated_from == 3 and count_rows(db_target)["worlds"] == 0
        found = EpisodeWorlds(upgraded, {"mock": MOCK})
        worlds = [await found.world_of(e) for e in await upgraded.list_episodes()]
        assert worlds == [MOCK, MOCK, MOCK, None]
        assert await upgraded.world_versions() == [
            WorldVersion("library", "e" * 64, 1, stored=False),
            WorldVersion("mock", MOCK.content_hash, 1, stored=False),
            WorldVersion("mock", "f" * 64, 2, stored=False),
        ]
        assert await upgraded.integrity_check() == "ok"
    finally:
        await upgraded.close()
    assert found.notes() == [
        f"warning: world 'mock' as 2 episode(s) ran it (hash ffffffffffff) is not stored in the database; used the "
        f"world folder's version (hash {short_hash(MOCK.content_hash)}), which differs",
        "1 episode(s) of world 'library' ran against a version (hash eeeeeeeeeeee) that the database does not hold "
        "and no world folder has; pass --worlds-dir with its folder",
    ]
    again = open_store(db_target)  # the step ran once: the database is current now
    try:
        assert again.migrated_from is None
    finally:
        await again.close()
