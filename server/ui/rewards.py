"""The per-step rewards of an episode's verdict on its page: the progress curve (progress at the start and after
every call, drawn as inline SVG, with each call's shaped reward and a mark where a call broke a kept check or made
a forbidden state hold, and the same values as a table) and the process judge's score of each agent step.

Both come from the verdict (`Verdict.progress`, `Verdict.process`); an episode without either gets nothing, not an
empty chart. The SVG is plain markup styled by `viewer.css` (the pages forbid inline styles and scripts); every
point and mark carries its values as `data-` attributes and a `<title>`, and the table says the same in text.
"""

from __future__ import annotations

from collections.abc import Sequence

from simia.sim.records import EventRecord
from simia.sim.verdict import ProcessScores, ProgressCurve, ProgressStep

from .html import h

__all__ = ["render_process", "render_progress", "step_facts"]

_WIDTH, _HEIGHT = 640, 200
_LEFT, _RIGHT, _TOP, _BOTTOM = 40, 16, 22, 26
_LABELLED = 16  # calls up to which each point is labelled with its number and reward (beyond: every few)


def _reward(step: ProgressStep) -> str:
    return "0 (infra)" if step.infra else f"{step.reward:+.2f}"


def _changes(step: ProgressStep) -> list[tuple[str, str]]:
    """What a call changed among the checks: (kind, words) each."""
    return (
        [("achieved", f"achieved {p}") for p in step.achieved]
        + [("broken", f"broke {p}") for p in step.broken]
        + [("violated", f"forbidden {p} reached") for p in step.violated]
    )


def step_facts(curve: ProgressCurve | None, seq: int) -> list[str]:
    """The progress facts of the call `seq` for its step detail (none when the episode has no curve)."""
    step = next((s for s in (curve.steps if curve else []) if s.seq == seq), None)
    if step is None:
        return []
    facts = [f"progress {step.progress:.2f}", f"shaped reward {h(_reward(step))}"]
    return facts + _marked(step)


def _marked(step: ProgressStep) -> list[str]:
    """The call's changes as HTML, each marked with its kind."""
    return [f'<span class="{kind}">{h(words)}</span>' for kind, words in _changes(step)]


def _point(kind: str, seq: int, progress: float, reward: float | None, at: tuple[float, float], tip: str) -> str:
    """One point of the curve, its values in `data-` attributes (full precision) and in its tooltip."""
    shaped = "" if reward is None else f' data-reward="{reward!r}"'
    return (
        f'<circle class="{kind}" data-seq="{seq}" data-progress="{progress!r}"{shaped} cx="{at[0]:.1f}" '
        f'cy="{at[1]:.1f}" r="4"><title>{h(tip)}</title></circle>'
    )


def _marks(step: ProgressStep, x: float, span: tuple[float, float]) -> str:
    """The marks at a call that made a forbidden state hold or broke a kept check: a line across the plot each
    (side by side when it did both), with the pointers."""
    marks = []
    for kind, pointers, dx, what in (
        ("violated", step.violated, -2, "made a forbidden state hold"),
        ("broken", step.broken, 2, "broke a kept check"),
    ):
        if pointers:
            marks.append(
                f'<g class="mark {kind}" data-seq="{step.seq}" data-pointers="{h(" ".join(pointers))}">'
                f'<line x1="{x + dx:.1f}" x2="{x + dx:.1f}" y1="{span[0]}" y2="{span[1]}"/>'
                f"<title>{h(f'call {step.seq} {what}: ' + ', '.join(pointers))}</title></g>"
            )
    return "".join(marks)


