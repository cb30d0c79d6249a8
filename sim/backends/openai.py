"""OpenAI and OpenAI-compatible servers (vLLM, SGLang, Ollama, llama.cpp server) through the `openai` SDK.

Structured output uses `response_format={"type": "json_schema", ...}` (OpenAI's own API gets the schema
with an object at its root, `object_rooted`; compatible servers the exact schema); a compatible
server that rejects it is asked again with JSON mode (`json_object`) and the
answer is validated by the simulator. Native tool calling sends `tools` with
`tool_choice: auto`; a compatible server that refuses it (vLLM without
`--enable-auto-tool-choice`) is asked for the structured action instead
(`simia.sim.backends.actions`), from then on. The SDK's own retries are off.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx
import openai
from openai.types.chat import ChatCompletion

from ..errors import BackendOutputError, BackendRejected
from ._base import (
    Backend,
    Completion,
    CompletionRequest,
    Retryable,
    RetryPolicy,
    ToolRequest,
    Usage,
    parse_json_object,
    status_failure,
)
from ._http import LeanHTTP
from ._pricing import Price, Pricing
from ._schema_forms import object_rooted
from .actions import FunctionTool, action_messages, action_schema, read_action
from .batch import BatchResult, BatchStatus, ResultKind

__all__ = ["OpenAIBackend"]

POOL_LIMIT = 128
"""Most connections one backend opens; more requests than this wait in the pool (cheap) rather than in httpx's
connection scan (quadratic)."""

# OpenAI reasoning models accept only their default temperature.
_FIXED_TEMPERATURE = ("gpt-5", "gpt-6", "o1", "o3", "o4")

# How compatible servers say they will not do native tool calling: vLLM without --enable-auto-tool-choice and
# --tool-call-parser, SGLang without --tool-call-parser, llama.cpp without --jinja, Ollama for a model whose
# template has no tools. Any other 400 (context length, a bad schema) stays an error.
_TOOLS_REFUSED = ("tool choice", "tool_choice", "tool-call-parser", "tool_call_parser", "--jinja", "support tools")

log = logging.getLogger("simia.backends")


@dataclass
class _Reply:
    """The parts of a chat-completions answer simia reads, from either HTTP path."""

    content: str | None
    tool_calls: list[dict[str, Any]]
    model: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int = 0  # of the prompt tokens, those served from the provider's prompt cache


class OpenAIBackend(Backend):
    """`openai:MODEL` (official API) or `openai-compatible:MODEL` (with a base URL).

    Args:
        prices: USD per million (input, output) tokens by model name, for models `genai-prices` does not list
            (a fine-tune, a private deployment); see `simia.sim.backends._pricing`.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        compatible: bool = False,
        max_concurrency: int = 16,
        retry: RetryPolicy | None = None,
        prices: Mapping[str, Price] | None = None,
    ) -> None:
        super().__init__(max_concurrency=max_concurrency, retry=retry)
        self.model = model
        self.compatible = compatible
        self.spec = f"{'openai-compatible' if compatible else 'openai'}:{model}"
        self.pricing = (
            Pricing(model, api_url=base_url, prices=prices)
            if compatible
            else Pricing(model, provider_id="openai", prices=prices)
        )
        self.json_mode_only = False
        self.native_tools_refused = False
        """Whether this compatible server refused native tool calling; tool turns then use the structured action."""
        # The pool never needs more connections than requests in flight (the concurrency cap); a bounded pool
        # also keeps httpx's per-event scan over its connections cheap.
        pool = min(max_concurrency, POOL_LIMIT)
        http = openai.DefaultAsyncHttpxClient(limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool))
        self._client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=0, http_client=http)
        # OpenAI-compatible servers on plain http (vLLM, SGLang, llama.cpp) get the lean client: the SDK's HTTP
        # stack costs ~1.2 ms CPU per call against ~0.1 ms (bench/backend_http_cost.py).
        self._lean = (
            LeanHTTP(base_url, headers={"authorization": f"Bearer {api_key}"}, max_idle=pool)
            if compatible and base_url and base_url.startswith("http://")
            else None
        )

    def _response_format(self, request: CompletionRequest) -> dict[str, Any]:
        if self.json_mode_only:
            return {"type": "json_object"}
        # OpenAI's API wants an object at the schema's root; compatible servers (vLLM, SGLang, llama.cpp) decode
        # under the exact schema, a root anyOf included.
        schema = request.schema if self.compatible else object_rooted(request.schema)
        return {"type": "json_schema", "json_schema": {"name": request.schema_name, "schema": schema, "strict": False}}

    async def generate(self, request: CompletionRequest, timeout: float) -> Completion:
        try:
            return await self._create(request, timeout)
        except BackendRejected as exc:
            text = str(exc).lower()
            if self.compatible and not self.json_mode_only and ("response_format" in text or "json_schema" in text):
                self.json_mode_only = True  # this server lacks json_schema: fall back to JSON mode
                return await self._create(request, timeout)
            raise

    async def _create(self, request: CompletionRequest, timeout: float) -> Completion:
        start = time.monotonic()
        reply = await self._post(self.request_body(request), timeout)
        return self._answer(reply, start)

    def request_body(self, request: CompletionRequest) -> dict[str, Any]:
        """The chat-completions body of `request`: what `generate` posts, and the body of a batch line."""
        messages = request.messages
        if self.json_mode_only:
            hint = {
                "role": "system",
                "content": "Answer with one JSON object matching this JSON Schema:\n" + _compact(request.schema),
            }
            messages = [*messages, hint]
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "response_format": self._response_format(request),
        }
        if self.compatible or not self.model.startswith(_FIXED_TEMPERATURE):
            body["temperature"] = request.temperature
        body["max_tokens" if self.compatible else "max_completion_tokens"] = request.max_tokens
        if request.seed is not None:
            body["seed"] = request.seed
        if request.cache_key is not None and not self.compatible:
            # OpenAI caches prompt prefixes of 1,024+ tokens by itself; the key routes the requests that share a
            # prefix to one cache. (Compatible servers cache prefixes without a key; some refuse unknown fields.)
            body["prompt_cache_key"] = request.cache_key
        return body

    def batch_answer(self, body: Any, request: CompletionRequest) -> Completion:
        """A batch result's body (a chat completion, as JSON) as the Completion `generate` would have made.

        Raises:
            BackendOutputError: the body is not a chat completion, or its answer is not a JSON object.
        """
        del request  # the answer is the message's text, whatever the request
        return self._answer(_reply_of(body, json.dumps(body)[:120].encode(), self.spec), time.monotonic())

    def _answer(self, reply: _Reply, start: float) -> Completion:
        text = reply.content or ""
        return Completion(
            data=parse_json_object(text),
            text=text,
            model=reply.model or self.model,
            usage=self._usage(reply),
            latency_ms=(time.monotonic() - start) * 1000,
        )

    supports_tools = True

    async def generate_tools(self, request: ToolRequest, timeout: float) -> Completion:
        """One tool-calling turn: native (`tools`, `tool_choice: auto`), or the structured action once a compatible
        server has refused native tools; either way `data` is {"message", "tool_calls": [{"id", "name", "arguments"}]}.
        """
        if self.native_tools_refused:
            return await self._generate_action(request, timeout)
        try:
            return await self._generate_native(request, timeout)
        except BackendRejected as exc:
            reason = str(exc).removeprefix(f"{self.spec}: ")
            if not self.compatible or not any(sign in reason.lower() for sign in _TOOLS_REFUSED):
                raise
            if not self.native_tools_refused:  # concurrent turns may all be refused: say it once
                self.native_tools_refused = True
                log.warning(
                    "%s refuses native tool calling (%s); tool-calling turns use the structured action "
                    "(a JSON answer constrained by the tools' schemas) from now on",
                    self.spec,
                    reason,
                )
            return await self._generate_action(request, timeout)

    async def _generate_action(self, request: ToolRequest, timeout: float) -> Completion:
        """A tool-calling turn as the structured action: earlier calls and results become plain turns."""
        tools = [FunctionTool.from_openai(t) for t in request.tools]
        completion = await self.generate(
            CompletionRequest(
                messages=action_messages(request.messages, tools),
                schema=action_schema(tools),
                schema_name="agent_action",
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                seed=request.seed,
            ),
            timeout,
        )
        data = read_action(completion.data)
        return Completion(data, json.dumps(data), completion.model, completion.usage, completion.latency_ms)

    async def _generate_native(self, request: ToolRequest, timeout: float) -> Completion:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "tools": request.tools,
            "tool_choice": "auto",
        }
        if self.compatible or not self.model.startswith(_FIXED_TEMPERATURE):
            body["temperature"] = request.temperature
        body["max_tokens" if self.compatible else "max_completion_tokens"] = request.max_tokens
        if request.seed is not None:
            body["seed"] = request.seed
        start = time.monotonic()
        reply = await self._post(body, timeout)
        calls = []
        for call in reply.tool_calls:
            fn = call.get("function") or {}
            try:
                arguments = json.loads(fn.get("arguments") or "{}")
            except json.JSONDecodeError:
                arguments = {"_unparsed_arguments": fn.get("arguments")}  # the server names the problem to the agent
            calls.append({"id": call.get("id"), "name": fn.get("name"), "arguments": arguments})
        data = {"message": reply.content or "", "tool_calls": calls}
        return Completion(
            data=data,
            text=json.dumps(data),
            model=reply.model or self.model,
            usage=self._usage(reply),
            latency_ms=(time.monotonic() - start) * 1000,
        )

    async def _post(self, body: dict[str, Any], timeout: float) -> _Reply:
        if self._lean is not None:
            return await self._post_lean(body, timeout)
        try:
            # The SDK's `create` walks every parameter through its type transforms, which costs more CPU than
            # the rest of a simulated call for simia's large prompts; `post` sends the same JSON body.
            response = await self._client.post(
                "/chat/completions",
                body=body,
                cast_to=ChatCompletion,
                options={"timeout": timeout, "security": {"bearer_auth": True}},  # type: ignore[typeddict-unknown-key]
            )
        except openai.APITimeoutError as exc:
            raise Retryable(f"request timed out: {exc}", reason="timeout") from None
        except openai.APIConnectionError as exc:
            raise Retryable(f"connection error: {exc}", reason="connection") from None
        except openai.APIStatusError as exc:
            raise status_failure(self.spec, exc.status_code, exc.body, str(exc.message), exc.response.headers) from None
        except (openai.APIResponseValidationError, ValueError) as exc:  # ValueError: a body that is not JSON
            raise BackendOutputError(f"{self.spec}: malformed response body: {exc}") from None
        if not getattr(response, "choices", None):
            raise BackendOutputError(f"{self.spec}: response has no choices")
        message = response.choices[0].message
        calls = []
        for call in message.tool_calls or []:
            fn = getattr(call, "function", None)  # custom (non-function) tool calls are not simia's
            if fn is not None:
                calls.append({"id": call.id, "function": {"name": fn.name, "arguments": fn.arguments}})
        usage = response.usage
        details = usage.prompt_tokens_details if usage else None
        return _Reply(
            message.content,
            calls,
            response.model,
            usage.prompt_tokens if usage else None,
            usage.completion_tokens if usage else None,
            (details.cached_tokens or 0) if details else 0,
        )

    async def _post_lean(self, body: dict[str, Any], timeout: float) -> _Reply:
        assert self._lean is not None
        try:
            async with asyncio.timeout(timeout):
                response = await self._lean.post("/chat/completions", body)
        except TimeoutError:
            raise Retryable(f"request timed out after {timeout:.1f}s", reason="timeout") from None
        except ConnectionError as exc:
            raise Retryable(f"connection error: {exc}", reason="connection") from None
        except ValueError as exc:
            raise BackendOutputError(f"{self.spec}: malformed response: {exc}") from None
        try:
            data = response.json()
        except (ValueError, RecursionError):  # not JSON, or JSON nested past the parser's limit
            data = None
        if response.status != 200:
            text = response.body.decode("utf-8", "replace")
            raise status_failure(self.spec, response.status, data, text, response.headers)
        return _reply_of(data, response.body, self.spec)

    def _usage(self, reply: _Reply) -> Usage:
        if reply.prompt_tokens is None or reply.completion_tokens is None:
            return Usage(calls=1)
        cached = min(reply.cached_tokens, reply.prompt_tokens)
        return self.pricing.usage(reply.prompt_tokens, reply.completion_tokens, cached=cached)

    def batches(self) -> OpenAIBatches:
        """This backend's Batch API (`simia.sim.backends.batch`)."""
        return OpenAIBatches(self._client)

    async def aclose(self) -> None:
        await self._client.close()
        if self._lean is not None:
            await self._lean.aclose()


