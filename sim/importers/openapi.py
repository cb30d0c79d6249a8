"""An OpenAPI description (Swagger 2.0, OpenAPI 3.0, 3.1) as an `ImportedWorld`: one tool per operation.

`load_spec` reads a local YAML or JSON file. `import_openapi` validates the description with
`openapi-spec-validator` (its problems become report notes: real descriptions often have a
few), resolves `$ref`s with `jsonref` through `documents.RefLoader` (files inside the
description's folder; remote documents only when asked), and maps each operation:

    name          operationId, or method + path; made MCP-valid and unique
    description   summary and description (title: the summary)
    inputSchema   path, query, header and cookie parameters, and the request body (as `body`): JSON, or a form
                  (application/x-www-form-urlencoded, multipart/form-data, Swagger 2.0's formData fields) as an
                  object of its fields
    outputSchema  the first 2xx JSON response; `allOf` parts merged into one object (`object_root`), a root
                  that is not an object wrapped as `result`; the response's own examples checked against it
    errors        each documented 4xx/5xx response: {code: not_found, when: "HTTP 404: ..."}
    annotations   readOnlyHint for GET/HEAD/OPTIONS/TRACE, destructiveHint for DELETE, idempotentHint for PUT/DELETE
    _meta         {"simia/openapi": {"method", "path", "operationId"}}: where the tool came from (and
                  "requestBody": the media type of a form body)
    grounding     for REST resources (`/things`, `/things/{id}`): reads, effects and preconditions over a
                  state laid out as `{"things": {id: record}}` (`simia.sim.importers.rest`; state.json a skeleton)

Security requirements go into the world's policy. Operations that cannot be a tool (a required request
body that is neither JSON nor a form, a broken `$ref`, a required file upload) are skipped, and every skip or
change is a `ReportEntry` with the reason. OpenAPI 3.2 and later 3.x are read as 3.1, with a note.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import jsonref
from openapi_spec_validator.shortcuts import get_validator_cls
from openapi_spec_validator.validation.exceptions import ValidatorDetectError

from ..errors import ImportSourceError
from ..schema import validate_instance
from .documents import MAX_SPEC_BYTES, Fetch, RefLoader, RefusedReference, load_spec, refusal
from .imported import ImportedWorld, ReportEntry, mcp_tool_name, tool_schema_problem, unique_name, world_name
from .openapi_schemas import SchemaConverter, SchemaTooLarge, UnsupportedSchema, object_root, plain
from .rest import RestOperation, propose_groundings

__all__ = ["MAX_SPEC_BYTES", "OperationFilter", "import_openapi", "load_spec"]

VALIDATE_MAX_CHARS = 4 * 1024 * 1024
"""Descriptions larger than this (as compact JSON) skip openapi-spec-validator's whole-document check."""
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
SAFE = {"get", "head", "options", "trace"}
_IGNORED_HEADERS = {"accept", "content-type", "authorization"}  # OpenAPI: described elsewhere, ignored here
_MAX_NOTES = 10
_MB = 1024 * 1024
_CYCLE = "reference cycle: $refs that only point to each other, never to a schema"


@dataclass(frozen=True)
class OperationFilter:
    """Which operations to import (each list: any of; the lists together: all of; empty: everything)."""

    tags: Sequence[str] = ()
    paths: Sequence[str] = ()
    operations: Sequence[str] = ()

    def __bool__(self) -> bool:
        return bool(self.tags or self.paths or self.operations)


@dataclass
class _Version:
    label: str  # "Swagger 2.0", "OpenAPI 3.0.4"
    v2: bool
    v31: bool
    beyond: bool = False  # a 3.x after 3.1 (3.2, ...): read as 3.1, with a note


_BEYOND = (
    "is newer than the versions simia documents (Swagger 2.0, OpenAPI 3.0 and 3.1): read as 3.1, so what is new "
    "in it is not imported; check the tools"
)


def _version(spec: dict[str, Any], where: str) -> _Version:
    swagger, openapi = spec.get("swagger"), spec.get("openapi")
    if str(swagger) == "2.0":
        return _Version("Swagger 2.0", True, False)
    if isinstance(openapi, str) and (minor := re.match(r"3\.([0-9]+)(\.|$)", openapi)):
        return _Version(f"OpenAPI {openapi}", False, not openapi.startswith("3.0"), int(minor[1]) > 1)
    if swagger is None and openapi is None:
        raise ImportSourceError(f"{where} is not an OpenAPI description: no 'openapi' or 'swagger' field at the top")
    found = f"swagger: {swagger}" if swagger is not None else f"openapi: {openapi}"
    raise ImportSourceError(f"{where}: unsupported version ({found}); simia reads Swagger 2.0 and OpenAPI 3.0, 3.1")


