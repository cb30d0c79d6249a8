"""The seeds read so far, grouped by tool set, in a SQLite file on disk: memory stays bounded however many records
and groups a dataset has (Toucan's 1.5 million, xLAM's tens of thousands of tool sets).

One group per canonical tool set (`NormalTools.key`). Each seed row holds its task (JSON, without the policy
variant, which is known only once every record is read), a hash of its system prompt, and its example when the
group still takes one. Counts are kept beside: records and examples per group, system prompts per group (the most
common becomes the world's policy), the report's changes and skips per group, and each tool's schemas (the same
name with two schemas is two groups, and the report says so).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..world import canonical_json
from .seeds_tools import NormalTools

__all__ = ["Group", "Spool"]

_CACHE = 4096  # groups and system prompts remembered in memory; the rest are looked up on disk

_SCHEMA = """
CREATE TABLE groups (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, described TEXT NOT NULL, tools TEXT NOT NULL,
                     records INTEGER NOT NULL DEFAULT 0, examples INTEGER NOT NULL DEFAULT 0);
CREATE TABLE seeds (grp INTEGER NOT NULL, digest BLOB NOT NULL UNIQUE, task TEXT NOT NULL, system TEXT NOT NULL,
                    example TEXT);
CREATE INDEX seeds_grp ON seeds (grp);
CREATE TABLE systems (hash TEXT PRIMARY KEY, text TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE group_systems (grp INTEGER NOT NULL, hash TEXT NOT NULL, n INTEGER NOT NULL, first INTEGER NOT NULL,
                            PRIMARY KEY (grp, hash)) WITHOUT ROWID;
CREATE TABLE group_sources (grp INTEGER NOT NULL, source TEXT NOT NULL, format TEXT NOT NULL, n INTEGER NOT NULL,
                            UNIQUE (grp, source, format));
CREATE TABLE entries (grp INTEGER NOT NULL, kind TEXT NOT NULL, item TEXT NOT NULL, reason TEXT NOT NULL,
                      n INTEGER NOT NULL, first TEXT NOT NULL, UNIQUE (grp, kind, item, reason));
CREATE TABLE tool_schemas (name TEXT NOT NULL, schema TEXT NOT NULL, grp INTEGER NOT NULL);
CREATE INDEX tool_schemas_name ON tool_schemas (name, schema);
CREATE INDEX tool_schemas_grp ON tool_schemas (grp);
"""


@dataclass
class Group:
    """A tool set's group as the reader needs it: its id, its examples so far, its first descriptions' hash."""

    id: int
    examples: int
    described: str
    created: bool = False


class Spool:
    """Seeds between reading and writing, in the SQLite file `path` (created; the caller removes it)."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None)
        for pragma in ("journal_mode = OFF", "synchronous = OFF", "temp_store = FILE", "cache_size = -16000"):
            self._db.execute(f"PRAGMA {pragma}")
        self._db.executescript(_SCHEMA)
        self._db.execute("BEGIN")
        self._groups: OrderedDict[str, Group] = OrderedDict()
        self._systems: OrderedDict[str, None] = OrderedDict()

    def close(self) -> None:
        self._db.close()

    def group(self, tools: NormalTools) -> Group:
        """The group of `tools`' key, created (with its tools, their schemas and their changes) when new."""
        found = self._groups.get(tools.key)
        if found is not None:
            self._groups.move_to_end(tools.key)
            return found
        row = self._db.execute("SELECT id, examples, described FROM groups WHERE key = ?", (tools.key,)).fetchone()
        if row is not None:
            found = Group(row[0], row[1], row[2])
        else:
            cursor = self._db.execute(
                "INSERT INTO groups (key, described, tools) VALUES (?, ?, ?)",
                (tools.key, tools.described, json.dumps(list(tools.tools), ensure_ascii=False)),
            )
            group_id = int(cursor.lastrowid or 0)
            self._db.executemany(
                "INSERT INTO tool_schemas (name, schema, grp) VALUES (?, ?, ?)",
                [(t["name"], _hash(t["inputSchema"]), group_id) for t in tools.tools],
            )
            for entry in dict.fromkeys(tools.changes):
                self.count(group_id, entry.kind, entry.item, entry.reason, "")
            found = Group(group_id, 0, tools.described, created=True)
        self._groups[tools.key] = found
        if len(self._groups) > _CACHE:
            self._groups.popitem(last=False)
        return found

    def add(
        self, group: Group, digest: bytes, task: str, system: str, example: str | None, source: tuple[str, str]
    ) -> bool:
        """Spool one seed; False (and nothing stored) when an identical record was spooled before."""
        system_hash = _hash(system) if system else ""
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO seeds (grp, digest, task, system, example) VALUES (?, ?, ?, ?, ?)",
            (group.id, digest, task, system_hash, example),
        )
        if cursor.rowcount == 0:
            return False
        seq = int(cursor.lastrowid or 0)
        added = 1 if example is not None else 0
        group.examples += added
        self._db.execute(
            "UPDATE groups SET records = records + 1, examples = examples + ? WHERE id = ?", (added, group.id)
        )
        self._db.execute(
            "INSERT INTO group_systems (grp, hash, n, first) VALUES (?, ?, 1, ?) "
            "ON CONFLICT (grp, hash) DO UPDATE SET n = n + 1",
            (group.id, system_hash, seq),
        )
        if system and system_hash not in self._systems:
            self._db.execute("INSERT OR IGNORE INTO systems (hash, text) VALUES (?, ?)", (system_hash, system))
            self._systems[system_hash] = None
            if len(self._systems) > _CACHE:
                self._systems.popitem(last=False)
        self._db.execute(
            "INSERT INTO group_sources (grp, source, format, n) VALUES (?, ?, ?, 1) "
            "ON CONFLICT (grp, source, format) DO UPDATE SET n = n + 1",
            (group.id, *source),
        )
        return True

    def count(self, group: int, kind: str, item: str, reason: str, where: str) -> None:
        """One more of a report line (`kind` skipped/changed/note) for the group; `where` is the first one's place."""
        self._db.execute(
            "INSERT INTO entries (grp, kind, item, reason, n, first) VALUES (?, ?, ?, ?, 1, ?) "
            "ON CONFLICT (grp, kind, item, reason) DO UPDATE SET n = n + 1",
            (group, kind, item, reason, where),
        )

    def any_seed(self) -> bool:
        return self._db.execute("SELECT 1 FROM groups WHERE records > 0 LIMIT 1").fetchone() is not None

    def groups(self) -> Iterator[tuple[int, list[dict[str, Any]], int]]:
        """Every group with a seed, in the order first seen, one at a time: (id, tools, records)."""
        cursor = self._db.execute("SELECT id, tools, records FROM groups WHERE records > 0 ORDER BY id")
        for group, tools, records in cursor:
            yield group, json.loads(tools), records

    def tasks(self, group: int) -> Iterator[tuple[str, str]]:
        """The group's tasks (JSON) with their system prompt's hash, in the order read."""
        cursor = self._db.execute("SELECT task, system FROM seeds WHERE grp = ? ORDER BY rowid", (group,))
        yield from cursor

    def examples(self, group: int) -> Iterator[tuple[str, str]]:
        """The group's examples (JSON) with their tasks (JSON), in the order read."""
        cursor = self._db.execute(
            "SELECT task, example FROM seeds WHERE grp = ? AND example IS NOT NULL ORDER BY rowid", (group,)
        )
        yield from cursor

    def policy(self, group: int) -> tuple[str, str, int]:
        """The group's most common system prompt (the first seen on a tie): (hash, text, records with another)."""
        rows = self._db.execute("SELECT hash, n FROM group_systems WHERE grp = ? ORDER BY n DESC, first", (group,))
        counts = rows.fetchall()
        if not counts:
            return "", "", 0
        best = counts[0][0]
        others = sum(count for _, count in counts[1:])
        text = self._db.execute("SELECT text FROM systems WHERE hash = ?", (best,)).fetchone() if best else None
        return best, text[0] if text else "", others

    def system(self, hash_: str) -> str:
        row = self._db.execute("SELECT text FROM systems WHERE hash = ?", (hash_,)).fetchone()
        return str(row[0]) if row else ""

    def sources(self, group: int) -> list[tuple[str, str, int]]:
        """(file, format, records) of the group, in the order read."""
        rows = self._db.execute("SELECT source, format, n FROM group_sources WHERE grp = ? ORDER BY rowid", (group,))
        return [(row[0], row[1], row[2]) for row in rows]

    def entries(self, group: int) -> list[tuple[str, str, str, int, str]]:
        """The group's report lines: (kind, item, reason, count, first place)."""
        query = "SELECT kind, item, reason, n, first FROM entries WHERE grp = ? ORDER BY rowid"
        rows = self._db.execute(query, (group,))
        return [(row[0], row[1], row[2], row[3], row[4]) for row in rows]

    def variants(self, group: int) -> list[tuple[str, int, int]]:
        """(tool, the first other group, how many) for each of the group's tools whose name other groups (with a
        seed) have with another input schema."""
        rows = self._db.execute(
            "SELECT a.name, MIN(b.grp), COUNT(DISTINCT b.grp) FROM tool_schemas a JOIN tool_schemas b "
            "ON a.name = b.name AND a.schema != b.schema JOIN groups g ON g.id = b.grp AND g.records > 0 "
            "WHERE a.grp = ? GROUP BY a.name ORDER BY a.name",
            (group,),
        )
        return [(row[0], row[1], row[2]) for row in rows]


def _hash(value: Any) -> str:
    text = value if isinstance(value, str) else canonical_json(value)
    return hashlib.sha256(text.encode()).hexdigest()[:32]
