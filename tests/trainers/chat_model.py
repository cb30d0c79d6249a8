"""A scripted tool-calling model behind an OpenAI-compatible chat-completions endpoint, for the trainers' own
harnesses: it answers as JSON, or as an SSE stream when the request asks for one (verifiers' interception relays
streams), with the native tool calls `simia.testing.fake_provider.chat_completion` builds.

The policy is the one the tests' tasks need: call `set_quantity` (milk to 4) once, then say it is done. On the mock
world's `restock_milk` that is judged 1 by its rules, on `count_apples` 0.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from simia.server.inprocess import serving
from simia.testing.fake_provider import chat_completion
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["ChatModel", "set_milk_then_stop"]


def set_milk_then_stop(body: dict[str, Any]) -> dict[str, Any]:
    """One turn of the scripted agent: the tool call first, the final answer once a tool result is in."""
    if any(message.get("role") == "tool" for message in body.get("messages", [])):
        return {"message": "Done: the milk is at 4 litres.", "tool_calls": []}
    names = [tool["function"]["name"] for tool in body.get("tools") or []]
    name = next((n for n in names if n.endswith("set_quantity")), "set_quantity")  # a harness may prefix it
    return {"message": None, "tool_calls": [{"name": name, "arguments": {"name": "milk", "qty": 4}}]}


class ChatModel:
    """`/v1/chat/completions` answering with `policy(body)`; `requests` keeps every request body."""

    def __init__(self, policy: Any = set_milk_then_stop) -> None:
        self.policy = policy
        self.requests: list[dict[str, Any]] = []
        self.port = 0
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._complete, methods=["POST"])])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _complete(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        completion = chat_completion(body, self.policy(body), len(self.requests))
        if not body.get("stream"):
            return JSONResponse(completion)
        choice = completion["choices"][0]
        message = dict(choice["message"])
        if message.get("tool_calls"):
            message["tool_calls"] = [{**call, "index": i} for i, call in enumerate(message["tool_calls"])]
        chunk = {
            **{k: v for k, v in completion.items() if k != "choices"},
            "object": "chat.completion.chunk",
            "choices": [
                {"index": 0, "delta": message, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}
            ],
        }
        events = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
        return Response(events, media_type="text/event-stream")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ChatModel]:
        """Serve on a free 127.0.0.1 port for the duration of the block."""
        async with serving(self.app) as port:
            self.port = port
            yield self