@dataclass
class _Operation:
    method: str
    path: str
    op: dict[str, Any]
    path_item: dict[str, Any]
    name: str = ""
    label: str = field(init=False)
    arguments: dict[str, str] = field(default_factory=dict)  # path and query parameter -> its inputSchema key
    query: list[str] = field(default_factory=list)  # the query parameters' names
    body: str | None = None  # the inputSchema key of a required request body
    media_type: str = ""  # a request body that is not JSON: its media type (a form), in the tool's _meta

    def __post_init__(self) -> None:
        self.label = f"{self.method.upper()} {self.path}"


class _Skip(Exception):
    """This operation cannot be a tool; the message says why."""


def import_openapi(
    spec: dict[str, Any],
    *,
    base_uri: str = "",
    name: str | None = None,
    select: OperationFilter | None = None,
    source: str = "",
    fetch: Fetch | None = None,
) -> ImportedWorld:
    """Turn an OpenAPI description into world data, one tool per selected operation.

    Args:
        spec: the parsed description (see `load_spec`).
        base_uri: where it was read from (a `file://` URI): references may read files in its folder only.
        name: the world name (default: from `info.title`).
        select: which operations to import (default: all).
        source: how the report names the description.
        fetch: reads a remote document a `$ref` names (default: remote references are refused).

    Returns:
        The world and its report (skipped operations, changes, the description's own validation problems,
        response examples the imported outputSchema refuses).

    Raises:
        ImportSourceError: not OpenAPI, no paths, a filter that matches nothing, no importable operation, or
            a `$ref` that leads outside the description's folder (or to the network without `fetch`).
    """
    where = source or "the description"
    version = _version(spec, where)
    info: dict[str, Any] = spec["info"] if isinstance(spec.get("info"), dict) else {}
    title = str(info.get("title") or "Imported API")
    world = ImportedWorld(
        name=name or world_name(title, fallback="openapi"),
        title=title,
        description=str(info.get("description") or info.get("summary") or f"Tools imported from {title}.").strip(),
        version=str(info.get("version") or "1"),
        source=source,
    )
    if version.beyond:
        world.report.append(ReportEntry("note", "version", f"{version.label} {_BEYOND}"))
    loader = RefLoader(base_uri, fetch)
    world.report += _validation_notes(spec, base_uri, loader)
    resolved = jsonref.replace_refs(spec, base_uri=base_uri, loader=loader, merge_props=version.v31)
    try:
        _import_operations(world, resolved, version, info, select or OperationFilter(), where)
    except jsonref.JsonRefError as exc:  # outside any one operation (a path item, the security schemes)
        raise refusal(exc, where) or ImportSourceError(f"{where}: broken $ref: {_ref_problem(exc)}") from None
    if "webhooks" in spec and isinstance(spec["webhooks"], dict) and spec["webhooks"]:
        world.report.append(
            ReportEntry("skipped", "webhooks", f"{len(spec['webhooks'])} webhook(s): calls the API makes, not tools")
        )
    return world


def _import_operations(
    world: ImportedWorld, resolved: Any, version: _Version, info: dict[str, Any], select: OperationFilter, where: str
) -> None:
    operations = _operations(resolved, world.report)
    if not operations:
        raise ImportSourceError(f"{where} has no operations under 'paths'")
    chosen = _select(operations, select, where)
    _name_operations(chosen, world.report)
    security: dict[str, list[str]] = {}
    imported: list[_Operation] = []
    for operation in chosen:
        try:
            tool = _tool(operation, resolved, version, world.report)
        except _Skip as exc:
            world.report.append(ReportEntry("skipped", operation.label, str(exc)))
            continue
        except jsonref.JsonRefError as exc:
            refused = refusal(exc, operation.label)
            if refused is not None:
                raise refused from None
            world.report.append(ReportEntry("skipped", operation.label, f"broken $ref: {_ref_problem(exc)}"))
            continue
        except RecursionError:  # jsonref follows a $ref to a $ref ... back to the first one without end
            world.report.append(ReportEntry("skipped", operation.label, _CYCLE))
            continue
        world.tools.append(tool)
        imported.append(operation)
        security.setdefault(_requirement_text(operation, resolved), []).append(tool["name"])
    if not world.tools:
        first = next((e for e in world.report if e.kind == "skipped"), None)
        why = f"; first: {first.item}: {first.reason}" if first else ""
        raise ImportSourceError(f"no operation of {where} could be imported ({len(chosen)} skipped{why})")
    world.policy = _policy(world.title, info, version, resolved, security)
    _ground(world, imported)