def _chart(curve: ProgressCurve, tools: dict[int, str], selected: int | None) -> str:
    """The curve: progress (y) at the start and after each call (x, in order), each call's shaped reward above
    its point, and the marks of `_marks`; the y axis spans 0 to 1 and whatever the curve reaches beyond."""
    values = [curve.start, *(s.progress for s in curve.steps)]
    lo, hi = min(0.0, *values), max(1.0, *values)
    n = max(1, len(curve.steps))
    width, height = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM
    every = 1 if len(curve.steps) <= _LABELLED else -(-len(curve.steps) // _LABELLED)

    def x(i: int) -> float:
        return _LEFT + width * i / n

    def y(v: float) -> float:
        return _TOP + height * (hi - v) / (hi - lo)

    grid = "".join(
        f'<line class="grid" x1="{_LEFT}" x2="{_WIDTH - _RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>'
        f'<text class="axis" x="{_LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>'
        for v in sorted({0.0, 1.0} | {v for v in (lo, hi) if min(abs(v), abs(v - 1)) >= 0.1 * (hi - lo)})
    )
    line = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
    points = [_point("pt start", 0, curve.start, None, (x(0), y(curve.start)), f"start: progress {curve.start:.2f}")]
    marks, labels = [], []
    for i, step in enumerate(curve.steps, start=1):
        cx, cy = x(i), y(step.progress)
        tip = f"call {step.seq} {tools.get(step.seq, '')}: progress {step.progress:.2f}, shaped reward {_reward(step)}"
        tip += "".join(f"; {words}" for _, words in _changes(step))
        kind = "pt" + (" infra" if step.infra else "") + (" selected" if step.seq == selected else "")
        points.append(_point(kind, step.seq, step.progress, step.reward, (cx, cy), tip))
        marks.append(_marks(step, cx, (_TOP, _TOP + height)))
        marked = bool(step.violated or step.broken)
        if i % every == 0 or i == len(curve.steps):
            labels.append(
                f'<text class="axis" x="{cx:.1f}" y="{_HEIGHT - 8}" text-anchor="middle">{step.seq}</text>'
                f'<text class="reward" x="{cx + (6 if marked else 0):.1f}" y="{cy - 8:.1f}" '
                f'text-anchor="{"start" if marked else "middle"}">{h(_reward(step))}</text>'  # clear of the marks
            )
    summary = f"progress from {curve.start:.2f} to {curve.end:.2f} over {len(curve.steps)} call(s)"
    return (
        f'<svg class="progress-chart" viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" aria-label="{h(summary)}">'
        f'{grid}{"".join(marks)}<polyline class="curve" points="{line}"/>{"".join(points)}{"".join(labels)}</svg>'
    )


def _table(episode_id: str, curve: ProgressCurve, tools: dict[int, str], selected: int | None) -> str:
    rows = [f'<tr data-seq="0"><td>start</td><td></td><td class="num">{curve.start:.2f}</td><td></td><td></td></tr>']
    for step in curve.steps:
        mark = ' aria-current="step"' if step.seq == selected else ""
        rows.append(
            f'<tr data-seq="{step.seq}"{mark}>'
            f'<td class="num"><a href="/ui/episodes/{h(episode_id)}?step={step.seq}#detail">{step.seq}</a></td>'
            f'<td class="mono">{h(tools.get(step.seq, ""))}</td><td class="num">{step.progress:.2f}</td>'
            f'<td class="num">{h(_reward(step))}</td><td class="mono">{"; ".join(_marked(step))}</td></tr>'
        )
    return (
        '<div class="scroll"><table class="progress" id="progress-steps"><thead><tr><th>#</th><th>tool</th>'
        "<th>progress</th><th>shaped reward</th><th>checks</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def render_progress(
    episode_id: str, events: Sequence[EventRecord], curve: ProgressCurve | None, selected: int | None
) -> str:
    """The progress section of an episode's page: the curve, then each call's values; "" without a curve."""
    if curve is None:
        return ""
    tools = {e.seq: e.tool for e in events}
    goals = sum(1 for c in curve.checks if not c.forbidden)
    forbidden = len(curve.checks) - goals
    facts = [
        f"start {curve.start:.2f}",
        f"end {curve.end:.2f}",
        f"shaped rewards sum to {sum(curve.rewards):+.2f}",
        f"gamma {curve.gamma:g}",
        f"{goals} goal check(s), {forbidden} forbidden state(s)",
    ]
    legend = (
        '<p class="legend"><span class="curve">● progress after each call</span> · '
        '<span class="violated">| a forbidden state reached</span> · '
        '<span class="broken">| a kept check broken</span></p>'
    )
    return f"""<section id="progress"><h2>Progress</h2><p class="facts">{" · ".join(facts)}</p>
{_chart(curve, tools, selected)}{legend}{_table(episode_id, curve, tools, selected)}</section>"""


def render_process(episode_id: str, process: ProcessScores | None) -> str:
    """The process judge's score of each agent step; "" when it did not run."""
    if process is None:
        return ""
    if process.status != "ok":
        return (
            '<section id="process"><h2>Process scores</h2>'
            f'<p class="problem">No step scores: {h(process.reason)}</p></section>'
        )
    rows = "".join(
        f'<tr data-step="{s.step}" class="score-{h(s.score)}"><td class="num">{s.step}</td>'
        f"<td class='num'>{h('' if s.turn is None else s.turn)}</td><td>"
        + ", ".join(f'<a href="/ui/episodes/{h(episode_id)}?step={q}#detail">{q}</a>' for q in s.seqs)
        + f"</td><td>{h(s.score)}</td><td>{h(s.reason)}</td></tr>"
        for s in process.steps
    )
    return f"""<section id="process"><h2>Process scores</h2><div class="scroll"><table class="process">
<thead><tr><th>step</th><th>turn</th><th>calls</th><th>score</th><th>reason</th></tr></thead>
<tbody>{rows}</tbody></table></div></section>"""
