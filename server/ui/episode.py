"""The episode page: lineage, verdict, the timeline of tool calls (and, from the verdict, the progress curve and
the process scores: `rewards`), one step's state diff, the transcript; and the page of the full state at any step."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from simia.sim.records import EpisodeRecord, EventRecord
from simia.sim.storage import EpisodeRow
from simia.sim.verdict import Verdict

from .cost import Spend
from .diff import state_diff
from .html import duration, h, json_block, json_inline, page, query_link, reward_badge, status_badge, timestamp
from .rewards import render_process, render_progress, step_facts

__all__ = ["render_episode", "render_state", "timeline_rows"]

_ANSWERED = {"simulated": "", "state": "answered from the state (declared)", "real": "answered by the real server"}
"""How a call's `source` reads in its step detail (a simulated call, the usual, says nothing)."""


def _outcome(e: EventRecord) -> str:
    if not e.is_error:
        return '<span class="ok">ok</span>'
    code = h(e.error_code or "error")
    return f'<span class="err err-{h(e.error_kind or "")}">{code}</span> <small>{h(e.error_kind or "")}</small>'


def timeline_rows(episode_id: str, events: Sequence[EventRecord], selected: int | None) -> str:
    """The timeline's table rows for `events` (the `selected` step marked)."""
    rows = []
    for e in events:
        tokens = int(e.usage.get("prompt_tokens", 0)) + int(e.usage.get("completion_tokens", 0))
        origin = f'<span class="injected">injected: {h(e.injected)}</span>' if e.injected else h(e.source)
        mark = ' aria-current="step" class="selected"' if e.seq == selected else ""
        rows.append(
            f'<tr id="step-{e.seq}" data-step="{e.seq}"{mark}>'
            f'<td class="num"><a class="row-link" href="/ui/episodes/{h(episode_id)}?step={e.seq}#detail">{e.seq}</a>'
            f'</td><td class="mono">{h(e.tool)}</td><td class="mono args">{json_inline(e.arguments)}</td>'
            f"<td>{_outcome(e)}</td><td>{origin}</td><td class='num'>{e.latency_ms:.0f} ms</td>"
            f"<td class='num'>{tokens:,}</td></tr>"
        )
    return "".join(rows)


def _lineage(ep: EpisodeRecord, group: Sequence[EpisodeRow]) -> str:
    parts = []
    if ep.parent_id:
        parts.append(
            f'forked from <a href="/ui/episodes/{h(ep.parent_id)}?step={ep.fork_step}">{h(ep.parent_id)}</a> '
            f"at step {h(ep.fork_step)}"
        )
    children = [g for g in group if g.parent_id == ep.id]
    if children:
        links = ", ".join(
            f'<a href="/ui/episodes/{h(c.id)}">{h(c.id[:14])}</a> (step {h(c.fork_step)})' for c in children
        )
        parts.append(f"forks: {links}")
    if len(group) > 1:
        href = query_link("/ui", {}, group=ep.group_id or ep.id, sort="group")
        parts.append(f'fork group <a href="{href}">{h(ep.group_id or ep.id)}</a> ({len(group)} episodes)')
    return "<p class='lineage'>" + " · ".join(parts) + "</p>" if parts else ""


