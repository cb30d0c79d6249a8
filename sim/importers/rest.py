"""REST resources of an API description, and the `grounding` declarations they imply.

A resource is a collection path of literal segments (`/things`) and its item path (`/things/{thing_id}`). Its
records live in the state as an object keyed by id under the collection's last segment, so the importer lays
out `{"things": {}}` and proposes, per operation (pointers are templates over the tool's arguments):

    GET    /things/{id}   read /things/{id}; a missing record is the not-found code
    GET    /things        read $.things.* (a list, under the output's array field); only without query parameters
    POST   /things        the new id an argument (a path or query parameter named like the item's):
                          precondition: no record there (conflict); effects: add /things/{id} = the body
                          the new id in the body (a field named like the item's parameter, or `id`), computed:
                          the same, the id read from the body
                          the new id the server's (no such field in the body; the response's record has one):
                          `let` draws one with `$newid`, shaped as the id's schema says (digits for an integer,
                          a UUID for `format: uuid`, else letters and digits); the record is the body and the id
    PUT    /things/{id}   precondition: the record exists (not found); effects: replace it with the body
    PATCH  /things/{id}   precondition: the record exists; guided (the merge of the body's fields is the model's)
    DELETE /things/{id}   precondition: the record exists; effects: remove it (guided: the model words the answer)

A write whose response is the record also reads it back (exact). A create from the body is proposed only when the
record it stores has every field the response (and the item's GET) requires. Where no declaration can be made (a
list with filters, a response with fields the server fills in) the report says so, and the model answers as it does
for any tool; a drawn id is reported too (it is simia's, not the server's scheme).
"""

from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..schema import validate_instance
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
    record: dict[str, Any] | None = None  # the outputSchema of GET /things/{thing_id}, when imported


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
            if why:  # what the user should know of the proposal (an id simia draws)
                report.append(ReportEntry("note", label, f"grounding proposed: {why}"))
        elif why:
            report.append(ReportEntry("note", label, f"no grounding proposed: {why}"))
    skeleton: dict[str, Any] = {r.key: {} for r in resources.values() if r.key in used}
    return groundings, skeleton, report


def _resources(operations: Sequence[RestOperation]) -> dict[str, _Resource]:
    """Collection path -> resource (one with an item path); a collection whose key another has is left out."""
    params: dict[str, str] = {}
    records: dict[str, dict[str, Any]] = {}
    collections: list[str] = []
    for operation in operations:
        item = _ITEM.fullmatch(operation.path)
        if item:
            params.setdefault(item["collection"], item["param"])
            collections.append(item["collection"])
            output = operation.tool.get("outputSchema")
            if operation.method == "get" and params[item["collection"]] == item["param"] and isinstance(output, dict):
                records.setdefault(item["collection"], output)
        elif _COLLECTION.fullmatch(operation.path):
            collections.append(operation.path)
    resources: dict[str, _Resource] = {}
    keys: set[str] = set()
    for collection in dict.fromkeys(collections):
        key = collection.rsplit("/", 1)[-1]
        if key in keys or collection not in params:  # without an item path, no records keyed by id
            continue
        keys.add(key)
        resources[collection] = _Resource(collection, key, params[collection], records.get(collection))
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
            return _create(operation, resource, on_item)
        return None, ""
    if method == "post":
        return _create(operation, resource, on_item)
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


def _create(operation: RestOperation, resource: _Resource, on_item: bool) -> tuple[dict[str, Any] | None, str]:
    argument = operation.arguments.get(resource.param)
    if argument is None and on_item:
        return (
            None,
            f"the new record's id is not an argument (no argument {resource.param!r} names it): the model picks it",
        )
    if operation.body is None:
        return None, "no required JSON body to store"
    if argument is None:
        return _create_from_body(operation, operation.body, resource)
    pointer = f"/{_token(resource.key)}/{{{argument}}}"
    absent = {"pointer": pointer, "exists": False, "error": _code(operation.tool, "409", "conflict")}
    effects = [{"op": "add", "path": pointer, "value": f"{{{operation.body}}}"}, *_id_field(operation, pointer)]
    return {"preconditions": [absent], "effects": effects, **_read_back(operation.tool, pointer)}, ""


