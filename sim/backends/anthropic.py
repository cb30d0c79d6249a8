"""Anthropic models through the official `anthropic` SDK.

Structured output is a forced tool call: the request carries one tool whose
`input_schema` is the requested schema (with an object at its root: `object_rooted`), with
`tool_choice` naming it, and the answer is that tool call's input. The SDK's own retries are off.
Prompt caching is explicit: a breakpoint after the system block, and one where the request says a part of
its user message may recur (`CompletionRequest.cache_breaks`, at most 2: the API takes 4 in all).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Mapping
from typing import Any

import anthropic
import httpx2 as httpx

from ..errors import BackendOutputError
from ._base import (
    Backend,
    Completion,
    CompletionRequest,
    Retryable,
    RetryPolicy,
    ToolRequest,
    Usage,
    status_failure,
)
from ._pricing import Price, Pricing
from ._schema_forms import object_rooted
from .batch import BatchResult, BatchStatus
from .openai import POOL_LIMIT

__all__ = ["AnthropicBackend"]


class AnthropicBackend(Backend):
    """`anthropic:MODEL`.

    Args:
        prices: USD per million (input, output) tokens by model name, for models `genai-prices` does not list;
            see `simia.sim.backends._pricing`.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        max_concurrency: int = 16,
        retry: RetryPolicy | None = None,
        prices: Mapping[str, Price] | None = None,
    ) -> None:
        super().__init__(max_concurrency=max_concurrency, retry=retry)
        self.model = model
        self.spec = f"anthropic:{model}"
        self.pricing = Pricing(model, provider_id="anthropic", prices=prices)
        pool = min(max_concurrency, POOL_LIMIT)
        http = anthropic.DefaultAsyncHttpxClient(
            limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool)
        )
        self._client = anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, max_retries=0, http_client=http)

    async def generate(self, request: CompletionRequest, timeout: float) -> Completion:
        start = time.monotonic()
        response = await self._create({**self.request_body(request), "timeout": timeout})
        return self._structured(response, request, start)

    def request_body(self, request: CompletionRequest) -> dict[str, Any]:
        """The Messages API parameters of `request`: what `generate` sends, and the `params` of a batch request."""
        system = "\n\n".join(str(m["content"]) for m in request.messages if m["role"] == "system")
        messages = [{"role": m["role"], "content": m["content"]} for m in request.messages if m["role"] != "system"]
        if request.cache_breaks and messages and messages[0]["role"] == "user":
            messages[0]["content"] = cached_blocks(str(messages[0]["content"]), request.cache_breaks)
        tool = {
            "name": request.schema_name,
            "description": "Return your answer by calling this tool with arguments matching its schema.",
            "input_schema": object_rooted(request.schema),  # the API refuses a root anyOf
        }
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "messages": messages,
            "tools": [tool],
            "tool_choice": {"type": "tool", "name": request.schema_name},
        }
        if system:
            # A cache breakpoint after the stable prefix (the answer tool, then the system block: the world for
            # the simulator, the judge's rules for the judge): Anthropic caches it when it is long enough (1,024+
            # tokens on most models) and bills reads at a tenth of the input price. `cache_breaks` add the
            # user message's own (the simulator's state section).
            body["system"] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
        return body

    def batch_answer(self, body: Any, request: CompletionRequest) -> Completion:
        """A batch result's message (as JSON) as the Completion `generate` would have made of it.

        Raises:
            BackendOutputError: the body is not a message, or the model did not call the answer tool.
        """
        try:
            message = anthropic.types.Message.model_validate(body)
        except ValueError as exc:  # pydantic's ValidationError
            raise BackendOutputError(f"{self.spec}: malformed batch result: {str(exc)[:200]}") from None
        return self._structured(message, request, time.monotonic())

    def _structured(self, response: Any, request: CompletionRequest, start: float) -> Completion:
        blocks = [b for b in (getattr(response, "content", None) or []) if getattr(b, "type", "") == "tool_use"]
        if not blocks or not isinstance(blocks[0].input, dict):
            raise BackendOutputError(f"{self.spec}: the model did not call the {request.schema_name!r} tool")
        return self._completion(dict(blocks[0].input), response, start)

    supports_tools = True

    async def generate_tools(self, request: ToolRequest, timeout: float) -> Completion:
        """One native tool-use turn: OpenAI-format messages become Anthropic content blocks."""
        system, messages = _to_anthropic(request.messages)
        tools = [
            {
                "name": t["function"]["name"],
                "description": t["function"].get("description", ""),
                "input_schema": t["function"]["parameters"],
            }
            for t in request.tools
        ]
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "messages": messages,
            "tools": tools,
            "timeout": timeout,
        }
        if system:  # the agent's instructions and tools: the same for every turn of a rollout
            kwargs["system"] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
        start = time.monotonic()
        response = await self._create(kwargs)
        text = "".join(getattr(b, "text", "") for b in response.content if getattr(b, "type", "") == "text")
        calls = [
            {"id": b.id, "name": b.name, "arguments": dict(b.input) if isinstance(b.input, dict) else {}}
            for b in response.content
            if getattr(b, "type", "") == "tool_use"
        ]
        data = {"message": text, "tool_calls": calls}
        return self._completion(data, response, start)

    async def _create(self, kwargs: dict[str, Any]) -> Any:
        try:
            return await self._client.messages.create(**kwargs)
        except anthropic.APITimeoutError as exc:
            raise Retryable(f"request timed out: {exc}", reason="timeout") from None
        except anthropic.APIConnectionError as exc:
            raise Retryable(f"connection error: {exc}", reason="connection") from None
        except anthropic.APIStatusError as exc:
            raise status_failure(self.spec, exc.status_code, exc.body, str(exc.message), exc.response.headers) from None
        except anthropic.APIResponseValidationError as exc:
            raise BackendOutputError(f"{self.spec}: malformed response body: {exc}") from None

    def _completion(self, data: dict[str, Any], response: Any, start: float) -> Completion:
        return Completion(
            data=data,
            text=json.dumps(data),
            model=response.model or self.model,
            usage=self._usage(response),
            latency_ms=(time.monotonic() - start) * 1000,
        )

    def _usage(self, response: Any) -> Usage:
        """Anthropic counts cache reads and writes apart from `input_tokens`; simia's prompt tokens are all three."""
        usage = response.usage
        if usage is None:
            return Usage(calls=1)
        read = getattr(usage, "cache_read_input_tokens", None) or 0
        write = getattr(usage, "cache_creation_input_tokens", None) or 0
        prompt = (usage.input_tokens or 0) + read + write
        return self.pricing.usage(prompt, usage.output_tokens or 0, cached=read, cache_write=write)

    def batches(self) -> AnthropicBatches:
        """This backend's Message Batches API (`simia.sim.backends.batch`)."""
        return AnthropicBatches(self._client)

    async def aclose(self) -> None:
        await self._client.close()


