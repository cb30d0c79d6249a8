"""What a model call costs: the genai-prices database for listed models, a set price for private ones, else null."""

from __future__ import annotations

from typing import Any

import genai_prices
import pytest
from simia.sim.backends import CompletionRequest, parse_price, resolve_backend
from simia.sim.errors import BackendConfigError
from simia.testing.fake_provider import FakeProvider

REQUEST = CompletionRequest(messages=[{"role": "user", "content": "2+2?"}], schema={"type": "object"})


def listed_cost(model: str, provider: str, prompt: int, completion: int) -> float:
    usage = genai_prices.Usage(input_tokens=prompt, output_tokens=completion)
    return float(genai_prices.calc_price(usage, model, provider_id=provider).total_price)


async def cost_of_one_call(spec: str, **options: Any) -> tuple[float | None, int, int]:
    async with FakeProvider({"answer": 4}).running() as fake:
        url = fake.anthropic_url if spec.startswith("anthropic:") else fake.base_url
        env = {"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}
        backend = resolve_backend(spec, base_url=url, env=env, **options)
        usage = (await backend.complete(REQUEST)).usage
        await backend.aclose()
    return usage.cost_usd, usage.prompt_tokens, usage.completion_tokens


@pytest.mark.parametrize(
    ("spec", "provider"), [("openai:gpt-5.4-mini", "openai"), ("anthropic:claude-opus-4-6", "anthropic")]
)
async def test_current_models_are_priced_from_the_genai_prices_database(spec: str, provider: str) -> None:
    cost, prompt, completion = await cost_of_one_call(spec)
    model = spec.partition(":")[2]
    assert cost is not None and cost > 0
    assert cost == pytest.approx(listed_cost(model, provider, prompt, completion))


@pytest.mark.parametrize("spec", ["openai-compatible:my-finetune", "openai:my-finetune", "openai:gpt-5.4-mini"])
async def test_a_set_price_prices_a_private_model_and_overrides_the_database(spec: str) -> None:
    model = spec.partition(":")[2]
    cost, prompt, completion = await cost_of_one_call(spec, prices={model: (1.0, 2.0)})
    assert cost == pytest.approx((prompt * 1.0 + completion * 2.0) / 1e6)


@pytest.mark.parametrize("spec", ["openai-compatible:Qwen/Qwen3-8B", "openai-compatible:gpt-5.4-mini", "openai:gpt-99"])
async def test_a_model_nobody_priced_costs_null_never_a_guess(spec: str) -> None:
    """A self-hosted server has no list price, even for a model name a provider sells; an unlisted model neither."""
    cost, prompt, _ = await cost_of_one_call(spec, prices={"another-model": (1.0, 2.0)})
    assert (cost, prompt) == (None, 100)


def test_a_price_option_reads_model_equals_input_comma_output() -> None:
    assert parse_price("my-finetune=0.2,0.6") == ("my-finetune", (0.2, 0.6))
    assert parse_price("org/model:v2 = 3, 15") == ("org/model:v2", (3.0, 15.0))
    assert parse_price("my-finetune=0.2,0.6,0.02") == ("my-finetune", (0.2, 0.6, 0.02))
    assert parse_price("my-finetune=0.2,0.6,0.02,0.25") == ("my-finetune", (0.2, 0.6, 0.02, 0.25))
    for bad in ["my-finetune", "my-finetune=0.2", "=0.2,0.6", "m=a,b", "m=-1,2", "m=1,2,3,4,5", "m=1,2,-3"]:
        with pytest.raises(BackendConfigError, match=r"MODEL=INPUT,OUTPUT\[,CACHED\[,CACHE_WRITE\]\]"):
            parse_price(bad)


def test_cached_tokens_are_priced_at_the_cache_rates_and_at_the_input_rate_when_none_is_set() -> None:
    from simia.sim.backends._pricing import Pricing

    pricing = Pricing("gpt-4o-mini", provider_id="openai")
    listed = pricing.usage(10_000, 100, cached=8_000)
    assert listed.cost_usd == pytest.approx((2_000 * 0.15 + 8_000 * 0.075 + 100 * 0.6) / 1e6)
    again = pricing.usage(4_000, 10)  # the price looked up once prices every later call
    assert again.cost_usd == pytest.approx(listed_cost("gpt-4o-mini", "openai", 4_000, 10))
    set_rates = Pricing("mine", prices={"mine": (1.0, 2.0, 0.1, 1.25)}).usage(1_000, 10, cached=600, cache_write=300)
    assert set_rates.cost_usd == pytest.approx((100 * 1.0 + 600 * 0.1 + 300 * 1.25 + 10 * 2.0) / 1e6)
    no_cache_rate = Pricing("mine", prices={"mine": (1.0, 2.0)}).usage(1_000, 10, cached=600)
    assert no_cache_rate.cost_usd == pytest.approx((1_000 * 1.0 + 10 * 2.0) / 1e6)
    assert (set_rates.cached_tokens, set_rates.cache_write_tokens) == (600, 300)


def test_a_summary_line_says_tokens_cached_tokens_and_usd_in_all_and_per_thousand_calls() -> None:
    from simia.sim.backends import Usage

    priced = Usage(prompt_tokens=30_000, completion_tokens=900, cost_usd=0.012, calls=10, cached_tokens=24_000)
    assert priced.describe() == (
        "10 model calls: input 30,000 tokens (24,000 cached), output 900; $0.0120 ($1.20 per 1,000 model calls)"
    )
    assert "cost unknown (a model without a known price: set one with --price)" in Usage(10, 2, None, 1).describe()
    assert Usage.from_dict(priced.as_dict()) == priced