def _create_from_body(operation: RestOperation, body: str, resource: _Resource) -> tuple[dict[str, Any] | None, str]:
    """A create whose new id is a body field (named like the item's parameter, or `id`) or the server's (a field of
    the record the response describes), computed in JSONata (docs/worlds.md); a proposal with an id simia draws
    comes with why (for the report)."""
    body_schema = operation.tool["inputSchema"]["properties"][body]
    fields = body_schema.get("properties") if isinstance(body_schema, dict) else None
    if not isinstance(fields, dict):
        return None, "the request body is not an object with properties (a record to store)"
    answer, record_get = _record(operation.tool.get("outputSchema")), _record(resource.record)
    in_body = _id_name(fields, resource.param)
    field = in_body or _id_name(((answer or record_get or {}).get("properties")) or {}, resource.param)
    if field is None:
        why = f"the new record's id is not an argument nor a body field ({resource.param!r} or 'id'), nor in the "
        return None, why + "response: the model picks it"
    given = set(body_schema.get("required") or []) | {field}
    item = f"GET {resource.collection}/{{{resource.param}}}"
    lacking = _lacking(answer, given, "response") or _lacking(record_get, given, f"{item} response")
    if lacking:
        return None, lacking
    names = [_step(name) for name in (resource.key, body, field)]
    if None in names:
        return None, "a name holds a backquote, which a JSONata expression cannot quote"
    collection, sent = f"$state.{names[0]}", f"$args.{names[1]}.{names[2]}"
    add = f'{{"op": "add", "path": $pointer({json.dumps(resource.key, ensure_ascii=False)}, $id), "value": '
    conflict = {"expr": f"$not($exists($lookup({collection}, $id)))", "error": _code(operation.tool, "409", "conflict")}
    read = {"read": {"expr": f"$lookup({collection}, $id)"}} if answer is not None else {}
    id_schema = (fields if in_body else (answer or record_get or {})["properties"])[field]
    if in_body and in_body in (body_schema.get("required") or []):  # the caller names every new record
        effect = {"expr": f"{add}$args.{names[1]}}}"}
        return {"let": {"id": _as_key(sent, id_schema)}, "preconditions": [conflict], "effects": [effect], **read}, ""
    shape = _id_shape(id_schema if isinstance(id_schema, dict) else {})
    if shape is None:
        shown = json.dumps(id_schema, ensure_ascii=False)[:120]
        return (
            None,
            f"the server makes the new id ({field}), whose schema {shown} simia cannot draw: the model picks it",
        )
    new_id = shape.draw(collection)
    record = f"$merge([$args.{names[1]}, {{{json.dumps(field, ensure_ascii=False)}: {shape.value}}}])"
    grounding: dict[str, Any] = {
        "let": {
            "id": f"{_sent(sent, id_schema)} ? {_as_key(sent, id_schema)} : {new_id}" if in_body else new_id,
            "record": record,
        },
        **({"preconditions": [conflict]} if in_body else {}),
        "effects": [{"expr": f"{add}$record}}"}],
        **read,
    }
    who = "the body may name the new id, else the server makes it" if in_body else "the server makes the new id"
    return grounding, f"{who} ({field}): simia draws {shape.words}, never one in use (its own scheme, not the server's)"


def _record(output: Any) -> dict[str, Any] | None:
    """An outputSchema that is a record (an object; not a value wrapped under `result`), else None."""
    return output if isinstance(output, dict) and not _wrapped(output) else None


def _id_name(fields: dict[str, Any], param: str) -> str | None:
    """The field named like the item path's parameter (`petId`, `pet_id`), else `id`; None when there is none."""
    plain = param.replace("_", "").replace("-", "").lower()
    for name in (param, *(n for n in fields if n.replace("_", "").replace("-", "").lower() == plain), "id"):
        if name in fields:
            return name
    return None


