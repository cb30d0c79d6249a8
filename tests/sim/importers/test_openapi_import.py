"""OpenAPI descriptions as world data: the mapping rules, Swagger 2.0 conversions, and every kind of bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from simia.sim.errors import ImportSourceError
from simia.sim.importers import ImportedWorld, OperationFilter, ReportEntry, import_openapi, load_spec
from simia.sim.world import write_world

SHOP = """
openapi: 3.0.3
info: {title: Shop API, version: "2.1", description: A small shop.}
security: [{key: []}]
components:
  securitySchemes:
    key: {type: apiKey, in: header, name: X-Key}
    oauth: {type: oauth2, flows: {clientCredentials: {tokenUrl: "https://example.com/token", scopes: {write: w}}}}
  schemas:
    Item:
      type: object
      required: [id, name]
      properties:
        id: {type: string, readOnly: true}
        name: {type: string}
        note: {type: string, nullable: true}
        secret: {type: string, writeOnly: true}
        qty: {type: integer, minimum: 0, exclusiveMinimum: true, example: 3}
    Error: {type: object, properties: {message: {type: string}}}
  parameters:
    Limit: {name: limit, in: query, schema: {type: integer, maximum: 100}, description: Page size.}
paths:
  /items/{itemId}:
    parameters: [{name: itemId, in: path, required: true, schema: {type: string}}]
    get:
      operationId: getItem
      summary: Get an item
      description: Returns one item.
      tags: [items]
      parameters:
        - {name: X-Trace, in: header, schema: {type: string}}
        - {name: session, in: cookie, schema: {type: string}}
        - {name: Accept, in: header, schema: {type: string}}
      responses:
        200: {description: The item, content: {application/json: {schema: {$ref: "#/components/schemas/Item"}}}}
        404: {description: No such item, content: {application/json: {schema: {$ref: "#/components/schemas/Error"}}}}
        5XX: {description: Server trouble}
    delete:
      operationId: deleteItem
      security: [{oauth: [write]}]
      responses: {204: {description: Deleted}, 404: {description: No such item}}
  /items:
    get:
      tags: [items]
      parameters: [{$ref: "#/components/parameters/Limit"}]
      responses:
        200:
          description: All
          content: {application/json: {schema: {type: array, items: {$ref: "#/components/schemas/Item"}}}}
    post:
      operationId: create item!
      tags: [admin]
      requestBody: {required: true, content: {application/json: {schema: {$ref: "#/components/schemas/Item"}}}}
      responses:
        201: {description: Created, content: {application/json: {schema: {$ref: "#/components/schemas/Item"}}}}
        409: {description: An item with this name exists}
  /items/{itemId}/photo:
    put:
      operationId: uploadPhoto
      parameters: [{name: itemId, in: path, required: true, schema: {type: string}}]
      requestBody: {required: true, content: {image/png: {}}}
      responses: {204: {description: Stored}}
