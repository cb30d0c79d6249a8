"""The errors the client raises: each names the boundary it came from, so a trainer can tell an environment that
went wrong (retry with a fresh episode) from a request it should not have made (fix the code).

    SimiaEnvError
    ├── ApiError            the HTTP API answered {"error": {"code", "message"}}: status, code, message
    ├── McpError            the episode's MCP endpoint answered a JSON-RPC error (a protocol error: code, message)
    └── ServerUnreachable   no answer at all after the retries (not running, wrong URL, network, timeout)

A tool that fails is not an exception: it is a `ToolResult` with `is_error` (and `error_kind` `agent` for the
model's mistakes, `infra` for the environment's), which the policy reads like any other result.
"""

from __future__ import annotations

__all__ = ["ApiError", "McpError", "ServerUnreachable", "SimiaEnvError"]


class SimiaEnvError(Exception):
    """Base of every error the client raises on purpose."""


class ApiError(SimiaEnvError):
    """The server refused a request: HTTP `status`, the error `code` and its `message` (what to fix)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class McpError(SimiaEnvError):
    """The episode's MCP endpoint refused the JSON-RPC request itself (not a tool failure): its `code`, `message`."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"MCP error {code}: {message}")
        self.code, self.message = code, message


class ServerUnreachable(SimiaEnvError):
    """No answer from the server after the retries (not running, wrong URL, network failure or timeout)."""