def _lacking(schema: dict[str, Any] | None, given: set[str], what: str) -> str:
    """Why a record with the fields `given` fails `schema`'s required ones ("" when it does not)."""
    required = set((schema or {}).get("required") or [])
    if not required - given:
        return ""
    names = ", ".join(sorted(required - given))
    return f"the {what} requires fields the body need not give ({names}): the server fills them; declare them by hand"


def _sent(value: str, schema: Any) -> str:
    """The JSONata test that the caller gave an optional id (a null one, where the schema allows it, is none)."""
    return f"$exists({value}) and {value} != null" if "null" in _types(schema) else f"$exists({value})"


def _as_key(value: str, schema: Any) -> str:
    """The JSONata text of an id as the state's key (a whole number written without a fraction)."""
    kinds = _types(schema)
    if kinds == {"string"}:
        return value
    return f"$string($floor({value}))" if kinds & {"integer"} else f"$string({value})"


def _types(schema: Any) -> set[str]:
    kind = schema.get("type") if isinstance(schema, dict) else None
    return {kind} if isinstance(kind, str) else {str(k) for k in kind} if isinstance(kind, list) else set()


@dataclass(frozen=True)
class _IdShape:
    """How simia draws a new id the server would make: `draw` gives JSONata for the key (text), never a key of the
    collection; `value` is the id as the record holds it (`$id` is the key)."""

    words: str
    draw: Callable[[str], str]
    sample: Callable[[random.Random], Any]
    value: str = "$id"


_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
_DIGITS = "0123456789"
_UUID = (
    '($h := "0123456789abcdef"; $newid($newid("", 8, [], $h) & "-" & $newid("", 4, [], $h) & "-4" & '
    '$newid("", 3, [], $h) & "-" & $newid("", 1, [], "89ab") & $newid("", 3, [], $h) & "-", 12, {taken}, $h))'
)


def _number(length: int) -> _IdShape:
    return _IdShape(
        f"a {length}-digit number",
        lambda taken: f'$newid($newid("", 1, [], "123456789"), {length - 1}, {taken})',
        lambda rng: rng.randrange(10 ** (length - 1), 10**length),
        "$floor($number($id))",
    )


def _chars(length: int, alphabet: str, words: str) -> _IdShape:
    return _IdShape(
        f"{length} {words}",
        lambda taken: f'$newid("", {length}, {taken}, {json.dumps(alphabet)})',
        lambda rng: "".join(rng.choice(alphabet) for _ in range(length)),
    )


_UUID_SHAPE = _IdShape(
    "a UUID (version 4)",
    lambda taken: _UUID.replace("{taken}", taken),
    lambda rng: str(uuid.UUID(int=rng.getrandbits(128), version=4)),
)


def _id_shape(schema: dict[str, Any]) -> _IdShape | None:
    """The first shape whose samples all fit the id's schema: digits for a number, a UUID for `format: uuid`,
    else letters and digits (or digits) as long as `minLength`/`maxLength` allow; None when none fits."""
    kinds = _types(schema)
    if kinds & {"integer", "number"}:
        shapes = [_number(9), _number(6), _number(4)]
    elif schema.get("format") == "uuid":
        shapes = [_UUID_SHAPE]
    elif not kinds or "string" in kinds:
        low, high = schema.get("minLength"), schema.get("maxLength")
        length = min(max(8, low if isinstance(low, int) else 0), high if isinstance(high, int) else 64, 64)
        if length < 1:
            return None
        shapes = [_chars(length, _ALNUM, "lowercase letters and digits"), _chars(length, _DIGITS, "digits")]
        shapes.append(_UUID_SHAPE)
    else:
        return None
    for shape in shapes:
        rng = random.Random(0)
        if all(not validate_instance(schema, shape.sample(rng), formats=True) for _ in range(16)):
            return shape
    return None


_KEYWORDS = {"and", "or", "in", "true", "false", "null", "function"}


def _step(name: str) -> str | None:
    """`name` as one step of a JSONata path (backquoted unless a plain name); None when it holds a backquote."""
    if _PLAIN_NAME.fullmatch(name) and name not in _KEYWORDS:
        return name
    return None if "`" in name else f"`{name}`"


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
