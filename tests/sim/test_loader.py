from __future__ import annotations

import json
import shutil
from pathlib import Path

import mcp_types as types
import pytest
import yaml
from mcp import Client
from mcp.server import Server
from simia.sim import WorldError, load_world, load_worlds
from simia.sim.world import World

ROOT = Path(__file__).resolve().parents[2]
WORLDS = ROOT / "tool_specs"
BROKEN = ROOT / "tests" / "fixtures" / "broken_worlds"


def test_shipped_worlds_load_with_tools_tasks_and_examples() -> None:
    report = load_worlds([ROOT / "tool_specs"])
    assert report.errors == []
    assert set(report.worlds) >= {"mock", "retail"}
    retail = report.worlds["retail"]
    assert len(retail.tasks) >= 8
    assert all(t.output_schema is not None for t in retail.tools)
    assert all(t.rubric and t.expected_state for t in retail.tasks)
    assert retail.policy.startswith("# Retail agent policy")
    mock = report.worlds["mock"]
    assert [t.name for t in mock.tools] == ["list_items", "get_item", "set_quantity"]
    assert len(mock.examples) == 1 and mock.initial_state["items"]["apple"]["qty"] == 3


def test_content_hash_is_stable_and_tracks_content(tmp_path: Path) -> None:
    first = load_world(ROOT / "tool_specs" / "mock")
    copy = tmp_path / "mock"
    shutil.copytree(ROOT / "tool_specs" / "mock", copy)
    assert load_world(copy).content_hash == first.content_hash  # the folder does not matter
    state = json.loads((copy / "state.json").read_text())
    state["items"]["apple"]["qty"] = 4
    (copy / "state.json").write_text(json.dumps(state))
    assert load_world(copy).content_hash != first.content_hash


@pytest.mark.parametrize(
    ("case", "file", "path", "message"),
    [
        ("yaml_syntax", "world.yaml:4", "$", "YAML syntax error"),
        ("json_syntax", "state.json:2", "$", "JSON syntax error"),
        ("unknown_field", "world.yaml", "$.tools[0].descripton", "did you mean 'description'?"),
        ("missing_field", "world.yaml", "$.tools[1].inputSchema", "missing required field"),
        ("duplicate_tool", "world.yaml", "$.tools[1].name", "duplicate tool name 'get_count'"),
        ("bad_tool_name", "world.yaml", "$.tools[0].name", "is not allowed by MCP"),
        (
            "invalid_input_schema",
            "world.yaml",
            "$.tools[1].inputSchema.properties.n.type",
            "not a valid JSON Schema",
        ),
        ("input_schema_not_object", "world.yaml", "$.tools[1].inputSchema.type", "must be 'type: object'"),
        (
            "invalid_output_schema",
            "world.yaml",
            "$.tools[0].outputSchema.required",
            "not a valid JSON Schema",
        ),
        ("state_violates_schema", "state.json", "$.count", "violates state_schema"),
        (
            "example_unknown_tool",
            "examples/one.json",
            "$.messages[0].tool_calls[0].function.name",
            "'subtract'",
        ),
        (
            "example_bad_arguments",
            "examples/one.json",
            "$.messages[0].tool_calls[0].function.arguments",
            '"two" is not of type "integer"',
        ),
        ("duplicate_task_id", "tasks.jsonl:2", "$.id", "duplicate task id 't1'"),
        ("bad_pointer", "tasks.jsonl:1", "$.expected_state['count']", "is not a JSON Pointer"),
    ],
)
def test_each_broken_world_fails_with_file_field_and_hint(case: str, file: str, path: str, message: str) -> None:
    with pytest.raises(WorldError) as info:
        load_world(BROKEN / case)
    first = info.value.issues[0]
    assert str(first).startswith(f"{BROKEN / case / file}: {path}: ")
    assert message in str(first)
    assert first.hint


def test_one_bad_world_never_stops_the_others() -> None:
    report = load_worlds([BROKEN])
    assert list(report.worlds) == ["tiny"]  # only the valid folder
    failed = sorted(Path(e.source).name for e in report.errors)
    assert failed == sorted(p.name for p in BROKEN.iterdir() if p.is_dir() and p.name != "valid")


