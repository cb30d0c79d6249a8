"""MCP over plain HTTP: the stateless requests of protocol 2026-07-28 to an episode's `mcp_url`, and their answers.

A request carries the protocol fields in `params._meta` and the `MCP-Protocol-Version`, `Mcp-Method` (and, for a
tool call, `Mcp-Name`) headers; no `initialize`, no session. The answer is one JSON-RPC message, as JSON or as a
server-sent event stream. simia derives a call's request key from the JSON-RPC id, the tool and its arguments, so
a call resent with the same id after an unknown delivery is answered with the committed result, not run twice.
"""

from __future__ import annotations

import json
from typing import Any

from ._errors import McpError

__all__ = ["PROTOCOL_VERSION", "rpc_headers", "rpc_request", "rpc_result"]

PROTOCOL_VERSION = "2026-07-28"
CLIENT_INFO = {"name": "simia-env-client", "version": "0.1.0"}


def rpc_request(request_id: str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON-RPC body of `method`, with the protocol fields of a stateless request in `params._meta`."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**(params or {}), "_meta": meta}}


def rpc_headers(method: str, name: str | None = None) -> dict[str, str]:
    """The HTTP headers of a stateless request of `method` (`name`: the tool of a `tools/call`)."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL_VERSION,
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def rpc_result(content_type: str, body: str, request_id: str) -> dict[str, Any]:
    """The result of the answer to request `request_id`, from a JSON body or an SSE stream.

    Raises:
        McpError: the answer is a JSON-RPC error, or holds no answer to this request.
    """
    message: Any = None
    if "text/event-stream" in content_type:
        for event in body.replace("\r\n", "\n").split("\n\n"):
            data = "\n".join(line[5:].lstrip() for line in event.split("\n") if line.startswith("data:"))
            if not data:
                continue
            try:
                candidate = json.loads(data)
            except json.JSONDecodeError:
                continue
            if isinstance(candidate, dict) and candidate.get("id") == request_id:
                message = candidate
                break
    else:
        try:
            message = json.loads(body)
        except json.JSONDecodeError:
            message = None
    if not isinstance(message, dict):
        raise McpError(-32603, f"the server's answer holds no JSON-RPC reply to request {request_id!r}: {body[:200]!r}")
    if "error" in message:
        error = message["error"] if isinstance(message["error"], dict) else {}
        raise McpError(int(error.get("code", -32603)), str(error.get("message", message["error"])))
    result = message.get("result")
    if not isinstance(result, dict):
        raise McpError(-32603, f"the JSON-RPC reply to {request_id!r} has no result object")
    return result
