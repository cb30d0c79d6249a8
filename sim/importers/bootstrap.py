"""Bootstrapping a world: a model drafts the state (with its schema), the tasks a world with tools lacks and the
groundings of tools that declare none (`simia.sim.importers.drafted_groundings`; given a database of recorded
runs, a drafted grounding must also answer the tool's recorded calls as recorded).

Every draft is checked before anything is written: the state must fit the drafted schema;
each task's `expected_state` rules must fail on
the task's initial state (otherwise any agent passes) and point into the state, and its
`initial_state_patch` must apply. A bad draft is retried with its problems fed back, then
dropped with its reasons in `bootstrap_report.json`. Hand-written content (state.json, tasks, a
`state_schema` in world.yaml) is never overwritten without `force`: a kept schema is the one the drafted
state must satisfy. The state skeleton an import wrote (REST collections keyed by id, recorded in
import_report.json) is not hand-written: it is drafted over, keeping each collection an object keyed by id,
so the tools' declarations still point into it. A re-run keeps what an earlier run wrote and drafts the rest.
Files are written atomically and the finished folder must load (`load_world`).
"""

from __future__ import annotations

import copy
import json
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..backends import Backend, CompletionRequest
from ..errors import BackendError, StateError, WorldError
from ..judging import rule_checks
from ..schema import validate_instance
from ..storage import Store, redact_url
from ..world import Task, World, apply_patch, atomic_write_text, is_missing, load_world, resolve_pointer, world_card
from .drafted_groundings import ANSWER as GROUNDINGS_ANSWER
from .drafted_groundings import Recording, draft_groundings, read_recordings
from .imported import REPORT_FILE, SKELETON_KEY, normal_modes

__all__ = ["BootstrapConfig", "BootstrapReport", "bootstrap", "check_task"]

TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
STATE_ANSWER: dict[str, Any] = {
    "type": "object",
    "properties": {"state_schema": {"type": "object"}, "state": {"type": "object"}},
    "required": ["state_schema", "state"],
}
TASKS_ANSWER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tasks": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "instruction": {"type": "string"},
                    "user_hidden": {"type": "string"},
                    "rubric": {"type": "string"},
                    "expected_state": {"type": "object"},
                    "initial_state_patch": {"type": "array", "items": {"type": "object"}},
                },
                "required": ["id", "instruction", "rubric", "expected_state"],
            },
        }
    },
    "required": ["tasks"],
}


@dataclass
class BootstrapConfig:
    """One `simia bootstrap`.

    Attributes:
        entities: records per collection the drafted state should hold.
        tasks: tasks the world should have when done (existing drafted ones count).
        force: replace hand-written state.json / tasks.jsonl / state_schema.
        max_attempts: drafts tried (problems fed back) before a part is dropped.
        max_tokens: cap on each model answer.
        groundings: draft groundings for the tools that declare none (`simia.sim.importers.drafted_groundings`).
    """

    entities: int = 3
    tasks: int = 5
    force: bool = False
    max_attempts: int = 3
    max_tokens: int = 4096
    groundings: bool = True