def test_unknown_world_names_the_loaded_ones() -> None:
    report = load_worlds([ROOT / "tool_specs"])
    with pytest.raises(Exception, match=r"unknown world 'shop'; loaded worlds: mock, retail"):
        report.get("shop")


def _captured_server() -> Server:
    """A real MCP SDK server with tools using every wire field, to capture its tools/list answer."""
    tools = [
        types.Tool(
            name="search_flights",
            title="Search flights",
            description="Find flights between two airports.",
            input_schema={
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {"origin": {"type": "string"}, "date": {"type": "string", "format": "date"}},
                "required": ["origin", "date"],
            },
            output_schema={"type": "object", "properties": {"flights": {"type": "array"}}},
            annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
            icons=[types.Icon(src="https://example.com/plane.png", mime_type="image/png")],
            meta={"vendor": "acme"},
        ),
        types.Tool(name="ping.v2", input_schema={"type": "object"}),
    ]

    async def on_list_tools(ctx: object, params: object) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    return Server("captured", on_list_tools=on_list_tools)


async def test_a_real_tools_list_answer_loads_unchanged(tmp_path: Path) -> None:
    async with Client(_captured_server()) as client:
        answer = await client.list_tools()
    wire = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
    folder = tmp_path / "captured"
    folder.mkdir()
    (folder / "world.yaml").write_text("name: captured\ntitle: Captured from a live server\n")
    (folder / "tools.json").write_text(json.dumps(wire["tools"]))
    world: World = load_world(folder)
    assert [tool.mcp_dict() for tool in world.tools] == wire["tools"]
    # A whole saved tools/list result is accepted too.
    (folder / "tools.json").write_text(json.dumps(wire))
    assert [tool.mcp_dict() for tool in load_world(folder).tools] == wire["tools"]


def test_tools_in_both_world_yaml_and_tools_json_is_an_error(tmp_path: Path) -> None:
    folder = tmp_path / "both"
    shutil.copytree(ROOT / "tool_specs" / "mock", folder)
    (folder / "tools.json").write_text("[]")
    with pytest.raises(WorldError, match=r"tools are defined both here and in tools\.json"):
        load_world(folder)


def _copy_mock(base: Path, folder: str, name: str) -> Path:
    target = base / folder
    shutil.copytree(WORLDS / "mock", target)
    world_yaml = target / "world.yaml"
    world_yaml.write_text(world_yaml.read_text(encoding="utf-8").replace("name: mock", f"name: {name}", 1))
    return target


def test_files_that_are_not_utf8_fail_only_their_own_world(tmp_path: Path) -> None:
    bad_policy = _copy_mock(tmp_path, "p", "bad_policy")
    raw = yaml.safe_load((bad_policy / "world.yaml").read_text(encoding="utf-8"))
    raw.pop("policy")
    (bad_policy / "world.yaml").write_text(yaml.safe_dump(raw))
    (bad_policy / "policy.md").write_bytes(b"Rules \xff\xfe in Latin-1")
    bad_tasks = _copy_mock(tmp_path, "t", "bad_tasks")
    (bad_tasks / "tasks.jsonl").write_bytes((bad_tasks / "tasks.jsonl").read_bytes() + b"\xff\n")
    _copy_mock(tmp_path, "g", "good")
    report = load_worlds([tmp_path])
    assert list(report.worlds) == ["good"]
    problems = {e.world: [str(i) for i in e.issues] for e in report.errors}
    assert problems == {
        "bad_policy": [f"{bad_policy / 'policy.md'}: $: not UTF-8 text (byte 6) (hint: save the policy as UTF-8)"],
        "bad_tasks": [
            f"{bad_tasks / 'tasks.jsonl'}: $: not UTF-8 text (byte {len((bad_tasks / 'tasks.jsonl').read_bytes()) - 2})"
            " (hint: save the tasks file as UTF-8)"
        ],
    }


