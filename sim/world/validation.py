"""Checking a world folder's files: reading them safely, checking schemas, and collecting every problem found.

The loader (`simia.sim.world.loader`) reads each part of a world through these: a file that leads out of
the folder is refused, a parse error names its line, a pydantic error names its field (with a did-you-mean),
a tool's grounding is checked against its world (`check_grounding`), and every problem lands in one
`IssueCollector`, so a bad world reports all of its issues at once.
"""

from __future__ import annotations

import difflib
import json
import re
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from jsonpath_rfc9535 import JSONPathError
from jsonpath_rfc9535 import compile as compile_jsonpath
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ValidationError

from ..errors import SimiaError, WorldIssue
from ..schema import error_path
from .expressions import argument_names, parse_problem
from .grounding import ComputedEffect, fill_jsonpath, template_names
from .model import ToolSpec
from .state import is_missing, resolve_pointer

__all__ = [
    "DATA_KEYWORDS",
    "NAMED_SCHEMAS",
    "IssueCollector",
    "NotPlainJson",
    "check_grounding",
    "check_schema",
    "is_json_pointer",
    "outside_folder",
    "read_json",
    "read_text",
    "read_yaml",
    "schema_nodes",
    "strict_json",
]


def _json_path(loc: Iterable[str | int]) -> str:
    out = "$"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


class IssueCollector:
    """Every problem found in one world folder, each with its file, field and a hint (nothing stops at the first)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.issues: list[WorldIssue] = []

    def add(self, file: str, path: str, message: str, hint: str = "", line: int | None = None) -> None:
        self.issues.append(WorldIssue(file=file, path=path, message=message, hint=hint, line=line))

    def pydantic(self, file: str, prefix: str, err: ValidationError, model: type[BaseModel]) -> None:
        for item in err.errors():
            loc = [p for p in item["loc"] if not isinstance(p, str) or not p.startswith(("function-", "union-"))]
            path = error_path(prefix, loc)
            kind = item["type"]
            if kind == "extra_forbidden":
                name = str(loc[-1]) if loc else ""
                known = _known_fields(model, loc[:-1])
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"allowed fields: {', '.join(known)}"
                self.add(file, path, f"unknown field {name!r}", hint)
            elif kind == "missing":
                self.add(file, path, "missing required field", f"add {str(loc[-1])!r}")
            else:
                self.add(file, path, item["msg"], f"got {_short(item.get('input'))}")


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _known_fields(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """Field names (wire names) of the model that `loc` points into, best effort."""
    current: type[BaseModel] = model
    for part in loc:
        if isinstance(part, int):
            continue
        info = current.model_fields.get(part) or next(
            (f for f in current.model_fields.values() if f.alias == part), None
        )
        inner = _model_in(info.annotation) if info else None
        if inner is None:
            break
        current = inner
    return sorted((f.alias or n) for n, f in current.model_fields.items())


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found:
            return found
    return None


def outside_folder(path: Path, issues: IssueCollector) -> bool:
    """Whether `path` leads out of the world's folder (a symlink, or `..` in a link): such a file is not read, so a
    world from elsewhere cannot pull another file of this machine into its prompts and answers."""
    try:
        inside = path.resolve().is_relative_to(issues.folder.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        inside = False
    if not inside:
        issues.add(
            str(path), "$", "the file leads outside the world's folder", "copy it into the folder; do not link it"
        )
    return not inside


class NotPlainJson(SimiaError):
    """A file parses, but not as plain JSON (or YAML) means it: one of the errors below. `hint` says the fix."""

    hint = ""
    line: int | None = None


class DuplicateKey(NotPlainJson):
    """An object (a mapping) names one key twice: JSON and YAML parsers keep the last value and drop the other
    without a word, so a world would load other than its author wrote it."""

    hint = "remove or rename one"

    def __init__(self, key: object, line: int | None = None, *, language: str = "JSON") -> None:
        where = "" if language == "YAML" else " in an object"
        super().__init__(f"duplicate key {key!r}{where}: {language} keeps only the last value")
        self.key, self.line = key, line


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that names a key twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: its keys may be overridden here
                continue
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if isinstance(key, str | int | float | bool) or key is None:
                if key in seen:
                    raise DuplicateKey(key, key_node.start_mark.line + 1, language="YAML")
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json.loads`' object_pairs_hook: the object, refused when a key repeats."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return value


class NotJsonNumber(NotPlainJson):
    """`NaN`, `Infinity` or `-Infinity` in a JSON file: Python's parser takes them, JSON has no such numbers, and
    served they would read back as null (a rule expecting one could never pass)."""

    hint = "write a number, a string or null"

    def __init__(self, constant: str) -> None:
        super().__init__(f"{constant} is not a JSON number")


def _no_constants(constant: str) -> Any:
    """`json.loads`' parse_constant: refuse NaN and the infinities."""
    raise NotJsonNumber(constant)


