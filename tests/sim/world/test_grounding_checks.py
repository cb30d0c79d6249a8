"""A tool's grounding is checked when its world loads: each bad declaration is a `simia validate` problem that
names the tool, the field and the fix (and the world does not load); a good one loads."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from simia.cli import main
from simia.sim.errors import WorldIssue
from simia.sim.world import fill_jsonpath, fill_pointer, fill_value, load_worlds

ROOT = Path(__file__).resolve().parents[3]
GOOD = {  # get_item answered from the state (its output needs `name`, which the record lacks: a guided read)
    "preconditions": [{"pointer": "/items/{name}", "exists": True, "error": "item_not_found"}],
    "read": {"pointer": "/items/{name}/qty", "key": "qty", "missing": "item_not_found"},
    "mode": "guided",
}


def world_with(tmp_path: Path, tool: str, grounding: dict[str, Any], **extra: Any) -> Path:
    """A copy of the mock world whose `tool` has this grounding (and the other `extra` fields)."""
    folder = tmp_path / "pantry"
    shutil.copytree(ROOT / "tool_specs" / "mock", folder)
    world = yaml.safe_load((folder / "world.yaml").read_text())
    spec = next(t for t in world["tools"] if t["name"] == tool)
    spec.update(grounding=grounding, **extra)
    (folder / "world.yaml").write_text(yaml.safe_dump(world, sort_keys=False))
    return folder


def issues(folder: Path) -> list[WorldIssue]:
    report = load_worlds([folder])
    assert not report.worlds
    (error,) = report.errors
    return error.issues


def test_a_good_declaration_loads(tmp_path: Path) -> None:
    world = load_worlds([world_with(tmp_path, "get_item", GOOD)]).get("mock")
    assert world.tool("get_item").grounding is not None  # type: ignore[union-attr]
    assert "grounding" not in world.tool("get_item").mcp_dict()  # type: ignore[union-attr]


WORLD = "world.yaml"
CASES = [
    ("get_item", {"read": {"pointer": "/itemz/{name}", "key": "item"}}, "$.tools[1].grounding.read.pointer",
     "tool 'get_item': /itemz (the fixed part of /itemz/{name}) does not resolve on the initial state",
     "name a part of state.json (or of a task's initial_state_patch), e.g. /orders/{order_id}"),
    ("get_item", {"read": {"pointer": "/items/{nam}", "key": "item"}}, "$.tools[1].grounding.read.pointer",
     "tool 'get_item': {nam} names no argument of the tool's inputSchema", "did you mean {name}?"),
    ("get_item", {"read": {"pointer": "/items/{name}", "key": "item", "missing": "gone"}},
     "$.tools[1].grounding.read.missing", "tool 'get_item': error code 'gone' is not one the tool may return",
     "add {code: gone, when: ...} to the tool's errors, or use one of: item_not_found, not_found, invalid_argument, "
     "conflict, permission_denied, rate_limited"),
    ("list_items", {"read": {"jsonpath": "$.items[?@.qty >]", "key": "items"}}, "$.tools[0].grounding.read.jsonpath",
     None, "write an RFC 9535 query, e.g. $.products[?@.category == {category}]"),
    ("list_items", {"read": {"jsonpath": "$.items.*"}}, "$.tools[0].grounding.read",
     "tool 'list_items': a jsonpath read gives a list of the matches, not an object",
     "add read.key: the output's field"),
    ("get_item", {"preconditions": [{"pointer": "/items/{name}", "exists": True, "equals": 1, "error": "not_found"}]},
     "$.tools[1].grounding.preconditions[0]",
     "tool 'get_item': Value error, a precondition needs exactly one of exists, equals, schema or expr", None),
    ("get_item", {"preconditions": [{"pointer": "/items/{name}", "error": "not_found"}]},
     "$.tools[1].grounding.preconditions[0]",
     "tool 'get_item': Value error, a precondition needs exactly one of exists, equals, schema or expr", None),
    ("get_item", {"preconditions": [{"pointer": "/items/{name}", "schema": {"type": 5}, "error": "not_found"}]},
     "$.tools[1].grounding.preconditions[0].schema.type", None, "see https://json-schema.org/draft/2020-12"),
    ("set_quantity", {"effects": [{"op": "add", "path": "/items/{name}/qty"}]}, "$.tools[2].grounding.effects[0]",
     "tool 'set_quantity': Value error, a 'add' effect needs a 'value'", None),
    ("set_quantity", {"effects": [{"op": "remove", "path": "/items/{name}", "value": 1}]},
     "$.tools[2].grounding.effects[0]", "tool 'set_quantity': Value error, a 'remove' effect takes no 'value'", None),
    ("set_quantity", {"effects": [{"op": "swap", "path": "/items/{name}"}]}, "$.tools[2].grounding.effects[0].op",
     None, None),
    ("set_quantity", {"effects": [{"op": "replace", "path": "items/{name}/qty", "value": "{qty}"}]},
     "$.tools[2].grounding.effects[0].path", "tool 'set_quantity': 'items/{name}/qty' is not a JSON Pointer",
     "start it with '/', e.g. /orders/{order_id}"),
    ("get_item", {"effects": [{"op": "remove", "path": "/items/{name}"}]}, "$.tools[1].grounding.effects",
     "tool 'get_item': is read-only (annotations.readOnlyHint) but declares effects",
     "remove grounding.effects, or set readOnlyHint: false if the tool changes the state"),
    ("set_quantity", {"effects": [{"op": "replace", "path": "/items/{name}/qty", "value": "{quantity}"}]},
     "$.tools[2].grounding.effects[0].value", "tool 'set_quantity': {quantity} names no argument of the tool's "
     "inputSchema", "its arguments: name, qty"),
    ("set_quantity", {"effects": [{"op": "replace", "path": "/items/{name}/qty", "value": 1}], "mode": "exact"},
     "$.tools[2].grounding",
     "tool 'set_quantity': Value error, mode exact needs a read (a tool with effects only is always guided)", None),
    ("list_items", {"read": {"jsonpath": "$.items.*", "key": "items", "fields": ["qty", "qty"]}},
     "$.tools[0].grounding.read", "tool 'list_items': Value error, read.fields names a member twice; name each once",
     None),
    ("get_item", {"reed": {"pointer": "/items/{name}"}}, "$.tools[1].grounding.reed",
     "tool 'get_item': unknown field 'reed'", "did you mean 'read'?"),
]  # fmt: skip


@pytest.mark.parametrize(("tool", "grounding", "path", "message", "hint"), CASES)
def test_a_bad_declaration_names_the_tool_the_field_and_the_fix(
    tmp_path: Path, tool: str, grounding: dict[str, Any], path: str, message: str | None, hint: str | None
) -> None:
    (issue,) = issues(world_with(tmp_path, tool, grounding))
    assert (Path(issue.file).name, issue.path) == (WORLD, path)
    assert issue.message.startswith(f"tool {tool!r}: ")
    if message is not None:
        assert issue.message == message
    if hint is not None:
        assert issue.hint == hint


def test_a_jsonpath_that_does_not_parse_says_where(tmp_path: Path) -> None:
    (issue,) = issues(world_with(tmp_path, "list_items", {"read": {"jsonpath": "$.items[?@.qty >]", "key": "items"}}))
    assert issue.message.startswith("tool 'list_items': the JSONPath does not parse: ")


def test_a_pointer_may_name_what_a_task_adds_to_the_state(tmp_path: Path) -> None:
    folder = world_with(tmp_path, "get_item", {"read": {"pointer": "/shelves/{name}", "key": "shelf"}})
    task = (
        '{"id": "shelves", "instruction": "x", "initial_state_patch": [{"op": "add", "path": "/shelves", "value": {}}]}'
    )
    (folder / "tasks.jsonl").write_text(task + "\n")
    assert load_worlds([folder]).worlds["mock"].tool("get_item") is not None


def test_simia_validate_prints_the_problem_as_the_worlds_page_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = world_with(tmp_path / "worlds", "get_item", {"read": {"pointer": "/items/{nam}", "key": "item"}})
    world = yaml.safe_load((folder / WORLD).read_text())
    (folder / WORLD).write_text(yaml.safe_dump({**world, "name": "pantry"}, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "worlds/pantry"]) == 1
    assert capsys.readouterr().err == (
        "FAIL  pantry  (worlds/pantry)\n"
        "  - worlds/pantry/world.yaml: $.tools[1].grounding.read.pointer: tool 'get_item': {nam} names no argument "
        "of the tool's inputSchema (hint: did you mean {name}?)\n"
        "1 problem(s) in 1 world(s)\n"
    )


def test_a_whole_number_sent_as_a_float_names_the_same_record_as_the_integer() -> None:
    assert (
        fill_pointer("/books/{book_id}", {"book_id": 5.0})
        == "/books/5"
        == fill_pointer("/books/{book_id}", {"book_id": 5})
    )
    assert fill_pointer("/books/{book_id}", {"book_id": 5.5}) == "/books/5.5"
    assert fill_value("book {book_id}", {"book_id": 5.0}) == "book 5"
    assert fill_jsonpath("$.books[?@.id == {book_id}]", {"book_id": 5.0}) == "$.books[?@.id == 5.0]"  # equal as numbers
