"""The runs page: episodes in a filtered, sorted, paged table, and the per-task reward summary with its bars."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from simia.sim.storage import TEXT_SCAN_LIMIT, EpisodePage, EpisodeQuery, EpisodeRow, TaskStats

from .cost import Spend
from .html import bar, duration, h, page, query_link, reward_badge, status_badge, timestamp

__all__ = ["COLUMNS", "render_runs", "task_summary"]

COLUMNS: list[tuple[str, str | None]] = [
    ("episode", None),
    ("world", "world"),
    ("task", "task"),
    ("status", "status"),
    ("reward", "reward"),
    ("calls", "calls"),
    ("errors (agent / infra)", None),
    ("tokens", "tokens"),
    ("cost", "cost"),
    ("duration", "duration"),
    ("time", "time"),
    ("fork group", "group"),
]
"""The table's columns: (heading, sort key or None when it cannot be sorted on)."""


def _header(params: Mapping[str, str], query: EpisodeQuery) -> str:
    cells = []
    for label, key in COLUMNS:
        if key is None:
            cells.append(f'<th scope="col">{h(label)}</th>')
            continue
        current = query.sort == key
        descending = not query.descending if current else key in ("time", "reward", "calls", "tokens", "cost")
        arrow = (" ▼" if query.descending else " ▲") if current else ""
        sort = "descending" if query.descending else "ascending"
        href = query_link("/ui", params, sort=key, dir="desc" if descending else "asc", page=None)
        aria = f' aria-sort="{sort}"' if current else ""
        cells.append(f'<th scope="col"{aria}><a href="{href}">{h(label)}{arrow}</a></th>')
    return "<tr>" + "".join(cells) + "</tr>"


def _row(row: EpisodeRow, params: Mapping[str, str]) -> str:
    group = ""
    if row.group_id or row.forks:
        root = row.group_id or row.id
        what = f" · fork of step {row.fork_step}" if row.parent_id else f" · root, {row.forks} fork(s)"
        group = f'<a href="{query_link("/ui", {}, group=root, sort="group")}">{h(root[:12])}</a>{what}'
    errors = f"{row.agent_errors} / {row.infra_errors}" if row.agent_errors or row.infra_errors else "0 / 0"
    cost = f"${row.cost_usd:.4f}" if row.cost_usd else "–"
    return (
        f'<tr data-episode="{h(row.id)}">'
        f'<td><a class="row-link mono" href="/ui/episodes/{h(row.id)}">{h(row.id[:14])}</a></td>'
        f'<td><a href="{query_link("/ui", params, world=row.world, page=None)}">{h(row.world)}</a></td>'
        f"<td>{h(row.task or '–')}</td><td>{status_badge(row.status)}</td><td>{reward_badge(row.reward)}</td>"
        f'<td class="num">{row.calls}</td><td class="num">{errors}</td>'
        f'<td class="num">{row.prompt_tokens + row.completion_tokens:,}</td><td class="num">{cost}</td>'
        f'<td class="num">{duration(row.duration)}</td><td>{timestamp(row.created_at)}</td><td>{group}</td></tr>'
    )


def _total(result: EpisodePage) -> str:
    """The table's footer: what the listed episodes cost together."""
    if not result.rows:
        return ""
    listed = len(result.rows)
    which = "on this page" if result.total > listed else "listed"
    return (
        f'<tfoot><tr><td colspan="{len(COLUMNS)}" id="run-cost">cost of the {listed:,} episode(s) {which}: '
        f"{Spend.of_rows(result.rows).html()}</td></tr></tfoot>"
    )


def _select(name: str, label: str, options: Sequence[tuple[str, str]], current: str | None) -> str:
    opts = "".join(
        f'<option value="{h(v)}"{" selected" if v == (current or "") else ""}>{h(text)}</option>' for v, text in options
    )
    return f'<label>{h(label)} <select name="{h(name)}">{opts}</select></label>'


