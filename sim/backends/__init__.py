"""Model backends, resolved from SPEC strings: `local`, `openai:MODEL`, `anthropic:MODEL`,
`openai-compatible:MODEL` (with a base URL), `scripted:FILE`, `replay:DB`.

Each provider lives in its own module, the only one importing that provider's SDK;
the registry below maps a SPEC prefix to a factory. Calls are priced from the
`genai-prices` database; `prices=` sets the price of a model it does not list (`_pricing`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..errors import BackendConfigError
from ._base import (
    Backend,
    Completion,
    CompletionRequest,
    Retryable,
    RetryPolicy,
    ToolRequest,
    Usage,
    parse_json_object,
)
from ._pricing import Price, parse_price
from .batch import BatchBackend
from .local import LocalBackend
from .replay import ReplayBackend
from .scripted import FunctionBackend, ScriptedBackend, load_script

__all__ = [
    "BACKENDS",
    "Backend",
    "BatchBackend",
    "Completion",
    "CompletionRequest",
    "FunctionBackend",
    "Price",
    "RetryPolicy",
    "Retryable",
    "ScriptedBackend",
    "ToolRequest",
    "Usage",
    "default_backend_spec",
    "parse_json_object",
    "parse_price",
    "resolve_backend",
]

Factory = Callable[[str, "BackendOptions"], Backend]


@dataclass
class BackendOptions:
    """What a factory may need besides the model name; built by `resolve_backend`."""

    base_url: str | None
    env: Mapping[str, str]
    retry: RetryPolicy | None
    max_concurrency: int
    prices: Mapping[str, Price] = field(default_factory=dict)

    def key(self, variable: str, spec: str) -> str:
        value = self.env.get(variable)
        if not value:
            raise BackendConfigError(
                f"{spec} needs an API key: set {variable} (e.g. `export {variable}=...`), or give the offline "
                "embedded model's SPEC, `local`, in its place"
            )
        return value


def _need_model(name: str, model: str) -> None:
    if not model:
        raise BackendConfigError(f"{name} needs a model: use {name}:MODEL, e.g. {name}:{_EXAMPLES[name]}")


def _openai(model: str, o: BackendOptions) -> Backend:
    from .openai import OpenAIBackend  # the provider SDKs load only for their backend (~0.5 s each per command)

    _need_model("openai", model)
    return OpenAIBackend(
        model,
        api_key=o.key("OPENAI_API_KEY", f"openai:{model}"),
        base_url=o.base_url,
        max_concurrency=o.max_concurrency,
        retry=o.retry,
        prices=o.prices,
    )


def _openai_compatible(model: str, o: BackendOptions) -> Backend:
    from .openai import OpenAIBackend  # the provider SDKs load only for their backend

    _need_model("openai-compatible", model)
    if not o.base_url:
        raise BackendConfigError(
            "openai-compatible needs --base-url, e.g. --base-url http://127.0.0.1:8000/v1 for a vLLM server"
        )
    return OpenAIBackend(
        model,
        api_key=o.env.get("OPENAI_API_KEY") or "not-needed",
        base_url=o.base_url,
        compatible=True,
        max_concurrency=o.max_concurrency,
        retry=o.retry,
        prices=o.prices,
    )


def _anthropic(model: str, o: BackendOptions) -> Backend:
    from .anthropic import AnthropicBackend  # the provider SDKs load only for their backend

    _need_model("anthropic", model)
    return AnthropicBackend(
        model,
        api_key=o.key("ANTHROPIC_API_KEY", f"anthropic:{model}"),
        base_url=o.base_url,
        max_concurrency=o.max_concurrency,
        retry=o.retry,
        prices=o.prices,
    )


def _local(path: str, o: BackendOptions) -> Backend:
    return LocalBackend(path or None, retry=o.retry)


def _scripted(path: str, o: BackendOptions) -> Backend:
    if not path:
        raise BackendConfigError("scripted needs a file: use scripted:PATH (a JSON list of answers)")
    return ScriptedBackend(load_script(path), model=path, when_exhausted="repeat", retry=o.retry)


def _replay(path: str, o: BackendOptions) -> Backend:
    if not path:
        raise BackendConfigError(
            "replay needs a database: use replay:PATH (a simia --db file) or replay:postgresql://..."
        )
    return ReplayBackend(path, retry=o.retry)


BACKENDS: dict[str, Factory] = {
    "local": _local,
    "openai": _openai,
    "openai-compatible": _openai_compatible,
    "anthropic": _anthropic,
    "scripted": _scripted,
    "replay": _replay,
}
_EXAMPLES = {"openai": "gpt-5.4-mini", "openai-compatible": "Qwen/Qwen3-8B", "anthropic": "claude-sonnet-4-6"}
_OPENAI_COMPATIBLE_SERVERS: dict[str, tuple[str, str]] = {
    "ollama": ("Ollama", "http://127.0.0.1:11434/v1"),
    "vllm": ("vLLM", "http://127.0.0.1:8000/v1"),
    "sglang": ("SGLang", "http://127.0.0.1:30000/v1"),
    "llamacpp": ("llama.cpp's server", "http://127.0.0.1:8080/v1"),
    "llama-cpp": ("llama.cpp's server", "http://127.0.0.1:8080/v1"),
    "lmstudio": ("LM Studio", "http://127.0.0.1:1234/v1"),
    "lm-studio": ("LM Studio", "http://127.0.0.1:1234/v1"),
}
"""Servers people name as a backend that are `openai-compatible` ones: their name and default address, for the hint."""


def default_backend_spec(env: Mapping[str, str]) -> str:
    """`openai:gpt-5.4-mini` with OPENAI_API_KEY, `anthropic:claude-sonnet-4-6` with ANTHROPIC_API_KEY, else `local`."""
    if env.get("OPENAI_API_KEY"):
        return "openai:gpt-5.4-mini"
    if env.get("ANTHROPIC_API_KEY"):
        return "anthropic:claude-sonnet-4-6"
    return "local"


def resolve_backend(
    spec: str | None,
    *,
    base_url: str | None = None,
    env: Mapping[str, str] | None = None,
    retry: RetryPolicy | None = None,
    max_concurrency: int = 16,
    prices: Mapping[str, Price] | None = None,
) -> Backend:
    """Build the backend a SPEC string names.

    Args:
        spec: `provider:model` (or `local`); None picks `default_backend_spec(env)`.
        base_url: server URL for `openai-compatible` (or a proxy for `openai`/`anthropic`).
        env: where API keys are read (the CLI passes `os.environ`); tests pass `{}`.
        prices: USD per million (input, output) tokens by model name, for a model `genai-prices` does not list
            (a fine-tune, a private deployment); it overrides the database. `parse_price` reads `MODEL=IN,OUT`.

    Raises:
        BackendConfigError: unknown provider (with "did you mean"), missing key, model or extra.
    """
    env = env or {}
    spec = spec or default_backend_spec(env)
    provider, _, rest = spec.partition(":")
    factory = BACKENDS.get(provider)
    if factory is None:
        server = _OPENAI_COMPATIBLE_SERVERS.get(provider.lower().replace("_", "-").replace(".", ""))
        if server is not None:
            name, url = server
            model = rest or "MODEL"
            raise BackendConfigError(
                f"unknown backend {provider!r}: {name} speaks the OpenAI API, so use "
                f"openai-compatible:{model} --base-url {url} (its default address)"
            )
        close = difflib.get_close_matches(provider, list(BACKENDS), n=1, cutoff=0.5)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise BackendConfigError(
            f"unknown backend {provider!r}.{hint} Valid backends: {', '.join(BACKENDS)} (SPEC is provider:model)"
        )
    return factory(rest, BackendOptions(base_url, env, retry, max_concurrency, dict(prices or {})))