def strict_json(text: str) -> Any:
    """`json.loads`, refusing what it would take without a word: a key named twice, NaN and the infinities.

    Raises:
        NotPlainJson: one of them (besides `json.loads`' own errors).
    """
    return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_no_constants)


def read_yaml(path: Path, issues: IssueCollector) -> Any:
    if outside_folder(path, issues):
        return None
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except DuplicateKey as exc:
        issues.add(str(path), "$", str(exc), f"{exc.hint} of them", exc.line)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark else None
        issues.add(str(path), "$", f"YAML syntax error: {exc.problem}", "fix the YAML syntax at that line", line)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        issues.add(str(path), "$", f"cannot read YAML: {exc}", "save the file as UTF-8 YAML")
    return None


def read_text(path: Path, issues: IssueCollector, kind: str) -> str | None:
    """A text file as UTF-8 (a leading byte-order mark, which Windows editors write, left out); None (and an issue
    naming the file) when it cannot be read."""
    if outside_folder(path, issues):
        return None
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        issues.add(str(path), "$", f"not UTF-8 text (byte {exc.start})", f"save the {kind} as UTF-8")
    except OSError as exc:
        issues.add(str(path), "$", f"cannot read the file: {exc.strerror}", "check the file's permissions")
    return None


def read_json(path: Path, issues: IssueCollector) -> Any:
    if outside_folder(path, issues):
        return None
    try:
        return strict_json(path.read_text(encoding="utf-8-sig"))  # a leading byte-order mark left out, as YAML does
    except NotPlainJson as exc:
        issues.add(str(path), "$", str(exc), exc.hint)
    except json.JSONDecodeError as exc:
        issues.add(
            str(path),
            "$",
            f"JSON syntax error: {exc.msg} (column {exc.colno})",
            "fix the JSON syntax",
            exc.lineno,
        )
    except UnicodeDecodeError as exc:
        issues.add(str(path), "$", f"cannot read JSON: {exc}", "save the file as UTF-8 JSON")
    except RecursionError:
        issues.add(str(path), "$", "JSON nested too deeply to read", "flatten the data (nesting over ~1000 levels)")
    return None


def check_schema(schema: dict[str, Any], file: str, path: str, issues: IssueCollector, *, root_object: bool) -> bool:
    """Check a JSON Schema against its metaschema (2020-12 unless `$schema` says otherwise)."""
    cls = validators.validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = error_path(path, list(exc.path))
        issues.add(
            file,
            where,
            f"not a valid JSON Schema: {exc.message}",
            "see https://json-schema.org/draft/2020-12",
        )
        return False
    if root_object and schema.get("type") != "object":
        issues.add(
            file,
            f"{path}.type",
            f"schema root must be 'type: object', got {schema.get('type')!r}",
            "MCP requires object arguments and results; wrap the value in an object property",
        )
        return False
    return _check_refs(schema, file, path, issues)


DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose values are data, not schemas: a `$ref` inside them is a value like any other."""
NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
"""Keywords whose members are schemas under names chosen by the author (a property may be named `enum`)."""


def schema_nodes(schema: Any, where: str) -> Iterable[tuple[str, dict[str, Any]]]:
    """(path, node) of every schema object inside `schema`, itself first, outside the keywords that hold data
    (walked without recursion: a schema nests as deep as its file)."""
    stack: list[tuple[str, Any]] = [(where, schema)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, list):
            stack.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(node))))
            continue
        if not isinstance(node, dict):
            continue
        yield path, node
        for key, value in reversed(list(node.items())):
            if key in NAMED_SCHEMAS and isinstance(value, dict):
                stack.extend((f"{path}.{key}.{name}", inner) for name, inner in reversed(list(value.items())))
            elif key not in DATA_KEYWORDS:
                stack.append((f"{path}.{key}", value))


def _refs(schema: Any, where: str) -> Iterable[tuple[str, str]]:
    """(path, reference) of every `$ref` in a schema, outside the keywords that hold data."""
    return ((path, node["$ref"]) for path, node in schema_nodes(schema, where) if isinstance(node.get("$ref"), str))


def _anchors(schema: Any) -> set[str]:
    return {node["$anchor"] for _, node in schema_nodes(schema, "$") if isinstance(node.get("$anchor"), str)}


def _check_refs(schema: dict[str, Any], file: str, path: str, issues: IssueCollector) -> bool:
    """Every `$ref` points inside the schema itself: simia never fetches a schema (a URL would be read on every
    call, blocking the server, and lets a world file make the server send requests), and a reference to nothing
    fails every call that needs it."""
    ok = True
    anchors: set[str] | None = None
    for where, ref in _refs(schema, path):
        if not ref.startswith("#"):
            issues.add(
                file, f"{where}.$ref", f"a $ref outside the schema ({ref!r}) is not fetched",
                "copy the referenced schema under $defs and point at it with '#/$defs/NAME'",
            )  # fmt: skip
            ok = False
        elif ref[1:].startswith("/") or ref == "#":
            if is_missing(resolve_pointer(schema, urllib.parse.unquote(ref[1:]))):
                issues.add(
                    file, f"{where}.$ref", f"$ref {ref!r} points at nothing in this schema",
                    "point it at a schema that exists, e.g. '#/$defs/NAME' with NAME under $defs",
                )  # fmt: skip
                ok = False
        else:
            anchors = _anchors(schema) if anchors is None else anchors
            if ref[1:] not in anchors:
                issues.add(
                    file, f"{where}.$ref", f"$ref {ref!r} names no $anchor of this schema",
                    f"add '$anchor: {ref[1:]}' to the schema it means, or use a JSON Pointer ('#/$defs/NAME')",
                )  # fmt: skip
                ok = False
    return ok


def is_json_pointer(text: str) -> bool:
    return text == "" or (text.startswith("/") and re.search(r"~(?![01])", text) is None)


_EXAMPLE_QUERY = "$.products[?@.category == {category}]"


def grounding_issues(tool: ToolSpec, state: dict[str, Any], codes: Sequence[str]) -> list[WorldIssue]:
    """The problems `check_grounding` finds in `tool`'s grounding on a world whose initial state is `state` (for a
    declaration not yet in a file: each issue's path starts at `grounding`)."""
    issues = IssueCollector(Path("."))
    check_grounding(tool, "world.yaml", "grounding", lambda: [state], codes, issues)
    return issues.issues


def check_grounding(
    tool: ToolSpec,
    file: str,
    path: str,
    states: Callable[[], Iterable[dict[str, Any]]],
    codes: Sequence[str],
    issues: IssueCollector,
) -> None:
    """Check `tool`'s grounding against its world: templates name its arguments, the fixed part of each pointer
    resolves on the initial state (or a task's patched state: `states` yields them, the initial one first), the
    error codes are among the tool's `codes`, the JSONPath parses, and a read-only tool declares no effects.

    Each problem names the tool, the field (`path` is the grounding's) and the fix.
    """
    grounding = tool.grounding
    if grounding is None:
        return
    say = _Teller(tool.name, file, issues)
    if grounding.effects and (tool.annotations or {}).get("readOnlyHint") is True:
        say(
            f"{path}.effects",
            "is read-only (annotations.readOnlyHint) but declares effects",
            "remove grounding.effects, or set readOnlyHint: false if the tool changes the state",
        )
    arguments = sorted((tool.input_schema.get("properties") or {}).keys())
    pointers: list[tuple[str, str]] = []  # (field, pointer template)
    templates: list[tuple[str, Any]] = []
    expressions: list[tuple[str, str]] = [(f"{path}.let.{name}", text) for name, text in grounding.let.items()]
    effects = [(f"{path}.effects[{i}]", effect) for i, effect in enumerate(grounding.effects)]
    for i, condition in enumerate(grounding.preconditions):
        where = f"{path}.preconditions[{i}]"
        _check_code(say, f"{where}.error", condition.error, codes)
        effects += [(f"{where}.effects[{j}]", effect) for j, effect in enumerate(condition.effects)]
        if condition.message is not None:
            expressions.append((f"{where}.message", condition.message))
        if condition.expr is not None:
            expressions.append((f"{where}.expr", condition.expr))
            continue
        pointer = condition.pointer or ""
        pointers.append((f"{where}.pointer", pointer))
        templates += [(f"{where}.pointer", pointer), (f"{where}.equals", condition.equals)]
        if condition.schema_ is not None:
            before = len(issues.issues)
            check_schema(condition.schema_, file, f"{where}.schema", issues, root_object=False)
            for i, issue in enumerate(issues.issues[before:], start=before):  # name the tool, as the others do
                issues.issues[i] = WorldIssue(
                    issue.file, issue.path, f"tool {tool.name!r}: {issue.message}", issue.hint
                )
    for where, effect in effects:
        if isinstance(effect, ComputedEffect):
            expressions.append((f"{where}.expr", effect.expr))
            continue
        pointers.append((f"{where}.path", effect.path))
        templates += [(f"{where}.path", effect.path), (f"{where}.value", effect.value)]
        if effect.from_ is not None:
            pointers.append((f"{where}.from", effect.from_))
            templates.append((f"{where}.from", effect.from_))
    read = grounding.read
    if read is not None:
        if read.pointer is not None:
            pointers.append((f"{path}.read.pointer", read.pointer))
            templates.append((f"{path}.read.pointer", read.pointer))
        if read.jsonpath is not None:
            templates.append((f"{path}.read.jsonpath", read.jsonpath))
            _check_jsonpath(say, f"{path}.read", read.jsonpath, read.key)
        if read.expr is not None:
            expressions.append((f"{path}.read.expr", read.expr))
        if read.missing is not None:
            _check_code(say, f"{path}.read.missing", read.missing, codes)
    for where, text in expressions:
        _check_expression(say, where, text, arguments)
    for where, template in templates:
        for name in template_names(template):
            if name not in arguments:
                close = difflib.get_close_matches(name, arguments, n=1)
                fix = f"did you mean {{{close[0]}}}?" if close else f"its arguments: {', '.join(arguments) or 'none'}"
                say(where, f"{{{name}}} names no argument of the tool's inputSchema", fix)
    for where, template in pointers:
        _check_pointer(say, where, template, states)


