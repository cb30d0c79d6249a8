"""The base states a store holds in memory: a world's initial state, kept once however many episodes start from it.

A base is stored once in the `states` table under its digest (`Store.put_base`), and every state the store
rebuilds (`Store.state_at`) is made from the one object this cache holds, so the episodes of a world share their
unchanged parts in memory too. The bases put are pinned (a server's worlds, few and always in use); the ones read
back from the database stay while they are among the last `READ_KEEP` used. Both engines use this class; only how
a row is read and written differs.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections import OrderedDict
from typing import Any, Protocol

from ..records import EpisodeRecord
from ..world import State, as_state, compact_json

__all__ = ["READ_KEEP", "BaseRows", "BaseStates"]

READ_KEEP = 8
"""How many bases read from the database (not put in this process) stay in memory, the last used."""


class BaseRows(Protocol):
    """The `states` table of one database, as an engine reads and writes it."""

    async def base_exists(self, digest: str) -> bool: ...

    async def insert_base(self, digest: str, text: str) -> None:
        """Insert the row unless one with that digest is there (then nothing changes)."""
        ...

    async def base_text(self, digest: str) -> str | None: ...


class BaseStates:
    """The bases of one store: pinned, recently read, and which digests are known to be stored."""

    def __init__(self, rows: BaseRows, keep: int = READ_KEEP) -> None:
        self._rows = rows
        self._keep = keep
        self._pinned: dict[str, State] = {}
        self._read: OrderedDict[str, State] = OrderedDict()
        self._stored: set[str] = set()  # digests known to have a `states` row (a digest is 64 characters)
        self._loading: dict[str, asyncio.Task[State]] = {}

    async def put(self, state: State, *, pin: bool = True) -> None:
        """Store `state` under its digest, once: a digest this store stored or read before costs nothing, one
        already in the database a lookup, and only a new one is serialized (off the event loop).

        Args:
            pin: keep the object for as long as the store is open (else among the recently used).
        """
        digest = state.digest
        if digest not in self._stored:
            if not await self._rows.base_exists(digest):
                await self._rows.insert_base(digest, await asyncio.to_thread(compact_json, state))
            self._stored.add(digest)
        if pin:
            self._pinned[digest] = state
            self._read.pop(digest, None)
        elif digest not in self._pinned:
            self._remember(state)

    async def attach(self, episode: EpisodeRecord) -> None:
        """Make a new `episode` reference a stored base (`Store.create_episode`): with a `base_hash`, check that it
        is stored (a lookup the first time only); without one, its `initial_state` becomes a base (O(its size):
        for callers that hold a plain state, not a world's base), stored and referenced with no base patches.

        Raises:
            LookupError: the `base_hash` given is not stored.
            ValueError: neither a `base_hash` nor an `initial_state`.
        """
        if episode.base_hash:
            if episode.base_hash not in self._stored:
                if not await self._rows.base_exists(episode.base_hash):
                    raise LookupError(
                        f"no base state {episode.base_hash} in the database; store it first (Store.put_base)"
                    )
                self._stored.add(episode.base_hash)
            return
        if episode.initial_state is None:
            raise ValueError(f"episode {episode.id!r} has neither a base_hash nor an initial_state to start from")
        given = episode.initial_state
        base = as_state(given if not isinstance(given, State) or given.base is given else dict(given))
        await self.put(base, pin=False)
        episode.base_hash, episode.base_patches, episode.initial_state = base.digest, [], base
        if episode.state is None or episode.state is given:
            episode.state = base

    async def get(self, digest: str) -> State:
        """The base stored under `digest`: the object in memory, else its row, parsed off the event loop
        (concurrent gets of one digest share one read and one parse).

        Raises:
            LookupError: there is no such base.
        """
        found = self._pinned.get(digest)
        if found is None:
            found = self._read.get(digest)
            if found is not None:
                self._read.move_to_end(digest)
        if found is not None:
            return found
        loading = self._loading.get(digest)
        if loading is None:
            loading = self._loading[digest] = asyncio.ensure_future(self._load(digest))
            loading.add_done_callback(functools.partial(self._loaded, digest))
        return await asyncio.shield(loading)  # a caller that gives up leaves the load to the others

    async def _load(self, digest: str) -> State:
        text = await self._rows.base_text(digest)
        if text is None:
            raise LookupError(f"no base state {digest} in the database; store it first (Store.put_base)")
        value: dict[str, Any] = await asyncio.to_thread(json.loads, text)
        self._stored.add(digest)
        return self._remember(as_state(value, digest=digest))

    def _loaded(self, digest: str, task: asyncio.Task[State]) -> None:
        del self._loading[digest]
        if not task.cancelled():
            task.exception()  # retrieved: a failed load whose callers all gave up is not an unhandled error

    def _remember(self, state: State) -> State:
        """Keep `state` among the recently used; one already kept under its digest wins (it may be shared)."""
        pinned = self._pinned.get(state.digest)
        if pinned is not None:
            return pinned
        kept = self._read.setdefault(state.digest, state)
        self._read.move_to_end(state.digest)
        while len(self._read) > self._keep:
            self._read.popitem(last=False)
        return kept
