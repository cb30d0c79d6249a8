"""Load world folders into validated `World` models, collecting every problem with file, field and hint.

A world folder holds `world.yaml` (required), and optionally `tools.json` (an MCP
`tools` array), `user_tools.json` (the user's own tools, in a dual-control world), `state.json`, `policy.md`,
`examples/*.json` and `tasks.jsonl`.
`load_world` raises `WorldError` listing all issues; `load_worlds` loads many
folders and never lets one bad world stop the others.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
from pydantic import BaseModel, ValidationError

from ..errors import StateError, UnknownWorldError, WorldError, WorldIssue
from ..schema import validate_instance
from .expressions import RESERVED_NAMES, parse_problem
from .model import ABSENT, GENERIC_ERRORS, Example, RealServer, Side, SimulatorHints, Task, ToolSpec, Trigger, World
from .state import State, apply_patch, as_state, is_missing, resolve_pointer
from .validation import (
    IssueCollector,
    NotPlainJson,
    check_grounding,
    check_schema,
    is_json_pointer,
    read_json,
    read_text,
    read_yaml,
    strict_json,
)

__all__ = ["LoadReport", "default_worlds_dir", "load_world", "load_worlds"]

TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
"""MCP spec (2025-11-25): 1-128 characters from A-Z a-z 0-9 _ - . ; case-sensitive, no spaces. Matched whole
(`fullmatch`: a `$` would also take a name ending in a newline)."""
WORLD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A world name: it is a URL path segment (`/worlds/NAME/mcp`)."""


def default_worlds_dir() -> Path:
    """`./tool_specs` when it exists, else the worlds shipped inside the package."""
    local = Path("tool_specs")
    if (local / "mock" / "world.yaml").exists():
        return local
    spec = importlib.util.find_spec("simia.tool_specs")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if Path(location, "mock", "world.yaml").exists():
            return Path(location)
    return local


class _WorldFile(BaseModel):
    """The shape of world.yaml (validated before the parts are assembled)."""

    model_config = {"extra": "forbid"}

    name: str
    title: str = ""
    description: str = ""
    version: str | int | float = "1"
    policy: str | None = None
    tools: list[Any] | None = None  # validated one by one in _load_tools
    user_tools: list[Any] | None = None  # the same
    functions: dict[str, str] = {}
    triggers: list[Trigger] = []
    state_schema: dict[str, Any] | None = None
    simulator: SimulatorHints = SimulatorHints()
    real_server: RealServer | None = None


def load_world(folder: str | Path) -> World:
    """Load and validate one world folder.

    Args:
        folder: path to a folder holding `world.yaml`.

    Returns:
        The validated `World`.

    Raises:
        WorldError: with every problem found (file, JSON path, message, hint).
    """
    folder = Path(folder)
    issues = IssueCollector(folder)
    world_file = folder / "world.yaml"
    if not world_file.is_file():
        raise WorldError(
            folder.name,
            [
                WorldIssue(
                    str(folder),
                    "$",
                    "no world.yaml in this folder",
                    "a world folder needs world.yaml with at least name and tools",
                )
            ],
        )
    raw = read_yaml(world_file, issues)
    if raw is None and not issues.issues:
        issues.add(str(world_file), "$", "file is empty", "add at least 'name' and 'tools'")
    if issues.issues:
        raise WorldError(folder.name, issues.issues, str(folder))
    if not isinstance(raw, dict):
        raise WorldError(
            folder.name,
            [
                WorldIssue(
                    str(world_file),
                    "$",
                    f"expected a mapping, got {type(raw).__name__}",
                    "world.yaml must be a YAML mapping of name, tools, ...",
                )
            ],
        )
    head: _WorldFile | None = None
    try:
        head = _WorldFile.model_validate(raw)
    except ValidationError as exc:
        issues.pydantic(str(world_file), "$", exc, _WorldFile)
    name = str(raw.get("name") or folder.name)
    if not WORLD_NAME.fullmatch(name):
        issues.add(
            str(world_file),
            "$.name",
            f"world name {name!r} is not URL-safe",
            "use 1-64 letters, digits, '_', '.' or '-' (the name is part of /worlds/NAME/mcp)",
        )

    tools, declared, where = _load_tools(folder, world_file, raw, issues)
    user_tools, _, user_where = _load_tools(folder, world_file, raw, issues, side="user")
    _check_sides(tools, user_tools, user_where, issues)
    if head is not None:
        _check_functions(head, world_file, issues)
    if head is not None and head.real_server is None and any(t.route == "real" for t in tools):
        issues.add(
            str(world_file),
            "$.real_server",
            "a tool has route: real but the world names no real server",
            "add real_server: {url: URL} (or {command: [...]}) to world.yaml, or route the tool to simulate",
        )
    policy = _load_policy(folder, world_file, head, issues)
    state_schema = head.state_schema if head else None
    if state_schema is not None and not check_schema(
        state_schema, str(world_file), "$.state_schema", issues, root_object=False
    ):
        state_schema = None
    limit = head.simulator.max_state_bytes if head else SimulatorHints().max_state_bytes
    state = _load_state(folder, state_schema, issues, limit)
    tools_by_name = {t.name: t for t in tools}
    examples = _load_examples(folder, tools_by_name, declared, issues)
    tasks = _load_tasks(folder, state, state_schema, issues, tools_by_name, declared)
    _check_groundings([*tools, *user_tools], {**where, **user_where}, head, state, tasks, issues)
    if issues.issues or head is None:
        raise WorldError(name, issues.issues, str(folder))
    return World(
        name=head.name,
        title=head.title,
        description=head.description,
        version=str(head.version),
        policy=policy,
        tools=tools,
        user_tools=user_tools,
        functions=head.functions,
        triggers=head.triggers,
        state_schema=state_schema,
        simulator=head.simulator,
        real_server=head.real_server,
        initial_state=state,
        examples=examples,
        tasks=tasks,
        source=str(folder),
    )