"""

ITEM_OUT = {
    "type": "object",
    "required": ["id", "name"],
    "properties": {
        "id": {"type": "string", "readOnly": True},
        "name": {"type": "string"},
        "note": {"type": ["string", "null"]},
        "qty": {"type": "integer", "exclusiveMinimum": 0, "examples": [3]},
    },
}
ITEM_IN = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "note": {"type": ["string", "null"]},
        "secret": {"type": "string", "writeOnly": True},
        "qty": {"type": "integer", "exclusiveMinimum": 0, "examples": [3]},
    },
}


def spec_file(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def imported(tmp_path: Path, text: str, **kwargs: Any) -> ImportedWorld:
    path = spec_file(tmp_path, text)
    return import_openapi(load_spec(path), base_uri=path.resolve().as_uri(), source="spec.yaml", **kwargs)


def by_name(world: ImportedWorld) -> dict[str, dict[str, Any]]:
    return {tool["name"]: tool for tool in world.tools}


def test_an_openapi_3_operation_maps_to_one_tool_by_the_rules(tmp_path: Path) -> None:
    world = imported(tmp_path, SHOP)
    assert [t["name"] for t in world.tools] == ["getItem", "deleteItem", "get_items", "create_item"]
    assert by_name(world)["getItem"] == {
        "name": "getItem",
        "title": "Get an item",
        "description": "Get an item\n\nReturns one item.",
        "inputSchema": {
            "type": "object",
            "properties": {"itemId": {"type": "string"}, "X-Trace": {"type": "string"}, "session": {"type": "string"}},
            "required": ["itemId"],
        },
        "outputSchema": ITEM_OUT,
        "annotations": {"readOnlyHint": True},
        "_meta": {"simia/openapi": {"method": "GET", "path": "/items/{itemId}", "operationId": "getItem"}},
        "errors": [
            {"code": "not_found", "when": "HTTP 404: No such item"},
            {"code": "server_error", "when": "HTTP 5XX: Server trouble"},
        ],
        "grounding": {"read": {"pointer": "/items/{itemId}", "missing": "not_found"}},
    }


def test_bodies_names_wrapped_outputs_and_hints_follow_the_rules(tmp_path: Path) -> None:
    tools = by_name(imported(tmp_path, SHOP))
    assert tools["create_item"]["inputSchema"] == {
        "type": "object",
        "properties": {"body": ITEM_IN},
        "required": ["body"],
    }
    assert tools["create_item"]["errors"] == [{"code": "conflict", "when": "HTTP 409: An item with this name exists"}]
    assert tools["get_items"]["inputSchema"] == {
        "type": "object",
        "properties": {"limit": {"type": "integer", "maximum": 100, "description": "Page size."}},
    }
    assert tools["get_items"]["outputSchema"] == {
        "type": "object",
        "properties": {"result": {"type": "array", "items": ITEM_OUT}},
        "required": ["result"],
    }
    assert tools["get_items"]["description"] == "The JSON response (a JSON array) is returned under `result`."
    assert tools["deleteItem"]["annotations"] == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": True,
    }
    assert "outputSchema" not in tools["deleteItem"]


def test_the_report_says_what_was_skipped_and_changed_and_the_policy_names_the_credentials(tmp_path: Path) -> None:
    world = imported(tmp_path, SHOP)
    assert world.report == [
        ReportEntry("changed", "POST /items", "operationId 'create item!' named 'create_item' (MCP names)"),
        ReportEntry(
            "changed", "GET /items", "outputSchema: the 200 response (a JSON array) wrapped as an object under 'result'"
        ),
        ReportEntry(
            "skipped",
            "PUT /items/{itemId}/photo",
            "the request body is image/png, not JSON nor a form (only JSON and form bodies are imported)",
        ),
        ReportEntry(
            "note",
            "GET /items",
            "no grounding proposed: its query parameters (limit) filter or page the list; declare the read by hand",
        ),
        ReportEntry(
            "note",
            "POST /items",
            "grounding proposed: the server makes the new id (id): simia draws 8 lowercase letters and digits, "
            "never one in use (its own scheme, not the server's)",
        ),
    ]
    assert (world.name, world.title, world.version, world.description) == (
        "shop-api",
        "Shop API",
        "2.1",
        "A small shop.",
    )
    assert world.policy.endswith(
        "## Authentication in the real API\n\n"
        "- key: an API key in the header `X-Key`\n"
        "- oauth: OAuth 2\n\n"
        "Required credentials (the simulated caller holds them; the real API refuses calls without):\n"
        "- getItem, get_items, create_item: key\n"
        "- deleteItem: oauth (write)"
    )


def test_an_imported_world_passes_the_loader(tmp_path: Path) -> None:
    world = imported(tmp_path, SHOP)
    loaded = write_world(tmp_path / "out", world.files())
    assert [t.name for t in loaded.tools] == ["getItem", "deleteItem", "get_items", "create_item"]
    assert loaded.tools[0].errors[0].code == "not_found" and "key" in loaded.policy


SWAGGER = """
swagger: "2.0"
info: {title: Legacy Pets, version: "1"}
consumes: [application/json]
produces: [application/json]
definitions:
  Pet: {type: object, properties: {name: {type: string}, tag: {type: string, x-nullable: true}}}