def _ground(world: ImportedWorld, imported: list[_Operation]) -> None:
    """Attach the declarations the REST resources imply, with the state skeleton they point into."""
    tools = {str(tool["name"]): tool for tool in world.tools}
    calls = [
        RestOperation(o.method, o.path, tools[o.name], o.arguments, tuple(o.query), o.body)
        for o in imported
        if o.name in tools
    ]
    groundings, skeleton, notes = propose_groundings(calls)
    for name, grounding in groundings.items():
        tools[name]["grounding"] = grounding
    if skeleton:
        world.state = skeleton
    world.report += notes


def _validation_notes(spec: dict[str, Any], base_uri: str, loader: RefLoader) -> list[ReportEntry]:
    """The description's own problems, from openapi-spec-validator (its references read through `loader`)."""
    try:
        cls = get_validator_cls(spec)
    except ValidatorDetectError:
        return []
    size = len(json.dumps(spec, separators=(",", ":")))
    if size > VALIDATE_MAX_CHARS:  # the validator takes ~2 s a MB; every imported tool is still checked
        why = f"not checked with openapi-spec-validator: {size / _MB:.1f} MB is over {VALIDATE_MAX_CHARS / _MB:g} MB"
        return [ReportEntry("note", "validation", why)]
    handlers = {scheme: loader for scheme in ("file", "http", "https")}
    local = type(f"Local{cls.__name__}", (cls,), {"resolver_handlers": handlers})
    notes: list[ReportEntry] = []
    try:
        for count, error in enumerate(local(spec, base_uri=base_uri).iter_errors()):
            if count == _MAX_NOTES:
                notes.append(ReportEntry("note", "validation", "more problems not listed"))
                break
            where = "/".join(str(p) for p in getattr(error, "absolute_path", ()))
            message = " ".join(str(getattr(error, "message", error)).split())[:200]
            notes.append(ReportEntry("note", "validation", f"{message} (at {where})" if where else message))
    except Exception as exc:  # the validator gave up (an unresolvable or remote $ref, a cycle it cannot walk)
        text = " ".join(str(exc).split())[:200] or type(exc).__name__
        notes.append(ReportEntry("note", "validation", f"the validator stopped: {text}"))
    return notes


def _operations(spec: Any, report: list[ReportEntry]) -> list[_Operation]:
    paths = spec.get("paths")
    found: list[_Operation] = []
    if not isinstance(paths, dict):
        return found
    for path, item in paths.items():
        try:
            if not isinstance(item, dict):
                continue
            for method in METHODS:
                op = item.get(method)
                if isinstance(op, dict):
                    found.append(_Operation(method, str(path), op, item))
        except jsonref.JsonRefError as exc:
            report.append(ReportEntry("skipped", str(path), f"broken $ref: {_ref_problem(exc)}"))
        except RecursionError:
            report.append(ReportEntry("skipped", str(path), _CYCLE))
    return found


def _select(operations: list[_Operation], select: OperationFilter, where: str) -> list[_Operation]:
    if not select:
        return operations
    chosen = []
    for operation in operations:
        tags: list[Any] = operation.op["tags"] if isinstance(operation.op.get("tags"), list) else []
        op_id = str(operation.op.get("operationId") or "")
        if select.tags and not set(map(str, tags)) & set(select.tags):
            continue
        if select.paths and not any(fnmatch.fnmatchcase(operation.path, p) for p in select.paths):
            continue
        if select.operations and op_id not in select.operations and _base_name(operation) not in select.operations:
            continue
        chosen.append(operation)
    if not chosen:
        known = sorted({str(t) for o in operations for t in (o.op.get("tags") or []) if isinstance(t, str)})
        hint = f" (tags in it: {', '.join(known[:20])})" if select.tags and known else ""
        raise ImportSourceError(f"no operation of {where} matches --tag/--path/--operation{hint}")
    return chosen