def _load_tools(
    folder: Path, world_file: Path, raw: dict[str, Any], issues: IssueCollector, *, side: Side = "agent"
) -> tuple[list[ToolSpec], set[str], dict[str, tuple[str, str]]]:
    """Validate each tool (of the agent's, or with `side="user"` the user's: `user_tools`, optional); returns the
    valid tools, every declared name (valid or not) and where each valid tool is (file, JSON path)."""
    key = "user_tools" if side == "user" else "tools"
    tools_json = folder / f"{key}.json"
    file, prefix = str(world_file), f"$.{key}"
    raw_tools: Any = raw.get(key)
    if tools_json.is_file():
        if raw_tools is not None:
            issues.add(
                str(world_file),
                f"$.{key}",
                f"{key} are defined both here and in {key}.json",
                f"keep one: delete '{key}' from world.yaml or delete {key}.json",
            )
            return [], set(), {}
        raw_tools = read_json(tools_json, issues)
        file, prefix = str(tools_json), "$"
        if isinstance(raw_tools, dict) and "tools" in raw_tools:  # a whole tools/list result
            raw_tools, prefix = raw_tools["tools"], "$.tools"
    if raw_tools is None:
        if not tools_json.is_file() and side == "agent":
            issues.add(
                str(world_file),
                "$.tools",
                "missing required field",
                "add a 'tools' list to world.yaml or a tools.json file",
            )
        return [], set(), {}
    if not isinstance(raw_tools, list):
        issues.add(file, prefix, f"expected a list of tools, got {type(raw_tools).__name__}", "use a YAML/JSON list")
        return [], set(), {}
    tools: list[ToolSpec] = []
    where: dict[str, tuple[str, str]] = {}
    seen: dict[str, int] = {}
    declared = {str(t["name"]) for t in raw_tools if isinstance(t, dict) and "name" in t}
    for i, item in enumerate(raw_tools):
        path = f"{prefix}[{i}]"
        try:
            tool = ToolSpec.model_validate(item)
        except ValidationError as exc:
            before = len(issues.issues)
            issues.pydantic(file, path, exc, ToolSpec)
            _name_tool(issues, before, item, f"{path}.grounding")
            continue
        ok = True
        if not TOOL_NAME.fullmatch(tool.name):
            issues.add(
                file,
                f"{path}.name",
                f"tool name {tool.name!r} is not allowed by MCP",
                "use 1-128 characters from A-Z, a-z, 0-9, '_', '-', '.'",
            )
            ok = False
        if tool.name in seen:
            issues.add(
                file,
                f"{path}.name",
                f"duplicate tool name {tool.name!r} (first at {prefix}[{seen[tool.name]}])",
                "tool names must be unique within a world",
            )
            ok = False
        seen.setdefault(tool.name, i)
        ok &= check_schema(tool.input_schema, file, f"{path}.inputSchema", issues, root_object=True)
        if tool.output_schema is not None:
            ok &= check_schema(tool.output_schema, file, f"{path}.outputSchema", issues, root_object=True)
        codes = [e.code for e in tool.errors]
        for dup in {c for c in codes if codes.count(c) > 1}:
            issues.add(file, f"{path}.errors", f"duplicate error code {dup!r}", "error codes must be unique per tool")
            ok = False
        if ok:
            tools.append(tool)
            where[tool.name] = (file, path)
    if not raw_tools and side == "agent":
        issues.add(file, prefix, "a world needs at least one tool", "add a tool with name and inputSchema")
    return tools, declared, where