paths:
  /pets:
    get:
      operationId: listPets
      parameters:
        - {name: limit, in: query, type: integer, format: int32, minimum: 1, exclusiveMinimum: false}
        - {name: tags, in: query, type: array, items: {type: string}, collectionFormat: multi}
      responses:
        200: {description: ok, schema: {type: array, items: {$ref: "#/definitions/Pet"}}}
        default: {description: unexpected error}
    post:
      operationId: addPet
      parameters: [{name: pet, in: body, required: true, schema: {$ref: "#/definitions/Pet"}}]
      responses: {201: {description: created, schema: {$ref: "#/definitions/Pet"}}}
  /pets/{id}/photo:
    post:
      operationId: uploadPhoto
      consumes: [multipart/form-data]
      parameters:
        - {name: id, in: path, required: true, type: string}
        - {name: file, in: formData, type: file, required: true}
      responses: {200: {description: ok}}
"""
PET = {"type": "object", "properties": {"name": {"type": "string"}, "tag": {"type": ["string", "null"]}}}


def test_swagger_2_parameters_bodies_and_types_become_json_schema(tmp_path: Path) -> None:
    world = imported(tmp_path, SWAGGER)
    tools = by_name(world)
    assert tools["listPets"]["inputSchema"] == {
        "type": "object",
        "properties": {
            "limit": {"type": "integer", "format": "int32", "minimum": 1},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    }
    assert tools["listPets"]["outputSchema"]["properties"]["result"] == {"type": "array", "items": PET}
    assert tools["listPets"]["errors"] == [{"code": "unexpected_error", "when": "any other failure: unexpected error"}]
    assert tools["addPet"]["inputSchema"] == {"type": "object", "properties": {"pet": PET}, "required": ["pet"]}
    assert tools["addPet"]["outputSchema"] == PET
    assert (
        ReportEntry("skipped", "POST /pets/{id}/photo", "form field 'file' is a file upload, not JSON") in world.report
    )
    write_world(tmp_path / "out", world.files())


FORMS = """
openapi: 3.0.3
info: {title: Records, version: "1"}
paths:
  /{dataset}/records:
    post:
      operationId: searchRecords
      parameters: [{name: dataset, in: path, required: true, schema: {type: string}}]
      requestBody:
        required: true
        content:
          application/x-www-form-urlencoded:
            schema:
              type: object
              required: [criteria]
              properties:
                criteria: {type: string, description: A Lucene query.}
                start: {type: integer, default: 0}
      responses: {200: {description: ok, content: {application/json: {schema: {type: object}}}}}
  /notes:
    post:
      operationId: addNote
      requestBody:
        content:
          multipart/form-data:
            schema: {type: object, properties: {text: {type: string}, attachment: {type: string, format: binary}}}
      responses: {201: {description: created}}
