"""The world each logged episode ran against, for the readers of a database (export, judge, view).

An episode names its world by content hash (`EpisodeRecord.world_hash`); the database holds that world as it
was served (`Store.put_world`). `EpisodeWorlds` answers with the stored one, and world folders are optional: a
folder's world that differs from the stored one is reported, never used in its place. An episode written before
the database kept worlds (schema version 4) gets the folder's world of its name when its hash matches, or with a
warning when it does not; one whose world is nowhere is counted as missing, by world name, and left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from ..records import EpisodeRecord
from ..world import World, default_worlds_dir, load_worlds
from .protocol import Store

__all__ = ["EpisodeWorlds", "short_hash"]


def short_hash(world_hash: str) -> str:
    """A content hash as messages show it (its first 12 hex digits)."""
    return world_hash[:12]


class EpisodeWorlds:
    """The worlds of one database's episodes, with what was found where.

    Args:
        store: the database.
        folders: the worlds of the folders the user named (`--worlds-dir`): each is checked against the stored
            version its episodes ran against, and stands in for a version the database lacks. None: the user
            named none; then the default world folder (`default_worlds_dir`) is read, the first time a version
            the database lacks is looked for, and only for those (never compared).
    """

    def __init__(self, store: Store, folders: Mapping[str, World] | None = None) -> None:
        self._store = store
        self._folders = dict(folders or {})
        self._fallback: Mapping[str, World] | None = None if folders is None else {}
        self._found: dict[tuple[str, str], tuple[World | None, bool]] = {}  # -> (the world, whether it is stored)
        self.differs: Counter[tuple[str, str, str]] = Counter()
        """(world, folder hash, stored hash) -> episodes that used the stored world over a different folder one."""
        self.by_name: Counter[tuple[str, str, str]] = Counter()
        """(world, folder hash, hash run against) -> episodes given a folder's world that differs (none stored)."""
        self.missing: Counter[tuple[str, str]] = Counter()
        """(world, hash run against) -> episodes whose world is neither stored nor in a folder."""

    async def world_of(self, episode: EpisodeRecord) -> World | None:
        """The world `episode` ran against (stored, else a folder's), or None when it is nowhere; counted in
        `differs`, `by_name` or `missing` where the answer is not the stored world alone."""
        return await self._count(episode.world, episode.world_hash, 1)

    async def _count(self, name: str, ran: str, episodes: int) -> World | None:
        """The world of version (`name`, `ran`), with `episodes` more counted where it came from."""
        key = (name, ran)
        if key not in self._found:
            self._found[key] = await self._find(name, ran)
        world, stored = self._found[key]
        folder = self._folders.get(name)
        if world is None:
            self.missing[key] += episodes
        elif not stored and world.content_hash != ran:
            self.by_name[(name, world.content_hash, ran)] += episodes
        elif stored and folder is not None and folder.content_hash != ran:
            self.differs[(name, folder.content_hash, ran)] += episodes
        return world

    async def _find(self, name: str, world_hash: str) -> tuple[World | None, bool]:
        stored = await self._store.served_world(world_hash)
        if stored is not None:
            return stored, True
        found = self._folders.get(name)
        if found is None:
            if self._fallback is None:
                self._fallback = load_worlds([default_worlds_dir()]).worlds
            found = self._fallback.get(name)
        return found, False

    async def latest(self) -> dict[str, World]:
        """Each world of the database by name, the version its newest episodes ran against (stored, else a
        folder's), with the folders' worlds that no episode ran."""
        worlds = dict(self._folders)
        for version in await self._store.world_versions():
            found = await self._count(version.name, version.world_hash, version.episodes)
            if found is not None:
                worlds[version.name] = found
        return worlds

    def problem(self, episode: EpisodeRecord) -> str:
        """Why `world_of` found no world for `episode`, and the fix."""
        return (
            f"world {episode.world!r} (hash {short_hash(episode.world_hash)}) is not stored in the database and no "
            "world folder has it; pass --worlds-dir with its folder"
        )

    def notes(self) -> list[str]:
        """One line per world version served from elsewhere than the database, or from nowhere, with counts."""
        lines = [
            f"warning: world {name!r} in --worlds-dir (hash {short_hash(folder)}) differs from the one {n} "
            f"episode(s) ran against (hash {short_hash(ran)}); used the version stored in the database"
            for (name, folder, ran), n in sorted(self.differs.items())
        ]
        lines += [
            f"warning: world {name!r} as {n} episode(s) ran it (hash {short_hash(ran)}) is not stored in the "
            f"database; used the world folder's version (hash {short_hash(folder)}), which differs"
            for (name, folder, ran), n in sorted(self.by_name.items())
        ]
        lines += [
            f"{n} episode(s) of world {name!r} ran against a version (hash {short_hash(ran)}) that the database "
            "does not hold and no world folder has; pass --worlds-dir with its folder"
            for (name, ran), n in sorted(self.missing.items())
        ]
        return lines