def _check_expression(say: _Teller, where: str, text: str, arguments: list[str]) -> None:
    """A JSONata expression parses, and each `$args.NAME` it reads is an argument of the tool."""
    problem = parse_problem(text)
    if problem is not None:
        say(where, f"the JSONata expression does not parse: {problem}", "see docs/worlds.md#declarations-that-compute")
        return
    for name in sorted(argument_names(text)):
        if name not in arguments:
            close = difflib.get_close_matches(name, arguments, n=1)
            fix = f"did you mean $args.{close[0]}?" if close else f"its arguments: {', '.join(arguments) or 'none'}"
            say(where, f"$args.{name} names no argument of the tool's inputSchema", fix)


class _Teller:
    """Adds issues about one tool's grounding, each message naming the tool."""

    def __init__(self, tool: str, file: str, issues: IssueCollector) -> None:
        self.tool, self.file, self.issues = tool, file, issues

    def __call__(self, path: str, message: str, hint: str) -> None:
        self.issues.add(self.file, path, f"tool {self.tool!r}: {message}", hint)


def _check_code(say: _Teller, where: str, code: str, codes: Sequence[str]) -> None:
    if code not in codes:
        say(
            where,
            f"error code {code!r} is not one the tool may return",
            f"add {{code: {code}, when: ...}} to the tool's errors, or use one of: {', '.join(codes)}",
        )


def _check_jsonpath(say: _Teller, where: str, query: str, key: str | None) -> None:
    filled = fill_jsonpath(query, _Anything())
    try:
        compile_jsonpath(filled or "")
    except JSONPathError as exc:
        say(
            f"{where}.jsonpath",
            f"the JSONPath does not parse: {exc}",
            f"write an RFC 9535 query, e.g. {_EXAMPLE_QUERY}",
        )
    if key is None:
        say(where, "a jsonpath read gives a list of the matches, not an object", "add read.key: the output's field")


class _Anything(dict[str, Any]):
    """Arguments that hold every name (a placeholder JSON literal), to parse a JSONPath template."""

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> str:
        return "x"


def _check_pointer(say: _Teller, where: str, template: str, states: Callable[[], Iterable[dict[str, Any]]]) -> None:
    tokens = template[1:].split("/") if template.startswith("/") else None
    if tokens is None or not is_json_pointer(re.sub(r"\{[^{}]*\}", "x", template)):
        say(where, f"{template!r} is not a JSON Pointer", "start it with '/', e.g. /orders/{order_id}")
        return
    templated = [i for i, token in enumerate(tokens) if any(True for _ in template_names(token))]
    fixed = tokens[: templated[0]] if templated else tokens[:-1]  # an untemplated target may be created by a call
    if not fixed:
        return
    prefix = "/" + "/".join(fixed)
    for state in states():
        if not is_missing(resolve_pointer(state, prefix)):
            return
    say(
        where,
        f"{prefix} (the fixed part of {template}) does not resolve on the initial state",
        "name a part of state.json (or of a task's initial_state_patch), e.g. /orders/{order_id}",
    )