def test_a_byte_order_mark_at_the_start_of_a_worlds_files_is_read_past(tmp_path: Path) -> None:
    """Windows editors save UTF-8 with a leading BOM: world.yaml was read past it, the JSON files and the
    policy were refused ("Unexpected UTF-8 BOM (decode using utf-8-sig)")."""
    folder = _copy_mock(tmp_path, "bom", "mock")
    raw = yaml.safe_load((folder / "world.yaml").read_text(encoding="utf-8"))
    policy = raw.pop("policy")
    (folder / "world.yaml").write_text(yaml.safe_dump(raw))
    (folder / "policy.md").write_text(policy)
    for name in ("world.yaml", "state.json", "tasks.jsonl", "policy.md"):
        (folder / name).write_bytes(b"\xef\xbb\xbf" + (folder / name).read_bytes())
    world = load_world(folder)
    plain = load_world(WORLDS / "mock")
    assert (world.initial_state, world.tasks, world.policy.strip()) == (
        plain.initial_state,
        plain.tasks,
        plain.policy.strip(),
    )


@pytest.mark.parametrize("name", ["c d/e", "a/b", "-lead", "x" * 65, "caf\u00e9"])
def test_world_names_must_be_url_safe(tmp_path: Path, name: str) -> None:
    folder = _copy_mock(tmp_path, "w", json.dumps(name))
    with pytest.raises(WorldError) as caught:
        load_world(folder)
    assert [i.path for i in caught.value.issues] == ["$.name"]
    assert "is not URL-safe" in caught.value.issues[0].message


def test_json_nested_too_deeply_fails_only_its_world(tmp_path: Path) -> None:
    deep = _copy_mock(tmp_path, "d", "deep")
    (deep / "state.json").write_text("[" * 100_000 + "]" * 100_000)
    _copy_mock(tmp_path, "g", "good")
    report = load_worlds([tmp_path])
    assert list(report.worlds) == ["good"]
    [error] = report.errors
    assert str(error.issues[0]) == (
        f"{deep / 'state.json'}: $: JSON nested too deeply to read (hint: flatten the data (nesting over ~1000 levels))"
    )


def test_a_state_over_the_size_limit_is_refused_naming_the_limit_and_how_to_raise_it(tmp_path: Path) -> None:
    folder = _copy_mock(tmp_path, "big", "big")
    world_file = folder / "world.yaml"
    raw = yaml.safe_load(world_file.read_text())
    raw["simulator"] = {**raw.get("simulator", {}), "max_state_bytes": 1024}
    world_file.write_text(yaml.safe_dump(raw))
    state = json.loads((folder / "state.json").read_text())
    state["items"].update({f"item{i}": {"qty": 1, "unit": "pieces"} for i in range(100)})  # the tasks' items kept
    (folder / "state.json").write_text(json.dumps(state))
    with pytest.raises(WorldError) as caught:
        load_world(folder)
    message = str(caught.value)
    assert (
        "over the limit of 1,024 (simulator.max_state_bytes)" in message
        and "raise simulator.max_state_bytes" in message
    )
    raw["simulator"]["max_state_bytes"] = 1_000_000
    world_file.write_text(yaml.safe_dump(raw))
    assert len(load_world(folder).initial_state["items"]) == 103


def test_a_copy_of_a_world_derives_its_hash_and_tool_lookup_again() -> None:
    world = load_world(ROOT / "tool_specs" / "retail")
    tool = world.tool("get_order_details")  # derived values computed before the copy
    assert tool is not None and tool.grounding is not None
    before = world.content_hash
    copy = world.model_copy(update={"tools": [t.model_copy(update={"grounding": None}) for t in world.tools]})
    assert copy.tool("get_order_details") == tool.model_copy(update={"grounding": None})
    assert copy.content_hash != before and world.content_hash == before


