"""Older JSON Schema drafts become 2020-12 schemas that accept and refuse the same instances."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft4Validator, Draft7Validator, Draft202012Validator
from simia.sim.importers import upgrade_schema

DRAFT_04 = {
    "$schema": "http://json-schema.org/draft-04/schema#",
    "type": "object",
    "required": ["qty"],
    "properties": {
        "qty": {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 10, "exclusiveMaximum": False},
        "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": False},
        "card": {"$ref": "#/definitions/card"},
    },
    "dependencies": {"card": ["holder"], "holder": {"required": ["card"]}},
    "definitions": {"card": {"type": "string", "pattern": "^[0-9]{4}$"}},
}

INSTANCES: list[dict[str, Any]] = [
    {"qty": 1},
    {"qty": 0},
    {"qty": 10},
    {"qty": 11},
    {"qty": 1, "pair": ["a", 1]},
    {"qty": 1, "pair": ["a", 1, "extra"]},
    {"qty": 1, "pair": [1, "a"]},
    {"qty": 1, "card": "1234", "holder": "Ann"},
    {"qty": 1, "card": "1234"},
    {"qty": 1, "holder": "Ann"},
    {"qty": 1, "card": "12", "holder": "Ann"},
]


def test_a_draft_04_schema_becomes_2020_12_and_judges_every_instance_the_same() -> None:
    upgraded, changes = upgrade_schema(DRAFT_04)
    Draft202012Validator.check_schema(upgraded)
    old, new = Draft4Validator(DRAFT_04), Draft202012Validator(upgraded)
    assert [new.is_valid(i) for i in INSTANCES] == [old.is_valid(i) for i in INSTANCES]
    assert [old.is_valid(i) for i in INSTANCES] == [
        True,
        False,
        True,
        False,
        True,
        False,
        False,
        True,
        False,
        False,
        False,
    ]
    assert upgraded["properties"]["qty"] == {"type": "integer", "exclusiveMinimum": 0, "maximum": 10}
    assert upgraded["properties"]["pair"] == {
        "type": "array",
        "prefixItems": [{"type": "string"}, {"type": "integer"}],
        "items": False,
    }
    assert upgraded["dependentRequired"] == {"card": ["holder"]}
    assert "$schema" not in upgraded and upgraded["definitions"] == DRAFT_04["definitions"]
    assert changes == [
        "array-form items turned into prefixItems",
        "boolean exclusiveMaximum turned into the 2020-12 number form",
        "boolean exclusiveMinimum turned into the 2020-12 number form",
        "dependencies split into dependentRequired and dependentSchemas",
        "draft-04 $schema removed (upgraded to 2020-12)",
    ]


def test_a_draft_07_schema_only_loses_its_dialect_line() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"a": {"type": "number"}},
    }
    upgraded, changes = upgrade_schema(schema)
    Draft7Validator.check_schema(schema)
    assert upgraded == {"type": "object", "properties": {"a": {"type": "number"}}}
    assert changes == ["draft-07 $schema removed (upgraded to 2020-12)"]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "array", "prefixItems": [{"type": "string"}]}}},
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"x": {"type": "string"}},
        },
    ],
)
def test_a_2020_12_schema_is_kept_as_written(schema: dict[str, Any]) -> None:
    assert upgrade_schema(schema) == (schema, [])


def test_a_pattern_python_cannot_compile_is_removed_so_the_metaschema_check_passes() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "pattern": "^\\p{L}+$"}}}
    upgraded, changes = upgrade_schema(schema)
    assert upgraded == {"type": "object", "properties": {"name": {"type": "string"}}}
    assert changes == ["pattern '^\\\\p{L}+$' removed (not a regular expression Python can compile)"]
    Draft202012Validator.check_schema(upgraded)
