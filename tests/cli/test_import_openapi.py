"""`simia import openapi` on real API descriptions: worlds that validate and are served with the same schemas;
bad input is one line, exit 2, and no folder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from simia.cli import main

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "tests" / "fixtures" / "openapi"


async def served_tools(url: str) -> list[dict[str, Any]]:
    """Every tool a world URL advertises, as MCP's wire dicts (all pages)."""
    tools: list[dict[str, Any]] = []
    async with Client(url) as client:
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools += [tool.model_dump(by_alias=True, exclude_none=True) for tool in page.tools]
            cursor = page.next_cursor
            if cursor is None:
                return tools


def imported_tools(folder: Path) -> list[dict[str, Any]]:
    """tools.json as MCP sends it (simia's own `errors` and `grounding` fields are not on the wire)."""
    return [
        {k: v for k, v in tool.items() if k not in {"errors", "grounding"}}
        for tool in json.loads((folder / "tools.json").read_text())
    ]


@pytest.mark.parametrize(
    ("spec", "name", "tools", "skipped"),
    [
        pytest.param(  # Docker's 14,000-line description: seconds
            "docker-engine-swagger-2.0.yaml",
            "docker-engine-api",
            107,
            ["PUT /containers/{id}/archive"],
            marks=pytest.mark.slow,
        ),
        ("petstore-openapi-3.0.yaml", "swagger-petstore-openapi-3.0", 19, []),
        ("museum-openapi-3.1.yaml", "redocly-museum-api", 8, ["webhooks"]),
    ],
)
async def test_a_real_description_becomes_a_world_that_validates_and_is_served_with_the_same_schemas(
    spec: str,
    name: str,
    tools: int,
    skipped: list[str],
    tmp_path: Path,
    make_server: Callable[..., Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "worlds" / name
    assert main(["import", "openapi", str(SPECS / spec), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"wrote {out}: world {name!r}, {tools} tool(s)")
    report = json.loads((out / "import_report.json").read_text())
    assert [e["item"] for e in report["report"] if e["kind"] == "skipped"] == skipped
    assert main(["validate", str(out)]) == 0
    async with make_server(worlds_dir=tmp_path / "worlds") as running:
        assert await served_tools(f"{running.url}/worlds/{name}/mcp") == imported_tools(out)
    assert len(imported_tools(out)) == tools


def test_filters_and_name_pick_what_is_imported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = str(SPECS / "petstore-openapi-3.0.yaml")
    assert main(["import", "openapi", spec, "--tag", "store", "--name", "store", "--out", str(tmp_path / "s")]) == 0
    assert [t["name"] for t in imported_tools(tmp_path / "s")] == [
        "getInventory",
        "placeOrder",
        "getOrderById",
        "deleteOrder",
    ]
    args = ["--path", "/pet/{petId}", "--operation", "getPetById", "--out", str(tmp_path / "p")]
    assert main(["import", "openapi", spec, *args]) == 0
    assert [t["name"] for t in imported_tools(tmp_path / "p")] == ["getPetById"]
    assert "world 'store', 4 tool(s)" in capsys.readouterr().out


def test_the_default_folder_is_tool_specs_name_and_is_never_overwritten_without_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = str(SPECS / "museum-openapi-3.1.yaml")
    assert main(["import", "openapi", spec]) == 0
    world = tmp_path / "tool_specs" / "redocly-museum-api"
    (world / "tasks.jsonl").write_text('{"id": "t1", "instruction": "Buy a ticket."}\n')
    capsys.readouterr()
    assert main(["import", "openapi", spec]) == 2
    assert capsys.readouterr().err == (
        "error: 'tool_specs/redocly-museum-api' already exists; pass --force to replace it, or --out another folder\n"
    )
    assert (world / "tasks.jsonl").exists()
    assert main(["import", "openapi", spec, "--force"]) == 0
    assert not (world / "tasks.jsonl").exists()


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


CYCLE = """openapi: 3.0.0
info: {title: Loop, version: "1"}
paths:
  /a:
    get:
      responses: {"200": {description: ok, content: {application/json: {schema: {$ref: "#/components/schemas/A"}}}}}
components: {schemas: {A: {$ref: "#/components/schemas/B"}, B: {$ref: "#/components/schemas/A"}}}
"""
BROKEN = CYCLE.replace('{$ref: "#/components/schemas/A"}}}}}', '{$ref: "#/components/schemas/Gone"}}}}}')
XML_ONLY = """swagger: "2.0"
info: {title: Xml, version: "1"}
paths:
  /upload:
    post:
      consumes: [application/xml]
      parameters: [{name: doc, in: body, required: true, schema: {type: object}}]
      responses: {"200": {description: ok}}
"""


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("missing.yaml", "error: no file at"),
        (
            ("notes.yaml", "title: my notes\nitems: [1, 2]\n"),
            "is not an OpenAPI description: no 'openapi' or 'swagger'",
        ),
        (("cycle.yaml", CYCLE), "could be imported (1 skipped; first: GET /a: reference cycle"),
        (("broken.yaml", BROKEN), "first: GET /a: broken $ref: '#/components/schemas/Gone': it points to nothing)"),
        (("xml.yaml", XML_ONLY), "first: POST /upload: the request body is application/xml, not JSON"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    spec: str | tuple[str, str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / spec if isinstance(spec, str) else write(tmp_path, *spec)
    out = tmp_path / "worlds" / "w"
    assert main(["import", "openapi", str(path), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and message in captured.err
    assert not (tmp_path / "worlds").exists()


@pytest.mark.parametrize("levels", [300, 5_000])
def test_a_description_nested_hundreds_of_levels_deep_is_one_line_naming_where(
    levels: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = '{"type": "object", "properties": {"a": ' * levels + '{"type": "string"}' + "}}" * levels
    body = f'{{"content": {{"application/json": {{"schema": {schema}}}}}}}'
    operation = f'{{"operationId": "x", "requestBody": {body}, "responses": {{"200": {{"description": "ok"}}}}}}'
    text = (
        f'{{"openapi": "3.0.0", "info": {{"title": "t", "version": "1"}}, "paths": {{"/x": {{"post": {operation}}}}}}}'
    )
    deep = write(tmp_path, "deep.json", text)
    assert main(["import", "openapi", str(deep), "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is nested deeper than 128 levels" in err
    assert not (tmp_path / "w").exists()


def test_a_description_over_the_size_limit_names_the_flag_that_raises_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = write(tmp_path, "big.json", json.dumps({"openapi": "3.0.0", "x-padding": "x" * 10_500_000}))
    assert main(["import", "openapi", str(big), "--max-size-mb", "8", "--out", str(tmp_path / "w")]) == 2
    assert capsys.readouterr().err.endswith(
        "big.json is 10.0 MB, over the 8 MB limit; pass --max-size-mb 11 to read it anyway\n"
    )
    assert not (tmp_path / "w").exists()


def test_duplicate_operation_ids_and_non_json_bodies_are_report_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write(
        tmp_path,
        "dups.yaml",
        XML_ONLY.replace(
            "  /upload:",
            "  /a: {get: {operationId: same, responses: {'204': {description: ok}}}}\n"
            "  /b: {get: {operationId: same, responses: {'204': {description: ok}}}}\n  /upload:",
        ),
    )
    assert main(["import", "openapi", str(spec), "--out", str(tmp_path / "w")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"wrote {tmp_path / 'w'}: world 'w', 2 tool(s) (1 skipped, 1 changed, 1 note)"
    assert out[1:4] == [
        "  skipped  POST /upload: the request body is application/xml, not JSON nor a form (only JSON and form bodies "
        "are imported)",
        "  changed  GET /b: duplicate operationId 'same' (also GET /a): named 'same_2'",
        "  note     validation: Operation ID 'same' for 'get' in '/b' is not unique",
    ]
