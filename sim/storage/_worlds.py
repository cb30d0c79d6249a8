"""The worlds a store holds as they were served: each world once under its content hash, so a log stands on its own.

An episode's row names the world it ran against by `world_hash` (`simia.sim.world.World.content_hash`); the `worlds`
table keeps that world (tools, policy, simulator hints, tasks, examples, name and version: everything but its
initial state, which is a base in the `states` table, named beside it by digest). `ServedWorlds` writes a world
once per process and hash and rebuilds one from its row and its base; both engines use it, only how a row is read
and written differs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from ..world import World, compact_json
from ._bases import BaseStates

log = logging.getLogger("simia.storage")

__all__ = ["WORLD_KEEP", "ServedWorlds", "WorldRows", "WorldVersion", "served_text"]

WORLD_KEEP = 8
"""How many worlds rebuilt from the database stay in memory, the last used."""


@dataclass(frozen=True)
class WorldVersion:
    """One world version episodes ran against: its name and content hash, how many episodes, and whether the
    database holds it (`Store.put_world`; episodes written before schema version 4 have none)."""

    name: str
    world_hash: str
    episodes: int
    stored: bool


class WorldRows(Protocol):
    """The `worlds` table of one database, as an engine reads and writes it."""

    async def insert_world(self, world_hash: str, name: str, base_hash: str, text: str) -> None:
        """Insert the row unless one with that hash is there (then nothing changes)."""
        ...

    async def world_row(self, world_hash: str) -> tuple[str, str] | None:
        """The stored world's base digest and JSON text, or None."""
        ...

    async def version_rows(self) -> list[WorldVersion]: ...


def served_text(world: World) -> str:
    """The JSON a world is stored as: everything that defines it but its initial state (stored as its base)."""
    return compact_json(world.model_dump(mode="json", exclude={"initial_state"}))


class ServedWorlds:
    """The served worlds of one store: which hashes are known to be stored, and the last few rebuilt."""

    def __init__(self, rows: WorldRows, bases: BaseStates, keep: int = WORLD_KEEP) -> None:
        self._rows = rows
        self._bases = bases
        self._keep = keep
        self._stored: set[str] = set()
        self._putting: dict[str, asyncio.Task[None]] = {}
        self._read: OrderedDict[str, World] = OrderedDict()

    async def put(self, world: World) -> None:
        """Store `world` under its content hash, with its base: one insert per hash in this process (concurrent
        puts of one hash share it), nothing again once it is done.

        Args:
            world: the world as served (its cached hashes are computed if they are not yet).
        """
        digest = world.content_hash
        if digest in self._stored:
            return
        putting = self._putting.get(digest)
        if putting is None:
            putting = self._putting[digest] = asyncio.ensure_future(self._insert(world))
            putting.add_done_callback(lambda _: self._putting.pop(digest, None))
        await asyncio.shield(putting)

    async def _insert(self, world: World) -> None:
        await self._bases.put(world.base_state)
        text = await asyncio.to_thread(served_text, world)
        await self._rows.insert_world(world.content_hash, world.name, world.base_state.digest, text)
        self._stored.add(world.content_hash)

    async def get(self, world_hash: str) -> World | None:
        """The world stored under `world_hash`, rebuilt on its stored base (shared with the store's states), or
        None when the database has none.

        Raises:
            LookupError: the row names a base state that is not stored.
        """
        found = self._read.get(world_hash)
        if found is not None:
            self._read.move_to_end(world_hash)
            return found
        row = await self._rows.world_row(world_hash)
        if row is None:
            return None
        base_hash, text = row
        fields: dict[str, Any] = await asyncio.to_thread(json.loads, text)
        try:
            served = World.model_validate(fields)
        except ValidationError as exc:  # stored by a simia whose world format differs: read as not stored
            log.warning(
                "world %s stored in the database does not load (%s); looked for elsewhere", world_hash[:12], exc
            )
            return None
        world = served.model_copy(update={"initial_state": await self._bases.get(base_hash)})
        self._stored.add(world_hash)
        self._read[world_hash] = world
        while len(self._read) > self._keep:
            self._read.popitem(last=False)
        return world

    async def versions(self) -> list[WorldVersion]:
        return await self._rows.version_rows()