@dataclass
class BootstrapReport:
    """What a run wrote, kept and dropped (with reasons); saved as `bootstrap_report.json`."""

    world: str
    state: str = "not drafted"  # drafted | kept (existing) | dropped
    state_problems: list[str] = field(default_factory=list)
    tasks_written: list[str] = field(default_factory=list)
    tasks_kept: list[str] = field(default_factory=list)
    tasks_dropped: list[dict[str, Any]] = field(default_factory=list)
    groundings_written: list[str] = field(default_factory=list)
    groundings_dropped: list[dict[str, Any]] = field(default_factory=list)
    recorded: str = ""
    """The database whose recorded calls the drafted groundings were checked against ("": none given)."""
    groundings_reproduced: dict[str, int] = field(default_factory=dict)
    """Each written grounding's number of recorded calls it answers as recorded (0: none recorded, so it was
    checked on the drafted state only)."""
    groundings_rejected: list[dict[str, Any]] = field(default_factory=list)
    """Each drafted grounding that answered a recorded call otherwise: the first such call (tool, arguments,
    episode, seq), the recorded and the drafted answer, and why."""
    model_calls: int = 0
    last_model_problem: str = ""

    def render(self) -> str:
        lines = [
            f"world {self.world}: state {self.state}; tasks written {len(self.tasks_written)}, "
            f"kept {len(self.tasks_kept)}, dropped {len(self.tasks_dropped)}; groundings written "
            f"{len(self.groundings_written)}, dropped {len(self.groundings_dropped)} ({self.model_calls} model calls)"
        ]
        lines += [f"  state problem: {p}" for p in self.state_problems[:5]]
        lines += [f"  dropped task {d['id']}: {'; '.join(d['problems'][:3])}" for d in self.tasks_dropped]
        rejected: dict[tuple[str, str], list[int]] = {}  # a model told why often drafts the same again: one line
        for r in self.groundings_rejected:
            rejected.setdefault((r["tool"], r["problem"]), []).append(r["attempt"])
        for d in self.groundings_dropped:
            why = "; ".join(d["problems"][:3])
            if all((d["tool"], p) in rejected for p in d["problems"]):
                why = "its last draft answers a recorded call otherwise (rejected, below)"
            lines.append(f"  dropped grounding {d['tool']}: {why}")
        lines += [
            f"  rejected draft of {tool} (attempt{'s' if len(tries) > 1 else ''} {', '.join(map(str, tries))}): {why}"
            for (tool, why), tries in rejected.items()
        ]
        lines += [
            f"  grounding {name}: "
            + (
                f"reproduces {self.groundings_reproduced[name]} recorded call(s)"
                if self.groundings_reproduced.get(name)
                else f"no recorded calls{' in ' + self.recorded if self.recorded else ''}, checked on the drafted "
                "state only"
            )
            for name in self.groundings_written
        ]
        return "\n".join(lines)


def check_task(task: Task, state: dict[str, Any], state_schema: dict[str, Any] | None) -> list[str]:
    """Why a drafted task cannot train anything (empty when it can): its rules must point into the state
    and fail on the task's initial state, and its `initial_state_patch` must apply."""
    problems = []
    if not TASK_ID.fullmatch(task.id):
        problems.append(f"id {task.id!r} must be 1-64 letters, digits, '_', '.', '-'")
    try:
        start = apply_patch(state, task.initial_state_patch, state_schema)
    except StateError as exc:
        return [*problems, f"initial_state_patch does not apply: {exc}"]
    if not task.expected_state:
        problems.append("expected_state is empty: the task needs at least one rule the agent must make true")
    for pointer in task.expected_state:
        if not pointer.startswith("/"):
            problems.append(f"expected_state key {pointer!r} is not a JSON Pointer (it starts with '/')")
        elif is_missing(resolve_pointer(start, pointer.rsplit("/", 1)[0] or "")):
            problems.append(f"{pointer}: its parent is not in the state, so no call can reach it")
    if problems:
        return problems
    passing = [c.pointer for c in rule_checks(task, start) if c.passed]
    if len(passing) == len(task.expected_state):
        problems.append(f"every rule already holds before the agent acts ({', '.join(passing)}): any agent passes")
    return problems


def _ask_json(problems: list[str]) -> str:
    return "Your answer had these problems; answer again, fixing them:\n- " + "\n- ".join(problems[:10])


@dataclass(frozen=True)
class _Layout:
    """What a drafted state must keep: a hand-written state_schema, and the collections the tools' declarations
    point into (an import's skeleton: each an object keyed by record id)."""

    schema: dict[str, Any] | None = None
    collections: tuple[str, ...] = ()

    def prompt(self) -> str:
        lines = []
        if self.collections:
            listed = ", ".join(f"`{c}`" for c in self.collections)
            lines.append(
                f"The state must hold the collections {listed}, each a JSON object whose keys are the records' ids "
                'and whose values are the records (e.g. {"' + self.collections[0] + '": {"<id>": {...}}}): the '
                "tools' declarations read and write records at /<collection>/<id>."
            )
        if self.schema is not None:
            lines.append(
                "The state must satisfy this state_schema, which is kept as it is (answer it back unchanged): "
                + json.dumps(self.schema, ensure_ascii=False)[:4000]
            )
        return "\n".join(lines)


