from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import pytest
from simia.server.inprocess import free_port
from simia.sim.backends import (
    CompletionRequest,
    RetryPolicy,
    ScriptedBackend,
    ToolRequest,
    parse_json_object,
    resolve_backend,
)
from simia.sim.errors import (
    BackendConfigError,
    BackendOutputError,
    BackendRejected,
    BackendTimeout,
    BackendUnavailable,
)
from simia.testing.fake_provider import FakeProvider, FakeReply
from simia.testing.processes import stop_process, wait_answering

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
REQUEST = CompletionRequest(
    messages=[{"role": "system", "content": "You add numbers."}, {"role": "user", "content": "2+2?"}],
    schema=SCHEMA,
    schema_name="sum",
    max_tokens=64,
    seed=3,
)


class Sleeps:
    """Records backoff delays instead of waiting (tests never sleep)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def backend_for(kind: str, fake: FakeProvider, policy: RetryPolicy) -> Any:
    if kind == "openai":
        return resolve_backend(
            "openai:gpt-4.1-mini", base_url=fake.base_url, env={"OPENAI_API_KEY": "sk-test"}, retry=policy
        )
    if kind == "openai-compatible":
        return resolve_backend("openai-compatible:qwen3", base_url=fake.base_url, retry=policy)
    return resolve_backend(
        "anthropic:claude-sonnet-4-6",
        base_url=fake.anthropic_url,
        env={"ANTHROPIC_API_KEY": "sk-ant-test"},
        retry=policy,
    )


KINDS = ["openai", "openai-compatible", "anthropic"]


async def test_openai_sends_a_json_schema_structured_output_request() -> None:
    async with FakeProvider({"answer": 4}).running() as fake:
        backend = backend_for("openai", fake, RetryPolicy())
        completion = await backend.complete(REQUEST)
        await backend.aclose()
    body = fake.requests[0]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "sum", "schema": SCHEMA, "strict": False},
    }
    assert (body["model"], body["max_completion_tokens"], body["seed"]) == ("gpt-4.1-mini", 64, 3)
    assert body["messages"] == REQUEST.messages
    assert fake.headers[0]["authorization"] == "Bearer sk-test"
    assert completion.data == {"answer": 4}
    assert (completion.usage.prompt_tokens, completion.usage.calls) == (100, 1)
    assert completion.usage.cost_usd == pytest.approx((100 * 0.4 + completion.usage.completion_tokens * 1.6) / 1e6)


async def test_openai_compatible_sends_max_tokens_and_falls_back_to_json_mode() -> None:
    async with FakeProvider({"answer": 4}).running() as fake:
        fake.script(FakeReply({"detail": "response_format json_schema is not supported"}, status=400))
        backend = backend_for("openai-compatible", fake, RetryPolicy())
        completion = await backend.complete(REQUEST)
        again = await backend.complete(REQUEST)
        await backend.aclose()
    assert fake.requests[0]["max_tokens"] == 64 and fake.requests[0]["response_format"]["type"] == "json_schema"
    assert fake.requests[1]["response_format"] == {"type": "json_object"}
    assert "JSON Schema" in fake.requests[1]["messages"][-1]["content"]
    assert fake.requests[2]["response_format"] == {"type": "json_object"}  # remembered
    assert completion.data == again.data == {"answer": 4}


async def test_anthropic_forces_a_tool_call_with_the_schema() -> None:
    async with FakeProvider({"answer": 4}).running() as fake:
        backend = backend_for("anthropic", fake, RetryPolicy())
        completion = await backend.complete(REQUEST)
        await backend.aclose()
    body = fake.requests[0]
    assert body["tools"][0]["name"] == "sum" and body["tools"][0]["input_schema"] == SCHEMA
    assert body["tool_choice"] == {"type": "tool", "name": "sum"}
    assert body["system"] == [{"type": "text", "text": "You add numbers.", "cache_control": {"type": "ephemeral"}}]
    assert body["messages"] == [{"role": "user", "content": "2+2?"}]
    assert body["max_tokens"] == 64 and fake.headers[0]["authorization"] == "Bearer sk-ant-test"
    assert completion.data == {"answer": 4} and completion.usage.prompt_tokens == 120


async def test_anthropic_splits_the_user_message_at_its_cache_breaks_and_marks_all_but_the_last_part() -> None:
    """A part the request says may recur is a breakpoint, at most two in the message (the API takes four in all);
    other backends send the message whole."""
    text = "state A|state B|call"
    split = dataclasses.replace(REQUEST, messages=[REQUEST.messages[0], {"role": "user", "content": text}])
    async with FakeProvider({"answer": 4}).running() as fake:
        for breaks in ((8,), (6, 8, 16), ()):
            backend = backend_for("anthropic", fake, RetryPolicy())
            await backend.complete(dataclasses.replace(split, cache_breaks=breaks))
            await backend.aclose()
        openai = backend_for("openai", fake, RetryPolicy())
        await openai.complete(dataclasses.replace(split, cache_breaks=(8,)))
        await openai.aclose()
    mark = {"cache_control": {"type": "ephemeral"}}
    one, three, none, whole = (body["messages"][-1]["content"] for body in fake.requests)
    assert one == [{"type": "text", "text": "state A|", **mark}, {"type": "text", "text": "state B|call"}]
    assert three == [
        {"type": "text", "text": "state "},
        {"type": "text", "text": "A|", **mark},
        {"type": "text", "text": "state B|", **mark},
        {"type": "text", "text": "call"},
    ]
    assert none == whole == text


async def test_openai_routes_by_the_prompt_cache_key_and_reads_cached_tokens() -> None:
    """The official API gets `prompt_cache_key`; the cached tokens its usage reports are recorded and priced at the
    cache-read rate. A compatible server gets no key (vLLM and SGLang cache prefixes without one)."""
    usage = {"prompt_tokens": 2048, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 1920}}
    reply = {"model": "gpt-4.1-mini", "choices": [{"message": {"content": '{"answer": 4}'}}], "usage": usage}
    keyed = dataclasses.replace(REQUEST, cache_key="simia-abc-sim-4")
    async with FakeProvider({"answer": 4}).running() as fake:
        fake.script(FakeReply(body=json.dumps(reply)))
        backend = backend_for("openai", fake, RetryPolicy())
        completion = await backend.complete(keyed)
        await backend.aclose()
        compatible = backend_for("openai-compatible", fake, RetryPolicy())
        await compatible.complete(keyed)
        await compatible.aclose()
    assert fake.requests[0]["prompt_cache_key"] == "simia-abc-sim-4"
    assert "prompt_cache_key" not in fake.requests[1]
    got = completion.usage
    assert (got.prompt_tokens, got.cached_tokens, got.cache_write_tokens) == (2048, 1920, 0)
    # gpt-4.1-mini: $0.40 input, $0.10 cached input, $1.60 output per million tokens
    assert got.cost_usd == pytest.approx((128 * 0.4 + 1920 * 0.1 + 10 * 1.6) / 1e6)


async def test_anthropic_usage_adds_cache_reads_and_writes_to_the_prompt_tokens() -> None:
    usage = {
        "input_tokens": 50,
        "output_tokens": 10,
        "cache_read_input_tokens": 3000,
        "cache_creation_input_tokens": 200,
    }
    reply = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [{"type": "tool_use", "id": "t1", "name": "sum", "input": {"answer": 4}}],
        "stop_reason": "tool_use",
        "usage": usage,
    }
    async with FakeProvider({"answer": 4}).running() as fake:
        fake.script(FakeReply(body=json.dumps(reply)))
        backend = backend_for("anthropic", fake, RetryPolicy())
        completion = await backend.complete(REQUEST)
        await backend.aclose()
    got = completion.usage
    assert (got.prompt_tokens, got.cached_tokens, got.cache_write_tokens) == (3250, 3000, 200)
    # claude-sonnet-4-6: $3 input, $0.30 cache read, $3.75 cache write, $15 output per million tokens
    assert got.cost_usd == pytest.approx((50 * 3 + 3000 * 0.3 + 200 * 3.75 + 10 * 15) / 1e6)


@pytest.mark.parametrize("kind", KINDS)
async def test_429_with_retry_after_is_honoured_then_succeeds(kind: str) -> None:
    sleeps = Sleeps()
    async with FakeProvider({"answer": 4}).running() as fake:
        fake.script(FakeReply({"m": "slow down"}, status=429, headers={"retry-after": "2"}))
        backend = backend_for(kind, fake, RetryPolicy(sleep=sleeps))
        completion = await backend.complete(REQUEST)
        await backend.aclose()
    assert completion.data == {"answer": 4}
    assert sleeps.delays == [2.0] and len(fake.requests) == 2  # one retry layer: no SDK retries


@pytest.mark.parametrize("kind", KINDS)
async def test_5xx_is_retried_with_capped_backoff_until_attempts_run_out(kind: str) -> None:
    sleeps = Sleeps()
    async with FakeProvider({"answer": 4}).running() as fake:
        fake.script(*[FakeReply({"m": "boom"}, status=500) for _ in range(3)])
        backend = backend_for(kind, fake, RetryPolicy(max_attempts=3, base_delay=0.5, max_delay=0.75, sleep=sleeps))
        with pytest.raises(BackendUnavailable, match=r"gave up after 3 attempts .*HTTP 500"):
            await backend.complete(REQUEST)
        await backend.aclose()
    assert len(fake.requests) == 3 and len(sleeps.delays) == 2
    assert all(0 <= d <= 0.75 for d in sleeps.delays)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_retry_after_beyond_the_cap_fails_at_once(kind: str) -> None:
    async with FakeProvider({"answer": 4}).running() as fake:
        fake.script(FakeReply({"m": "later"}, status=429, headers={"retry-after": "3600"}))
        backend = backend_for(kind, fake, RetryPolicy(max_retry_after=30, sleep=Sleeps()))
        with pytest.raises(BackendUnavailable, match="Retry-After 3600s exceeds the 30s cap"):
            await backend.complete(REQUEST)
        await backend.aclose()
    assert len(fake.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_other_4xx_are_never_retried(kind: str) -> None:
    async with FakeProvider({"answer": 4}).running() as fake:
        fake.script(FakeReply({"m": "context length exceeded"}, status=400))
        backend = backend_for(kind, fake, RetryPolicy(sleep=Sleeps()))
        with pytest.raises(BackendRejected, match="HTTP 400"):
            await backend.complete(REQUEST)
        await backend.aclose()
    assert len(fake.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_a_slow_backend_hits_the_per_call_deadline(kind: str) -> None:
    async with FakeProvider({"answer": 4}).running() as fake:
        fake.script(FakeReply({"answer": 4}, delay=1.5))
        backend = backend_for(kind, fake, RetryPolicy(deadline=0.3, sleep=Sleeps()))
        with pytest.raises(BackendTimeout, match=r"no answer within the 0\.3s deadline"):
            await backend.complete(REQUEST)
        await backend.aclose()


@pytest.mark.parametrize("kind", ["openai", "openai-compatible"])
async def test_a_garbage_body_is_an_output_error(kind: str) -> None:
    async with FakeProvider({"answer": 4}).running() as fake:
        fake.script(FakeReply(body=b"<html>502 bad gateway</html>", status=200))
        backend = backend_for(kind, fake, RetryPolicy(sleep=Sleeps()))
        with pytest.raises(BackendOutputError):
            await backend.complete(REQUEST)
        await backend.aclose()


async def test_model_text_that_is_not_json_is_an_output_error() -> None:
    async with FakeProvider().running() as fake:
        fake.script(
            FakeReply(
                answer=None,
                body=json.dumps(
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "m",
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "four"}}
                        ],
                    }
                ),
            )
        )
        backend = backend_for("openai-compatible", fake, RetryPolicy())
        with pytest.raises(BackendOutputError, match="not valid JSON"):
            await backend.complete(REQUEST)
        await backend.aclose()


def completion_body(content: str) -> str:
    """A chat completion whose assistant text is `content`, exactly as a provider sends it."""
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "finish_reason": "stop", "message": message}
    return json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]})


async def test_a_raw_control_character_inside_a_json_string_is_read_not_failed() -> None:
    """Grammar-constrained decoding lets the embedded model write a raw line break or tab inside a string
    ("Invalid control character at: ..." failed agent and judge calls): what it meant is plain, so it is read."""
    async with FakeProvider().running() as fake:
        fake.script(FakeReply(body=completion_body('{"answer": 4, "note": "two\nlines\tand a tab"}')))
        backend = backend_for("openai-compatible", fake, RetryPolicy())
        completion = await backend.complete(REQUEST)
        await backend.aclose()
    assert completion.data == {"answer": 4, "note": "two\nlines\tand a tab"}
    assert parse_json_object('{"message": "a\x01b"}') == {"message": "a\x01b"}


def test_an_unparsable_answer_names_the_problem_and_its_position_once() -> None:
    with pytest.raises(BackendOutputError) as info:
        parse_json_object('{"message": "cut off')
    assert str(info.value) == (
        'model output is not valid JSON (Unterminated string starting at char 12): \'{"message": "cut off\''
    )


async def test_the_concurrency_cap_bounds_requests_in_flight() -> None:
    in_flight = peak = 0

    async def tracked(seconds: float) -> None:
        return None

    backend = ScriptedBackend([{"answer": 1}], when_exhausted="repeat", max_concurrency=3, latency=0.01)
    original = backend.generate

    async def counting(request: CompletionRequest, timeout: float) -> Any:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            return await original(request, timeout)
        finally:
            in_flight -= 1

    backend.generate = counting  # type: ignore[method-assign]
    await asyncio.gather(*(backend.complete(REQUEST) for _ in range(12)))
    assert peak == 3


def test_unknown_backend_lists_the_valid_ones_and_suggests() -> None:
    with pytest.raises(BackendConfigError) as info:
        resolve_backend("antropic:claude")
    assert str(info.value) == (
        "unknown backend 'antropic'. Did you mean 'anthropic'? Valid backends: local, openai, openai-compatible, "
        "anthropic, scripted, replay (SPEC is provider:model)"
    )


@pytest.mark.parametrize(
    ("spec", "variable"), [("openai:gpt-4o", "OPENAI_API_KEY"), ("anthropic:claude-sonnet-4-6", "ANTHROPIC_API_KEY")]
)
def test_a_missing_key_names_the_variable_to_set(spec: str, variable: str) -> None:
    with pytest.raises(BackendConfigError, match=f"set {variable}"):
        resolve_backend(spec, env={})


def test_the_default_backend_is_local_without_keys() -> None:
    from simia.sim.backends import default_backend_spec

    assert default_backend_spec({}) == "local"
    assert default_backend_spec({"OPENAI_API_KEY": "k"}).startswith("openai:")
    with pytest.raises(BackendConfigError, match="needs --base-url"):
        resolve_backend("openai-compatible:m")


TOOL_TURN = ToolRequest(
    messages=[{"role": "system", "content": "You keep a pantry."}, {"role": "user", "content": "Set milk to 4."}],
    tools=[
        {
            "type": "function",
            "function": {
                "name": "set_quantity",
                "description": "Set an item's quantity.",
                "parameters": {"type": "object", "properties": {"qty": {"type": "integer"}}, "required": ["qty"]},
            },
        }
    ],
)
CALL = {"message": "", "tool_calls": [{"name": "set_quantity", "arguments": {"qty": 4}}]}


async def test_concurrent_tool_turns_a_compatible_server_refuses_fall_back_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with FakeProvider(CALL, refuse_tools=True).running() as fake:
        backend = backend_for("openai-compatible", fake, RetryPolicy(sleep=Sleeps()))
        with caplog.at_level(logging.WARNING, logger="simia.backends"):
            answers = await asyncio.gather(*(backend.complete_tools(TOOL_TURN) for _ in range(3)))
            later = await backend.complete_tools(TOOL_TURN)
        await backend.aclose()
    expected = {"message": "", "tool_calls": [{"id": None, "name": "set_quantity", "arguments": {"qty": 4}}]}
    assert [a.data for a in [*answers, later]] == [expected] * 4
    assert "tools" not in fake.requests[-1] and fake.requests[-1]["response_format"]["type"] == "json_schema"
    assert sum("tools" in body for body in fake.requests) <= 3  # the fourth turn did not try native tools
    assert [r.getMessage().split(" (")[0] for r in caplog.records if r.name == "simia.backends"] == [
        "openai-compatible:qwen3 refuses native tool calling"
    ]


@pytest.mark.parametrize(
    ("kind", "refusal"),
    [
        ("openai-compatible", {"message": "This model's maximum context length is 4096 tokens."}),
        ("openai", {"message": "tool_choice is not supported"}),
    ],
)
async def test_a_400_that_is_not_a_compatible_server_refusing_tools_stays_an_error(
    kind: str, refusal: dict[str, Any]
) -> None:
    """Only a compatible server saying it will not do tools switches to the structured action; a context-length
    error, or the official API rejecting a request, is an error as before."""
    async with FakeProvider(CALL).running() as fake:
        fake.script(FakeReply(body=json.dumps({"object": "error", **refusal, "code": 400}), status=400))
        backend = backend_for(kind, fake, RetryPolicy(sleep=Sleeps()))
        with pytest.raises(BackendRejected, match="HTTP 400"):
            await backend.complete_tools(TOOL_TURN)
        again = await backend.complete_tools(TOOL_TURN)
        await backend.aclose()
    assert [body["tool_choice"] for body in fake.requests] == ["auto", "auto"]
    assert again.data["tool_calls"][0]["name"] == "set_quantity" and again.data["tool_calls"][0]["id"]


@contextlib.contextmanager
def lean_provider(port: int) -> Iterator[subprocess.Popen[bytes]]:
    argv = [sys.executable, "-m", "simia.testing.fake_provider", "--port", str(port), "--answer", "ok", "--lean"]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        stop_process(proc)


@pytest.mark.processes  # python -m simia.testing.fake_provider --lean
async def test_the_lean_fake_provider_answers_a_real_backend_on_one_kept_connection() -> None:
    port = free_port()
    with lean_provider(port) as proc:
        await wait_answering(f"http://127.0.0.1:{port}/v1/chat/completions", proc, what="the lean provider")
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"http://127.0.0.1:{port}/v1/chat/completions")).status_code == 404
        backend = resolve_backend("openai-compatible:qwen3", base_url=f"http://127.0.0.1:{port}/v1")
        completions = await asyncio.gather(*(backend.complete(REQUEST) for _ in range(20)))
        await backend.aclose()
    assert [c.data for c in completions] == [{"ok": True}] * 20
    assert completions[0].usage.prompt_tokens == 100


@pytest.mark.processes
def test_the_lean_fake_provider_refuses_chaos() -> None:
    argv = [sys.executable, "-m", "simia.testing.fake_provider", "--port", "1", "--lean", "--chaos", "0.5"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--lean serves answers only: drop --chaos" in done.stderr
