"""The embedded model for real: SmolLM2-135M-Instruct through llama-cpp-python (select with -m local_model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from simia.sim import load_world
from simia.sim.backends import CompletionRequest, resolve_backend
from simia.sim.loader import validate_instance
from simia.sim.prompts import answer_schema
from simia.sim.simulator import Simulator, ToolCall

pytestmark = pytest.mark.local_model
ROOT = Path(__file__).resolve().parents[2]


async def test_the_embedded_model_answers_within_the_schema_and_simulates_a_mock_call() -> None:
    pytest.importorskip("llama_cpp", reason="needs the `local` extra: pip install 'simia[local]'")
    world = load_world(ROOT / "tool_specs" / "mock")
    backend = resolve_backend("local")
    assert backend.spec == "local" and backend.model == "SmolLM2-135M-Instruct"
    sim = Simulator(backend, max_tokens=512)
    call = ToolCall("list_items", {})
    schema = answer_schema(world.tools[0])
    request = CompletionRequest(
        sim.build_messages(world, world.initial_state, [], call), schema, max_tokens=512, seed=1
    )
    completion = await backend.complete(request)
    assert validate_instance(schema, completion.data) == []  # constrained decoding: always schema-valid
    assert completion.usage.prompt_tokens > 100 and completion.usage.completion_tokens > 0

    step = await sim.step(world, world.initial_state, [], call, seed=1)
    assert step.error_kind != "infra", step.detail
    if not step.is_error:
        assert validate_instance(world.tools[0].output_schema or {}, step.output) == []
    assert step.state == world.initial_state  # list_items is read-only