def _verdict(v: Verdict | None) -> str:
    if v is None:
        return '<section id="verdict"><h2>Verdict</h2><p class="empty">Not judged yet.</p></section>'
    training = v.training_reward()
    reasons = "".join(f"<li>{h(r)}</li>" for r in v.reasons)
    checks = "".join(
        f"<tr><td class='mono'>{h(c.pointer)}</td><td class='mono'>{json_inline(c.expected)}</td>"
        f"<td class='mono'>{json_inline(c.actual)}</td><td>{'✓ pass' if c.passed else '✗ fail'}</td></tr>"
        for c in v.rule_checks
    )
    criteria = "".join(
        f"<tr><td>{h(c.criterion)}</td><td>{'✓ pass' if c.passed else '✗ fail'}</td><td>{h(c.evidence)}</td></tr>"
        for c in v.criteria
    )
    mismatches = "".join(f"<li>{h(m)}</li>" for m in v.transcript_mismatches)
    cost = v.usage.get("cost_usd")
    facts = [
        f"reward {reward_badge(v.reward)}",
        f"status {h(v.status)}",
        f"training reward {h('masked' if training is None else training)}",
        f"checks {h(', '.join(v.checks) or 'none')}",
        f"judge {h(v.judge_model or 'none')}",
    ]
    if cost is not None:
        facts.append(f"judge cost ${float(cost):.4f}")
    if v.infra_failures:
        facts.append(f"infra failures {v.infra_failures}")
    if v.fabricated:
        facts.append('<strong class="err">fabricated transcript</strong>')
    return f"""<section id="verdict"><h2>Verdict</h2><p class="facts">{" · ".join(facts)}</p>
{f"<h3>Reasons</h3><ul class='reasons'>{reasons}</ul>" if reasons else ""}
{
        f'''<h3>Rule checks</h3><div class="scroll"><table class="checks"><thead><tr><th>path</th><th>expected</th>
<th>actual</th><th>result</th></tr></thead><tbody>{checks}</tbody></table></div>'''
        if checks
        else ""
    }
{
        f'''<h3>Criteria</h3><div class="scroll"><table class="criteria"><thead><tr><th>criterion</th><th>result</th>
<th>evidence</th></tr></thead><tbody>{criteria}</tbody></table></div>'''
        if criteria
        else ""
    }
{f"<h3>Transcript mismatches</h3><ul>{mismatches}</ul>" if mismatches else ""}
</section>"""


def _diff(before: dict[str, Any], after: dict[str, Any]) -> str:
    changes = state_diff(before, after)
    if not changes:
        return '<p class="empty">The state did not change.</p>'
    rows = "".join(
        f'<tr class="op-{c.op}"><td>{c.op}</td><td class="mono">{h(c.path)}</td>'
        f'<td class="mono">{"" if c.op == "added" else json_inline(c.before, 400)}</td>'
        f'<td class="mono">{"" if c.op == "removed" else json_inline(c.after, 400)}</td></tr>'
        for c in changes
    )
    return (
        '<div class="scroll"><table class="diff"><thead><tr><th>change</th><th>path</th><th>before</th>'
        f"<th>after</th></tr></thead><tbody>{rows}</tbody></table></div>"
    )


def _text_adds(e: EventRecord) -> bool:
    """Whether a result's text says more than its structured output (it is usually that output as JSON)."""
    if e.output is None or not e.text:
        return False
    try:
        return bool(json.loads(e.text) != e.output)
    except ValueError:
        return True


def _detail(ep: EpisodeRecord, e: EventRecord, before: dict[str, Any], after: dict[str, Any], last: int) -> str:
    progress = ep.verdict.progress if ep.verdict else None
    nav = []
    if e.seq > 1:
        nav.append(f'<a rel="prev" href="/ui/episodes/{h(ep.id)}?step={e.seq - 1}#detail">← step {e.seq - 1}</a>')
    if e.seq < last:
        nav.append(f'<a rel="next" href="/ui/episodes/{h(ep.id)}?step={e.seq + 1}#detail">step {e.seq + 1} →</a>')
    state = f"/ui/episodes/{h(ep.id)}/state?step="
    result = json_block(e.output) if e.output is not None else f'<pre class="text">{h(e.text)}</pre>'
    facts = [f"{_outcome(e)}", f"{e.latency_ms:.0f} ms", f"model {h(e.model or '–')}", timestamp(e.created_at)]
    if e.injected:
        facts.append(f"injected fault: {h(e.injected)}")
    answered = _ANSWERED.get(e.source, f"source: {e.source}")
    if answered:
        facts.append(h(answered))
    facts += step_facts(progress, e.seq)
    if e.detail:
        facts.append(f"detail: {h(e.detail)}")
    return f"""<section id="detail" tabindex="-1"><h2>Step {e.seq}: <span class="mono">{h(e.tool)}</span></h2>
<nav class="pager">{" ".join(nav)} <a id="state-link" href="{state}{e.seq}">full state after step {e.seq}</a>
· <a href="{state}{e.seq - 1}">before</a></nav>
<p class="facts">{" · ".join(facts)}</p>
<div class="cols"><div><h3>Arguments</h3>{json_block(e.arguments)}</div><div><h3>Result</h3>{result}
{f'<h3>Text</h3><pre class="text">{h(e.text)}</pre>' if _text_adds(e) else ""}</div></div>
<h3>State diff</h3>{_diff(before, after)}
<details><summary>state patch (RFC 6902)</summary>{json_block(e.state_patch)}</details>
<details><summary>usage</summary>{json_block(e.usage)}</details>
</section>"""


