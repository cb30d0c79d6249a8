"""Deterministic backends for tests and demos: a script of answers, or a function of the request.

Shipped in the package (like httpx's `MockTransport`) so users test their own
worlds and pipelines without a model. `scripted:FILE` loads a script from JSON.

A script entry is one of:
  - an answer: any JSON object, returned as the model's answer;
  - `{"data": {...}}`: the same, explicit (use it when the answer has a reserved key);
  - `{"match": "text", "data": {...}}`: answers whenever `text` occurs in the last message
    (match entries are rules, never consumed; they are tried before the queue);
  - `{"text": "..."}`: raw model text (e.g. garbage, to test output repair);
  - `{"raise": "retryable" | "timeout" | "rejected" | "output", "message": "...", "retry_after": 1.5}`:
    a failure of that kind;
  - in Python, a callable `request -> answer` or an exception instance.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from ..errors import BackendConfigError, BackendOutputError, BackendRejected
from ._base import Backend, Completion, CompletionRequest, Retryable, RetryPolicy, Usage, parse_json_object

__all__ = ["FunctionBackend", "ScriptedBackend", "load_script"]

KEEP_REQUESTS = 1000
_DIRECTIVE_KEYS = {"data", "raise", "match", "message", "retry_after", "text", "delay"}

Responder = Callable[[CompletionRequest], dict[str, Any]]


def _estimate_usage(request: CompletionRequest, text: str) -> Usage:
    prompt_chars = sum(len(str(m.get("content", ""))) for m in request.messages)
    return Usage(prompt_tokens=prompt_chars // 4 + 1, completion_tokens=len(text) // 4 + 1, cost_usd=0.0, calls=1)


def _is_directive(entry: dict[str, Any]) -> bool:
    return bool(entry) and set(entry) <= _DIRECTIVE_KEYS and ("data" in entry or "raise" in entry or "text" in entry)


class ScriptedBackend(Backend):
    """Answers from a script, in order. The last 1,000 requests are kept in `requests`.

    Args:
        script: entries as described in the module docstring.
        when_exhausted: `"error"` (a clear failure), `"repeat"` (the last entry again) or `"cycle"`.
        latency: seconds each answer takes (for load tests); 0 answers at once.
    """

    def __init__(
        self,
        script: Sequence[Any],
        *,
        model: str = "scripted",
        when_exhausted: Literal["error", "repeat", "cycle"] = "error",
        latency: float = 0.0,
        max_concurrency: int = 1_000_000,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(max_concurrency=max_concurrency, retry=retry)
        self.model = model
        self.spec = f"scripted:{model}"
        self.rules = [e for e in script if isinstance(e, dict) and "match" in e]
        self.queue = [e for e in script if not (isinstance(e, dict) and "match" in e)]
        self.when_exhausted = when_exhausted
        self.latency = latency
        self.position = 0
        self.requests: list[CompletionRequest] = []
        # A script's answers are fixed: each is rendered once, found again by the entry's identity.
        self._texts = {id(e): json.dumps(answer) for e in script if (answer := _answer_of(e)) is not None}

    @property
    def answers_synchronously(self) -> bool:
        return not self.latency

    def _next(self, request: CompletionRequest) -> Any:
        last = str(request.messages[-1].get("content", "")) if request.messages else ""
        for rule in self.rules:
            if str(rule["match"]) in last:
                return rule
        if self.position < len(self.queue):
            entry = self.queue[self.position]
            self.position += 1
            return entry
        if self.queue and self.when_exhausted == "repeat":
            return self.queue[-1]
        if self.queue and self.when_exhausted == "cycle":
            self.position = 1
            return self.queue[0]
        raise BackendRejected(f"{self.spec}: the script is exhausted after {len(self.queue)} answer(s)")

    async def generate(self, request: CompletionRequest, timeout: float) -> Completion:
        self.requests.append(request)
        if len(self.requests) > 2 * KEEP_REQUESTS:  # a long-running server must not keep every prompt
            del self.requests[:-KEEP_REQUESTS]
        entry = self._next(request)
        if self.latency:
            await asyncio.sleep(self.latency)
        if isinstance(entry, BaseException):
            raise entry
        text = self._texts.get(id(entry)) if isinstance(entry, dict) else None
        if callable(entry):
            entry = entry(request)
        if not isinstance(entry, dict):
            raise BackendConfigError(f"{self.spec}: script entries must be JSON objects, got {type(entry).__name__}")
        if _is_directive(entry):
            if "raise" in entry:
                _raise(entry)
            if "text" in entry:
                text = str(entry["text"])
                data = parse_json_object(text)
            else:
                data = entry["data"]
                text = text or json.dumps(data)
        else:
            data, text = entry, text or json.dumps(entry)
        return Completion(data=data, text=text, model=self.model, usage=_estimate_usage(request, text))


def _answer_of(entry: Any) -> dict[str, Any] | None:
    """The fixed answer of a script entry (None for callables, failures and raw text)."""
    if not isinstance(entry, dict):
        return None
    if not _is_directive(entry):
        return entry
    return entry["data"] if "data" in entry and "raise" not in entry and "text" not in entry else None


def _raise(entry: dict[str, Any]) -> None:
    kind, message = entry["raise"], str(entry.get("message", "scripted failure"))
    if kind == "retryable":
        raise Retryable(message, entry.get("retry_after"))
    if kind == "timeout":
        raise TimeoutError(message)
    if kind == "rejected":
        raise BackendRejected(message)
    if kind == "output":
        raise BackendOutputError(message)
    raise BackendConfigError(f"unknown scripted failure {kind!r}; use retryable, timeout, rejected or output")


class FunctionBackend(ScriptedBackend):
    """Answers every request with `fn(request)` (like pydantic-ai's `FunctionModel`)."""

    def __init__(
        self,
        fn: Responder,
        *,
        model: str = "function",
        latency: float = 0.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__([fn], model=model, when_exhausted="repeat", latency=latency, retry=retry)
        self.spec = f"function:{model}"


def load_script(path: str | Path) -> list[Any]:
    """Read a script file: a JSON list, `{"responses": [...]}`, or JSONL (one entry a line).

    Raises:
        BackendConfigError: the file is missing or not a script.
    """
    file = Path(path)
    if not file.is_file():
        raise BackendConfigError(f"scripted: no such file {str(file)!r}; pass scripted:PATH to a JSON or JSONL script")
    text = file.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise BackendConfigError(f"scripted: {file} is neither JSON nor JSONL: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("responses"), list):
        data = data["responses"]
    if not isinstance(data, list):
        raise BackendConfigError(f'scripted: {file} must hold a list of entries or {{"responses": [...]}}')
    return data