def _base_name(operation: _Operation) -> str:
    op_id = operation.op.get("operationId")
    if isinstance(op_id, str) and op_id.strip():
        return mcp_tool_name(op_id)
    path = re.sub(r"\{([^}]*)\}", r"by_\1", operation.path)
    return mcp_tool_name(f"{operation.method}_{path}")


def _name_operations(operations: list[_Operation], report: list[ReportEntry]) -> None:
    taken: dict[str, str] = {}
    for operation in operations:
        base = _base_name(operation)
        op_id = operation.op.get("operationId")
        operation.name = unique_name(base, taken)
        if operation.name != base:
            first = taken[base]
            why = f"duplicate operationId {op_id!r} (also {first})" if op_id else f"name {base!r} taken by {first}"
            report.append(ReportEntry("changed", operation.label, f"{why}: named {operation.name!r}"))
        elif isinstance(op_id, str) and base != op_id:
            report.append(ReportEntry("changed", operation.label, f"operationId {op_id!r} named {base!r} (MCP names)"))
        taken[operation.name] = operation.label


def _tool(operation: _Operation, spec: Any, version: _Version, report: list[ReportEntry]) -> dict[str, Any]:
    op = operation.op
    converter = SchemaConverter()
    changes: list[str] = []
    try:
        input_schema = _input_schema(operation, spec, version, converter, changes)
        output = _output_schema(operation, spec, version, converter, changes)
    except (UnsupportedSchema, SchemaTooLarge) as exc:
        raise _Skip(str(exc)) from None
    summary = " ".join(str(op.get("summary") or "").split())
    parts = [summary, str(op.get("description") or "").strip()]
    if op.get("deprecated") is True:
        parts.append("Deprecated.")
    if output.wrapped:
        parts.append(f"The JSON response ({output.wrapped}) is returned under `result`.")
    tool: dict[str, Any] = {"name": operation.name}
    if summary:
        tool["title"] = summary[:200]
    description = "\n\n".join(p for p in parts if p)
    if description:
        tool["description"] = description
    tool["inputSchema"] = input_schema
    if output.schema is not None:
        tool["outputSchema"] = output.schema
    tool["annotations"] = _annotations(operation.method)
    meta = {"method": operation.method.upper(), "path": operation.path}
    if isinstance(op.get("operationId"), str):
        meta["operationId"] = op["operationId"]
    if operation.media_type:
        meta["requestBody"] = operation.media_type  # the real API takes the `body` argument in this encoding
    tool["_meta"] = {"simia/openapi": meta}
    errors = _errors(op.get("responses"))
    if errors:
        tool["errors"] = errors
    for key in ("inputSchema", "outputSchema"):
        problem = tool_schema_problem(tool[key]) if key in tool else None
        if problem:
            raise _Skip(f"{key}: {problem}")
    if op.get("callbacks"):
        changes.append("callbacks not imported (requests the API makes)")
    for name, why in converter.cuts.items():
        changes.append(f"schema {name!r} cut: {why}")
    if converter.loosened:
        changes.append(
            f"the result's oneOf read as anyOf ({converter.loosened}x): an answer may fit more than one branch"
        )
    report.extend(ReportEntry("changed", operation.label, change) for change in changes)
    report.extend(_example_problems(operation.label, output))
    return tool