def _transcript(messages: list[dict[str, Any]] | None) -> str:
    if not messages:
        return '<p class="empty">No transcript (it arrives with <code>/end</code>).</p>'
    items = []
    for m in messages:
        calls = "".join(
            f'<div class="call mono">→ {h(c.get("function", {}).get("name"))}'
            f"({h(c.get('function', {}).get('arguments'))})</div>"
            for c in m.get("tool_calls") or []
            if isinstance(c, dict)
        )
        content = m.get("content")
        text = content if isinstance(content, str) else ("" if content is None else json_inline(content, 2000))
        items.append(
            f'<li class="msg role-{h(m.get("role"))}"><span class="role">{h(m.get("role"))}</span>'
            f'<div class="content">{h(text)}</div>{calls}</li>'
        )
    return f'<ol class="transcript">{"".join(items)}</ol>'


def render_episode(
    ep: EpisodeRecord,
    events: Sequence[EventRecord],
    selected: int | None,
    before: dict[str, Any],
    after: dict[str, Any],
    group: Sequence[EpisodeRow],
) -> str:
    """The episode page; `before`/`after` are the states around the `selected` step (when there is one)."""
    chosen = next((e for e in events if e.seq == selected), None)
    facts = [
        status_badge(ep.status),
        f"reward {reward_badge(ep.verdict.reward if ep.verdict else None)}",
        f"world <a href='/ui/worlds/{h(ep.world)}'>{h(ep.world)}</a>",
        f"task {h(ep.task or '–')}",
        f"seed {h(ep.seed)}" if ep.seed is not None else "",
        f"{ep.calls} calls",
        f"{duration((ep.ended_at or ep.updated_at) - ep.created_at)}",
        f"started {timestamp(ep.created_at)}",
        f"reason: {h(ep.status_reason)}" if ep.status_reason else "",
    ]
    live = ep.status == "active"
    body = f"""<p class="crumbs"><a href="/ui">Runs</a> › episode</p>
<h1 class="mono">{h(ep.id)}</h1>
<p class="facts" id="facts">{" · ".join(f for f in facts if f)}</p>
<p class="facts" id="cost">simulator cost {Spend.of_events(events).html()}</p>
{_lineage(ep, group)}
{'<p class="live" id="live" role="status">live: new calls appear as they land</p>' if live else ""}
<h2>Timeline</h2>
<div class="scroll"><table class="timeline" id="timeline"><thead><tr><th>#</th><th>tool</th><th>arguments</th>
<th>result</th><th>origin</th><th>latency</th><th>tokens</th></tr></thead>
<tbody id="timeline-rows">{timeline_rows(ep.id, events, selected)}</tbody></table></div>
{"" if events else '<p class="empty" id="no-calls">No calls yet.</p>'}
{render_progress(ep.id, events, ep.verdict.progress if ep.verdict else None, selected)}
{render_process(ep.id, ep.verdict.process if ep.verdict else None)}
{_detail(ep, chosen, before, after, events[-1].seq) if chosen else ""}
{_verdict(ep.verdict)}
<section id="transcript"><h2>Transcript</h2>{_transcript(ep.transcript)}</section>
"""
    data = ['data-page="episode"', f'data-episode="{h(ep.id)}"', f'data-seq="{ep.seq}"']
    if live:
        data.append('data-live="1"')
    return page(f"Episode {ep.id[:14]}", body, nav="runs", data=data)


def render_state(ep: EpisodeRecord, step: int, state: dict[str, Any]) -> str:
    """The full state of `ep` right after `step` (0: its initial state), with links to the steps around it."""
    nav = [f'<a href="/ui/episodes/{h(ep.id)}?step={step}#detail">back to step {step}</a>']
    if step > 0:
        nav.insert(0, f'<a rel="prev" href="/ui/episodes/{h(ep.id)}/state?step={step - 1}">← after step {step - 1}</a>')
    if step < ep.seq:
        nav.append(f'<a rel="next" href="/ui/episodes/{h(ep.id)}/state?step={step + 1}">after step {step + 1} →</a>')
    body = f"""<p class="crumbs"><a href="/ui">Runs</a> › <a href="/ui/episodes/{h(ep.id)}">episode</a> › state</p>
<h1>State after step {step}</h1><p class="mono">{h(ep.id)}</p>
<nav class="pager">{" · ".join(nav)}</nav>
{json_block(state)}"""
    return page(f"State {step}", body, nav="runs", data=['data-page="state"'])
