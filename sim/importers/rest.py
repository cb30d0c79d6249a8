"""REST resources of an API description, and the `grounding` declarations they imply.

A resource is a collection path of literal segments (`/things`) and its item path (`/things/{thing_id}`). Its
records live in the state as an object keyed by id under the collection's last segment, so the importer lays
out `{"things": {}}` and proposes, per operation (pointers are templates over the tool's arguments):

    GET    /things/{id}   read /things/{id}; a missing record is the not-found code
    GET    /things        read $.things.* (a list, under the output's array field); only without query parameters
    POST   /things        when the new id is an argument (a path or query parameter named like the item's):
                          precondition: no record there (conflict); effects: add /things/{id} = the body
    PUT    /things/{id}   precondition: the record exists (not found); effects: replace it with the body
    PATCH  /things/{id}   precondition: the record exists; guided (the merge of the body's fields is the model's)
    DELETE /things/{id}   precondition: the record exists; effects: remove it (guided: the model words the answer)

A write whose response is the record also reads it back (exact). Where no declaration can be made (the new id
is inside the body, a list with filters) the report says so, and the model answers as it does for any tool.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .imported import ReportEntry

__all__ = ["RestOperation", "propose_groundings"]

_ITEM = re.compile(r"(?P<collection>(?:/[^/{}]+)+)/\{(?P<param>[^/{}]+)\}")
_COLLECTION = re.compile(r"(?:/[^/{}]+)+")
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class RestOperation:
    """What the proposals need of one imported operation.

    Attributes:
        method: lower case (`get`).
        path: the path template (`/things/{thing_id}`).
        tool: the imported tool (name, inputSchema, outputSchema, errors).
        arguments: each path and query parameter's inputSchema key.
        query: the query parameters' names.
        body: the inputSchema key of a required JSON request body (None without one).
    """

    method: str
    path: str
    tool: dict[str, Any]
    arguments: dict[str, str]
    query: Sequence[str]
    body: str | None


@dataclass(frozen=True)
class _Resource:
    collection: str  # the collection path, /things
    key: str  # the state's top-level key, things
    param: str  # the item path's parameter name, thing_id


def propose_groundings(
    operations: Sequence[RestOperation],
) -> tuple[dict[str, dict[str, Any]], dict[str, Any], list[ReportEntry]]:
    """The declarations the REST resources among `operations` imply.

    Returns:
        The grounding per tool name, the state skeleton they need (`{"things": {}}`; empty without resources)
        and a report line for each resource operation left undeclared.
    """
    resources = _resources(operations)
    groundings: dict[str, dict[str, Any]] = {}
    report: list[ReportEntry] = []
    used: set[str] = set()
    for operation in operations:
        found = _resource_of(operation.path, resources)
        if found is None:
            continue
        resource, on_item = found
        label = f"{operation.method.upper()} {operation.path}"
        grounding, why = _proposal(operation, resource, on_item)
        if grounding is not None:
            groundings[str(operation.tool["name"])] = grounding
            used.add(resource.key)
        elif why:
            report.append(ReportEntry("note", label, f"no grounding proposed: {why}"))
    skeleton: dict[str, Any] = {r.key: {} for r in resources.values() if r.key in used}
    return groundings, skeleton, report


def _resources(operations: Sequence[RestOperation]) -> dict[str, _Resource]:
    """Collection path -> resource (one with an item path); a collection whose key another has is left out."""
    params: dict[str, str] = {}
    collections: list[str] = []
    for operation in operations:
        item = _ITEM.fullmatch(operation.path)
        if item:
            params.setdefault(item["collection"], item["param"])
            collections.append(item["collection"])
        elif _COLLECTION.fullmatch(operation.path):
            collections.append(operation.path)
    resources: dict[str, _Resource] = {}
    keys: set[str] = set()
    for collection in dict.fromkeys(collections):
        key = collection.rsplit("/", 1)[-1]
        if key in keys or collection not in params:  # without an item path, no records keyed by id
            continue
        keys.add(key)
        resources[collection] = _Resource(collection, key, params[collection])
    return resources


def _resource_of(path: str, resources: dict[str, _Resource]) -> tuple[_Resource, bool] | None:
    if path in resources:
        return resources[path], False
    item = _ITEM.fullmatch(path)
    if item and item["collection"] in resources and resources[item["collection"]].param == item["param"]:
        return resources[item["collection"]], True
    return None


def _proposal(operation: RestOperation, resource: _Resource, on_item: bool) -> tuple[dict[str, Any] | None, str]:
    """One operation's grounding, or None and why not ("" when the method implies nothing)."""
    method = operation.method
    if not on_item:
        if method == "get":
            return _list(operation, resource)
        if method == "post":
            return _create(operation, resource)
        return None, ""
    if method == "post":
        return _create(operation, resource)
    if method not in {"get", "put", "patch", "delete"}:
        return None, ""
    argument = operation.arguments.get(resource.param)
    if argument is None:
        return None, f"the path parameter {resource.param!r} is not an argument"
    pointer = f"/{_token(resource.key)}/{{{argument}}}"
    not_found = _code(operation.tool, "404", "not_found")
    if method == "get":
        return {"read": {"pointer": pointer, **_key(operation.tool), "missing": not_found}}, ""
    exists = {"pointer": pointer, "exists": True, "error": not_found}
    if method == "patch":
        return {"preconditions": [exists], "mode": "guided"}, ""
    if method == "delete":
        return {"preconditions": [exists], "effects": [{"op": "remove", "path": pointer}]}, ""
    if operation.body is None:
        return None, "no required JSON body to store"
    effects = [{"op": "replace", "path": pointer, "value": f"{{{operation.body}}}"}, *_id_field(operation, pointer)]
    return {"preconditions": [exists], "effects": effects, **_read_back(operation.tool, pointer)}, ""