def _parameters(operation: _Operation) -> list[dict[str, Any]]:
    """Path-level parameters, overridden by the operation's own (same name and location)."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for source in (operation.path_item.get("parameters"), operation.op.get("parameters")):
        for param in source if isinstance(source, list) else []:
            if isinstance(param, dict) and isinstance(param.get("name"), str):
                merged[(str(param.get("in")), param["name"])] = param
    return list(merged.values())


def _input_schema(
    operation: _Operation, spec: Any, version: _Version, converter: SchemaConverter, changes: list[str]
) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    form_fields: list[dict[str, Any]] = []
    for param in _parameters(operation):
        where, name = str(param.get("in")), str(param["name"])
        if where == "formData":
            form_fields.append(param)
            continue
        if where == "header" and name.lower() in _IGNORED_HEADERS:
            continue
        if where == "body":
            consumes = operation.op.get("consumes") or spec.get("consumes")
            if consumes and not any(_is_json(t) for t in consumes):
                _non_json_body(param.get("required") is True, list(consumes), changes)
                continue
            schema = converter.convert(param.get("schema", {}), "request")
        else:
            schema = _parameter_schema(param, version, converter)
        key = name if name not in properties else f"{where}_{name}"
        if key != name:
            changes.append(f"{where} parameter {name!r} is {key!r} (the name is also used elsewhere)")
        description = " ".join(str(param.get("description") or "").split())
        if description and "description" not in schema:
            schema["description"] = description
        if param.get("deprecated") is True:
            schema["deprecated"] = True
        properties[key] = schema
        if param.get("required") is True or where == "path":
            required.append(key)
        if where == "path" or (where == "query" and name not in operation.arguments):
            operation.arguments[name] = key  # a path parameter's own key, even when a query one has its name
            operation.query += [name] if where == "query" else []
        if where == "body" and param.get("required") is True:
            operation.body = key
    if form_fields:
        consumes = operation.op.get("consumes") or spec.get("consumes") or []
        kind = next((str(t) for t in consumes if _form_type(t)), "form data")
        form = _form_fields(form_fields, version, converter, changes)
        needed = any(p.get("required") is True for p in form_fields)
        key = _add_body(operation, properties, required, form, "", needed, changes)
        changes.append(f"the request body is {kind}: imported as the {key!r} argument, an object of its fields")
        operation.media_type = kind
    body = operation.op.get("requestBody")
    if not version.v2 and isinstance(body, dict):
        content: dict[str, Any] = body["content"] if isinstance(body.get("content"), dict) else {}
        found = _body_media(content)
        if found is None:
            _non_json_body(body.get("required") is True, list(content), changes)
        else:
            media_type, media = found
            body_schema = converter.convert(media.get("schema", {}), "request")
            description = " ".join(str(body.get("description") or "").split())
            needed = body.get("required") is True
            key = _add_body(operation, properties, required, body_schema, description, needed, changes)
            if not _is_json(media_type):
                changes.append(
                    f"the request body is {media_type}: imported as the {key!r} argument, an object of its fields"
                )
                operation.media_type = media_type
    root: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        root["required"] = required
    return root


def _add_body(
    operation: _Operation,
    properties: dict[str, Any],
    required: list[str],
    schema: dict[str, Any],
    description: str,
    is_required: bool,
    changes: list[str],
) -> str:
    """Add the request body's schema as the `body` argument (another name when a parameter has that one); a
    required body is the operation's `body` (what a REST create stores). Returns its key."""
    key = unique_name("body", properties)
    if key != "body":
        changes.append(f"the request body is {key!r} (a parameter is named 'body')")
    if description and "description" not in schema:
        schema["description"] = description
    properties[key] = schema
    if is_required:
        required.append(key)
        operation.body = key
    return key


def _form_fields(
    fields: list[dict[str, Any]], version: _Version, converter: SchemaConverter, changes: list[str]
) -> dict[str, Any]:
    """Swagger 2.0's `formData` parameters as one object schema, a field a property (an optional file upload is
    left out with a note; a required one skips the operation)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field_ in fields:
        name = str(field_["name"])
        if field_.get("type") == "file":
            if field_.get("required") is True:
                raise _Skip(f"form field {name!r} is a file upload, not JSON")
            changes.append(f"optional form field {name!r} (a file upload) left out")
            continue
        schema = _parameter_schema(field_, version, converter)
        description = " ".join(str(field_.get("description") or "").split())
        if description and "description" not in schema:
            schema["description"] = description
        properties[name] = schema
        if field_.get("required") is True:
            required.append(name)
    form: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        form["required"] = required
    return form


def _parameter_schema(param: dict[str, Any], version: _Version, converter: SchemaConverter) -> dict[str, Any]:
    if version.v2:  # Swagger 2.0: the schema keywords sit on the parameter itself
        fields = {k: v for k, v in param.items() if k not in {"name", "in", "required", "description"}}
        fields.pop("collectionFormat", None)
        fields.pop("allowEmptyValue", None)
        return converter.convert(fields, "request")
    if "schema" in param:
        return converter.convert(param["schema"], "request")
    content = param.get("content")
    if isinstance(content, dict):
        media = _json_media(content)
        if media is None:
            raise _Skip(f"parameter {param['name']!r} is {', '.join(content)} only, not JSON")
        return converter.convert(media.get("schema", {}), "request")
    return {}


def _non_json_body(required: bool, types: list[str], changes: list[str]) -> None:
    kinds = ", ".join(str(t) for t in types) or "no media type"
    if required:
        raise _Skip(f"the request body is {kinds}, not JSON nor a form (only JSON and form bodies are imported)")
    changes.append(f"optional request body ({kinds}, not JSON) left out")


def _is_json(media_type: Any) -> bool:
    kind = str(media_type).split(";", 1)[0].strip().lower()
    return kind in {"application/json", "*/*", "application/*"} or kind.endswith("+json")


def _json_media(content: dict[str, Any]) -> dict[str, Any] | None:
    for media_type, media in content.items():
        if _is_json(media_type):
            return media if isinstance(media, dict) else {}
    return None


def _form_type(media_type: Any) -> bool:
    kind = str(media_type).split(";", 1)[0].strip().lower()
    return kind in {"application/x-www-form-urlencoded", "multipart/form-data"}


def _body_media(content: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The request body's media type and Media Type Object: JSON first, else a form (URL-encoded or multipart,
    whose fields a JSON object carries as well); None for any other type."""
    for accepted in (_is_json, _form_type):
        for media_type, media in content.items():
            if accepted(media_type):
                return str(media_type), media if isinstance(media, dict) else {}
    return None


