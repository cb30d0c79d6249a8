"""The SQL both stores share: the column lists, the row mapping, and the statements written once for SQLite
and Postgres (each engine swaps in its placeholder where it differs).

`simia.sim.storage.sqlite` and `simia.sim.storage.postgres` import these; neither imports the other.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..records import EpisodeRecord, EventRecord, Progress, StatePath, result_text
from ..verdict import Verdict
from ..world import compact_json

__all__ = [
    "BASE_EXISTS_SQL",
    "BASE_SQL",
    "CONSISTENCY_SQL",
    "EPISODE_COLUMNS",
    "EPISODE_SQL",
    "EVENT_COLUMNS",
    "INDEX_SQL",
    "INSERT_BASE",
    "INSERT_EPISODE",
    "INSERT_WORLD",
    "JSON_EPISODE",
    "JSON_EVENT",
    "MISSING_BASES_SQL",
    "PACKED_EVENT",
    "PATCHES_SQL",
    "PROGRESS_SQL",
    "SET_STATUS_SQL",
    "STATE_START_SQL",
    "WORLD_SQL",
    "WORLD_VERSIONS_SQL",
    "consistency_report",
    "episode_from_row",
    "episode_params",
    "event_from_row",
    "list_sql",
    "packed",
    "progress_from_rows",
    "set_status_params",
    "state_path_of",
    "stored_text",
    "unpacked",
]

INDEX_SQL = """
CREATE INDEX IF NOT EXISTS episodes_created ON episodes (created_at);
CREATE INDEX IF NOT EXISTS episodes_principal_created ON episodes (principal, created_at);
CREATE INDEX IF NOT EXISTS episodes_task ON episodes (world, task, reward);
CREATE INDEX IF NOT EXISTS episodes_principal_task ON episodes (principal, world, task, reward);
CREATE INDEX IF NOT EXISTS episodes_group ON episodes (group_id);
"""
"""Indexes of the viewer's queries (`simia.sim.storage.queries`), each for every episode (`simia view`) and for one
principal's (`simia serve`): the newest page read from an index walk instead of a sort of the table, the
per-task rewards from a covering index, and fork groups by their root. They change only when an episode is
created or judged, never on a call."""

EPISODE_COLUMNS = [
    "id", "world", "world_hash", "task", "seed", "principal", "status", "seq", "calls", "prompt_tokens",
    "completion_tokens", "cost_usd", "base_hash", "base_patches", "parent_id", "fork_step", "group_id", "verdict",
    "transcript", "tokens", "status_reason", "created_at", "updated_at", "ended_at", "perturbation",
]  # fmt: skip
"""The columns of an `EpisodeRecord` (every read selects these, never a state: an episode's row holds none)."""
JSON_EPISODE = {"base_patches", "verdict", "transcript", "tokens", "perturbation"}
EVENT_COLUMNS = [
    "seq", "request_key", "tool", "arguments", "output", "text", "is_error", "error_code", "error_kind",
    "state_patch", "usage", "latency_ms", "model", "detail", "created_at", "injected",
    "source", "side",
]  # fmt: skip
JSON_EVENT = {"arguments", "output", "state_patch", "usage"}
PACKED_EVENT = ("arguments", "output", "text")
"""The event columns SQLite may keep compressed (`packed`): what a call sent and answered, which grows with the
records it names; a patch and the counters stay plain (replay reads the patches in SQL)."""
PACK_FROM = 512
"""The shortest text `packed` compresses: below it zlib saves too little to free a page."""
INSERT_EPISODE = "INSERT INTO episodes ({}) VALUES ({})".format(
    ", ".join(EPISODE_COLUMNS), ", ".join("?" * len(EPISODE_COLUMNS))
)
EPISODE_SQL = f"SELECT {', '.join(EPISODE_COLUMNS)} FROM episodes WHERE id = ?"
"""`Store.get_episode`'s statement (parameter: the id)."""

BASE_SQL = "SELECT state FROM states WHERE hash = ?"
BASE_EXISTS_SQL = "SELECT 1 FROM states WHERE hash = ?"
INSERT_BASE = "INSERT INTO states (hash, state) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING"
"""A base state under its digest, written once: a second insert of one digest changes nothing (same digest, same
state)."""
INSERT_WORLD = (
    "INSERT INTO worlds (hash, name, base_hash, world, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (hash) DO NOTHING"
)
"""A world as served under its content hash, written once (`simia.sim.storage._worlds`)."""
WORLD_SQL = "SELECT base_hash, world FROM worlds WHERE hash = ?"
WORLD_VERSIONS_SQL = (
    "SELECT e.world, e.world_hash, COUNT(*), MAX(CASE WHEN w.hash IS NULL THEN 0 ELSE 1 END) FROM episodes e "
    "LEFT JOIN worlds w ON w.hash = e.world_hash GROUP BY e.world, e.world_hash ORDER BY e.world, MIN(e.created_at)"
)
"""Each (world, content hash) episodes ran against, oldest first per world: the episodes' count and whether the
world is stored (`Store.world_versions`)."""
STATE_START_SQL = "SELECT base_hash, base_patches FROM episodes WHERE id = ?"
PATCHES_SQL = "SELECT state_patch FROM events WHERE episode_id = ? AND seq <= ? AND state_patch <> '[]' ORDER BY seq"
"""`Store.state_path`'s two statements: where the episode starts (parameter: the id), then the patches of its
events up to a step (parameters: the id, the step), the empty ones (reads, errors) left out."""


def episode_params(episode: EpisodeRecord) -> list[Any]:
    """The values of `INSERT_EPISODE` for `episode` (its JSON fields as JSON text)."""
    return [
        compact_json(getattr(episode, k)) if k in JSON_EPISODE and getattr(episode, k) is not None
        else getattr(episode, k)
        for k in EPISODE_COLUMNS
    ]  # fmt: skip


def state_path_of(start: Sequence[Any] | None, patches: Iterable[str], episode_id: str) -> StatePath:
    """The `StatePath` of `STATE_START_SQL`'s row (None: no such episode) and `PATCHES_SQL`'s patch texts.

    Raises:
        LookupError: there is no such episode.
    """
    if start is None:
        raise LookupError(f"no episode {episode_id!r}")
    base_hash, base_patches = start
    path: list[list[dict[str, Any]]] = json.loads(base_patches)
    path.extend(patch for patch in map(json.loads, patches) if patch)
    return StatePath(base_hash, path)


def list_sql(
    *,
    world: str | None,
    status: str | None,
    principal: str | None,
    task: str | None,
    since: float | None,
    newest_first: bool = False,
    ph: str = "?",
) -> tuple[str, list[Any]]:
    """`Store.list_episodes`'s statement and parameters (the limit and offset are the statement's last two
    parameters, not among them); `ph` is the engine's placeholder."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (("world", world), ("status", status), ("principal", principal), ("task", task)):
        if value is not None:
            clauses.append(f"{column} = {ph}")
            params.append(value)
    if since is not None:
        clauses.append(f"created_at >= {ph}")
        params.append(since)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    order = "created_at DESC, id DESC" if newest_first else "created_at, id"
    return f"SELECT {', '.join(EPISODE_COLUMNS)} FROM episodes {where} ORDER BY {order} LIMIT {ph} OFFSET {ph}", params


SET_STATUS_SQL = (
    "UPDATE episodes SET status = ?, status_reason = COALESCE(?, status_reason), "
    "verdict = COALESCE(?, verdict), reward = CASE WHEN ? THEN ? ELSE reward END, "
    "transcript = COALESCE(?, transcript), tokens = COALESCE(?, tokens), updated_at = ?, "
    "ended_at = CASE WHEN ? = 'active' THEN NULL ELSE COALESCE(ended_at, ?) END WHERE id = ?"
)
"""`Store.set_status`'s statement (parameters: `set_status_params`): fields given as None stay as they are."""


def set_status_params(
    episode_id: str,
    status: str,
    reason: str | None,
    verdict: Verdict | None,
    transcript: list[dict[str, Any]] | None,
    tokens: dict[str, Any] | None,
) -> tuple[Any, ...]:
    """The parameters of `SET_STATUS_SQL`, `updated_at` (and a first `ended_at`) now."""
    now = time.time()
    return (
        status,
        reason,
        compact_json(verdict.as_json()) if verdict is not None else None,
        verdict is not None,
        verdict.reward if verdict is not None else None,
        compact_json(transcript) if transcript is not None else None,
        compact_json(tokens) if tokens is not None else None,
        now,
        status,
        now,
        episode_id,
    )


CONSISTENCY_SQL = (
    "SELECT e.id FROM episodes e LEFT JOIN (SELECT episode_id, COUNT(*) AS n, MAX(seq) AS top FROM events "
    "GROUP BY episode_id) v ON v.episode_id = e.id "
    "WHERE e.seq <> COALESCE(v.top, 0) OR COALESCE(v.n, 0) <> COALESCE(v.top, 0) ORDER BY e.id LIMIT 5"
)
"""Episodes whose `seq` is not their last event's, or whose events are not numbered 1..seq without gaps."""
MISSING_BASES_SQL = (
    "SELECT e.id FROM episodes e LEFT JOIN states s ON s.hash = e.base_hash WHERE s.hash IS NULL ORDER BY e.id LIMIT 5"
)
"""Episodes whose base state is not stored (their states cannot be rebuilt)."""


def consistency_report(bad: list[str], baseless: list[str]) -> str:
    """What `integrity_check` says about the ids `CONSISTENCY_SQL` and `MISSING_BASES_SQL` found."""
    problems = []
    if bad:
        problems.append(f"episodes whose seq disagrees with their events (gaps or a lost event): {', '.join(bad)}")
    if baseless:
        problems.append(f"episodes whose base state is missing from the states table: {', '.join(baseless)}")
    return "; ".join(problems) or "ok"


def episode_from_row(row: Mapping[str, Any]) -> EpisodeRecord:
    values = {k: (json.loads(row[k]) if k in JSON_EPISODE and row[k] is not None else row[k]) for k in EPISODE_COLUMNS}
    if values["verdict"] is not None:
        values["verdict"] = Verdict.model_validate(values["verdict"])
    return EpisodeRecord(**values)


def stored_text(event: EventRecord) -> str:
    """What the `text` column keeps of an event: "" when the text is its output's rendering (`result_text`, read
    back by `event_from_row`), so a call's output is not written twice."""
    if event.output is not None and not event.is_error and event.text == result_text(event.output):
        return ""
    return event.text


def packed(text: str | None) -> str | bytes | None:
    """How SQLite keeps a `PACKED_EVENT` column: zlib-compressed UTF-8 (a BLOB) when the text is `PACK_FROM`
    characters or more and compressing saves, else the text itself.

    A write then costs about what the call changed and named: a WAL commit writes each page it touches in full,
    and a product listing of a large world is tens of KB of JSON (compressed ~4x); `unpacked` reads either form,
    so a database written before compression reads as it did."""
    if text is None or len(text) < PACK_FROM:
        return text
    raw = text.encode()
    small = zlib.compress(raw, 6)
    return small if len(small) < len(raw) else text


def unpacked(value: Any) -> Any:
    """A column's value as text: `packed` bytes inflated, anything else as it is."""
    return zlib.decompress(value).decode() if isinstance(value, bytes) else value


def event_from_row(row: Mapping[str, Any]) -> EventRecord:
    values = {k: unpacked(row[k]) for k in EVENT_COLUMNS}
    values.update({k: json.loads(values[k]) for k in JSON_EVENT if values[k] is not None})
    values["is_error"] = bool(values["is_error"])
    if values["text"] == "" and values["output"] is not None and not values["is_error"]:
        values["text"] = result_text(values["output"])
    return EventRecord(**values)


PROGRESS_SQL = (
    f"SELECT ep.seq AS at_seq, ep.status AS at_status, {', '.join(f'ev.{c}' for c in EVENT_COLUMNS)} "
    "FROM episodes ep LEFT JOIN events ev ON ev.episode_id = ep.id AND ev.seq > ? AND ev.seq <= ? "
    "WHERE ep.id = ? ORDER BY ev.seq"
)
"""`Store.progress` in one statement (parameters: after, after + limit, the episode id): one row per event
after `after`, or one row with no event when there is none; no row when there is no such episode."""


def progress_from_rows(rows: Sequence[Mapping[str, Any]]) -> Progress | None:
    """The `Progress` that `PROGRESS_SQL`'s rows describe."""
    if not rows:
        return None
    events = [event_from_row(r) for r in rows if r["seq"] is not None]
    return Progress(int(rows[0]["at_seq"]), str(rows[0]["at_status"]), events)