_OPENAI_ENDED = {"completed", "failed", "expired", "cancelled"}


class OpenAIBatches:
    """The OpenAI Batch API: the requests as a JSONL file (`purpose: batch`), one batch over it, then its output
    and error files read back by custom_id."""

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self._client = client

    async def submit(self, requests: list[tuple[str, dict[str, Any]]]) -> str:
        lines = "".join(
            json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body}) + "\n"
            for cid, body in requests
        )
        upload = await self._client.files.create(file=("simia-batch.jsonl", lines.encode()), purpose="batch")
        batch = await self._client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        return batch.id

    async def status(self, batch_id: str) -> BatchStatus:
        batch = await self._client.batches.retrieve(batch_id)
        return BatchStatus(ended=batch.status in _OPENAI_ENDED, state=batch.status)

    async def results(self, batch_id: str) -> dict[str, BatchResult]:
        batch = await self._client.batches.retrieve(batch_id)
        out: dict[str, BatchResult] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                content = await self._client.files.content(file_id)
                for line in content.text.splitlines():
                    if line.strip():
                        cid, result = _openai_result(json.loads(line))
                        out[cid] = result
        if batch.status in ("expired", "cancelled"):
            kind: ResultKind = "expired" if batch.status == "expired" else "canceled"
            return {cid: r if r.kind == "succeeded" else BatchResult(kind, error=r.error) for cid, r in out.items()}
        return out


