"""Episode queries for browsing many episodes: a filtered, sorted page of rows, and per-task reward statistics.

`EpisodeQuery` says what a reader wants (the viewer's runs page); `EpisodePage` and `TaskStats` are what a
store answers. The SQL lives here, once, in plain portable SQL with `?` placeholders (a store with another
placeholder style passes its own to `page_sql`), so every `Store` implementation runs the same statements.

The text filter (a word in a call's arguments, output or text) scans only the newest `TEXT_SCAN_LIMIT`
events, in insertion order: a bounded scan keeps it usable at 100,000 episodes without a full-text index
that every committed call would have to update. `EpisodePage.text_scan_complete` says whether the scan
covered every event, so a reader can say "searched the newest N calls".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "PAGE_LIMIT",
    "SORT_KEYS",
    "TEXT_SCAN_LIMIT",
    "EpisodePage",
    "EpisodeQuery",
    "EpisodeRow",
    "TaskStats",
    "error_counts_sql",
    "fork_counts_sql",
    "page_sql",
    "task_stats_sql",
    "unmatched_filter",
]

TEXT_SCAN_LIMIT = 100_000
"""How many of the newest events a text filter reads (see the module docstring)."""

PAGE_LIMIT = 500
"""The most rows one page may hold."""

SORT_KEYS: dict[str, str] = {
    "time": "created_at",
    "world": "world",
    "task": "task",
    "status": "status",
    "reward": "reward",
    "calls": "calls",
    "tokens": "(prompt_tokens + completion_tokens)",
    "cost": "cost_usd",
    "duration": "(COALESCE(ended_at, updated_at) - created_at)",
    "group": "COALESCE(group_id, id)",
}
"""The sort keys a query accepts, and the SQL expression each orders by."""

RewardFilter = Literal["1", "0", "none"]

_ROW_COLUMNS = (
    "id, world, task, seed, status, reward, calls, prompt_tokens, completion_tokens, cost_usd, "
    "created_at, updated_at, ended_at, parent_id, fork_step, group_id"
)


@dataclass(frozen=True)
class EpisodeQuery:
    """Which episodes, in which order, which slice.

    Attributes:
        world, task, status, principal, group: exact matches when given; `group` is a fork group's id (its
            root episode's id), matching the root and every fork in it.
        reward: `"1"` or `"0"` (judged with that reward) or `"none"` (no reward yet) when given.
        text: a case-insensitive substring of an event's arguments, output or text (newest events only).
        sort: one of `SORT_KEYS`; ties fall back to the newest first.
        descending: the sort direction.
        offset, limit: the slice (limit at most `PAGE_LIMIT`).
    """

    world: str | None = None
    task: str | None = None
    status: str | None = None
    principal: str | None = None
    group: str | None = None
    reward: RewardFilter | None = None
    text: str | None = None
    sort: str = "time"
    descending: bool = True
    offset: int = 0
    limit: int = 50

    def __post_init__(self) -> None:
        if self.sort not in SORT_KEYS:
            raise ValueError(f"unknown sort {self.sort!r}; one of {', '.join(SORT_KEYS)}")
        if not 0 < self.limit <= PAGE_LIMIT or self.offset < 0:
            raise ValueError(f"limit must be 1..{PAGE_LIMIT} and offset >= 0")


@dataclass
class EpisodeRow:
    """One episode as a list shows it: no state, events or transcript."""

    id: str
    world: str
    task: str | None
    seed: int | None
    status: str
    reward: int | None
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    created_at: float
    updated_at: float
    ended_at: float | None
    parent_id: str | None
    fork_step: int | None
    group_id: str | None
    agent_errors: int = 0
    infra_errors: int = 0
    forks: int = 0
    """How many episodes name this one as their fork group's root."""

    @property
    def duration(self) -> float:
        """Seconds from creation to the end (or to the last call, while active)."""
        return (self.ended_at or self.updated_at) - self.created_at


@dataclass
class EpisodePage:
    """A page of episodes: the rows, how many match in all, and whether a text filter read every event."""

    rows: list[EpisodeRow]
    total: int
    text_scan_complete: bool = True


@dataclass
class TaskStats:
    """Rewards of one (world, task) across its episodes; every judged episode is an attempt."""

    world: str
    task: str | None
    episodes: int
    judged: int
    passed: int
    ks: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.ks = [k for k in (1, 2, 4, 8) if k <= self.judged]

    @property
    def mean(self) -> float | None:
        """The mean reward of the judged episodes (None when none is judged)."""
        return self.passed / self.judged if self.judged else None

    def interval(self, z: float = 1.96) -> tuple[float, float] | None:
        """The Wilson score interval of the mean reward (95% by default), None when nothing is judged."""
        n = self.judged
        if not n:
            return None
        p = self.passed / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return max(0.0, centre - half), min(1.0, centre + half)

    def pass_hat(self, k: int) -> float:
        """pass^k (tau-bench): the chance that k attempts drawn without replacement all pass,
        C(passed, k) / C(judged, k)."""
        if not 0 < k <= self.judged:
            raise ValueError(f"pass^{k} needs at least {k} judged episodes, {self.judged} here")
        return math.comb(self.passed, k) / math.comb(self.judged, k)