class AnthropicBatches:
    """Anthropic Message Batches: the requests' Messages API parameters in one batch, its results read by
    custom_id once its processing has ended."""

    def __init__(self, client: anthropic.AsyncAnthropic) -> None:
        self._client = client

    async def submit(self, requests: list[tuple[str, dict[str, Any]]]) -> str:
        batch = await self._client.messages.batches.create(
            requests=[{"custom_id": cid, "params": params} for cid, params in requests]  # type: ignore[typeddict-item]
        )
        return batch.id

    async def status(self, batch_id: str) -> BatchStatus:
        batch = await self._client.messages.batches.retrieve(batch_id)
        return BatchStatus(ended=batch.processing_status == "ended", state=batch.processing_status)

    async def results(self, batch_id: str) -> dict[str, BatchResult]:
        out: dict[str, BatchResult] = {}
        async for entry in await self._client.messages.batches.results(batch_id):
            result = entry.result
            if result.type == "succeeded":
                out[entry.custom_id] = BatchResult("succeeded", body=result.message.model_dump(mode="json"))
            elif result.type == "errored":
                out[entry.custom_id] = BatchResult("errored", error=str(result.error.error.message)[:300])
            else:
                out[entry.custom_id] = BatchResult(result.type)
        return out


def _to_anthropic(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """OpenAI chat messages -> (system, Anthropic messages): tool calls become tool_use blocks and tool results
    tool_result blocks in a user turn (consecutive results share one)."""
    system = "\n\n".join(str(m.get("content") or "") for m in messages if m["role"] == "system")
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "system":
            continue
        if m["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": str(m.get("content"))}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif m["role"] == "assistant" and m.get("tool_calls"):
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            for call in m["tool_calls"]:
                args = call["function"]["arguments"]
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["function"]["name"],
                        "input": json.loads(args) if isinstance(args, str) else args,
                    }
                )
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": m["role"], "content": str(m.get("content") or "")})
    return system, out


MESSAGE_BREAKPOINTS = 2
"""Breakpoints a user message may carry (the API takes 4 per request; the system block and the tools use the rest)."""


def cached_blocks(text: str, breaks: tuple[int, ...]) -> list[dict[str, Any]]:
    """`text` as text blocks split at `breaks`, each but the last a cache breakpoint (the last
    `MESSAGE_BREAKPOINTS` of them: the API looks back up to 20 blocks from a breakpoint for an earlier request's).
    A request repeating an earlier one's parts then reads them from the cache and writes only what it adds."""
    cuts = sorted({b for b in breaks if 0 < b < len(text)})
    bounds = [0, *cuts, len(text)]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text[a:b]} for a, b in itertools.pairwise(bounds)]
    for block in blocks[:-1][-MESSAGE_BREAKPOINTS:]:
        block["cache_control"] = {"type": "ephemeral"}
    return blocks
