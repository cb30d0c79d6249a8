"""Request bodies of the HTTP API as wire models: parsed strictly, and every problem a 400 whose message names the
field, what it must be and what was sent (for an unknown field, the allowed ones). A body is `application/json`
(415 otherwise) and names each key of an object once (400 naming the key otherwise: a JSON parser keeps the last of
two, another one the first, so two readers of one body could disagree on what it says)."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from simia.sim.wire import CreateEpisode, EndEpisode, ForkEpisode
from starlette.requests import Request

from ._body import MAX_BODY, read_body
from .errors import BadRequest, UnsupportedMediaType

__all__ = ["MAX_JSON_BODY", "json_body", "no_query", "parse_body", "refuse_duplicate_keys"]

MAX_JSON_BODY = MAX_BODY
M = TypeVar("M", bound=BaseModel)


def no_query(request: Request) -> None:
    """Refuse a query string on a route that takes none (a misspelt filter is never ignored in silence).

    Raises:
        BadRequest: naming the first parameter, and where the route's input goes instead.
    """
    if request.query_params:
        name = next(iter(request.query_params))
        where = "its fields go in a JSON body" if request.method == "POST" else "it takes none"
        raise BadRequest(f"unknown query parameter {name!r}; {request.method} {request.url.path}: {where}")


async def parse_body(request: Request, model: type[M]) -> M:
    """The request body as `model`; an empty body is `{}`. Parsing is strict: a JSON value of the wrong type
    (`"12"` or `true` for an integer) is refused, never converted.

    Raises:
        BadRequest: any problem, in a message that names the field (a query string too: see `no_query`), or a key
            given twice in one object.
        PayloadTooLarge: a body over `MAX_JSON_BODY`.
        UnsupportedMediaType: a body that is not `application/json`.
    """
    no_query(request)
    raw = await json_body(request, MAX_JSON_BODY)
    try:
        return model.model_validate_json(raw if raw.strip() else b"{}", strict=True)
    except ValidationError as exc:
        raise BadRequest(_validation_message(exc)) from None


async def json_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The body of an API POST, read no further than `limit`: declared `application/json` (an empty body may declare
    nothing), and with no key twice in one object.

    Raises:
        UnsupportedMediaType: another Content-Type, or a body without one (checked before the body is read).
        BadRequest: a key given twice in one object (`refuse_duplicate_keys`).
        PayloadTooLarge: a body over `limit`.
    """
    declared = request.headers.get("content-type")
    if declared is not None and declared.split(";", 1)[0].strip().lower() != "application/json":
        raise UnsupportedMediaType(_SEND_JSON.format(what=f"Content-Type {declared[:100]!r}"))
    raw = await read_body(request, limit)
    if declared is None and raw.strip():
        raise UnsupportedMediaType(_SEND_JSON.format(what="a body without a Content-Type"))
    refuse_duplicate_keys(raw)
    return raw


_SEND_JSON = "{what} is not accepted: send the body as JSON with 'Content-Type: application/json' (curl: --json BODY)"


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _DuplicateKey(key)
        found[key] = value
    return found


def refuse_duplicate_keys(raw: bytes) -> None:
    """Refuse a JSON body in which one object names a key twice (a body that is not JSON passes: the parser that
    reads it next says what is wrong).

    Raises:
        BadRequest: naming the key.
    """
    if b'"' not in raw:
        return
    try:
        json.loads(raw, object_pairs_hook=_unique_pairs)
    except _DuplicateKey as exc:
        key = exc.key if len(exc.key) <= 100 else exc.key[:100] + "..."
        raise BadRequest(f"request body gives the key {key!r} twice in one object; give each key once") from None
    except (ValueError, RecursionError):
        return


def _validation_message(exc: ValidationError) -> str:
    """One line per problem: where, what (pydantic's own words), and for unknown fields the allowed ones."""
    problems = []
    for error in exc.errors(include_url=False)[:5]:
        where = ".".join(str(part) for part in error["loc"]) or "body"
        if error["type"] == "json_invalid":
            problems.append(f"request body is not valid JSON: {error['msg']}")
        elif error["type"] in ("model_type", "model_attributes_type") and not error["loc"]:
            problems.append("request body must be a JSON object")
        elif error["type"] == "extra_forbidden":
            allowed = ", ".join(_FIELDS.get(exc.title, ()))
            problems.append(f"unknown field {where!r}" + (f"; allowed: {allowed}" if allowed else ""))
        elif error["type"] == "missing":
            problems.append(f"missing field {where!r}")
        elif error["type"] in _EXPECTED:
            problems.append(f"field {where!r} must be {_EXPECTED[error['type']]}, got {_json_type(error['input'])}")
        elif error["type"] == "value_error":  # a model's own check: its message names the field
            reason = str(error.get("ctx", {}).get("error", error["msg"]))
            problems.append(reason if not error["loc"] else f"field {where!r}: {reason}")
        elif error["type"] == "finite_number":
            problems.append(f"field {where!r} must be a finite number (JSON has no NaN or Infinity)")
        else:
            problems.append(f"field {where!r}: {error['msg']}")
    return "; ".join(problems)


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_parsing_size": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
}


def _json_type(value: Any) -> str:
    """The JSON name of a value's type, as the client sent it."""
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string")):
        if isinstance(value, kind):
            return name
    return {dict: "object", list: "array", type(None): "null"}.get(type(value), type(value).__name__)


_FIELDS = {m.__name__: tuple(m.model_fields) for m in (CreateEpisode, ForkEpisode, EndEpisode)}
