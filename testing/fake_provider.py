"""A fake model provider speaking the OpenAI chat-completions and Anthropic messages APIs over real HTTP.

Ships with simia (like httpx's `MockTransport`) for tests and benchmarks: start it
on 127.0.0.1, point `openai-compatible:` / `anthropic:` backends at its URL, and
script its replies (status, body, headers, delay) or answer with a function. With
`refuse_tools=True` it answers any chat-completions request carrying `tools` or `tool_choice`
with the HTTP 400 vLLM gives when started without `--enable-auto-tool-choice`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from simia.server.inprocess import serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .mock_world import mock_world_answer

__all__ = ["VLLM_TOOLS_REFUSED", "FakeProvider", "FakeReply"]

VLLM_TOOLS_REFUSED = {
    "object": "error",
    "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
"""vLLM's answer to native tool calling when the server was started without a tool-call parser."""


@dataclass
class FakeReply:
    """One scripted HTTP reply. `answer` is wrapped in the provider's response shape; `body` is sent as is."""

    answer: dict[str, Any] | None = None
    status: int = 200
    body: str | bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


class FakeProvider:
    """A fake OpenAI + Anthropic server.

    Args:
        answer: the default answer (a JSON object) when no scripted reply is queued;
            a callable receives the request body.
        latency: seconds every reply waits (for load tests).
        refuse_tools: answer OpenAI requests that carry `tools` or `tool_choice` with vLLM's HTTP 400
            (`VLLM_TOOLS_REFUSED`), recording the request but using no scripted reply.
    """

    def __init__(
        self,
        answer: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        latency: float = 0.0,
        *,
        refuse_tools: bool = False,
    ) -> None:
        self.default = answer if answer is not None else {"ok": True}
        self.latency = latency
        self.refuse_tools = refuse_tools
        self.queue: list[FakeReply] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.port = 0
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._openai, methods=["POST"]),
                Route("/v1/messages", self._anthropic, methods=["POST"]),
            ]
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *replies: FakeReply) -> None:
        self.queue.extend(replies)

    async def _reply(self, request: Request) -> tuple[FakeReply, dict[str, Any]]:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        reply = self.queue.pop(0) if self.queue else FakeReply()
        delay = reply.delay or self.latency
        if delay:
            await asyncio.sleep(delay)
        if reply.answer is None and reply.body is None:
            reply.answer = self.default(body) if callable(self.default) else self.default
        return reply, body

    async def _openai(self, request: Request) -> Response:
        if self.refuse_tools:
            body = await request.json()  # starlette keeps the parsed body for `_reply`
            if "tools" in body or "tool_choice" in body:
                self.requests.append(body)
                self.headers.append(dict(request.headers))
                return JSONResponse(VLLM_TOOLS_REFUSED, status_code=400)
        reply, body = await self._reply(request)
        if reply.body is not None:
            return Response(reply.body, status_code=reply.status, headers=reply.headers, media_type="application/json")
        if reply.status != 200:
            error = {"error": {"message": json.dumps(reply.answer), "type": "fake_error"}}
            return JSONResponse(error, status_code=reply.status, headers=reply.headers)
        content = json.dumps(reply.answer)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if body.get("tools") and isinstance(reply.answer, dict) and "tool_calls" in reply.answer:  # native tool calls
            calls = [
                {
                    "id": c.get("id") or f"call_{len(self.requests)}_{i}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
                }
                for i, c in enumerate(reply.answer["tool_calls"])
            ]
            message = {"role": "assistant", "content": reply.answer.get("message") or None, "tool_calls": calls or None}
        return JSONResponse(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "fake"),
                "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                "usage": {"prompt_tokens": 100, "completion_tokens": len(content) // 4, "total_tokens": 0},
            },
            headers=reply.headers,
        )

    async def _anthropic(self, request: Request) -> Response:
        reply, body = await self._reply(request)
        if reply.body is not None:
            return Response(reply.body, status_code=reply.status, headers=reply.headers, media_type="application/json")
        if reply.status != 200:
            error = {"type": "error", "error": {"type": "fake_error", "message": json.dumps(reply.answer)}}
            return JSONResponse(error, status_code=reply.status, headers=reply.headers)
        tool = (body.get("tool_choice") or {}).get("name", "respond")
        content: list[dict[str, Any]] = [{"type": "tool_use", "id": "toolu_1", "name": tool, "input": reply.answer}]
        if not body.get("tool_choice") and isinstance(reply.answer, dict) and "tool_calls" in reply.answer:
            content = [{"type": "text", "text": reply.answer.get("message") or ""}] + [
                {
                    "type": "tool_use",
                    "id": f"toolu_{len(self.requests)}_{i}",
                    "name": c["name"],
                    "input": c["arguments"],
                }
                for i, c in enumerate(reply.answer["tool_calls"])
            ]
        return JSONResponse(
            {
                "id": f"msg_{len(self.requests)}",
                "type": "message",
                "role": "assistant",
                "model": body.get("model", "fake"),
                "content": content,
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": 120, "output_tokens": 30},
            },
            headers=reply.headers,
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[FakeProvider]:
        """Serve on a free 127.0.0.1 port for the duration of the block."""
        async with serving(self.app) as port:
            self.port = port
            yield self


def main() -> None:
    """`python -m simia.testing.fake_provider --port P [--latency S] [--answer mock]`: serve until killed."""
    parser = argparse.ArgumentParser(description="A fake OpenAI/Anthropic provider for tests and benchmarks.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds every reply waits")
    parser.add_argument(
        "--answer",
        choices=["mock", "ok"],
        default="mock",
        help='mock: a correct simulator of the mock world; ok: always {"ok": true}',
    )
    args = parser.parse_args()
    answer: Any = None
    if args.answer == "mock":
        answer = mock_world_answer
    provider = FakeProvider(answer, latency=args.latency)
    uvicorn.run(provider.app, host="127.0.0.1", port=args.port, log_level="warning", backlog=4096)


if __name__ == "__main__":
    main()
