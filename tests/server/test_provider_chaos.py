"""Provider chaos: the fake provider's seeded fault mode, what each fault looks like on the wire, and simia under
200 concurrent agents while half the provider's answers are faults (`bench/chaos_provider.py`)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client
from simia.sim.backends import CompletionRequest, FunctionBackend, RetryPolicy, resolve_backend
from simia.sim.errors import BackendOutputError
from simia.testing import FAULTS, Chaos, FakeProvider, FakeReply

BENCH = Path(__file__).resolve().parents[2] / "bench"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
REQUEST = CompletionRequest(
    messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
    schema={"type": "object"},
    schema_name="x",
    max_tokens=16,
)


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_chaos_draws_the_same_faults_for_the_same_seed_and_refuses_unknown_ones() -> None:
    first, second = Chaos(seed=3), Chaos(seed=3)
    draws = [first.draw() for _ in range(200)]
    assert draws == [second.draw() for _ in range(200)]
    assert set(draws) == {"ok", *FAULTS}
    assert 0.4 < draws.count("ok") / len(draws) < 0.6  # rate=0.5
    with pytest.raises(ValueError, match="unknown chaos fault"):
        Chaos(faults=("429", "meteor"))


@pytest.mark.parametrize(
    ("fault", "status", "check"),
    [
        ("429", 429, lambda r: "retry-after" not in r.headers),
        ("429_retry_after", 429, lambda r: r.headers["retry-after"] == "0.2"),
        ("500", 500, lambda r: r.json()["error"]["message"] == "chaos: 500"),
        ("502", 502, lambda r: True),
        ("503", 503, lambda r: True),
        ("truncated", 200, lambda r: r.text.startswith('{"id": "chatcmpl-1"') and not r.text.endswith("}")),
        ("trickle", 200, lambda r: r.json()["choices"][0]["message"]["content"] == '{"answer": 4}'),
        (
            "wrong_schema",
            200,
            lambda r: (
                json.loads(r.json()["choices"][0]["message"]["content"]) == {"chaos": "an answer of the wrong shape"}
            ),
        ),
    ],
)
async def test_each_fault_looks_on_the_wire_as_a_real_provider_failure_does(
    fault: str, status: int, check: Any
) -> None:
    provider = FakeProvider({"answer": 4}, chaos=Chaos(rate=1.0, faults=(fault,), trickle=0.05))
    async with provider.running(), httpx.AsyncClient() as http:
        response = await http.post(f"{provider.base_url}/chat/completions", json=CHAT)
    assert response.status_code == status
    assert check(response)
    assert provider.faults == {fault: 1}


async def test_a_reset_closes_the_connection_mid_answer_and_a_hang_outlasts_the_client() -> None:
    provider = FakeProvider({"answer": 4}, chaos=Chaos(rate=1.0, faults=("reset", "hang"), hang=0.3, seed=1))
    async with provider.running(), httpx.AsyncClient(timeout=0.1) as http:
        seen = set()
        for _ in range(6):
            try:
                await http.post(f"{provider.base_url}/chat/completions", json=CHAT)
            except httpx.RemoteProtocolError:
                seen.add("reset")
            except httpx.ReadTimeout:
                seen.add("hang")
    assert seen == {"reset", "hang"}


async def test_scripted_replies_are_never_replaced_by_chaos() -> None:
    provider = FakeProvider({"answer": 4}, chaos=Chaos(rate=1.0, faults=("500",)))
    provider.script(FakeReply({"answer": 5}))
    async with provider.running(), httpx.AsyncClient() as http:
        scripted = await http.post(f"{provider.base_url}/chat/completions", json=CHAT)
        chaotic = await http.post(f"{provider.base_url}/chat/completions", json=CHAT)
    assert (scripted.status_code, chaotic.status_code) == (200, 500)


@pytest.mark.parametrize(
    "body",
    [
        b'{"choices": 3}',
        b'{"choices": [3]}',
        b'{"choices": [{"message": "text"}]}',
        b"[" * 100_000,
        b'{"choices": [{"message": {"content": 5}}], "usage": "many", "model": 7}',
    ],
)
async def test_any_malformed_chat_completion_is_an_output_error_never_a_crash(body: bytes) -> None:
    async with FakeProvider().running() as fake:
        fake.script(FakeReply(body=body))
        backend = resolve_backend("openai-compatible:m", base_url=fake.base_url, retry=RetryPolicy(max_attempts=1))
        with pytest.raises(BackendOutputError):
            await backend.complete(REQUEST)
        await backend.aclose()


async def test_an_unexpected_backend_exception_is_a_recorded_infra_error_not_a_lost_call(make_server: Any) -> None:
    def broken(request: Any) -> dict[str, Any]:
        raise TypeError("'int' object is not subscriptable")

    async with make_server(backend=FunctionBackend(broken)) as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        async with Client(episode["mcp_url"]) as client:
            result = await client.call_tool("list_items", {})
        events = (await http.get(f"/v1/episodes/{episode['id']}")).json()["events"]
        metrics = (await http.get("/metrics")).text
    assert result.is_error and result.meta is not None
    assert (result.meta["simia/error_kind"], result.meta["simia/error_code"]) == ("infra", "backend_error")
    assert result.content[0].text == "The tool is temporarily unavailable (backend error)."
    assert [(e["error_code"], e["detail"]) for e in events] == [
        ("backend_error", "unexpected TypeError in function:function: 'int' object is not subscriptable")
    ]
    assert 'simia_tool_errors_total{code="backend_error",kind="infra",world="mock"} 1.0' in metrics


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_200_agents_under_provider_chaos_get_results_or_clean_infra_errors_in_time_and_lose_no_event() -> None:
    report = _load("chaos_provider").run(agents=200, calls=4, seed=0)
    assert report.failures == {}
    assert report.calls == 800
    assert set(report.faults) == {"ok", *FAULTS}
    assert report.max_requests_per_call <= 12
    assert {"ok", "agent:item_not_found", "infra:backend_error"} <= set(report.outcomes)
    assert {"rate_limited", "server_error", "connection", "malformed"} <= set(report.backend_failures)