async def _draft_state(
    world: World, backend: Backend, config: BootstrapConfig, report: BootstrapReport, layout: _Layout
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You design the backing data of simulated tool environments. Answer JSON."},
        {
            "role": "user",
            "content": f"{world_card(world)}\n\n# Your task\nDraft the world's state: a JSON object holding the "
            f"records these tools read and change (about {config.entities} per collection, each collection an "
            "object keyed by the ids the tools take), and a JSON Schema (`state_schema`, type object) that the "
            "state satisfies. Use the field names the tools' inputs and outputs use. "
            f'{layout.prompt()}\nAnswer {{"state_schema": {{...}}, "state": {{...}}}}.',
        },
    ]
    for _ in range(config.max_attempts):
        data = await _complete(backend, messages, STATE_ANSWER, "world_state", config, report)
        if data is not None and layout.schema is not None:
            data = {**data, "state_schema": layout.schema}  # a hand-written schema is never replaced
        problems = _state_problems(data, report.last_model_problem, layout)
        if data is not None and not problems:
            return data["state_schema"], data["state"]
        report.state_problems = problems
        messages += [
            {"role": "assistant", "content": json.dumps(data)},
            {"role": "user", "content": _ask_json(problems)},
        ]
    return None


def _state_problems(data: dict[str, Any] | None, model_problem: str, layout: _Layout) -> list[str]:
    """Why a drafted state is unusable. Whether it holds what the tools refer to is not checked here: the
    tasks drafted next must point into it, and a task whose pointers do not resolve is dropped."""
    if data is None:
        return [f"the model gave no usable answer: {model_problem or 'not a JSON object'}"]
    schema, state = data.get("state_schema"), data.get("state")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return ["state_schema must be a JSON Schema object with type object"]
    if not isinstance(state, dict) or not state:
        return ["state must be a non-empty JSON object"]
    problems = [
        f"state.{name} must be an object whose keys are record ids and whose values are the records"
        for name in layout.collections
        if not isinstance(state.get(name), dict) or not all(isinstance(r, dict) for r in state[name].values())
    ]
    try:
        problems += [f"state breaks state_schema: {p}" for p in validate_instance(schema, state)]
    except Exception as exc:  # an invalid schema: say why, the model retries
        return [f"state_schema is not a valid JSON Schema: {exc}"]
    return problems


async def _draft_tasks(
    world: World,
    state: dict[str, Any],
    schema: dict[str, Any] | None,
    backend: Backend,
    config: BootstrapConfig,
    report: BootstrapReport,
    taken: set[str],
    wanted: int,
) -> list[Task]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You write training tasks for tool-using agents. Answer JSON."},
        {
            "role": "user",
            "content": f"{world_card(world)}\n\n# State\n{json.dumps(state, ensure_ascii=False)[:6000]}\n\n"
            f"# Your task\nWrite {wanted} different tasks a user could ask an agent to do with these tools. Each: "
            "id (snake_case, unique), instruction (the user's request), user_hidden (facts only the user knows), "
            "rubric (what the judge checks), expected_state (JSON Pointer into the state -> the value it must hold "
            'when the task is done, or {"$absent": true}; at least one rule must NOT hold in the state above), '
            "and optionally initial_state_patch (RFC 6902). "
            f"Ids already used: {', '.join(sorted(taken)) or 'none'}.",
        },
    ]
    kept: list[Task] = []
    for attempt in range(config.max_attempts):
        data = await _complete(backend, messages, TASKS_ANSWER, "world_tasks", config, report)
        problems_all: list[str] = []
        for raw in (data or {}).get("tasks") or []:
            try:
                task = Task.model_validate({k: v for k, v in raw.items() if v not in (None, "")})
            except ValidationError as exc:
                problems_all.append(f"task {raw.get('id')!r}: {exc.errors()[0]['msg']}")
                continue
            problems = check_task(task, state, schema)
            if task.id in taken:
                problems.append(f"id {task.id!r} is already used")
            if problems:
                problems_all += [f"task {task.id!r}: {p}" for p in problems]
                if attempt == config.max_attempts - 1:
                    report.tasks_dropped.append({"id": task.id, "problems": problems})
                continue
            kept.append(task)
            taken.add(task.id)
            if len(kept) == wanted:
                return kept
        if not problems_all and data is None:
            problems_all = [f"the model gave no usable answer: {report.last_model_problem or 'not a JSON object'}"]
        messages += [
            {"role": "assistant", "content": json.dumps(data)},
            {"role": "user", "content": _ask_json(problems_all or [f"write {wanted - len(kept)} more tasks"])},
        ]
    return kept