"""
SWAGGER_FORMS = """
swagger: "2.0"
info: {title: Stars, version: "1"}
paths:
  /animal/search:
    post:
      operationId: searchAnimals
      consumes: [application/x-www-form-urlencoded]
      parameters:
        - {name: pageNumber, in: query, type: integer}
        - {name: name, in: formData, type: string, description: The animal's name.}
        - {name: earthAnimal, in: formData, type: boolean}
        - {name: photo, in: formData, type: file}
      responses: {200: {description: ok, schema: {type: object}}}
"""


def test_form_bodies_import_their_fields_as_the_body_argument_like_json_bodies(tmp_path: Path) -> None:
    """URL-encoded and multipart bodies (OpenAPI 3) and Swagger 2.0's formData fields were dropped, an operation
    with a required one skipped: a search lost every criterion. They import as `body`, an object of the fields,
    as a JSON body does, and the report and `_meta` say the real API takes them form-encoded."""
    world = imported(tmp_path, FORMS)
    tools = by_name(world)
    assert tools["searchRecords"]["inputSchema"] == {
        "type": "object",
        "properties": {
            "dataset": {"type": "string"},
            "body": {
                "type": "object",
                "required": ["criteria"],
                "properties": {
                    "criteria": {"type": "string", "description": "A Lucene query."},
                    "start": {"type": "integer", "default": 0},
                },
            },
        },
        "required": ["dataset", "body"],
    }
    assert tools["searchRecords"]["_meta"]["simia/openapi"]["requestBody"] == "application/x-www-form-urlencoded"
    assert tools["addNote"]["inputSchema"]["properties"]["body"]["properties"] == {
        "text": {"type": "string"},
        "attachment": {"type": "string", "format": "binary"},
    }
    assert "required" not in tools["addNote"]["inputSchema"]
    changed = [(e.item, e.reason) for e in world.report if e.kind == "changed"]
    assert changed == [
        (
            "POST /{dataset}/records",
            "the request body is application/x-www-form-urlencoded: imported as the 'body' argument, an object of "
            "its fields",
        ),
        (
            "POST /notes",
            "the request body is multipart/form-data: imported as the 'body' argument, an object of its fields",
        ),
    ]
    legacy = imported(tmp_path, SWAGGER_FORMS)
    [search] = legacy.tools
    assert search["inputSchema"] == {
        "type": "object",
        "properties": {
            "pageNumber": {"type": "integer"},
            "body": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The animal's name."},
                    "earthAnimal": {"type": "boolean"},
                },
            },
        },
    }
    assert [e.reason for e in legacy.report if e.kind == "changed"] == [
        "optional form field 'photo' (a file upload) left out",
        "the request body is application/x-www-form-urlencoded: imported as the 'body' argument, an object of its "
        "fields",
    ]
    write_world(tmp_path / "out", world.files())  # the imported world loads


def test_an_openapi_version_past_3_1_imports_with_a_note_that_it_is_beyond_the_documented_ones(tmp_path: Path) -> None:
    world = imported(tmp_path, SHOP.replace("openapi: 3.0.3", "openapi: 3.2.0"))
    assert world.report[0] == ReportEntry(
        "note",
        "version",
        "OpenAPI 3.2.0 is newer than the versions simia documents (Swagger 2.0, OpenAPI 3.0 and 3.1): read as 3.1, "
        "so what is new in it is not imported; check the tools",
    )
    assert [t["name"] for t in world.tools] == [t["name"] for t in imported(tmp_path, SHOP).tools]
    assert not any(e.item == "version" for e in imported(tmp_path, SHOP).report)


RECURSIVE = """
openapi: 3.1.0
info: {title: Trees, version: "1"}
paths:
  /tree:
    get:
      operationId: getTree
      responses: {"200": {description: ok, content: {application/json: {schema: {$ref: "#/components/schemas/Node"}}}}}
  /loop:
    get:
      operationId: getLoop
      responses: {"200": {description: ok, content: {application/json: {schema: {$ref: "#/components/schemas/A"}}}}}
components:
  schemas:
    Node:
      type: object
      properties:
        name: {type: string}
        children: {type: array, items: {$ref: "#/components/schemas/Node"}}
    A: {$ref: "#/components/schemas/B"}
    B: {$ref: "#/components/schemas/A"}
"""


def test_a_recursive_schema_is_cut_where_it_recurs_and_a_reference_cycle_skips_its_operation(tmp_path: Path) -> None:
    world = imported(tmp_path, RECURSIVE)
    cut = {
        "type": "object",
        "description": "A Node (recursive reference, not expanded again; its fields are not listed).",
    }
    assert by_name(world)["getTree"]["outputSchema"] == {
        "type": "object",
        "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": cut}},
    }
    assert [e for e in world.report if e.kind != "note"] == [
        ReportEntry("changed", "GET /tree", "schema 'Node' cut: recursive reference, not expanded again"),
        ReportEntry("skipped", "GET /loop", "reference cycle: $refs that only point to each other, never to a schema"),
    ]
    write_world(tmp_path / "out", world.files())


BROKEN_REF = """
openapi: 3.0.0
info: {title: Broken, version: "1"}
paths:
  /ok: {get: {operationId: ok, responses: {"204": {description: ok}}}}
  /broken:
    get:
      operationId: broken
      responses:
        "200": {description: ok, content: {application/json: {schema: {$ref: "#/components/schemas/Missing"}}}}
  /local:
    get:
      operationId: local
      responses: {"200": {description: ok, content: {application/json: {schema: {$ref: "parts.yaml#/Thing"}}}}}
"""


def test_a_broken_reference_skips_its_operation_and_a_file_in_the_description_folder_is_followed(
    tmp_path: Path,
) -> None:
    spec_file(tmp_path, "Thing: {type: object, properties: {n: {type: integer}}}\n", "parts.yaml")
    world = imported(tmp_path, BROKEN_REF)
    assert [t["name"] for t in world.tools] == ["ok", "local"]
    assert by_name(world)["local"]["outputSchema"] == {"type": "object", "properties": {"n": {"type": "integer"}}}
    skipped = {e.item: e.reason for e in world.skipped()}
    assert skipped == {
        "GET /broken": "broken $ref: '#/components/schemas/Missing': it points to nothing",
    }


def test_nothing_importable_is_an_error_naming_the_first_reason(tmp_path: Path) -> None:
    text = BROKEN_REF.replace('  /ok: {get: {operationId: ok, responses: {"204": {description: ok}}}}\n', "")
    text = text.split("  /local:")[0]
    with pytest.raises(ImportSourceError) as raised:
        imported(tmp_path, text)
    assert str(raised.value) == (
        "no operation of spec.yaml could be imported (1 skipped; first: GET /broken: "
        "broken $ref: '#/components/schemas/Missing': it points to nothing)"
    )


def test_duplicate_operation_ids_are_made_unique_and_reported(tmp_path: Path) -> None:
    text = """
openapi: 3.0.0
info: {title: Dups, version: "1"}
paths:
  /a: {get: {operationId: getThing, responses: {"204": {description: ok}}}}
  /b: {get: {operationId: getThing, responses: {"204": {description: ok}}}}
"""
    world = imported(tmp_path, text)
    assert [t["name"] for t in world.tools] == ["getThing", "getThing_2"]
    assert (
        ReportEntry("changed", "GET /b", "duplicate operationId 'getThing' (also GET /a): named 'getThing_2'")
        in world.report
    )
    assert any(e.kind == "note" and "getThing" in e.reason for e in world.report)  # the validator's own finding


def test_filters_pick_operations_by_tag_path_and_operation(tmp_path: Path) -> None:
    def names(select: OperationFilter) -> list[str]:
        return [t["name"] for t in imported(tmp_path, SHOP, select=select).tools]

    assert names(OperationFilter(tags=["items"])) == ["getItem", "get_items"]
    assert names(OperationFilter(paths=["/items/*"])) == ["getItem", "deleteItem"]
    assert names(OperationFilter(operations=["deleteItem", "create_item"])) == ["deleteItem", "create_item"]
    assert names(OperationFilter(tags=["items"], paths=["/items"])) == ["get_items"]
    with pytest.raises(ImportSourceError, match=r"matches --tag/--path/--operation \(tags in it: admin, items\)"):
        imported(tmp_path, SHOP, select=OperationFilter(tags=["nope"]))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("title: not an API\n", "spec.yaml is not an OpenAPI description: no 'openapi' or 'swagger' field at the top"),
        ("openapi: 4.0.0\ninfo: {title: x}\n", "unsupported version (openapi: 4.0.0)"),
        ("swagger: '1.2'\n", "unsupported version (swagger: 1.2)"),
        ("- a list\n", "holds a list, not an OpenAPI description"),
        ("openapi: 3.0.0\npaths: {a: [b\n", "is not YAML or JSON"),
        ("openapi: 3.0.0\ninfo: {title: x, version: '1'}\npaths: {}\n", "has no operations under 'paths'"),
    ],
)
def test_a_file_that_is_not_an_openapi_description_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ImportSourceError) as raised:
        imported(tmp_path, text)
    assert message in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.slow  # the alias bomb is walked to its 5,000,000-value limit (seconds)
def test_too_large_non_utf8_and_alias_bomb_files_are_refused_before_any_work(tmp_path: Path) -> None:
    big = spec_file(tmp_path, "x" * 2_000_000, "big.yaml")
    with pytest.raises(ImportSourceError, match=r"big.yaml is 1.9 MB, over the 1 MB limit; pass --max-size-mb 2"):
        load_spec(big, max_bytes=1024 * 1024)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("openapi: 3.0.0\ninfo: {title: Caf\xe9}\n".encode("latin-1"))
    with pytest.raises(ImportSourceError, match=r"is not UTF-8 text \(byte 32\)"):
        load_spec(latin)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    with pytest.raises(ImportSourceError, match="expands to more than 5000000 values"):
        load_spec(spec_file(tmp_path, bomb, "bomb.yaml"))


def test_a_10_mb_description_imports_within_the_default_limit(tmp_path: Path) -> None:
    long = "Documented at length. " * 1500
    paths = {
        f"/things{i}/{{id}}": {
            "get": {
                "operationId": f"getThing{i}",
                "description": long,
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {
                    "200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}
                },
            }
        }
        for i in range(320)
    }
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"openapi": "3.0.3", "info": {"title": "Big", "version": "1"}, "paths": paths}))
    assert path.stat().st_size > 10_000_000
    world = import_openapi(load_spec(path), source="big.json")
    assert len(world.tools) == 320
    assert world.report == [
        ReportEntry("note", "validation", "not checked with openapi-spec-validator: 10.1 MB is over 4 MB")
    ]


def test_a_path_parameter_keeps_its_pointer_when_a_query_parameter_or_the_body_share_its_name(tmp_path: Path) -> None:
    text = """
openapi: 3.1.0
info: {title: Params, version: "1"}
paths:
  /q/{a}:
    get:
      operationId: q
      parameters:
        - {name: a, in: query, schema: {type: integer}}
        - {name: a, in: path, required: true, schema: {type: string}}
        - {name: body, in: query, schema: {type: string}}
      requestBody: {content: {application/json: {schema: {type: object}}}}
      responses: {"200": {description: ok}}
"""
    world = imported(tmp_path, text)
    [tool] = world.tools
    assert set(tool["inputSchema"]["properties"]) == {"a", "path_a", "body", "body_2"}
    assert tool["grounding"]["read"]["pointer"] == "/q/{path_a}"  # the path parameter, not the query one
    assert ReportEntry("changed", "GET /q/{a}", "path parameter 'a' is 'path_a' (the name is also used elsewhere)") in (
        world.report
    )
    assert ReportEntry("changed", "GET /q/{a}", "the request body is 'body_2' (a parameter is named 'body')") in (
        world.report
    )


def test_a_results_oneof_is_read_as_anyof_and_reported_while_an_argument_keeps_its_oneof(tmp_path: Path) -> None:
    text = """
openapi: 3.1.0
info: {title: Reviews, version: "1"}
paths:
  /reviews:
    post:
      operationId: review
      requestBody:
        required: true
        content:
          application/json:
            schema: {oneOf: [{type: object, required: [stars]}, {type: object, required: [text]}]}
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema:
                oneOf:
                  - {type: object, properties: {stars: {type: integer}}}
                  - {type: object, properties: {deleted: {type: boolean}}, required: [deleted]}
"""
    world = imported(tmp_path, text)
    [tool] = world.tools
    assert "anyOf" in tool["outputSchema"] and "oneOf" not in tool["outputSchema"]
    assert "oneOf" in tool["inputSchema"]["properties"]["body"]
    assert (
        ReportEntry(
            "changed", "POST /reviews", "the result's oneOf read as anyOf (1x): an answer may fit more than one branch"
        )
        in world.report
    )


YAML_12 = """
openapi: 3.1.0
info: {title: Nordic shop, version: "1"}
paths:
  /ship:
    get:
      operationId: ship
      parameters:
        - {name: country, in: query, required: true, schema: {type: string, enum: [NO, SE, DK]}}
        - {name: on, in: query, schema: {type: string, enum: [yes, no]}}
        - {name: code, in: query, schema: {type: integer, enum: [012, 0x1F]}}
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema: {type: object, properties: {on: {type: boolean}, off: {type: string, default: off}}}
"""


def test_a_yaml_description_is_read_by_yaml_12s_core_schema_as_openapi_3_requires(tmp_path: Path) -> None:
    """YAML 1.1 (PyYAML's) reads NO, yes, on and off as booleans and 012 as octal: Norway's code became false,
    a parameter named `on` a boolean key, and an enum of yes/no one that no string satisfies."""
    tool = by_name(imported(tmp_path, YAML_12))["ship"]
    assert tool["inputSchema"]["properties"] == {
        "country": {"type": "string", "enum": ["NO", "SE", "DK"]},
        "on": {"type": "string", "enum": ["yes", "no"]},
        "code": {"type": "integer", "enum": [12, 31]},
    }
    assert tool["outputSchema"]["properties"] == {
        "on": {"type": "boolean"},
        "off": {"type": "string", "default": "off"},
    }
