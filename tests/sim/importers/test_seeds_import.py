"""`import_seeds`: hand-written records of every dataset format become worlds that load, grouped by tool set, with
their conversions reported; bad records are skipped and counted by reason; a generated 200,000-record import stays
in bounded memory."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from simia.sim.errors import ImportSourceError, WorldExistsError
from simia.sim.importers.seeds import REPORT_FILE, SeedFile, Skipped, import_seeds
from simia.sim.importers.seeds_formats import bracket_calls, detect, read_seed
from simia.sim.importers.seeds_records import SkipRecord
from simia.sim.importers.seeds_tools import normal_tools, type_from_text
from simia.sim.world import load_world, load_worlds

SEEDS = Path(__file__).resolve().parents[2] / "fixtures" / "seeds"
GOOD = ["apigen.json", "xlam.json", "hermes.jsonl", "toolace.json", "glaive.jsonl", "openai.jsonl"]
GOOD += ["nemotron.jsonl", "toucan.jsonl"]


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def report(folder: Path) -> list[tuple[str, str, str]]:
    data = json.loads((folder / "import_report.json").read_text(encoding="utf-8"))
    return [(entry["kind"], entry["item"], entry["reason"]) for entry in data["report"]]


def test_every_format_is_told_apart_and_becomes_worlds_that_load(tmp_path: Path) -> None:
    result = import_seeds([SEEDS / name for name in GOOD], tmp_path / "worlds")

    assert result.files == [
        SeedFile(str(SEEDS / "apigen.json"), "sharegpt", 3, 3),
        SeedFile(str(SEEDS / "xlam.json"), "xlam", 3, 3),
        SeedFile(str(SEEDS / "hermes.jsonl"), "hermes", 2, 2),
        SeedFile(str(SEEDS / "toolace.json"), "toolace", 2, 2),
        SeedFile(str(SEEDS / "glaive.jsonl"), "glaive", 2, 2),
        SeedFile(str(SEEDS / "openai.jsonl"), "openai", 2, 2),
        SeedFile(str(SEEDS / "nemotron.jsonl"), "nemotron", 2, 2),
        SeedFile(str(SEEDS / "toucan.jsonl"), "toucan", 2, 2),
    ]
    assert result.skipped == []
    loaded = load_worlds([tmp_path / "worlds"])
    assert loaded.errors == []
    shape = {name: (sorted(w.tools_by_name), len(w.tasks), len(w.examples)) for name, w in loaded.worlds.items()}
    assert shape == {
        "member-renew-2-tools": (["find_member", "renew_loan"], 3, 3),
        "air-quality-2-tools": (["air_quality", "forecast"], 2, 2),
        "convert-units": (["convert_units"], 1, 1),
        "book-table-2-tools": (["book_table", "list_openings"], 2, 2),
        "currency-rate-2-tools": (["Currency_Rate", "convertAmount"], 2, 2),
        "calculate-tip": (["calculate_tip"], 2, 2),
        "ticket-close-2-tools": (["close_ticket", "get_ticket"], 2, 2),
        "hold-seat-2-tools": (["hold_seat", "search_flights"], 2, 2),
        "wiki-page-2-tools": (["wiki-page", "wiki-search"], 2, 2),
    }
    assert [w.name for w in result.worlds] == [  # in the order first read
        "member-renew-2-tools",
        "air-quality-2-tools",
        "convert-units",
        "book-table-2-tools",
        "currency-rate-2-tools",
        "calculate-tip",
        "ticket-close-2-tools",
        "hold-seat-2-tools",
        "wiki-page-2-tools",
    ]
    summary = json.loads((tmp_path / "worlds" / REPORT_FILE).read_text(encoding="utf-8"))
    assert (summary["records"], summary["seeds"], len(summary["worlds"])) == (18, 18, 9)


def test_an_apigen_seed_becomes_a_task_an_example_and_the_policy(tmp_path: Path) -> None:
    import_seeds([SEEDS / "apigen.json"], tmp_path)
    folder = tmp_path / "member-renew-2-tools"
    world = load_world(folder)

    assert [t["name"] for t in json.loads((folder / "tools.json").read_text())] == ["find_member", "renew_loan"]
    assert world.policy.startswith("# Library desk policy\n- Look the member up")  # 2 of 3 records have it
    assert world.initial_state == {}
    assert "starts empty" in (world.simulator.instructions or "")
    seed = json.loads((folder / "examples" / "apigen-1.json").read_text())["messages"]
    assert lines(folder / "tasks.jsonl")[0] == {
        "id": "apigen-1",
        "instruction": "Hi, I'd like to renew the loan of 'The Left Hand of Darkness'. My member id is M-204.",
        "user_hidden": "What you say later in the conversation, in order:\n- Yes please.",
        "rubric": "The agent reaches the outcome the seed conversation reached.\n"
        "The seed's calls, in order:\n"
        '- find_member {"member_id": "M-204"}\n'
        '- renew_loan {"loan_id": "L-88", "weeks": 2}\n'
        "The seed's final answer:\n"
        "Done: loan L-88 is renewed and now due on 2026-03-14.",
        "reference": seed,  # the seed itself: what the simulator follows in this task's episodes
    }
    assert world.task("apigen-1").reference == seed  # type: ignore[union-attr]
    variant = lines(folder / "tasks.jsonl")[2]["rubric"]
    assert variant.endswith(
        "judge the agent by it:\n# Library desk policy (weekend)\n- Look the member up before "
        "any change to their loans.\n- No renewals on weekends: tell the member to come back "
        "on Monday."
    )
    first = json.loads((folder / "examples" / "apigen-1.json").read_text())["messages"]
    assert first[1] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "I should look the member up before renewing anything.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "find_member", "arguments": '{"member_id": "M-204"}'},
            }
        ],
    }
    assert [m["role"] for m in first] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert report(folder) == [
        ("note", "seeds", f"3 seed conversation(s) from {SEEDS / 'apigen.json'} (sharegpt)"),
        (
            "changed",
            "think",
            "a pseudo-tool for thinking out loud: not served; its calls became the assistant's reasoning",
        ),
        (
            "changed",
            f"1 seed(s), the first at {SEEDS / 'apigen.json'}:1",
            "think calls became the assistant's reasoning (reasoning_content); their results dropped",
        ),
        (
            "changed",
            f"3 seed(s), the first at {SEEDS / 'apigen.json'}:1",
            "tool calls got ids (call_1, call_2, ...): the source has none",
        ),
        ("note", "policy", "1 seed(s) had another system prompt: it is on their task's rubric"),
        ("note", "state.json", "empty: the seeds carry no database (`simia bootstrap WORLD` drafts one)"),
        ("note", "records", f"what became no world is in ../{REPORT_FILE}"),
    ]


def test_xlam_type_strings_become_a_json_schema_and_each_conversion_is_reported(tmp_path: Path) -> None:
    import_seeds([SEEDS / "xlam.json"], tmp_path)
    folder = tmp_path / "air-quality-2-tools"
    tools = {t["name"]: t["inputSchema"] for t in json.loads((folder / "tools.json").read_text())}

    assert tools["forecast"] == {
        "type": "object",
        "properties": {
            "cities": {"type": "array", "items": {"type": "string"}, "description": "City names."},
            "days": {"type": "integer", "description": "How many days ahead, 1 to 7.", "default": 1},
            "units": {"type": "string", "description": "metric or imperial.", "default": "metric"},
        },
        "required": ["cities"],
    }
    assert ("changed", "forecast.days", 'type \'int, optional\' -> {"type":"integer"}, not required') in report(folder)
    assert ("changed", "air_quality.latitude", 'type \'float\' -> {"type":"number"}') in report(folder)
    other = json.loads((tmp_path / "convert-units" / "tools.json").read_text())[0]["inputSchema"]
    assert other["properties"]["options"]["type"] == "object"
    assert other["required"] == ["value", "source", "target"]
    assert all(task["tags"] == ["single-turn"] for task in lines(folder / "tasks.jsonl"))


def test_toolace_python_types_names_and_bracket_calls_are_converted(tmp_path: Path) -> None:
    import_seeds([SEEDS / "toolace.json"], tmp_path)
    folder = tmp_path / "currency-rate-2-tools"
    example = json.loads((folder / "examples" / "toolace-2.json").read_text())["messages"]

    assert [c["function"] for c in example[1]["tool_calls"]] == [
        {"name": "Currency_Rate", "arguments": '{"base": "USD", "quote": "CHF", "date": "2025-12-01"}'},
        {"name": "Currency_Rate", "arguments": '{"base": "GBP", "quote": "CHF", "date": "2025-12-01"}'},
    ]
    assert [(m["role"], m.get("content")) for m in example[2:4]] == [
        ("tool", '{"name": "Currency Rate", "results": {"rate": 0.81}}'),
        ("tool", '{"name": "Currency Rate", "results": {"rate": 1.06}}'),
    ]
    assert ("changed", "Currency_Rate", "renamed from 'Currency Rate' (MCP names are A-Z a-z 0-9 _ . -)") in report(
        folder
    )
    assert ("changed", "convertAmount.amount", 'type \'float\' -> {"type":"number"}') in report(folder)
    assert load_world(folder).policy == ""  # the system text was a calling convention


def test_hermes_glaive_nemotron_and_toucan_calls_reasoning_and_results_come_across(tmp_path: Path) -> None:
    import_seeds([SEEDS / n for n in ("hermes.jsonl", "glaive.jsonl", "nemotron.jsonl", "toucan.jsonl")], tmp_path)

    hermes = json.loads((tmp_path / "book-table-2-tools" / "examples" / "hermes-2.json").read_text())["messages"]
    assert [m["role"] for m in hermes] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert hermes[2]["content"] == '{"free": ["18:00", "19:30"]}'
    glaive = lines(tmp_path / "calculate-tip" / "tasks.jsonl")
    assert [(t["id"], t.get("user_hidden"), t.get("tags")) for t in glaive] == [
        ("glaive-1", None, ["single-turn"]),
        ("glaive-2", "What you say later in the conversation, in order:\n- 20 percent.", None),
    ]
    nemotron = json.loads((tmp_path / "hold-seat-2-tools" / "examples" / "nemotron-1.json").read_text())["messages"]
    assert [m.get("reasoning_content") for m in nemotron if m["role"] == "assistant"] == [
        "Search first, then hold the cheapest seat.",
        "KL1710 is cheaper.",
        None,
    ]
    assert load_world(tmp_path / "hold-seat-2-tools").policy == (
        "You are a travel agent. Never hold more than one seat per passenger."
    )
    toucan = json.loads((tmp_path / "wiki-page-2-tools" / "examples" / "toucan-1.json").read_text())["messages"]
    assert [(m["role"], m.get("tool_call_id")) for m in toucan] == [
        ("user", None),
        ("assistant", None),
        ("tool", "call_1"),
        ("assistant", None),
        ("tool", "call_2"),
        ("assistant", None),
    ]


def test_the_same_tool_name_with_another_schema_makes_another_world_and_both_reports_say_so(tmp_path: Path) -> None:
    records = json.loads((SEEDS / "xlam.json").read_text())
    changed = dict(records[0])
    tools = json.loads(changed["tools"])
    tools[0]["parameters"]["days"]["type"] = "float, optional"  # a number now: another schema for `forecast`
    changed["tools"] = json.dumps(tools)
    source = tmp_path / "two.json"
    source.write_text(json.dumps([records[0], changed, records[1]]))

    result = import_seeds([source], tmp_path / "out")

    assert [(w.name, w.seeds) for w in result.worlds] == [("air-quality-2-tools", 2), ("air-quality-2-tools_2", 1)]
    assert ("note", "forecast", "another inputSchema of this tool made world 'air-quality-2-tools_2'") in report(
        tmp_path / "out" / "air-quality-2-tools"
    )
    assert ("note", "forecast", "another inputSchema of this tool made world 'air-quality-2-tools'") in report(
        tmp_path / "out" / "air-quality-2-tools_2"
    )


def test_each_bad_record_is_skipped_and_counted_under_its_reason(tmp_path: Path) -> None:
    result = import_seeds([SEEDS / "bad.jsonl"], tmp_path)
    bad = str(SEEDS / "bad.jsonl")

    assert result.skipped == [
        Skipped("calls a tool it does not list", 1, f"{bad}:5: calls 'delete_ticket', which its tools do not list"),
        Skipped("duplicate of an earlier record", 1, f"{bad}:7: the same tools, system prompt and conversation"),
        Skipped(
            "invalid tool schema",
            1,
            f"{bad}:4: tool 'get_ticket': the root must be 'type: object' (MCP requires it), got 'array'",
        ),
        Skipped("mixed formats", 1, f"{bad}:6: a record in xlam format in a file of openai records"),
        Skipped("no tools", 1, f"{bad}:3"),
        Skipped("not JSON", 1, f"{bad}:2: Expecting value"),
        Skipped("not a JSON object", 1, f"{bad}:8: a JSON list"),
    ]
    assert [(w.name, w.seeds) for w in result.worlds] == [("ticket", 1)]
    assert ("skipped", f"1 record(s), the first at {bad}:5", "calls a tool it does not list") in report(
        tmp_path / "ticket"
    )


def test_auto_stops_naming_the_fields_it_found_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(
        ImportSourceError, match=r"cannot tell the format of record 1 \(its fields: completion, prompt\)"
    ):
        import_seeds([SEEDS / "apigen.json", SEEDS / "unknown.jsonl"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_unknown_format_name_is_refused_with_the_closest(tmp_path: Path) -> None:
    with pytest.raises(ImportSourceError, match="unknown seed format 'xlamm': did you mean 'xlam'"):
        import_seeds([SEEDS / "xlam.json"], tmp_path, fmt="xlamm")


def test_records_of_another_format_than_the_one_named_are_skipped_as_mixed(tmp_path: Path) -> None:
    result = import_seeds([SEEDS / "openai.jsonl"], tmp_path / "out", fmt="xlam")

    assert result.skipped == [
        Skipped("mixed formats", 2, f"{SEEDS / 'openai.jsonl'}:1: a record in openai format in a file of xlam records")
    ]
    assert result.worlds == [] and not (tmp_path / "out").exists()


def test_apigen_and_nemotron_are_the_sharegpt_and_openai_readers(tmp_path: Path) -> None:
    result = import_seeds([SEEDS / "apigen.json"], tmp_path / "a", fmt="apigen")
    assert (result.files[0].format, result.seeds) == ("apigen", 3)
    result = import_seeds([SEEDS / "openai.jsonl"], tmp_path / "b", fmt="nemotron")
    assert (result.files[0].format, result.seeds) == ("nemotron", 2)


def test_an_existing_world_is_replaced_only_with_force_and_a_refusal_writes_nothing(tmp_path: Path) -> None:
    import_seeds([SEEDS / "glaive.jsonl"], tmp_path)
    (tmp_path / "calculate-tip" / "mine.txt").write_text("kept")

    with pytest.raises(WorldExistsError, match="pass --force to replace it"):
        import_seeds([SEEDS / "xlam.json", SEEDS / "glaive.jsonl"], tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calculate-tip", REPORT_FILE]  # no xLAM world, no staging
    assert (tmp_path / "calculate-tip" / "mine.txt").exists()

    import_seeds([SEEDS / "xlam.json", SEEDS / "glaive.jsonl"], tmp_path, force=True)
    assert not (tmp_path / "calculate-tip" / "mine.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "air-quality-2-tools",
        "calculate-tip",
        "convert-units",
        REPORT_FILE,
    ]


def test_examples_are_capped_every_seed_is_a_task_and_a_seed_that_breaks_a_schema_is_no_example(
    tmp_path: Path,
) -> None:
    records = lines(SEEDS / "openai.jsonl")
    broken = json.loads(json.dumps(records[1]))
    broken["messages"][2]["tool_calls"][0]["function"]["arguments"] = {"ticket_id": 40}  # an integer, not a string
    source = tmp_path / "seeds.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in (broken, records[0], records[1])))

    result = import_seeds([source], tmp_path / "out", max_examples=1)

    folder = tmp_path / "out" / "ticket-close-2-tools"
    assert (result.worlds[0].seeds, result.worlds[0].examples) == (3, 1)
    assert [t["id"] for t in lines(folder / "tasks.jsonl")] == ["seeds-1", "seeds-2", "seeds-3"]
    assert sorted(p.name for p in (folder / "examples").iterdir()) == ["seeds-2.json"]
    assert (
        "changed",
        f'1 seed(s), the first at {source}:1: get_ticket: $.ticket_id: 40 is not of type "string"',
        "its calls break a tool's inputSchema: kept as a task without a reference, not as an example",
    ) in report(folder)
    references = [t.get("reference") is not None for t in lines(folder / "tasks.jsonl")]
    assert references == [False, True, True]  # a reference is checked against the tools as an example is


def test_json_arrays_are_read_element_by_element_across_chunks_and_gzip_is_read_too(tmp_path: Path) -> None:
    records = lines(SEEDS / "openai.jsonl")
    many = []
    for i in range(3000):  # about 2.5 MB: many 64 KB chunks, elements cut at their ends
        record = json.loads(json.dumps(records[i % 2]))
        record["messages"][1]["content"] = f"Is ticket T-{i} open? (é, 日本, \U0001f600)"
        many.append(record)
    array = tmp_path / "many.json"
    array.write_text(json.dumps(many, ensure_ascii=False), encoding="utf-8")
    with gzip.open(tmp_path / "many.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in many[:10])

    result = import_seeds([array, tmp_path / "many.jsonl.gz"], tmp_path / "out")

    assert [(f.format, f.records, f.seeds) for f in result.files] == [("openai", 3000, 3000), ("openai", 10, 0)]
    assert result.skipped == [
        Skipped(
            "duplicate of an earlier record",
            10,
            f"{tmp_path / 'many.jsonl.gz'}:1: the same tools, system prompt and conversation",
        )
    ]
    tasks = lines(tmp_path / "out" / "ticket-close-2-tools" / "tasks.jsonl")
    assert tasks[2999]["instruction"] == "Is ticket T-2999 open? (é, 日本, \U0001f600)"


def test_a_json_array_that_does_not_parse_stops_the_import_naming_the_element(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text((SEEDS / "xlam.json").read_text().replace('"id": 1,', '"id": 1,,'))
    with pytest.raises(ImportSourceError, match="element 2 of the JSON array"):
        import_seeds([broken], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_parquet_rows_are_read_in_batches(tmp_path: Path) -> None:
    parquet = pytest.importorskip("pyarrow.parquet")
    table = pytest.importorskip("pyarrow").Table.from_pylist(lines(SEEDS / "toucan.jsonl"))
    parquet.write_table(table, tmp_path / "toucan.parquet")

    result = import_seeds([tmp_path / "toucan.parquet"], tmp_path / "out")

    assert [(f.format, f.seeds) for f in result.files] == [("toucan", 2)]
    assert [w.name for w in result.worlds] == ["wiki-page-2-tools"]


@pytest.mark.parametrize(
    ("text", "schema", "optional"),
    [
        ("int", {"type": "integer"}, False),
        ("str, optional", {"type": "string"}, True),
        ("Optional[float]", {"type": "number"}, True),
        ("List[str]", {"type": "array", "items": {"type": "string"}}, False),
        ("list[List[int]]", {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}, False),
        ("Dict[str, int]", {"type": "object", "additionalProperties": {"type": "integer"}}, False),
        ("dict", {"type": "object"}, False),
        ("Union[int, str, None]", {"type": ["integer", "string"]}, True),
        ("Literal['asc', 'desc']", {"enum": ["asc", "desc"]}, False),
        ("Tuple[float, float]", {"type": "array", "items": {"type": "number"}}, False),
        ("Tuple[str, int]", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}, False),
        ("Any", {}, False),
    ],
)
def test_python_type_strings_map_to_json_schema(text: str, schema: dict[str, Any], optional: bool) -> None:
    assert type_from_text(text) == (schema, optional, True)


def test_a_type_simia_does_not_know_is_left_unconstrained_and_reported() -> None:
    tools = normal_tools([{"name": "f", "parameters": {"cb": {"type": "Callable", "description": "a hook"}}}])
    assert tools.tools[0]["inputSchema"] == {
        "type": "object",
        "properties": {"cb": {"description": "a hook"}},
        "required": ["cb"],
    }
    assert tools.changes[0].reason == "type 'Callable' is not a type simia knows: left unconstrained"


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ('[Currency Rate(base="EUR", quote="JPY")]', [("Currency Rate", {"base": "EUR", "quote": "JPY"})]),
        ("[a(x=1, y=[1, 2], z={'k': true}), b()]", [("a", {"x": 1, "y": [1, 2], "z": {"k": True}}), ("b", {})]),
        ('[f(text="a (b), c")]', [("f", {"text": "a (b), c"})]),
        ("The rate is 161.2 [yen].", None),
        ("[1, 2, 3]", None),
        ("[f(1)]", None),
    ],
)
def test_toolace_bracket_calls_are_parsed_and_prose_is_not(text: str, calls: Any) -> None:
    assert bracket_calls(text) == calls


def test_formats_are_told_from_the_fields_of_a_record() -> None:
    firsts = {
        name: (lines(SEEDS / name) if name.endswith("l") else json.loads((SEEDS / name).read_text()))[0]
        for name in GOOD
    }
    assert {name: detect(record) for name, record in firsts.items()} == {
        "apigen.json": "sharegpt",
        "xlam.json": "xlam",
        "hermes.jsonl": "hermes",
        "toolace.json": "toolace",
        "glaive.jsonl": "glaive",
        "openai.jsonl": "openai",
        "nemotron.jsonl": "nemotron",
        "toucan.jsonl": "toucan",
    }
    assert detect({"prompt": "x", "completion": "y"}) is None


TOOLS = '[{"name": "get", "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}]'
CALL = '{"name": "get", "arguments": {"id": "a"}}'


def sharegpt(*turns: tuple[str, str], tools: str = TOOLS) -> dict[str, Any]:
    return {"conversations": [{"from": f, "value": v} for f, v in turns], "tools": tools}


def test_parallel_calls_are_answered_in_order_even_when_a_result_is_a_list() -> None:
    record = sharegpt(
        ("human", "Get a and b."),
        ("function_call", f'[{CALL}, {{"name": "get", "arguments": {{"id": "b"}}}}]'),
        ("observation", '["one", "two"]'),
        ("observation", '{"id": "b"}'),
        ("gpt", "Done."),
    )
    record["conversations"] = json.dumps(record["conversations"])  # as a Parquet column holds it

    seed = read_seed(detect(record) or "", record)

    assert [(m["role"], m.get("tool_call_id"), m.get("content")) for m in seed.messages] == [
        ("user", None, "Get a and b."),
        ("assistant", None, None),
        ("tool", "call_1", '["one", "two"]'),
        ("tool", "call_2", '{"id": "b"}'),
        ("assistant", None, "Done."),
    ]


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (sharegpt(("human", "hi"), ("observation", "{}")), "a tool result with no call"),
        (sharegpt(("gpt", "Hello."), ("function_call", CALL)), "no user turn"),
        (sharegpt(("human", "hi")), "no assistant turn"),
        (sharegpt(("human", "hi"), ("narrator", "...")), "unknown turn"),
        (sharegpt(("human", "hi"), ("function_call", '{"arguments": {}}')), "malformed tool call"),
        (
            sharegpt(("human", "hi"), ("function_call", '{"name": "get", "arguments": "[1]"}')),
            "call arguments are not a JSON object",
        ),
        (sharegpt(("human", "hi"), ("gpt", "ok"), tools='[{"name": "think"}]'), "no tools"),
        (
            sharegpt(
                ("human", "hi"),
                ("gpt", "ok"),
                tools='[{"name": "a"}, {"name": "a", "parameters": {"type": "object", "properties": {"x": {}}}}]',
            ),
            "invalid tool schema",
        ),
    ],
)
def test_a_record_that_cannot_be_a_seed_says_why(record: dict[str, Any], reason: str) -> None:
    with pytest.raises(SkipRecord) as raised:
        read_seed("sharegpt", record)
    assert raised.value.reason == reason


def _rss() -> int:
    """The process's resident set size now (Linux: /proc), not its peak: the peak may be an earlier test's."""
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _record(i: int) -> dict[str, Any]:
    tool = f"lookup_{i % 25}"
    schema = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
    call = {"id": "c1", "type": "function", "function": {"name": tool, "arguments": json.dumps({"key": f"R-{i}"})}}
    return {
        "messages": [
            {"role": "user", "content": f"Find record R-{i}, please."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"key": f"R-{i}", "value": i})},
            {"role": "assistant", "content": f"R-{i} holds {i}."},
        ],
        "tools": [
            {"type": "function", "function": {"name": tool, "description": "Look a record up.", "parameters": schema}}
        ],
    }


@pytest.mark.slow
def test_two_hundred_thousand_records_import_in_bounded_memory(tmp_path: Path) -> None:
    """Half the records in a JSONL file, half in a JSON array: memory grows by far less than the files hold."""
    jsonl, array = tmp_path / "half.jsonl", tmp_path / "half.json"
    with jsonl.open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(_record(i)) + "\n" for i in range(100_000))
    with array.open("w", encoding="utf-8") as handle:
        handle.write("[\n" + ",\n".join(json.dumps(_record(i)) for i in range(100_000, 200_000)) + "\n]\n")
    size = jsonl.stat().st_size + array.stat().st_size
    samples: list[int] = []
    before = _rss()

    result = import_seeds([jsonl, array], tmp_path / "out", progress=lambda file, n: samples.append(_rss()))
    samples.append(_rss())

    assert (result.records, result.seeds, len(result.worlds), result.skipped) == (200_000, 200_000, 25, [])
    assert len(samples) == 3  # after 100,000 records of each file, and at the end
    grown = max(samples) - before
    assert grown < size / 2, f"memory grew by {grown / 1e6:.0f} MB while importing {size / 1e6:.0f} MB of records"
    assert grown < 80e6
    world = load_world(tmp_path / "out" / result.worlds[0].name)
    assert (len(world.tasks), len(world.examples)) == (8000, 3)
    shutil.rmtree(tmp_path / "out")
