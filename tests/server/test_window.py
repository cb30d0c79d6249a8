"""The simulator's window holds only calls the agent got a real answer for: infrastructure failures stay out."""

from __future__ import annotations

from typing import Any

from mcp import Client
from simia.clients.api import SimiaClient
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.errors import BackendRejected
from simia.testing import mock_world_answer


async def test_an_infra_failure_never_enters_the_simulators_window(make_server: Any) -> None:
    prompts: list[str] = []

    def simulator(request: CompletionRequest) -> dict[str, Any]:
        prompts.append(str(request.messages[-1]["content"]))
        if len(prompts) == 2:  # the second call's model request fails, after its retries: an infra failure
            raise BackendRejected("HTTP 400: injected")
        return mock_world_answer(request)

    async with make_server(backend=FunctionBackend(simulator)) as server, SimiaClient(server.url) as api:
        episode = await api.create("mock")
        async with Client(episode.mcp_url) as client:
            first = await client.call_tool("get_item", {"name": "milk"})
            failed = await client.call_tool("get_item", {"name": "apple"})
            await client.call_tool("get_item", {"name": "rice"})
    assert not first.is_error
    assert failed.is_error and failed.meta and failed.meta["simia/error_kind"] == "infra"
    window = prompts[-1].split("Recent calls", 1)[1]
    assert "1. get_item" in window and '"milk"' in window  # the answered call is there
    assert '"apple"' not in window and "2. " not in window  # the failed one is not
