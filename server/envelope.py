"""The JSON-RPC envelope of a message POSTed to an MCP URL, checked before the MCP SDK's transport reads it.

The SDK's answers to a malformed message say little: a `tools/call` whose `arguments` is not an object, or whose
`name` is missing or not a string, got a bare `-32602 Invalid request parameters`; an `id` of `null` or an object
got `202 Accepted` and no answer at all; a batch, `"jsonrpc": "1.0"` or `"params": []` got a dump of pydantic's
union errors; a wrong Content-Type or a body over the limit got a line of plain text. `checked_message` answers
each of these with a JSON-RPC error that names what is wrong and how to send it right, and hands every other
message on to the transport unchanged (its body replayed as read).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from ._body import read_body
from .errors import PayloadTooLarge

__all__ = ["checked_message", "envelope_problem", "jsonrpc_error"]


def jsonrpc_error(code: int, message: str, *, request_id: str | int | None = None, status: int = 200) -> JSONResponse:
    """A JSON-RPC error answer (`status` 200 for a request it answers by id, 400 for a message it cannot)."""
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status)


def _kind(value: Any) -> str:
    """How JSON names `value`'s type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )


def envelope_problem(message: Any) -> tuple[int, str, str | int | None] | None:
    """What is wrong with `message` as one JSON-RPC 2.0 message of MCP: (error code, text, the id to answer with,
    None when it cannot be answered by id), or None when nothing is."""
    if isinstance(message, list):
        return (
            -32600,
            "Invalid request: a JSON-RPC batch (an array) is not accepted; MCP takes one message per POST",
            None,
        )
    if not isinstance(message, dict):
        return -32600, f"Invalid request: a JSON-RPC message is an object, got {_kind(message)}", None
    if message.get("jsonrpc") != "2.0":
        got = "no 'jsonrpc' member" if "jsonrpc" not in message else f"{message['jsonrpc']!r}"
        return -32600, f'Invalid request: "jsonrpc" must be "2.0", got {got}', None
    if "id" in message:
        request_id = message["id"]
        if isinstance(request_id, bool) or not isinstance(request_id, str | int):
            return (
                -32600,
                f"Invalid request: id must be a string or an integer, got {_kind(request_id)}; "
                "leave it out for a notification",
                None,
            )
    else:
        request_id = None
    if "method" not in message:
        if request_id is not None and ("result" in message or "error" in message):
            return None  # the client's answer to a request of the server's
        return -32600, "Invalid request: a request or notification needs a 'method' (a string)", None
    method = message["method"]
    if not isinstance(method, str):
        return -32600, f"Invalid request: 'method' must be a string, got {_kind(method)}", None
    params = message.get("params")
    if params is not None and not isinstance(params, dict):  # null is taken as absent, as the SDK takes it
        return -32602, f"Invalid params: 'params' of {method} must be an object, got {_kind(params)}", request_id
    if method == "tools/call":
        params = params or {}
        name = params.get("name")
        if not isinstance(name, str):
            got = "none" if "name" not in params else _kind(name)
            return (
                -32602,
                f"Invalid params: tools/call needs params.name, the tool's name as a string, got {got}; "
                "tools/list lists the names",
                request_id,
            )
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            return (
                -32602,
                f"Invalid params: params.arguments of tools/call {name!r} must be an object of the tool's arguments "
                f"(by name), got {_kind(arguments)}",
                request_id,
            )
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """`receive` giving `body` (already read) first, then what the connection sends next (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def checked_message(scope: Scope, receive: Receive, send: Send) -> Receive | None:
    """For a POST to an MCP URL: answer a message the transport would answer unhelpfully (see the module doc) and
    return None; else a `receive` that gives the transport the body as read. Other methods pass as they came."""
    if scope["method"] != "POST":
        return receive
    request = Request(scope, receive)
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        shown = f"{media!r}" if media else "none"
        await jsonrpc_error(
            -32600,
            f"Invalid request: Content-Type must be application/json, got {shown}; POST one JSON-RPC message",
            status=400,
        )(scope, receive, send)
        return None
    try:
        body = await read_body(request)
    except PayloadTooLarge as exc:
        await jsonrpc_error(-32600, f"Invalid request: {exc.message}", status=413)(scope, receive, send)
        return None
    try:
        message = json.loads(body)  # as the SDK reads it (pydantic-core's parser refuses deep nesting, lone surrogates)
    except (ValueError, RecursionError) as exc:
        await jsonrpc_error(-32700, f"Parse error: the body is not JSON ({exc})", status=400)(scope, receive, send)
        return None
    problem = envelope_problem(message)
    if problem is not None:
        code, text, request_id = problem
        status = 200 if request_id is not None else 400
        await jsonrpc_error(code, text, request_id=request_id, status=status)(scope, receive, send)
        return None
    return _replay(body, receive)