def _success(responses: Any) -> list[tuple[str, Any]]:
    if not isinstance(responses, dict):
        return []
    found = [(str(s), r) for s, r in responses.items() if re.fullmatch(r"2[0-9]{2}", str(s))]
    found.sort()
    found += [(str(s), r) for s, r in responses.items() if str(s).upper() == "2XX"]
    return found


@dataclass
class _Output:
    """An operation's outputSchema (None: none), what its response root was when wrapped under `result`, and
    the description's own examples of that response (name, value), checked against the schema."""

    schema: dict[str, Any] | None = None
    wrapped: str = ""
    examples: list[tuple[str, Any]] = field(default_factory=list)


def _output_schema(
    operation: _Operation, spec: Any, version: _Version, converter: SchemaConverter, changes: list[str]
) -> _Output:
    """The first 2xx JSON response as an object-rooted outputSchema, with its documented examples."""
    for status, response in _success(operation.op.get("responses")):
        if not isinstance(response, dict):
            continue
        if version.v2:
            if "schema" not in response:
                continue
            produces = operation.op.get("produces") or spec.get("produces")
            if produces and not any(_is_json(t) for t in produces):
                changes.append(f"the {status} response is {', '.join(map(str, produces))}, not JSON: no outputSchema")
                return _Output()
            raw = response["schema"]
            given = response.get("examples")
            documented = [(f"{status} {k}", plain(v)) for k, v in (given or {}).items() if _is_json(k)]
        else:
            content = response.get("content")
            if not isinstance(content, dict) or not content:
                continue
            media = _json_media(content)
            if media is None:
                changes.append(f"the {status} response is {', '.join(content)}, not JSON: no outputSchema")
                return _Output()
            if "schema" not in media:
                return _Output()
            raw = media["schema"]
            documented = _media_examples(status, media)
        schema = converter.convert(raw, "response")
        documented += [(f"{status} schema example {n + 1}", v) for n, v in enumerate(schema.get("examples") or [])]
        if not schema:
            return _Output()
        rooted = object_root(schema)
        if rooted is not None:
            if isinstance(raw, dict) and "allOf" in raw and "allOf" not in rooted:
                changes.append("outputSchema: the response's allOf merged into one object")
            return _Output(rooted, "", documented)
        kind = schema.get("type")
        what = f"a JSON {' or '.join(kind) if isinstance(kind, list) else kind or 'value'}"
        changes.append(f"outputSchema: the {status} response ({what}) wrapped as an object under 'result'")
        wrapped = {"type": "object", "properties": {"result": schema}, "required": ["result"]}
        return _Output(wrapped, what, [(name, {"result": value}) for name, value in documented])
    return _Output()


def _media_examples(status: str, media: dict[str, Any]) -> list[tuple[str, Any]]:
    """A Media Type Object's `example` and `examples` (Example Objects; `externalValue` ones are not read)."""
    found: list[tuple[str, Any]] = []
    if "example" in media:
        found.append((f"{status} example", plain(media["example"])))
    examples = media.get("examples")
    for name, example in examples.items() if isinstance(examples, dict) else ():
        if isinstance(example, dict) and "value" in example:
            found.append((f"{status} example {name!r}", plain(example["value"])))
    return found