async def _complete(
    backend: Backend,
    messages: list[dict[str, Any]],
    schema: dict[str, Any],
    name: str,
    config: BootstrapConfig,
    report: BootstrapReport,
) -> dict[str, Any] | None:
    report.model_calls += 1
    report.last_model_problem = ""
    try:
        completion = await backend.complete(
            CompletionRequest(
                messages=messages, schema=schema, schema_name=name, max_tokens=config.max_tokens, temperature=0.7
            )
        )
    except BackendError as exc:
        report.last_model_problem = str(exc)
        return None
    return completion.data if isinstance(completion.data, dict) else None


async def bootstrap(
    folder: str | Path, backend: Backend, config: BootstrapConfig, *, recorded: Store | None = None
) -> BootstrapReport:
    """Draft what the world in `folder` lacks (state, state schema, tasks, groundings), check it and write it.

    Args:
        recorded: a database of the world's runs: a drafted grounding must answer the tool's calls recorded there
            (a real server's or a declaration's answers) as recorded. Without it, or for a tool with no recorded
            calls, a grounding is checked on the drafted state only.

    Raises:
        WorldError: the world does not load to begin with, or the result does not (nothing is written then).
    """
    folder = Path(folder)
    world = load_world(folder)
    report = BootstrapReport(world=world.name)
    world_file = folder / "world.yaml"
    raw_world = yaml.safe_load(world_file.read_text(encoding="utf-8"))
    schema: dict[str, Any] | None = world.state_schema
    state = copy.deepcopy(world.initial_state)
    skeleton = _import_skeleton(folder)
    hand_written = bool(state) and state != skeleton
    if hand_written and not config.force:
        report.state = "kept (existing state.json)"
    else:
        kept_schema = "state_schema" in raw_world and not config.force
        layout = _Layout(schema if kept_schema else None, tuple(skeleton or {}))
        drafted = await _draft_state(world, backend, config, report, layout)
        if drafted is None:
            report.state = "dropped"
        else:
            schema, state = drafted
            report.state = "drafted (to the existing state_schema)" if kept_schema else "drafted"
            report.state_problems = []
    existing = [] if config.force else list(world.tasks)
    report.tasks_kept = [t.id for t in existing]
    new: list[Task] = []
    if state and len(existing) < config.tasks:
        new = await _draft_tasks(
            world, state, schema, backend, config, report, {t.id for t in existing}, config.tasks - len(existing)
        )
    report.tasks_written = [t.id for t in new]
    groundings: dict[str, dict[str, Any]] = {}
    if config.groundings and state:

        async def ask(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
            return await _complete(backend, messages, GROUNDINGS_ANSWER, "world_groundings", config, report)

        recordings: dict[str, list[Recording]] = {}
        if recorded is not None:
            report.recorded = redact_url(recorded.path)  # a report is shared: no password in it
            undeclared = [tool.name for tool in world.tools if tool.grounding is None]
            recordings = await read_recordings(recorded, world, undeclared)
        proposed = await draft_groundings(world, state, ask, config.max_attempts, recordings)
        groundings, report.groundings_dropped = proposed.kept, proposed.dropped
        report.groundings_written = list(groundings)
        report.groundings_reproduced, report.groundings_rejected = proposed.reproduced, proposed.rejected
    written = _write(
        folder,
        raw_world,
        schema,
        state,
        [*existing, *new],
        report,
        changed_state=report.state.startswith("drafted"),
        groundings=groundings,
    )
    atomic_write_text(folder / "bootstrap_report.json", json.dumps(asdict(report), indent=1) + "\n")
    normal_modes(folder, [*written, "bootstrap_report.json"])
    return report


def _import_skeleton(folder: Path) -> dict[str, Any] | None:
    """The state skeleton `simia import` wrote (recorded in import_report.json), or None."""
    try:
        recorded = json.loads((folder / REPORT_FILE).read_text(encoding="utf-8")).get(SKELETON_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    return recorded if isinstance(recorded, dict) else None


def _write(
    folder: Path,
    raw_world: dict[str, Any],
    schema: dict[str, Any] | None,
    state: dict[str, Any],
    tasks: list[Task],
    report: BootstrapReport,
    *,
    changed_state: bool,
    groundings: dict[str, dict[str, Any]],
) -> list[str]:
    """Write the files, after checking in a scratch copy that the whole folder loads; returns their names."""
    files: dict[str, str] = {}
    new_world = dict(raw_world)
    if changed_state:
        files["state.json"] = json.dumps(state, indent=1, ensure_ascii=False) + "\n"
        if raw_world.get("state_schema") != schema:
            new_world["state_schema"] = schema
    if groundings and isinstance(raw_world.get("tools"), list):
        new_world["tools"] = [_grounded(tool, groundings) for tool in raw_world["tools"]]
    elif groundings:  # the tools are in tools.json (an MCP import keeps the server's answer there)
        files["tools.json"] = _grounded_tools_json(folder / "tools.json", groundings)
    if new_world != raw_world:
        files["world.yaml"] = yaml.safe_dump(new_world, sort_keys=False, allow_unicode=True)
    if report.tasks_written:
        files["tasks.jsonl"] = "".join(
            json.dumps(t.model_dump(exclude_defaults=True), ensure_ascii=False) + "\n" for t in tasks
        )
    if not files:
        return []
    with tempfile.TemporaryDirectory() as scratch:
        trial = Path(scratch) / folder.name
        _copy_world(folder, trial)
        for name, text in files.items():
            (trial / name).write_text(text, encoding="utf-8")
        try:
            load_world(trial)
        except WorldError as exc:
            raise WorldError(exc.world, exc.issues, str(folder)) from None
    for name, text in files.items():
        atomic_write_text(folder / name, text)
    return list(files)


def _grounded(tool: Any, groundings: dict[str, dict[str, Any]]) -> Any:
    """A tool entry of world.yaml or tools.json with its drafted grounding, if it got one."""
    if isinstance(tool, dict) and tool.get("name") in groundings:
        return {**tool, "grounding": groundings[tool["name"]]}
    return tool


def _grounded_tools_json(path: Path, groundings: dict[str, dict[str, Any]]) -> str:
    """tools.json (a list of tools, or a tools/list answer holding one) with the drafted groundings added."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(raw, dict) and isinstance(raw.get("tools"), list):
        raw = {**raw, "tools": [_grounded(tool, groundings) for tool in raw["tools"]]}
    elif isinstance(raw, list):
        raw = [_grounded(tool, groundings) for tool in raw]
    return json.dumps(raw, indent=1, ensure_ascii=False) + "\n"


def _copy_world(source: Path, target: Path) -> None:
    target.mkdir(parents=True)
    for path in source.rglob("*"):
        relative = path.relative_to(source)
        if path.is_dir():
            (target / relative).mkdir(parents=True, exist_ok=True)
        elif path.is_file():
            (target / relative).write_bytes(path.read_bytes())