def _where(query: EpisodeQuery, ph: str, recency: str = "rowid", text_of: str = "{}") -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    exact = (
        ("world", query.world),
        ("task", query.task),
        ("status", query.status),
        ("principal", query.principal),
    )
    for column, value in exact:
        if value is not None:
            clauses.append(f"{column} = {ph}")
            params.append(value)
    if query.group is not None:  # a group is its root episode and the forks that name it
        clauses.append(f"(group_id = {ph} OR id = {ph})")
        params.extend([query.group, query.group])
    if query.reward == "none":
        clauses.append("reward IS NULL")
    elif query.reward is not None:
        clauses.append(f"reward = {ph}")
        params.append(int(query.reward))
    if query.text:
        pattern = "%" + query.text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        like = f"LIKE {ph} ESCAPE '\\'"
        clauses.append(
            "id IN (SELECT episode_id FROM "
            f"(SELECT episode_id, arguments, output, text FROM events ORDER BY {recency} DESC LIMIT {ph}) recent "
            f"WHERE lower({text_of.format('arguments')}) {like} OR lower({text_of.format('output')}) {like} "
            f"OR lower({text_of.format('text')}) {like})"
        )
        params.extend([TEXT_SCAN_LIMIT, pattern, pattern, pattern])
    return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), params


def page_sql(
    query: EpisodeQuery, ph: str = "?", recency: str = "rowid", text_of: str = "{}"
) -> tuple[str, str, list[Any]]:
    """The statements of one page: (rows SQL, count SQL, parameters of the WHERE clause).

    The rows statement takes the WHERE parameters followed by limit and offset; the count statement takes
    the WHERE parameters alone. Rows come in `EpisodeRow` field order (errors and forks excluded:
    `error_counts_sql`, `fork_counts_sql`).
    The text filter reads the newest events ordered by `recency`: `rowid` (SQLite's insertion order), or an
    engine's own (Postgres: `created_at`, indexed), and reads an event column as `text_of` with the column's name
    in its `{}`: SQLite's `TEXT_OF`, which inflates a compressed one (`simia.sim.storage.sql.packed`).
    """
    where, params = _where(query, ph, recency, text_of)
    direction = "DESC" if query.descending else "ASC"
    key = SORT_KEYS[query.sort]
    order = f"{key} {direction}" if query.sort == "time" else f"({key} IS NULL), {key} {direction}, created_at DESC"
    rows = f"SELECT {_ROW_COLUMNS} FROM episodes {where} ORDER BY {order} LIMIT {ph} OFFSET {ph}"
    return rows, f"SELECT COUNT(*) FROM episodes {where}", params


def error_counts_sql(n: int, ph: str = "?") -> str:
    """Agent and infrastructure error counts of `n` episodes (their ids as parameters): rows of
    (episode_id, agent errors, infra errors)."""
    marks = ", ".join([ph] * n)
    return (
        "SELECT episode_id, SUM(CASE WHEN error_kind = 'agent' THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN error_kind = 'infra' THEN 1 ELSE 0 END) "
        f"FROM events WHERE episode_id IN ({marks}) AND is_error = 1 GROUP BY episode_id"
    )


def fork_counts_sql(n: int, ph: str = "?") -> str:
    """How many forks each of `n` episodes (their ids as parameters) is the group root of: rows of
    (episode_id, forks), for the roots among them."""
    marks = ", ".join([ph] * n)
    return f"SELECT group_id, COUNT(*) FROM episodes WHERE group_id IN ({marks}) GROUP BY group_id"


def task_stats_sql(world: str | None, principal: str | None, ph: str = "?") -> tuple[str, list[Any]]:
    """Per-(world, task) counts: rows of (world, task, episodes, judged, passed), by world and task."""
    where, params = _where(EpisodeQuery(world=world, principal=principal), ph)
    return (
        "SELECT world, task, COUNT(*), COUNT(reward), SUM(CASE WHEN reward = 1 THEN 1 ELSE 0 END) "
        f"FROM episodes {where} GROUP BY world, task ORDER BY world, task"
    ), params


def unmatched_filter(
    stats: Iterable[TaskStats], world: str | None, task: str | None, known: Mapping[str, Iterable[str]] | None = None
) -> str | None:
    """Why a `world` or `task` filter matched nothing because no episode (and no `known` world: name -> its task
    ids) has that name, saying which names there are; None when the names exist (the other filters excluded all).

    A reader would otherwise take a misspelt name for an empty result."""
    tasks: dict[str, set[str]] = {name: set(ids) for name, ids in (known or {}).items()}
    for row in stats:
        tasks.setdefault(row.world, set()).update([row.task] if row.task else [])
    if world is not None and world not in tasks:
        return f"no episode is of world {world!r}; worlds: {', '.join(sorted(tasks)) or '(none)'}"
    if task is None:
        return None
    ids = tasks[world] if world is not None else set().union(*tasks.values())
    if task in ids:
        return None
    where = f" of world {world!r}" if world is not None else ""
    return f"no episode is of task {task!r}{where}; tasks{where}: {', '.join(sorted(ids)) or '(none)'}"
