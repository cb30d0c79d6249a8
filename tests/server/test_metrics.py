"""/metrics text: counters, cumulative latency buckets and their sum, as Prometheus scrapes them."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
from mcp import Client
from prometheus_client.parser import text_string_to_metric_families
from simia.server.metrics import Metrics


def test_calls_errors_latency_and_tokens_render_as_prometheus_families() -> None:
    metrics = Metrics()
    metrics.call(
        "mock", "get_item", "ok", 0.004, prompt_tokens=120, completion_tokens=30, cost_usd=0.002, cached_tokens=96
    )
    metrics.call("mock", "get_item", "agent", 0.3, error=("agent", "item_not_found"))
    metrics.call("retail", "cancel_order", "infra", 70.0, error=("infra", "backend_error"))
    metrics.episodes["mock"] += 2
    metrics.live = 1
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }
    assert samples[("simia_tool_calls_total", (("outcome", "ok"), ("tool", "get_item"), ("world", "mock")))] == 1
    assert samples[("simia_tool_errors_total", (("code", "item_not_found"), ("kind", "agent"), ("world", "mock")))] == 1
    bucket = "simia_tool_call_latency_seconds_bucket"
    assert samples[(bucket, (("le", "0.005"), ("world", "mock")))] == 1
    assert samples[(bucket, (("le", "0.25"), ("world", "mock")))] == 1
    assert samples[(bucket, (("le", "0.5"), ("world", "mock")))] == 2  # cumulative
    assert samples[(bucket, (("le", "60.0"), ("world", "retail")))] == 0
    assert samples[(bucket, (("le", "+Inf"), ("world", "retail")))] == 1
    assert samples[("simia_tool_call_latency_seconds_count", (("world", "mock"),))] == 2
    assert abs(samples[("simia_tool_call_latency_seconds_sum", (("world", "mock"),))] - 0.304) < 1e-9
    assert samples[("simia_backend_tokens_total", (("kind", "prompt"),))] == 120
    assert samples[("simia_backend_tokens_total", (("kind", "cached"),))] == 96
    assert samples[("simia_backend_tokens_total", (("kind", "cache_write"),))] == 0
    assert samples[("simia_backend_cost_usd_total", ())] == 0.002
    assert samples[("simia_episodes_created_total", (("world", "mock"),))] == 2
    assert samples[("simia_live_episodes", ())] == 1


async def test_a_server_with_tune_gc_freezes_its_startup_heap(make_server: Any) -> None:
    import gc

    from simia.server.settings import ServerSettings

    threshold = gc.get_threshold()
    try:
        async with make_server(ServerSettings(tune_gc=True)):
            assert gc.get_freeze_count() > 10_000 and gc.get_threshold()[0] == 10_000
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


async def test_the_event_loop_s_task_count_is_a_gauge_so_a_soak_sees_task_leaks() -> None:
    families = {f.name: f for f in text_string_to_metric_families(Metrics().render().decode())}
    [sample] = families["simia_asyncio_tasks"].samples
    assert sample.value >= 1  # this test's own task, at least


async def test_tools_the_world_does_not_have_share_one_label_so_guessed_names_add_no_series(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient() as http:
        episode = (await http.post(f"{server.url}/v1/episodes", json={"world": "mock"})).json()
        async with Client(episode["mcp_url"]) as client:
            for name in ("zz_guess_a1", "zz_guess_b2", "get_item"):
                await client.call_tool(name, {"name": "milk"})
        text = (await http.get(f"{server.url}/metrics")).text
    tools = {
        s.labels["tool"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "simia_tool_calls_total"
    }
    assert tools == {"<unknown>": 2, "get_item": 1}