def _example_problems(label: str, output: _Output) -> list[ReportEntry]:
    """A note for each documented response example the imported outputSchema refuses."""
    if output.schema is None:
        return []
    notes = []
    for name, value in output.examples:
        problems = validate_instance(output.schema, value)
        if problems:
            why = f"response example ({name}) does not validate against the outputSchema: {problems[0]}"
            notes.append(ReportEntry("note", label, why[:300]))
    return notes


def _errors(responses: Any) -> list[dict[str, str]]:
    if not isinstance(responses, dict):
        return []
    errors: list[dict[str, str]] = []
    codes: set[str] = set()
    has_success = bool(_success(responses))
    for status, response in responses.items():
        status = str(status).upper()
        if re.fullmatch(r"[45][0-9]{2}", status):
            try:
                phrase = HTTPStatus(int(status)).phrase
                code = re.sub(r"[^a-z0-9]+", "_", phrase.lower()).strip("_")
            except ValueError:
                code = f"http_{status}"
        elif status in {"4XX", "5XX"}:
            code = "client_error" if status == "4XX" else "server_error"
        elif status == "DEFAULT" and has_success:
            code = "unexpected_error"
        else:
            continue
        try:
            description = " ".join(str(response.get("description") or "").split())[:300]
        except jsonref.JsonRefError as exc:
            if isinstance(exc.cause, RefusedReference):
                raise
            description = ""
        if code in codes:
            continue
        codes.add(code)
        label = "any other failure" if status == "DEFAULT" else f"HTTP {status}"
        errors.append({"code": code, "when": f"{label}: {description}" if description else label})
    return errors


def _annotations(method: str) -> dict[str, Any]:
    if method in SAFE:
        return {"readOnlyHint": True}
    annotations: dict[str, Any] = {"readOnlyHint": False, "destructiveHint": method == "delete"}
    if method in {"put", "delete"}:
        annotations["idempotentHint"] = True
    return annotations


def _requirement_text(operation: _Operation, spec: Any) -> str:
    """The operation's security requirement in words ("" when none applies)."""
    requirement = operation.op.get("security", spec.get("security"))
    if not isinstance(requirement, list) or not requirement:
        return ""
    options = []
    for alternative in requirement:
        if not isinstance(alternative, dict):
            continue
        if not alternative:
            options.append("no credentials")
            continue
        parts = []
        for scheme, scopes in alternative.items():
            listed = ", ".join(map(str, scopes)) if isinstance(scopes, list) and scopes else ""
            parts.append(f"{scheme} ({listed})" if listed else str(scheme))
        options.append(" and ".join(parts))
    return " or ".join(options)


def _scheme_text(name: str, scheme: Any) -> str:
    if not isinstance(scheme, dict):
        return name
    kind = str(scheme.get("type") or "")
    if kind == "apiKey":
        return f"{name}: an API key in the {scheme.get('in')} `{scheme.get('name')}`"
    if kind == "http":
        return f"{name}: HTTP {scheme.get('scheme', '')} authentication".replace("  ", " ")
    if kind == "basic":
        return f"{name}: HTTP basic authentication"
    if kind in {"oauth2", "openIdConnect"}:
        return f"{name}: {'OAuth 2' if kind == 'oauth2' else 'OpenID Connect'}"
    return f"{name}: {kind}"


def _policy(title: str, info: dict[str, Any], version: _Version, spec: Any, security: dict[str, list[str]]) -> str:
    lines = [
        f"Tools imported from the API description {title!r} (version {info.get('version', '?')}, {version.label}).",
        "Each tool is one HTTP operation of that API; answer as the real API would, with the documented errors.",
    ]
    required = {text: names for text, names in security.items() if text}
    if required:
        components = spec.get("components") or {}
        schemes = spec.get("securityDefinitions") if version.v2 else components.get("securitySchemes")
        lines += ["", "## Authentication in the real API", ""]
        for name, scheme in (schemes or {}).items():
            lines.append(f"- {_scheme_text(str(name), plain(scheme))}")
        lines += ["", "Required credentials (the simulated caller holds them; the real API refuses calls without):"]
        for text, names in required.items():
            lines.append(f"- {', '.join(names)}: {text}")
    return "\n".join(lines)


def _ref_problem(exc: jsonref.JsonRefError) -> str:
    reference = exc.reference.get("$ref") if isinstance(exc.reference, dict) else exc.reference
    cause = exc.cause if isinstance(exc.cause, ImportSourceError) else None
    why = str(cause) if cause else "it points to nothing"
    return f"{reference!r}: {why}"