def test_a_ref_outside_its_schema_or_to_nothing_is_refused_at_load_and_local_ones_load(tmp_path: Path) -> None:
    folder = _copy_mock(tmp_path, "r", "refs")
    raw = yaml.safe_load((folder / "world.yaml").read_text(encoding="utf-8"))
    tool = raw["tools"][0]
    good = {
        "type": "object",
        "$defs": {"qty": {"type": "integer"}, "named": {"$anchor": "label", "type": "string"}},
        "properties": {
            "a": {"$ref": "#/$defs/qty"},
            "b": {"$ref": "#label"},
            "c": {"const": {"$ref": "http://example.com/data-not-a-schema"}},  # a value, never fetched
        },
    }
    tool["inputSchema"] = good
    (folder / "world.yaml").write_text(yaml.safe_dump(raw))
    assert load_world(folder).tools[0].input_schema == good
    tool["inputSchema"] = {
        "type": "object",
        "properties": {
            "remote": {"$ref": "http://127.0.0.1:9/schema.json"},
            "file": {"$ref": "other.json#/x"},
            "nothing": {"$ref": "#/$defs/nope"},
            "anchor": {"$ref": "#nobody"},
            "enum": {"$ref": "#/$defs/gone"},  # a property named like a data keyword is still a schema
        },
    }
    (folder / "world.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(WorldError) as caught:
        load_world(folder)
    found = {i.path: i.message for i in caught.value.issues}
    base = "$.tools[0].inputSchema.properties"
    assert found == {
        f"{base}.remote.$ref": "a $ref outside the schema ('http://127.0.0.1:9/schema.json') is not fetched",
        f"{base}.file.$ref": "a $ref outside the schema ('other.json#/x') is not fetched",
        f"{base}.nothing.$ref": "$ref '#/$defs/nope' points at nothing in this schema",
        f"{base}.anchor.$ref": "$ref '#nobody' names no $anchor of this schema",
        f"{base}.enum.$ref": "$ref '#/$defs/gone' points at nothing in this schema",
    }


def test_an_annotation_hint_that_is_not_a_boolean_is_refused_and_other_members_pass(tmp_path: Path) -> None:
    folder = _copy_mock(tmp_path, "a", "hints")
    raw = yaml.safe_load((folder / "world.yaml").read_text(encoding="utf-8"))
    raw["tools"][0]["annotations"] = {"readOnlyHint": True, "title": "Get", "vendorHint": 3}
    (folder / "world.yaml").write_text(yaml.safe_dump(raw))
    assert load_world(folder).tools[0].annotations == {"readOnlyHint": True, "title": "Get", "vendorHint": 3}
    raw["tools"][0]["annotations"] = {"readOnlyHint": "yes"}
    (folder / "world.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(WorldError) as caught:
        load_world(folder)
    [issue] = caught.value.issues
    assert issue.path == "$.tools[0].annotations"
    assert "annotations.readOnlyHint must be true or false, got 'yes'" in issue.message


def test_a_key_named_twice_in_a_world_file_is_refused_where_a_parser_would_keep_the_last(tmp_path: Path) -> None:
    folder = _copy_mock(tmp_path, "dup", "dup")
    world_file = folder / "world.yaml"
    world_file.write_text(
        world_file.read_text().replace("title: Mock", "description: first\ndescription: second\ntitle: Mock")
    )
    (folder / "state.json").write_text('{"items": {"rice": {"qty": 2, "unit": "kg", "qty": 5}}}')
    tasks = (folder / "tasks.jsonl").read_text().splitlines()
    (folder / "tasks.jsonl").write_text("\n".join([tasks[0][:-1] + ', "id": "again"}', *tasks[1:]]) + "\n")
    with pytest.raises(WorldError) as caught:
        load_world(folder)
    line = next(i for i, text in enumerate(world_file.read_text().splitlines(), 1) if text == "description: second")
    assert [str(i) for i in caught.value.issues] == [
        f"{world_file}:{line}: $: duplicate key 'description': YAML keeps only the last value"
        " (hint: remove or rename one of them)"
    ]
    world_file.write_text(world_file.read_text().replace("description: first\ndescription: second\n", ""))
    with pytest.raises(WorldError) as caught:
        load_world(folder)
    assert [str(i) for i in caught.value.issues][:2] == [
        f"{folder / 'state.json'}: $: duplicate key 'qty' in an object: JSON keeps only the last value"
        " (hint: remove or rename one)",
        f"{folder / 'tasks.jsonl'}:1: $: duplicate key 'id' in an object: JSON keeps only the last value"
        " (hint: remove or rename one)",
    ]


def test_yaml_merge_keys_may_still_be_overridden(tmp_path: Path) -> None:
    from simia.sim.world.validation import IssueCollector, read_yaml

    file = tmp_path / "world.yaml"
    file.write_text("base: &base {x: 1, y: 2}\nother:\n  <<: *base\n  x: 3\n")
    issues = IssueCollector(tmp_path)
    assert read_yaml(file, issues) == {"base": {"x": 1, "y": 2}, "other": {"x": 3, "y": 2}}
    assert issues.issues == []


def test_nan_and_infinity_in_a_world_file_are_refused_as_not_json(tmp_path: Path) -> None:
    folder = _copy_mock(tmp_path, "nan", "nan")
    (folder / "state.json").write_text('{"items": {"rice": {"qty": NaN, "unit": "kg"}}}')
    tasks = (folder / "tasks.jsonl").read_text().splitlines()
    (folder / "tasks.jsonl").write_text("\n".join([tasks[0][:-1] + ', "x": -Infinity}', *tasks[1:]]) + "\n")
    with pytest.raises(WorldError) as caught:
        load_world(folder)
    assert [str(i) for i in caught.value.issues][:2] == [
        f"{folder / 'state.json'}: $: NaN is not a JSON number (hint: write a number, a string or null)",
        f"{folder / 'tasks.jsonl'}:1: $: -Infinity is not a JSON number (hint: write a number, a string or null)",
    ]


def test_a_task_expecting_what_the_state_schema_forbids_is_refused_and_one_the_agent_may_create_passes(
    tmp_path: Path,
) -> None:
    folder = _copy_mock(tmp_path, "never", "never")
    tasks = [
        {"id": "words", "instruction": "Set milk to four.", "expected_state": {"/items/milk/qty": "four"}},
        {"id": "too_many", "instruction": "x", "expected_state": {"/items/rice/qty": 101, "/items/rice/unit": "kg"}},
        {"id": "no_qty", "instruction": "x", "expected_state": {"/items/apple/qty": {"$absent": True}}},
        {"id": "bad_new", "instruction": "x", "expected_state": {"/items/tea": {"unit": "g"}}},
        {"id": "new_ok", "instruction": "x", "expected_state": {"/items/tea/qty": 5, "/items/tea": {"qty": 5}}},
        {"id": "gone_ok", "instruction": "x", "expected_state": {"/items/apple": {"$absent": True}}},
    ]
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    with pytest.raises(WorldError) as caught:
        load_world(folder)
    found = [(i.line, i.path, i.message) for i in caught.value.issues]
    assert [(line, path) for line, path, _ in found] == [
        (1, "$.expected_state['/items/milk/qty']"),
        (2, "$.expected_state['/items/rice/qty']"),
        (3, "$.expected_state['/items/apple/qty']"),
        (4, "$.expected_state['/items/tea']"),
    ]
    assert found[0][2] == (
        'expects "four" at /items/milk/qty, which state_schema never allows: '
        '$.items.milk.qty: "four" is not of type "integer"'
    )
    assert "101 is greater than the maximum of 100" in found[1][2]
    assert '"qty" is a required property' in found[2][2] and '"qty" is a required property' in found[3][2]
    assert "hint" not in found[0][2] and caught.value.issues[0].hint.startswith("fix the expected value")
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks[4:]))
    assert [t.id for t in load_world(folder).tasks] == ["new_ok", "gone_ok"]


def test_a_tool_name_ending_in_a_newline_is_refused_as_mcp_refuses_it(tmp_path: Path) -> None:
    folder = tmp_path / "nl"
    folder.mkdir()
    (folder / "world.yaml").write_text(
        'name: nl\ntools:\n  - name: "get_item\\n"\n    inputSchema: {type: object, properties: {}}\n'
        "  - name: get_item\n    inputSchema: {type: object, properties: {}}\n"
    )
    with pytest.raises(WorldError) as caught:
        load_world(folder)
    [issue] = caught.value.issues
    assert (issue.path, "is not allowed by MCP" in issue.message) == ("$.tools[0].name", True)