def _check_sides(
    tools: list[ToolSpec], user_tools: list[ToolSpec], where: dict[str, tuple[str, str]], issues: IssueCollector
) -> None:
    """A user tool may not take an agent tool's name (a call could not say whose it is): the user tool is dropped."""
    names = {t.name for t in tools}
    for tool in [t for t in user_tools if t.name in names]:
        file, path = where[tool.name]
        issues.add(
            file,
            f"{path}.name",
            f"user tool {tool.name!r} has the name of an agent tool",
            "rename one of them: the agent's tools and the user's share no names",
        )
        user_tools.remove(tool)


def _check_functions(head: _WorldFile, world_file: Path, issues: IssueCollector) -> None:
    """Each function is a JSONata function that parses, under a name simia does not bind itself."""
    for name, text in head.functions.items():
        where = f"$.functions.{name}"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name in RESERVED_NAMES:
            issues.add(
                str(world_file),
                where,
                f"function name {name!r} is not usable",
                "use letters, digits and _ (not args, state, before or another name simia binds)",
            )
            continue
        problem = parse_problem(text)
        if not problem and not re.match(r"\s*(function|λ)\s*\(", text):
            problem = "it is not a function"
        if problem:
            issues.add(
                str(world_file),
                where,
                f"function {name!r}: {problem}",
                "write it as function($a, $b) { ... } (see docs/worlds.md#declarations-that-compute)",
            )


def _name_tool(issues: IssueCollector, since: int, item: Any, grounding: str) -> None:
    """Name the tool in the issues found in its grounding since `since` (they say the field and the fix)."""
    name = item.get("name") if isinstance(item, dict) else None
    issues.issues[since:] = [
        WorldIssue(i.file, i.path, f"tool {name!r}: {i.message}", i.hint, i.line)
        if i.path.startswith(grounding) and name is not None
        else i
        for i in issues.issues[since:]
    ]


def _check_groundings(
    tools: list[ToolSpec],
    where: dict[str, tuple[str, str]],
    head: _WorldFile | None,
    state: dict[str, Any],
    tasks: list[Task],
    issues: IssueCollector,
) -> None:
    """Check each tool's grounding against the world (`check_grounding`); a pointer may resolve on the initial
    state or on a task's patched state (made only when a pointer needs it)."""

    def states() -> Iterable[dict[str, Any]]:
        yield state
        for task in tasks:
            if task.initial_state_patch:
                yield jsonpatch.apply_patch(state, task.initial_state_patch)

    shared = [*(head.simulator.errors if head else []), *GENERIC_ERRORS]
    for tool in tools:
        if tool.grounding is not None:
            codes = list(dict.fromkeys(e.code for e in [*tool.errors, *shared]))
            file, path = where[tool.name]
            check_grounding(tool, file, f"{path}.grounding", states, codes, issues)


def _load_policy(folder: Path, world_file: Path, head: _WorldFile | None, issues: IssueCollector) -> str:
    policy_md = folder / "policy.md"
    inline = head.policy if head else None
    if policy_md.is_file():
        if inline:
            issues.add(
                str(world_file),
                "$.policy",
                "policy is given both inline and in policy.md",
                "keep one: delete 'policy' from world.yaml or delete policy.md",
            )
        return (read_text(policy_md, issues, "policy") or "").strip()
    return (inline or "").strip()


def _load_state(
    folder: Path, state_schema: dict[str, Any] | None, issues: IssueCollector, max_bytes: int
) -> dict[str, Any]:
    path = folder / "state.json"
    if not path.is_file():
        state: Any = {}
    elif path.stat().st_size > max_bytes:
        issues.add(
            str(path),
            "$",
            f"state.json is {path.stat().st_size:,} bytes, over the limit of {max_bytes:,} (simulator.max_state_bytes)",
            "raise simulator.max_state_bytes in world.yaml if the machine has the memory (about 10x the file)",
        )
        return {}
    else:
        state = read_json(path, issues)
        if state is None:
            return {}
    if not isinstance(state, dict):
        issues.add(
            str(path),
            "$",
            f"the state must be a JSON object, got {type(state).__name__}",
            'wrap the state in an object, e.g. {"items": [...]}',
        )
        return {}
    if state_schema is not None:
        for message in validate_instance(state_schema, state):
            issues.add(
                str(path),
                message.split(":", 1)[0],
                "state violates state_schema:" + message.split(":", 1)[1],
                "fix state.json or state_schema in world.yaml",
            )
    return state