def _openai_result(line: dict[str, Any]) -> tuple[str, BatchResult]:
    """One line of a batch's output or error file: (custom_id, its outcome)."""
    cid = str(line.get("custom_id"))
    response = line.get("response") or {}
    error = line.get("error")
    if not error and response.get("status_code") == 200:
        return cid, BatchResult("succeeded", body=response.get("body"))
    if not error:
        body = response.get("body") or {}
        error = body.get("error", body) if isinstance(body, dict) else body
    message = error.get("message", json.dumps(error)) if isinstance(error, dict) else str(error)
    code = error.get("code") if isinstance(error, dict) else None
    kind: ResultKind = "expired" if code == "batch_expired" else "canceled" if code == "batch_cancelled" else "errored"
    return cid, BatchResult(kind, error=f"HTTP {response.get('status_code')}: {message}"[:300])


def _reply_of(data: Any, raw: bytes, spec: str) -> _Reply:
    """A chat completion as JSON, checked level by level (a proxy's page, a truncated body, {"choices": 3} may
    come back), as a `_Reply`.

    Raises:
        BackendOutputError: it has no message to read.
    """
    choices = data.get("choices") if isinstance(data, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        raise BackendOutputError(f"{spec}: malformed response body: {raw[:120]!r}")
    assert isinstance(data, dict)
    usage = data.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    calls = message.get("tool_calls")
    content = message.get("content")
    details = usage.get("prompt_tokens_details")
    return _Reply(
        content if isinstance(content, str) else None,
        [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else [],
        data.get("model") if isinstance(data.get("model"), str) else None,
        _count(usage.get("prompt_tokens")),
        _count(usage.get("completion_tokens")),
        (_count(details.get("cached_tokens")) or 0) if isinstance(details, dict) else 0,
    )


def _count(value: Any) -> int | None:
    """A token count from a response, or None when it is not a count."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _compact(schema: dict[str, Any]) -> str:
    return json.dumps(schema, separators=(",", ":"))
