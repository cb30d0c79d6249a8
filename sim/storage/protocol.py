"""The store: the interface through which episodes, their events and the response cache are kept.

`Store` lists the operations the server, the CLI and the exports use, each with
its contract; an implementation keeps them for one database (`SqliteStore`, the
embedded default; `PgStore`, for several replicas on one database). `open_store`
picks the implementation from a `--db` target.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from ..records import EpisodeRecord, EventRecord, Progress, StatePath
from ..verdict import Verdict
from ..world import State, World
from ._worlds import WorldVersion
from .queries import EpisodePage, EpisodeQuery, TaskStats

__all__ = ["Store"]


class Store(Protocol):
    """Episodes, their events and state history, the worlds they ran against, and the simulator's response cache, in
    one database.

    States are stored by reference: a base state (a world's initial state) is kept once, in the `states` table
    under its digest, and an episode's row names its base and the patches from it (`EpisodeRecord.base_hash`,
    `base_patches`); each event carries its state patch. So creating, forking or advancing an episode writes
    nothing the size of its state, and reading or listing episodes reads no state (`state_at` rebuilds one).

    Every operation is a coroutine, and every write is committed (durable at the
    database's setting) before it returns: the server replies to a call only after
    `commit_event` returned. Operations may run concurrently from many tasks; an
    implementation serialises or groups them as it needs. After `close` every
    operation raises `RuntimeError`.
    """

    @property
    def path(self) -> str:
        """Where the data lives, as `open_store` accepts it again (a file path or a database URL)."""
        ...

    migrated_from: int | None
    """The schema version opening the store upgraded the database from (`simia.sim.storage.migrations`); None when
    it was current or new."""

    shared: bool
    """Whether other processes may write this database (Postgres replicas): a server then checks its cached
    copy of an episode against `progress` before each call."""

    async def put_base(self, state: State) -> None:
        """Store `state` as a base under its `digest` (once: again, from any process, it changes nothing), and keep
        the object in memory for as long as the store is open, so the states `state_at` rebuilds from it share it.
        A digest this store stored or read before costs nothing (no serialization, no query)."""
        ...

    async def base(self, base_hash: str) -> State:
        """The base state stored under `base_hash`: the object in memory, else read and parsed off the event loop
        (the last few read stay in memory).

        Raises:
            LookupError: no base is stored under that digest.
        """
        ...

    async def put_world(self, world: World) -> None:
        """Store `world` as it is served, once under its `content_hash` (the `world_hash` its episodes record):
        everything that defines it but its initial state, which is stored as its base (`put_base`) and named
        beside it. Again, from any process, it changes nothing; a hash this store stored before costs nothing (the
        server puts a world when it creates an episode of it, so it is one insert per world and process)."""
        ...

    async def served_world(self, world_hash: str) -> World | None:
        """The world stored under `world_hash` (`put_world`), rebuilt on its stored base; None when the database has
        none (episodes written before schema version 4, or created without `put_world`).

        Raises:
            LookupError: the stored world's base state is missing.
        """
        ...

    async def world_versions(self) -> list[WorldVersion]:
        """Each (world name, content hash) the episodes ran against, with their count and whether the world is
        stored, by name then oldest first."""
        ...

    async def create_episode(self, episode: EpisodeRecord) -> EpisodeRecord:
        """Insert a new episode (its id must be new) and return it, committed.

        The row references `episode.base_hash` (a stored base) and `episode.base_patches`, and holds no state, so
        a create costs the same whatever the state's size. An episode without a `base_hash` (a caller holding a
        plain state) gets one: its `initial_state` becomes a base (`put_base`, O(its size)), with no patches.

        Raises:
            LookupError: `episode.base_hash` names no stored base (nothing is written).
        """
        ...

    async def get_episode(self, episode_id: str) -> EpisodeRecord | None:
        """The episode as last committed (counters, status, verdict, base), or None when there is none; its
        `initial_state` and `state` are None (no state is read: `state_at` rebuilds one)."""
        ...

    async def list_episodes(
        self,
        *,
        world: str | None = None,
        status: str | None = None,
        principal: str | None = None,
        task: str | None = None,
        since: float | None = None,
        limit: int = 1000,
        offset: int = 0,
        newest_first: bool = False,
    ) -> list[EpisodeRecord]:
        """Episodes matching every filter given (`since`: created at or after), oldest first (`newest_first`: the
        other way), at most `limit` after skipping `offset`; like `get_episode`'s, with no states."""
        ...

    async def query_episodes(self, query: EpisodeQuery) -> EpisodePage:
        """One page of the episodes `query` selects, in its order, with the total that match.

        Implementations run the statements of `simia.sim.storage.queries.page_sql`, `error_counts_sql`
        (each row's agent and infra error counts) and `fork_counts_sql` (forks of each group root); the
        text filter reads only the newest `TEXT_SCAN_LIMIT` events and says so in `text_scan_complete`.
        """
        ...

    async def task_stats(self, *, world: str | None = None, principal: str | None = None) -> list[TaskStats]:
        """Per-(world, task) episode, judged and passed counts (`episode_query.task_stats_sql`)."""
        ...

    async def progress(self, episode_id: str, after: int, limit: int) -> Progress | None:
        """The episode's committed `seq` and status and its events after seq `after` (at most `limit`, oldest
        first), in one read; None when there is no such episode."""
        ...

    async def count_live(self, principal: str | None = None) -> int:
        """The number of episodes whose status is `active` (of `principal`'s only, when given)."""
        ...

    async def set_status(
        self,
        episode_id: str,
        status: str,
        *,
        reason: str | None = None,
        verdict: Verdict | None = None,
        transcript: list[dict[str, Any]] | None = None,
        tokens: dict[str, Any] | None = None,
    ) -> None:
        """Set the episode's status and touch `updated_at`; the other fields change only when given (not None).

        `ended_at` is set the first time the status leaves `active`, and cleared when it returns to `active`.
        """
        ...

    async def abandon_idle(self, idle_seconds: float) -> list[str]:
        """Mark active episodes not updated for `idle_seconds` as `abandoned` (reason `idle timeout`,
        events kept) and return their ids."""
        ...

    async def commit_event(
        self, episode_id: str, event: EventRecord, *, expected_seq: int | None = None
    ) -> EventRecord:
        """Append one call's event and advance its episode, in one transaction committed before this returns.

        The episode's `seq` goes up by one and the event gets it (`event.seq` is set), so an
        episode's events are numbered 1, 2, 3... without gaps or repeats, however many commits
        run at once. In the same transaction `calls` grows by one when `event.counts_as_call`,
        the token counts and cost grow by the event's `usage`, and `updated_at` becomes the
        event's `created_at`. The state the call made is the event's `state_patch` applied to the
        previous one: nothing else is written for it.

        With `expected_seq` (the `seq` the caller's copy of the episode is at) the commit happens only
        if the episode, locked for the transaction, is still active at that `seq`: how calls of one
        episode served by several processes are serialized (each computed from the state the
        previous one committed).

        Returns:
            `event`, with its `seq`.

        Raises:
            LookupError: there is no such episode (nothing is written).
            StoreConflict: `expected_seq` is given and the episode moved on or is no longer active
                (nothing is written; reload it and try again).
        """
        ...

    def hold(self, episode_id: str) -> AbstractAsyncContextManager[None]:
        """Keep other processes from committing to the episode until the block ends (they wait), and run
        this task's operations inside the block in one transaction, committed when it ends. Used after a
        `StoreConflict`, so a call that lost a race to another replica is not starved by it. A store that
        one process owns (SQLite) holds nothing."""
        ...

    async def recent_events(self, episode_id: str, n: int) -> list[EventRecord]:
        """The episode's last `n` events, oldest first (none when `n` <= 0)."""
        ...

    async def events(self, episode_id: str) -> list[EventRecord]:
        """All the episode's events, in `seq` order."""
        ...

    async def state_path(self, episode_id: str, step: int) -> StatePath:
        """How to rebuild the episode's state right after event `step` (0: its initial state): its base, then its
        `base_patches` and the non-empty `state_patch` of its events up to `step`, in `seq` order.

        Raises:
            LookupError: there is no such episode.
        """
        ...

    async def state_at(self, episode_id: str, step: int) -> State:
        """The episode's state right after event `step` (0: its initial state): `base` with `state_path`'s
        patches applied, O(what they changed). Its digest is the one the live path reached (the base's, then
        one step per non-empty patch), and it shares every unchanged part with the base in memory.

        Raises:
            LookupError: there is no such episode (or its base is missing).
        """
        ...

    async def integrity_check(self) -> str:
        """`"ok"` when the database is sound, else what its own check reports."""
        ...

    async def get(self, key: str) -> dict[str, Any] | None:
        """The simulator answer cached under `key` (`simia.sim.storage.cache.cache_key`), if any."""
        ...

    async def put(self, key: str, replay_key: str, data: dict[str, Any], model: str) -> None:
        """Cache a validated simulator answer under `key` (and `replay_key`, for `replay:DB`), replacing any."""
        ...

    async def close(self) -> None:
        """Finish the operations under way and release the database; idempotent."""
        ...