def _filters(query: EpisodeQuery, stats: Sequence[TaskStats]) -> str:
    worlds = sorted({s.world for s in stats})
    tasks = sorted({s.task for s in stats if s.task and (query.world is None or s.world == query.world)})
    parts = [
        _select("world", "world", [("", "any"), *((w, w) for w in worlds)], query.world),
        _select("task", "task", [("", "any"), *((t, t) for t in tasks)], query.task),
        _select(
            "status",
            "status",
            [("", "any"), ("active", "active"), ("ended", "ended"), ("abandoned", "abandoned")],
            query.status,
        ),
        _select(
            "reward",
            "reward",
            [("", "any"), ("1", "1 (pass)"), ("0", "0 (fail)"), ("none", "not judged")],
            query.reward,
        ),
        f'<label>text <input type="search" name="text" id="text-filter" value="{h(query.text or "")}" '
        'placeholder="in arguments or outputs"></label>',
    ]
    hidden = "".join(
        f'<input type="hidden" name="{k}" value="{h(v)}">'
        for k, v in (("sort", query.sort), ("dir", "desc" if query.descending else "asc"), ("group", query.group))
        if v
    )
    return (
        f'<form class="filters" method="get" action="/ui" role="search">{"".join(parts)}{hidden}'
        '<button type="submit">Filter</button> <a href="/ui">clear</a></form>'
    )


def task_summary(stats: Sequence[TaskStats], *, link_world: bool = True) -> str:
    """The per-task table: episodes, mean reward with its 95% interval and a bar, pass^k where k attempts exist."""
    if not stats:
        return '<p class="empty">No episodes yet.</p>'
    rows = []
    for s in stats:
        mean, interval = s.mean, s.interval()
        label = "not judged" if mean is None else f"{mean:.2f}"
        ci = f"[{interval[0]:.2f}, {interval[1]:.2f}]" if interval else ""
        passk = " · ".join(f"pass^{k} {s.pass_hat(k):.2f}" for k in s.ks[1:]) or "–"
        task = h(s.task or "(no task)")
        if link_world:
            task = f'<a href="{query_link("/ui", {}, world=s.world, task=s.task)}">{task}</a>'
        rows.append(
            f"<tr><td>{h(s.world)}</td><td>{task}</td><td class='num'>{s.episodes}</td>"
            f"<td class='num'>{s.judged}</td><td>{bar(mean, label)}</td><td class='num'>{ci}</td><td>{passk}</td></tr>"
        )
    return (
        '<div class="scroll"><table class="summary"><caption>Reward per task (every judged episode is an attempt; '
        "interval: Wilson 95%)</caption><thead><tr><th>world</th><th>task</th><th>episodes</th><th>judged</th>"
        "<th>mean reward</th><th>95% interval</th><th>pass^k</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
    )


def render_runs(params: Mapping[str, str], query: EpisodeQuery, result: EpisodePage, stats: list[TaskStats]) -> str:
    """The runs page for `query` (from the request's `params`), its `result` page, and the task statistics."""
    first, last = query.offset + 1, query.offset + len(result.rows)
    page_no = query.offset // query.limit
    pager = []
    if page_no > 0:
        pager.append(f'<a rel="prev" href="{query_link("/ui", params, page=page_no - 1 or None)}">← newer page</a>')
    if last < result.total:
        pager.append(f'<a rel="next" href="{query_link("/ui", params, page=page_no + 1)}">next page →</a>')
    shown = f"{first:,}–{last:,} of {result.total:,}" if result.rows else f"0 of {result.total:,}"
    scan = (
        ""
        if result.text_scan_complete
        else f'<p class="note">The text filter searched the newest {TEXT_SCAN_LIMIT:,} calls.</p>'
    )
    group = f'<p class="note">Fork group {h(query.group)}.</p>' if query.group else ""
    rows = "".join(_row(r, params) for r in result.rows) or (
        f'<tr><td colspan="{len(COLUMNS)}" class="empty">No episodes match.</td></tr>'
    )
    body = f"""<h1>Runs</h1>
{_filters(query, stats)}
{group}{scan}
<p class="count" id="count">{shown}</p>
<div class="scroll"><table class="runs" id="runs"><thead>{_header(params, query)}</thead>
<tbody>{rows}</tbody>{_total(result)}</table></div>
<nav class="pager">{" ".join(pager)}</nav>
<h2>Tasks</h2>
{task_summary(stats)}
"""
    return page("Runs", body, nav="runs", data=['data-page="runs"'])
