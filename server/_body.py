"""Reading a request body with a size limit: no body is ever read into memory past its limit."""

from __future__ import annotations

from starlette.requests import Request

from .errors import PayloadTooLarge

__all__ = ["MAX_BODY", "read_body"]

MAX_BODY = 4 * 1024 * 1024
"""The most bytes any request body may have (the MCP SDK's transports cap theirs at the same 4 MiB)."""


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The body, read no further than `limit` bytes.

    Raises:
        PayloadTooLarge: the declared (Content-Length) or streamed (chunked) body is over the limit.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body is {int(declared)} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
