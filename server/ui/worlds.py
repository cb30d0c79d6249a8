"""The worlds pages: every world seen (loaded or in the database), and one world's tools, tasks and rewards."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from simia.sim.storage import TaskStats
from simia.sim.world import World

from .html import bar, h, json_block, page, query_link
from .runs import task_summary

__all__ = ["render_world", "render_worlds"]


def render_worlds(worlds: Mapping[str, World], stats: Sequence[TaskStats]) -> str:
    """The list of worlds: loaded ones with their tool and task counts, and every world episodes were run in."""
    names = sorted(set(worlds) | {s.world for s in stats})
    rows = []
    for name in names:
        mine = [s for s in stats if s.world == name]
        judged, passed = sum(s.judged for s in mine), sum(s.passed for s in mine)
        world = worlds.get(name)
        tools = str(len(world.tools)) if world else "–"
        tasks = str(len(world.tasks)) if world else "–"
        rate = passed / judged if judged else None
        rows.append(
            f'<tr><td><a class="row-link" href="/ui/worlds/{h(name)}">{h(name)}</a></td>'
            f"<td>{h(world.title if world else '(not loaded)')}</td><td class='num'>{tools}</td>"
            f"<td class='num'>{tasks}</td><td class='num'>{sum(s.episodes for s in mine):,}</td>"
            f"<td>{bar(rate, 'not judged' if rate is None else f'{rate:.2f}')}</td></tr>"
        )
    body = (
        '<h1>Worlds</h1><div class="scroll"><table class="worlds"><thead><tr><th>world</th><th>title</th>'
        "<th>tools</th><th>tasks</th><th>episodes</th><th>reward rate</th></tr></thead><tbody>"
        + ("".join(rows) or '<tr><td colspan="6" class="empty">No worlds.</td></tr>')
        + "</tbody></table></div>"
    )
    return page("Worlds", body, nav="worlds", data=['data-page="worlds"'])


def render_world(name: str, world: World | None, stats: Sequence[TaskStats]) -> str:
    """One world: its tools with their schemas and documented errors, its tasks, and reward rate per task."""
    if world is None:
        tools = (
            '<p class="empty">This world\'s files are not loaded here (<code>simia view --worlds-dir DIR</code> '
            "shows its tools and tasks).</p>"
        )
        tasks = ""
    else:
        tools = "".join(
            f"""<details class="tool" id="tool-{h(t.name)}"><summary><span class="mono">{h(t.name)}</span>
{h(t.title or "")} <small>{h(t.description)}</small></summary>
<h4>inputSchema</h4>{json_block(t.input_schema)}
{f"<h4>outputSchema</h4>{json_block(t.output_schema)}" if t.output_schema else ""}
{f"<h4>annotations</h4>{json_block(t.annotations)}" if t.annotations else ""}
{
                "<h4>errors</h4><ul>"
                + "".join(f"<li><code>{h(e.code)}</code> {h(e.when)}</li>" for e in t.errors)
                + "</ul>"
                if t.errors
                else ""
            }</details>"""
            for t in world.tools
        )
        tasks = "".join(
            f'<tr><td class="mono"><a href="{query_link("/ui", {}, world=name, task=t.id)}">{h(t.id)}</a></td>'
            f"<td>{h(t.instruction)}</td></tr>"
            for t in world.tasks
        )
        tasks = (
            '<h2>Tasks</h2><div class="scroll"><table class="tasks"><thead><tr><th>id</th><th>instruction</th></tr>'
            f"</thead><tbody>{tasks}</tbody></table></div>"
            if tasks
            else ""
        )
    title = f" <small>{h(world.title)}</small>" if world and world.title else ""
    description = f"<p>{h(world.description)}</p>" if world and world.description else ""
    body = f"""<p class="crumbs"><a href="/ui/worlds">Worlds</a> › {h(name)}</p>
<h1>{h(name)}{title}</h1>{description}
<p><a href="{query_link("/ui", {}, world=name)}">episodes of this world</a></p>
<h2>Reward rate per task</h2>{task_summary(stats)}
<h2>Tools</h2>{tools}
{tasks}"""
    return page(f"World {name}", body, nav="worlds", data=['data-page="world"'])
