"""What a model call costs in USD: a price set for the model, else the maintained `genai-prices` database, else null.

A backend prices each call's tokens with one `Pricing`. A price set in `prices` (USD per
million input and output tokens, keyed by model name, as the backend was given it) wins;
otherwise `genai-prices` prices the model at the provider the backend talks to: OpenAI for
`openai:`, Anthropic for `anthropic:`, and for `openai-compatible:` the provider whose API
the base URL names (OpenRouter, Together, ...). A model neither knows costs null, never a
guessed number: a self-hosted vLLM serving a model some provider sells has no list price.

Set a private model's price with `resolve_backend(..., prices={"my-model": (0.2, 0.6)})`
(or the backend's `prices=` argument); a CLI flag reads each `MODEL=INPUT,OUTPUT[,CACHED[,CACHE_WRITE]]` with
`parse_price`, e.g. `--price my-model=0.2,0.6` or `--price my-model=0.2,0.6,0.02`. Tokens a provider served
from its prompt cache are priced at its cache-read rate (`genai-prices` knows them per model), and tokens
written to Anthropic's cache at its cache-write rate; a price set without cache rates bills them as input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import genai_prices

from ..errors import BackendConfigError
from ._base import Usage, priced_usage

__all__ = ["Price", "Pricing", "parse_price"]

Price = tuple[float, ...]
"""USD per million tokens: (input, output), optionally then (cache read, cache write)."""


def parse_price(text: str) -> tuple[str, Price]:
    """Read `MODEL=INPUT,OUTPUT[,CACHED[,CACHE_WRITE]]` (USD per million input, output, cache-read and cache-write
    tokens), e.g. `my-model=0.2,0.6` or `my-model=0.2,0.6,0.02,0.25`.

    Raises:
        BackendConfigError: the text is not in that form, or a price is negative.
    """
    model, _, prices = text.rpartition("=")
    parts = prices.split(",")
    try:
        price: Price | None = tuple(float(part) for part in parts) if 2 <= len(parts) <= 4 else None
    except ValueError:
        price = None
    if not model.strip() or price is None or min(price) < 0:
        raise BackendConfigError(
            "a model price is MODEL=INPUT,OUTPUT[,CACHED[,CACHE_WRITE]] in USD per million tokens, e.g. "
            f"my-model=0.2,0.6 or my-model=0.2,0.6,0.02; got {text!r}"
        )
    return model.strip(), price


class Pricing:
    """Prices one backend model's calls.

    Args:
        model: the model name the backend sends.
        provider_id: the `genai-prices` provider (`"openai"`, `"anthropic"`), when the backend talks to one.
        api_url: the base URL of an OpenAI-compatible server; `genai-prices` knows some providers by their URL.
        prices: prices set by the user, by model name; the one for `model`, if any, is used instead of the database.
    """

    def __init__(
        self,
        model: str,
        *,
        provider_id: str | None = None,
        api_url: str | None = None,
        prices: Mapping[str, Price] | None = None,
    ) -> None:
        self.model = model
        self.provider_id = provider_id
        self.api_url = api_url
        self.price = (prices or {}).get(model)
        self._listed = provider_id is not None or api_url is not None  # until a lookup says otherwise
        self._model_price: Any = None  # the database's price of the model, once looked up (each lookup scans it)

    def usage(self, prompt_tokens: int, completion_tokens: int, *, cached: int = 0, cache_write: int = 0) -> Usage:
        """The usage of one call of `prompt_tokens` in (`cached` of them read from the provider's prompt cache,
        `cache_write` written to it) and `completion_tokens` out, with its cost when known."""
        if self.price is not None:
            return priced_usage(prompt_tokens, completion_tokens, self.price, cached=cached, cache_write=cache_write)
        unpriced = Usage(prompt_tokens, completion_tokens, None, 1, cached, cache_write)
        if not self._listed:
            return unpriced
        tokens = genai_prices.Usage(
            input_tokens=prompt_tokens,
            cache_read_tokens=cached or None,
            cache_write_tokens=cache_write or None,
            output_tokens=completion_tokens,
        )
        if self._model_price is not None:  # tiers by prompt size are the model price's own: it prices any usage
            total = self._model_price.calc_price(tokens)["total_price"]
            return Usage(prompt_tokens, completion_tokens, float(total), 1, cached, cache_write)
        try:
            if self.provider_id is not None:
                calc = genai_prices.calc_price(tokens, self.model, provider_id=self.provider_id)
            else:
                calc = genai_prices.calc_price(tokens, self.model, provider_api_url=self.api_url)
        except (LookupError, ValueError):  # not in the database (a miss is remembered: each lookup scans it)
            self._listed = False
            return unpriced
        self._model_price = calc.model_price
        return Usage(prompt_tokens, completion_tokens, float(calc.total_price), 1, cached, cache_write)
