"""Responses composed with allOf / oneOf import as object outputSchemas, and the description's own response
examples are checked against them (a realistic OpenAPI 3.1 description, written for these tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simia.sim.importers import ImportedWorld, ReportEntry, import_openapi, load_spec
from simia.sim.schema import validate_instance
from simia.sim.world import write_world

LIBRARY = Path(__file__).with_name("library_lending_openapi_3_1.yaml")
ID = {"type": "string", "readOnly": True, "description": "The record's id, unique in its collection."}
BOOK = {
    "type": "object",
    "description": "A book of the catalogue.",
    "properties": {
        "id": ID,
        "title": {"type": "string", "minLength": 1},
        "author": {"type": "string"},
        "year": {"type": "integer", "minimum": 1450},
        "tags": {"type": "array", "items": {"type": "string"}},
        "available": {"type": "boolean", "default": True},
    },
    "required": ["id", "title", "author"],
}
NEXT = {"type": ["string", "null"], "description": "Where the next page starts (null on the last page)."}


def library() -> ImportedWorld:
    return import_openapi(load_spec(LIBRARY), base_uri=LIBRARY.resolve().as_uri(), source="library.yaml")


def outputs(world: ImportedWorld) -> dict[str, Any]:
    return {tool["name"]: tool.get("outputSchema") for tool in world.tools}


def test_every_allof_response_of_a_real_3_1_description_is_one_merged_object() -> None:
    found = outputs(library())
    assert found["getBook"] == BOOK and found["createBook"] == BOOK and found["replaceBook"] == BOOK
    assert found["listBooks"] == {
        "type": "object",
        "properties": {"next_cursor": NEXT, "books": {"type": "array", "items": BOOK}},
        "required": ["books"],
    }
    assert found["getMember"] == {
        "type": "object",
        "properties": {
            "id": ID,
            "created_at": {"type": "string", "format": "date-time", "readOnly": True},
            "name": {"type": "string"},
            "email": {"type": "string", "format": "email"},
        },
        "required": ["id", "name", "email"],
    }
    assert found["borrowBook"]["properties"]["status"] == {  # a field two parts narrow: both must hold
        "allOf": [{"type": "string", "enum": ["active", "returned"]}, {"const": "active"}]
    }
    # oneOf of two objects, read as anyOf in a result (an answer that fits both branches stays answerable)
    assert found["getLoan"]["type"] == "object" and len(found["getLoan"]["anyOf"]) == 2
    assert not any("result" in (schema or {}).get("properties", {}) for schema in found.values())


def test_the_descriptions_own_examples_validate_against_every_imported_output_schema(tmp_path: Path) -> None:
    world = library()
    assert [e for e in world.report if "example" in e.reason] == []
    spec = load_spec(LIBRARY)
    examples = [
        (operation["operationId"], media["example"] if "example" in media else example["value"])
        for item in spec["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "responses" in operation
        for status, response in operation["responses"].items()
        if status.startswith("2") and "content" in response
        for media in [response["content"]["application/json"]]
        for example in ([media] if "example" in media else media.get("examples", {}).values())
    ]
    assert len(examples) == 9
    schemas = outputs(world)
    assert {name: validate_instance(schemas[name], value) for name, value in examples} == {
        name: [] for name, _ in examples
    }
    loaded = write_world(tmp_path / "library", world.files())  # and the loader takes every schema
    assert len(loaded.tools) == len(world.tools) == 11


def test_an_example_the_schema_refuses_is_reported_with_its_name(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("""
openapi: 3.1.0
info: {title: Clocks, version: "1"}
paths:
  /time:
    get:
      operationId: now
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema:
                allOf:
                  - {type: object, required: [iso], properties: {iso: {type: string}}}
                  - {type: object, properties: {zone: {type: string}}}
              examples:
                good: {value: {iso: "2025-01-01T00:00:00Z", zone: UTC}}
                stale: {value: {zone: UTC}}
""")
    world = import_openapi(load_spec(spec), base_uri=spec.resolve().as_uri(), source="spec.yaml")
    assert world.tools[0]["outputSchema"] == {
        "type": "object",
        "properties": {"iso": {"type": "string"}, "zone": {"type": "string"}},
        "required": ["iso"],
    }
    assert [e for e in world.report if "example" in e.reason] == [
        ReportEntry(
            "note",
            "GET /time",
            "response example (200 example 'stale') does not validate against the outputSchema: "
            + validate_instance(world.tools[0]["outputSchema"], {"zone": "UTC"})[0],
        )
    ]


def test_an_allof_whose_merge_would_change_its_meaning_stays_composed_under_an_object_root(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("""
openapi: 3.1.0
info: {title: Strict, version: "1"}
paths:
  /x:
    get:
      operationId: getX
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema:
                allOf:
                  - {type: object, properties: {a: {type: string}}, additionalProperties: false}
                  - {type: object, properties: {b: {type: string}}}
""")
    world = import_openapi(load_spec(spec), base_uri=spec.resolve().as_uri(), source="spec.yaml")
    assert world.tools[0]["outputSchema"] == {
        "type": "object",
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
            {"type": "object", "properties": {"b": {"type": "string"}}},
        ],
    }