def _load_examples(
    folder: Path, tools: dict[str, ToolSpec], declared: set[str], issues: IssueCollector
) -> list[Example]:
    examples: list[Example] = []
    for path in sorted((folder / "examples").glob("*.json")):
        data = read_json(path, issues)
        if data is None:
            continue
        if not isinstance(data, dict):
            issues.add(str(path), "$", "an example must be an object with 'messages'", 'use {"messages": [...]}')
            continue
        try:
            example = Example.model_validate({"name": path.stem, **data})
        except ValidationError as exc:
            issues.pydantic(str(path), "$", exc, Example)
            continue
        before = len(issues.issues)
        _check_conversation(example.messages, str(path), "$.messages", tools, declared, issues)
        if len(issues.issues) == before:
            examples.append(example)
    return examples


def _check_conversation(
    messages: list[dict[str, Any]],
    file: str,
    where: str,
    tools: dict[str, ToolSpec],
    declared: set[str],
    issues: IssueCollector,
    line: int | None = None,
) -> None:
    """Check a conversation in OpenAI chat format (an example's messages, a task's reference): known roles, calls
    of the world's tools with arguments that fit their inputSchema. `where` is its JSON path in `file`."""

    def add(path: str, message: str, hint: str) -> None:
        issues.add(file, path, message, hint, line)

    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in {"system", "user", "assistant", "tool", "developer"}:
            add(
                f"{where}[{i}].role",
                f"unknown role {role!r}",
                "use system, user, assistant or tool (OpenAI chat format)",
            )
        for j, call in enumerate(message.get("tool_calls") or []):
            path = f"{where}[{i}].tool_calls[{j}].function"
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict):
                add(path, "missing 'function'", 'use {"id", "type": "function", "function": {...}}')
                continue
            tool = tools.get(str(fn.get("name")))
            if tool is None and str(fn.get("name")) in declared:
                continue  # the tool itself is invalid and already reported
            if tool is None:
                close = difflib.get_close_matches(str(fn.get("name")), list(tools), n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"tools: {', '.join(sorted(tools))}"
                add(f"{path}.name", f"calls tool {fn.get('name')!r}, which the world lacks", hint)
                continue
            args = fn.get("arguments", "{}")
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except RecursionError:
                    add(f"{path}.arguments", "arguments nested too deeply", "flatten the arguments")
                    continue
                except json.JSONDecodeError as exc:
                    add(
                        f"{path}.arguments",
                        f"arguments are not valid JSON: {exc.msg}",
                        "arguments are a JSON-encoded string of an object",
                    )
                    continue
            for problem in validate_instance(tool.input_schema, args):
                add(
                    f"{path}.arguments",
                    f"breaks {tool.name}'s inputSchema: {problem}",
                    "make the call's arguments match the tool's inputSchema",
                )


def _load_tasks(
    folder: Path,
    state: dict[str, Any],
    state_schema: dict[str, Any] | None,
    issues: IssueCollector,
    tools: dict[str, ToolSpec],
    declared: set[str],
) -> list[Task]:
    path = folder / "tasks.jsonl"
    if not path.is_file():
        return []
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    text = read_text(path, issues, "tasks file")
    for lineno, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = strict_json(line)
        except RecursionError:
            issues.add(str(path), "$", "JSON nested too deeply to read", "flatten the task's data", lineno)
            continue
        except NotPlainJson as exc:
            issues.add(str(path), "$", str(exc), exc.hint, lineno)
            continue
        except json.JSONDecodeError as exc:
            issues.add(
                str(path),
                "$",
                f"JSON syntax error: {exc.msg} (column {exc.colno})",
                "each line must be one JSON object",
                lineno,
            )
            continue
        try:
            task = Task.model_validate(raw)
        except ValidationError as exc:
            before = len(issues.issues)
            issues.pydantic(str(path), "$", exc, Task)
            issues.issues[before:] = [
                WorldIssue(i.file, i.path, i.message, i.hint, lineno) for i in issues.issues[before:]
            ]
            continue
        ok = True
        if task.id in seen:
            issues.add(
                str(path),
                "$.id",
                f"duplicate task id {task.id!r} (first on line {seen[task.id]})",
                "task ids must be unique within a world",
                lineno,
            )
            ok = False
        seen.setdefault(task.id, lineno)
        if task.reference is not None:
            before = len(issues.issues)
            _check_conversation(task.reference, str(path), "$.reference", tools, declared, issues, lineno)
            ok = ok and len(issues.issues) == before
        for pointer in task.expected_state:
            if not is_json_pointer(pointer):
                issues.add(
                    str(path),
                    f"$.expected_state[{pointer!r}]",
                    f"{pointer!r} is not a JSON Pointer",
                    "JSON Pointers start with '/', e.g. '/orders/O1/status'; escape '~' as ~0 and '/' as ~1",
                    lineno,
                )
                ok = False
        if task.initial_state_patch:
            try:
                patched = jsonpatch.apply_patch(state, task.initial_state_patch)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as exc:
                issues.add(
                    str(path),
                    "$.initial_state_patch",
                    f"patch does not apply to state.json: {exc}",
                    "use RFC 6902 operations whose paths exist in state.json",
                    lineno,
                )
                ok = False
            else:
                for message in validate_instance(state_schema or {}, patched):
                    issues.add(
                        str(path),
                        "$.initial_state_patch",
                        f"patched state violates state_schema: {message}",
                        "fix the patch or the state_schema",
                        lineno,
                    )
                    ok = False
        if ok and state_schema is not None and task.expected_state:
            base = as_state(patched if task.initial_state_patch else state, digest="")
            for pointer, problem in _impossible_expectations(base, task.expected_state, state_schema):
                issues.add(
                    str(path),
                    f"$.expected_state[{pointer!r}]",
                    f"expects {json.dumps(task.expected_state[pointer])[:80]} at {pointer}, which state_schema never "
                    f"allows: {problem}",
                    "fix the expected value, or state_schema if the value is right (the task could never pass)",
                    lineno,
                )
                ok = False
        if ok:
            tasks.append(task)
    return tasks


def _impossible_expectations(
    base: State, expected: dict[str, Any], schema: dict[str, Any]
) -> Iterable[tuple[str, str]]:
    """Each pointer of `expected` whose value `schema` refuses where it would stand in `base`, with the problem.

    Checked as the patch that would make the expectation true (replace, add, or remove for `ABSENT`), on the part it
    touches; a pointer under a record `base` lacks (one the agent is to create) is not checked."""
    for pointer, value in expected.items():
        if not is_json_pointer(pointer):
            continue
        current = resolve_pointer(base, pointer)
        if value == ABSENT:
            op = None if is_missing(current) else {"op": "remove", "path": pointer}
        elif not is_missing(current):
            op = {"op": "replace", "path": pointer, "value": value}
        else:
            parent = resolve_pointer(base, pointer.rsplit("/", 1)[0]) if pointer else None
            op = {"op": "add", "path": pointer, "value": value} if isinstance(parent, dict) else None
        if op is None:
            continue
        try:
            apply_patch(base, [op], schema)
        except StateError as exc:
            yield pointer, str(exc).removeprefix("patched state breaks state_schema: ")


@dataclass
class LoadReport:
    """The outcome of loading many world folders: what loaded and what failed."""

    worlds: dict[str, World] = field(default_factory=dict)
    errors: list[WorldError] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    """The paths given that are folders but hold no world (no world.yaml in them or in their subfolders)."""

    def get(self, name: str) -> World:
        try:
            return self.worlds[name]
        except KeyError:
            raise UnknownWorldError(name, list(self.worlds)) from None


def _world_folders(path: Path) -> list[Path]:
    if (path / "world.yaml").is_file():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and (p / "world.yaml").is_file())


def load_worlds(paths: Iterable[str | Path]) -> LoadReport:
    """Load every world under `paths` (each a world folder or a folder of worlds).

    A bad world is recorded in `errors` and never stops the others. Two worlds
    with the same name are an error for the second one.
    """
    report = LoadReport()
    for base in map(Path, paths):
        if not base.is_dir():
            report.errors.append(
                WorldError(
                    base.name,
                    [WorldIssue(str(base), "$", "not a folder", "pass a world folder or a folder of worlds")],
                )
            )
            continue
        folders = _world_folders(base)
        if not folders:
            report.empty.append(str(base))
        for folder in folders:
            try:
                world = load_world(folder)
            except WorldError as exc:
                report.errors.append(exc)
                continue
            if world.name in report.worlds:
                first = report.worlds[world.name].source
                report.errors.append(
                    WorldError(
                        world.name,
                        [
                            WorldIssue(
                                str(folder / "world.yaml"),
                                "$.name",
                                f"world name {world.name!r} is already used by {first}",
                                "world names must be unique across worlds dirs",
                            )
                        ],
                        source=str(folder),
                    )
                )
                continue
            report.worlds[world.name] = world
    return report
