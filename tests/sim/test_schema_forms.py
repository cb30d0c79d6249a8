"""Each backend sends the form of the answer schema its API reads: OpenAI's API and Anthropic's an object at
the root, OpenAI-compatible servers the exact schema (a root anyOf), over real HTTP to the fake provider."""

from __future__ import annotations

from pathlib import Path

from simia.sim import load_world
from simia.sim.backends import CompletionRequest, RetryPolicy, resolve_backend
from simia.sim.backends._schema_forms import object_rooted
from simia.sim.engine import answer_schema
from simia.testing import FakeProvider

ROOT = Path(__file__).resolve().parents[2]
WORLD = load_world(ROOT / "tool_specs" / "retail")
SCHEMA = answer_schema(WORLD, WORLD.tools[0])
ANSWER = {"is_error": True, "error_code": "not_found", "message": "no", "output": None, "state_patch": []}
REQUEST = CompletionRequest([{"role": "user", "content": "find"}], SCHEMA, schema_name="simulate_tool_call")
KEYS = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test"}


async def test_each_backend_sends_the_schema_form_its_api_reads() -> None:
    async with FakeProvider(ANSWER).running() as fake:
        sent = {}
        for spec, url in (
            ("openai:gpt-4.1-mini", fake.base_url),
            ("openai-compatible:m", fake.base_url),
            ("anthropic:claude-sonnet-4-5", fake.anthropic_url),
        ):
            backend = resolve_backend(spec, base_url=url, env=KEYS, retry=RetryPolicy(max_attempts=1))
            assert (await backend.complete(REQUEST)).data == ANSWER
            await backend.aclose()
            body = fake.requests[-1]
            sent[spec] = (
                body["tools"][0]["input_schema"]
                if "tools" in body
                else body["response_format"]["json_schema"]["schema"]
            )
    assert sent == {
        "openai:gpt-4.1-mini": object_rooted(SCHEMA),
        "openai-compatible:m": SCHEMA,
        "anthropic:claude-sonnet-4-5": object_rooted(SCHEMA),
    }
    assert "anyOf" in SCHEMA and object_rooted(SCHEMA)["type"] == "object"


def test_additional_properties_false_without_properties_names_the_unexpected_members() -> None:
    """jsonschema-rs says only "False schema does not allow 1" there; an agent must learn which argument to drop."""
    from simia.sim.schema import validate_instance

    closed = {"type": "object", "additionalProperties": False}
    assert validate_instance(closed, {"x": 1, "y": "a"}) == [
        "$: Additional properties are not allowed ('x', 'y' were unexpected)"
    ]
    nested = {"type": "object", "properties": {"a": {**closed, "patternProperties": {"^p": {}}}}}
    assert validate_instance(nested, {"a": {"x": 1, "p1": 2}}) == [
        "$.a: Additional properties are not allowed ('x' was unexpected)"
    ]
    assert validate_instance({"type": "array", "items": False}, [1]) == ["$[0]: False schema does not allow 1"]