def _list(operation: RestOperation, resource: _Resource) -> tuple[dict[str, Any] | None, str]:
    if operation.query:
        names = ", ".join(operation.query)
        return None, f"its query parameters ({names}) filter or page the list; declare the read by hand"
    key = _list_key(operation.tool.get("outputSchema"))
    if key is None:
        return None, "the response is not a list (nor an object with one list field)"
    plain = _PLAIN_NAME.fullmatch(resource.key)
    path = f"$.{resource.key}.*" if plain else f"$[{_json_string(resource.key)}][*]"
    return {"read": {"jsonpath": path, "key": key}}, ""


def _create(operation: RestOperation, resource: _Resource) -> tuple[dict[str, Any] | None, str]:
    argument = operation.arguments.get(resource.param)
    if argument is None:
        return (
            None,
            f"the new record's id is not an argument (no argument {resource.param!r} names it): the model picks it",
        )
    if operation.body is None:
        return None, "no required JSON body to store"
    pointer = f"/{_token(resource.key)}/{{{argument}}}"
    absent = {"pointer": pointer, "exists": False, "error": _code(operation.tool, "409", "conflict")}
    effects = [{"op": "add", "path": pointer, "value": f"{{{operation.body}}}"}, *_id_field(operation, pointer)]
    return {"preconditions": [absent], "effects": effects, **_read_back(operation.tool, pointer)}, ""


def _id_field(operation: RestOperation, pointer: str) -> list[dict[str, Any]]:
    """An effect that stores the id in the record too, when the record has an id field the body lacks."""
    argument = pointer.rsplit("{", 1)[1].rstrip("}")
    body_schema = operation.tool["inputSchema"]["properties"].get(operation.body or "", {})
    output = operation.tool.get("outputSchema") or {}
    record = output.get("properties", {}).get("result", output) if _wrapped(output) else output
    fields = record.get("properties") if isinstance(record, dict) else None
    in_body = body_schema.get("properties") if isinstance(body_schema, dict) else None
    for name in (argument, "id"):
        if isinstance(fields, dict) and name in fields and not (isinstance(in_body, dict) and name in in_body):
            return [{"op": "add", "path": f"{pointer}/{_token(name)}", "value": f"{{{argument}}}"}]
    return []


def _read_back(tool: dict[str, Any], pointer: str) -> dict[str, Any]:
    """A read of the written record when the response is that record (an object output), else nothing."""
    output = tool.get("outputSchema")
    if not isinstance(output, dict) or _wrapped(output):
        return {}  # no response, or one that is not an object (so not the record)
    return {"read": {"pointer": pointer}}


def _key(tool: dict[str, Any]) -> dict[str, str]:
    """`key: result` when the response root was wrapped under `result` (the record is not an object)."""
    output = tool.get("outputSchema")
    return {"key": "result"} if isinstance(output, dict) and _wrapped(output) else {}


def _wrapped(output: dict[str, Any]) -> bool:
    return output.get("required") == ["result"] and list(output.get("properties") or {}) == ["result"]


def _list_key(output: Any) -> str | None:
    """The output field a list of records goes in: `result` (a wrapped array), or the object's one array field
    when no other field is required."""
    if not isinstance(output, dict):
        return None
    properties: dict[str, Any] = output.get("properties") or {}
    arrays = [name for name, sub in properties.items() if isinstance(sub, dict) and sub.get("type") == "array"]
    if len(arrays) != 1:
        return None
    required: list[str] = output.get("required") or []
    return arrays[0] if set(required) <= {arrays[0]} else None


def _code(tool: dict[str, Any], status: str, generic: str) -> str:
    """The tool's documented code for an HTTP status, else the generic code every tool has."""
    for error in tool.get("errors") or []:
        if str(error.get("when", "")).startswith(f"HTTP {status}"):
            return str(error["code"])
    return generic


def _token(name: str) -> str:
    """`name` as one literal JSON Pointer token of a template (braces doubled: they are not an argument)."""
    return name.replace("~", "~0").replace("/", "~1").replace("{", "{{").replace("}", "}}")


def _json_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
