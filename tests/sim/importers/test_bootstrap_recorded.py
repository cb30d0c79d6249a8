"""`simia bootstrap --recorded DB`: a drafted grounding is kept only when it answers the tool's recorded calls (a
declaration's or a real server's answers, stored by the server) as recorded, each replayed on the state before it;
a tool with no recorded calls is checked on the drafted state only, and the report says which."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import yaml
from simia.cli import main
from simia.server.episodes import EpisodeService
from simia.server.real_tools import RealTools
from simia.server.settings import ServerSettings
from simia.sim import load_world
from simia.sim.backends import CompletionRequest, FunctionBackend, ScriptedBackend
from simia.sim.engine import Simulator
from simia.sim.engine.grounded import plan_call
from simia.sim.importers import BootstrapConfig, bootstrap
from simia.sim.importers.drafted_groundings import Recording, disagreement
from simia.sim.storage import open_store
from simia.sim.world import Grounding, RealServer, as_state

ROOT = Path(__file__).resolve().parents[3]
STATE = {"items": {"apple": {"qty": 3, "unit": "pieces"}, "milk": {"qty": 0, "unit": "litres"}}}
TASK = {
    "id": "restock_milk",
    "instruction": "Set the milk to 2 litres.",
    "rubric": "The agent sets milk to 2 and confirms.",
    "expected_state": {"/items/milk/qty": 2},
}
EXISTS = {"pointer": "/items/{name}", "exists": True, "error": "item_not_found"}
DECLARED = {  # how the pantry's tools answered when the calls were recorded
    "get_item": {
        "preconditions": [EXISTS],
        "read": {"expr": '{"name": $args.name, "qty": $lookup($state.items, $args.name).qty}'},
    },
    "set_quantity": {
        "preconditions": [EXISTS],
        "effects": [{"op": "replace", "path": "/items/{name}/qty", "value": "{qty}"}],
        "read": {"expr": '{"name": $args.name, "qty": $args.qty}'},
    },
}
CALLS = [
    ("get_item", {"name": "apple"}),
    ("get_item", {"name": "rice"}),
    ("set_quantity", {"name": "milk", "qty": 2}),
    ("set_quantity", {"name": "rice", "qty": 1}),
    ("get_item", {"name": "milk"}),
]
ITEM = "$lookup($state.items, $args.name)"
RIGHT_GET = {  # computed, and written otherwise than the declaration that answered: it answers the same
    "tool": "get_item",
    "grounding": {
        "let": {"item": ITEM},
        "preconditions": [{"expr": "$exists($item)", "error": "item_not_found"}],
        "read": {"expr": '{"name": $args.name, "qty": $item.qty}'},
    },
}
WRONG_SET = {  # answers the quantity before the change: it runs, and structural checks cannot tell
    "tool": "set_quantity",
    "grounding": {
        "let": {"item": ITEM},
        "preconditions": [{"expr": "$exists($item)", "error": "item_not_found"}],
        "effects": [{"op": "replace", "path": "/items/{name}/qty", "value": "{qty}"}],
        "read": {"expr": '{"name": $args.name, "qty": $item.qty}'},
    },
}
LIST_ITEMS = {  # never called in the recorded runs
    "tool": "list_items",
    "grounding": {
        "read": {"expr": '{"items": [$keys($state.items).{"name": $, "qty": $lookup($state.items, $).qty}]}'}
    },
}


def pantry(base: Path, groundings: dict[str, Any] | None = None, **extra: Any) -> Path:
    """The mock world's tools (with `groundings`, if given) and a hand-written state, without tasks."""
    folder = base / "pantry"
    folder.mkdir(parents=True, exist_ok=True)
    raw = yaml.safe_load((ROOT / "tool_specs" / "mock" / "world.yaml").read_text())
    tools = [{**t, "grounding": groundings[t["name"]]} if t["name"] in (groundings or {}) else t for t in raw["tools"]]
    (folder / "world.yaml").write_text(yaml.safe_dump({**raw, "name": "pantry", "tools": tools, **extra}))
    (folder / "state.json").write_text(json.dumps(STATE))
    return folder


async def record(folder: Path, db: Path, real: RealTools | None = None) -> None:
    """`CALLS` through the server's call path (no model: a model call fails), committed to the store at `db`."""
    world = load_world(folder)
    store = open_store(db)
    service = EpisodeService({"pantry": world}, Simulator(ScriptedBackend([])), store, ServerSettings(), real=real)
    episode = await service.create("pantry", seed=5)
    for tool, arguments in CALLS:
        event = await service.call(episode.id, "", tool, arguments)
        assert event.error_kind != "infra", event.detail
    await store.close()


def drafter(batches: list[list[dict[str, Any]]]) -> Any:
    """A model that drafts the task, then each next batch of grounding proposals."""
    proposals = iter(batches)

    def answer(request: CompletionRequest) -> dict[str, Any]:
        if request.schema_name == "world_groundings":
            return {"groundings": next(proposals)}
        return {"tasks": [TASK]}

    return answer


async def test_a_draft_that_answers_a_recorded_call_otherwise_is_rejected_naming_the_call(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    await record(pantry(tmp_path / "recorded", DECLARED), db)
    folder = pantry(tmp_path)  # the same world as imported: no groundings
    backend = FunctionBackend(drafter([[RIGHT_GET, WRONG_SET, LIST_ITEMS], [WRONG_SET]]))
    recorded = open_store(db)
    report = await bootstrap(folder, backend, BootstrapConfig(tasks=1, max_attempts=2), recorded=recorded)
    await recorded.close()

    assert report.groundings_written == ["get_item", "list_items"]
    assert report.groundings_reproduced == {"get_item": 3, "list_items": 0}  # apple, rice (an error), milk
    assert len(report.groundings_rejected) == 2  # the wrong draft, twice
    first = report.groundings_rejected[0]
    assert {k: first[k] for k in ("tool", "arguments", "seq", "source", "why", "attempt", "grounding")} == {
        "tool": "set_quantity",
        "arguments": {"name": "milk", "qty": 2},
        "seq": 3,
        "source": "state",
        "why": "gives another output",
        "attempt": 1,
        "grounding": WRONG_SET["grounding"],
    }
    patch = [{"op": "replace", "path": "/items/milk/qty", "value": 2}]
    assert first["recorded"] == {"output": {"name": "milk", "qty": 2}, "state_patch": patch}
    assert first["drafted"] == {"output": {"name": "milk", "qty": 0}, "state_patch": patch}
    assert report.groundings_dropped == [{"tool": "set_quantity", "problems": [first["problem"]]}]

    requests = [r for r in backend.requests if r.schema_name == "world_groundings"]
    shown = str(requests[0].messages[-1]["content"])  # the recorded answers are in the prompt
    assert '- set_quantity {"name":"milk","qty":2} -> {"output":{"name":"milk","qty":2}' in shown
    told = str(requests[1].messages[-1]["content"])  # and the disagreeing call is fed back
    assert 'the recorded call set_quantity {"name":"milk","qty":2} (episode ' in told
    assert 'recorded {"output":{"name":"milk","qty":2}' in told and 'drafted {"output":{"name":"milk","qty":0}' in told

    rendered = report.render()
    assert "groundings written 2, dropped 1" in rendered
    assert "  dropped grounding set_quantity: its last draft answers a recorded call otherwise" in rendered
    assert '  rejected draft of set_quantity (attempts 1, 2): the recorded call set_quantity {"name":"milk"' in rendered
    assert "  grounding get_item: reproduces 3 recorded call(s)" in rendered
    assert f"  grounding list_items: no recorded calls in {db}, checked on the drafted state only" in rendered
    saved = json.loads((folder / "bootstrap_report.json").read_text())
    assert (saved["recorded"], saved["groundings_rejected"][0]["arguments"]) == (str(db), {"name": "milk", "qty": 2})

    world = load_world(folder)  # what was written loads and answers as recorded
    assert world.tools_by_name["get_item"].grounding == Grounding.model_validate(RIGHT_GET["grounding"])
    assert world.tools_by_name["set_quantity"].grounding is None
    listed = plan_call(world, world.tools_by_name["list_items"], world.base_state, {})
    assert listed.output == {"items": [{"name": "apple", "qty": 3}, {"name": "milk", "qty": 0}]}  # type: ignore[union-attr]


async def test_without_recordings_drafts_are_checked_on_the_drafted_state_only(tmp_path: Path) -> None:
    folder = pantry(tmp_path)
    backend = FunctionBackend(drafter([[RIGHT_GET, WRONG_SET]]))
    report = await bootstrap(folder, backend, BootstrapConfig(tasks=1))
    assert report.groundings_written == ["get_item", "set_quantity"]  # nothing recorded tells the wrong one apart
    assert (report.recorded, report.groundings_rejected) == ("", [])
    assert report.groundings_reproduced == {"get_item": 0, "set_quantity": 0}
    assert "  grounding set_quantity: no recorded calls, checked on the drafted state only" in report.render()
    assert "# Recorded answers" not in str(backend.requests[-1].messages)


class RealPantry(RealTools):
    """The pantry's real server, in process: get_item answers the name and quantity of what it holds."""

    def __bool__(self) -> bool:  # RealTools has a __len__ (its open sessions): EpisodeService's `real or ...`
        return True  # would otherwise take this one, with none open, for no RealTools given

    async def call(self, episode_id: str, server: RealServer, tool: str, arguments: dict[str, Any]) -> Any:
        item = STATE["items"].get(arguments["name"])
        if item is None:
            text = types.TextContent(type="text", text="Error: item_not_found")
            return types.CallToolResult(content=[text], is_error=True), ""
        output = {"name": arguments["name"], "qty": item["qty"]}
        content = [types.TextContent(type="text", text=json.dumps(output))]
        return types.CallToolResult(content=content, structured_content=output), ""


async def test_a_real_servers_recorded_answers_decide_until_a_simulated_write_and_a_fixed_draft_is_kept(
    tmp_path: Path,
) -> None:
    real = {"real_server": {"url": "http://127.0.0.1:9/mcp"}}
    recorded_world = pantry(tmp_path / "recorded", {"set_quantity": DECLARED["set_quantity"]}, **real)
    raw = yaml.safe_load((recorded_world / "world.yaml").read_text())
    raw["tools"] = [{**t, "route": "real"} if t["name"] == "get_item" else t for t in raw["tools"]]
    (recorded_world / "world.yaml").write_text(yaml.safe_dump(raw))
    db = tmp_path / "runs.db"
    await record(recorded_world, db, RealPantry())
    whole_record = {  # the state's whole record: the real server answers only name and quantity
        "tool": "get_item",
        "grounding": {"preconditions": [EXISTS], "read": {"expr": f'$merge([{{"name": $args.name}}, {ITEM}])'}},
    }
    backend = FunctionBackend(drafter([[whole_record], [RIGHT_GET]]))
    recorded = open_store(db)
    report = await bootstrap(pantry(tmp_path, **real), backend, BootstrapConfig(tasks=1), recorded=recorded)
    await recorded.close()
    # get_item milk, recorded after the simulated set_quantity, is not compared: the real server never saw the write
    assert report.groundings_written == ["get_item"] and report.groundings_reproduced == {"get_item": 2}
    [rejected] = report.groundings_rejected
    assert {k: rejected[k] for k in ("tool", "arguments", "seq", "source", "recorded", "drafted")} == {
        "tool": "get_item",
        "arguments": {"name": "apple"},
        "seq": 1,
        "source": "real",
        "recorded": {"output": {"name": "apple", "qty": 3}},  # a real answer changes no simulated state
        "drafted": {"output": {"name": "apple", "qty": 3, "unit": "pieces"}, "state_patch": []},
    }
    assert "answered by the real server) gives another output" in rejected["problem"]


def test_the_bootstrap_command_checks_against_recorded_and_prints_the_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    asyncio.run(record(pantry(tmp_path / "recorded", DECLARED), db))
    folder = pantry(tmp_path)
    script = tmp_path / "drafter.json"
    script.write_text(json.dumps([
        {"match": "write its grounding", "data": {"groundings": [RIGHT_GET, WRONG_SET]}},
        {"match": "Fix these problems", "data": {"groundings": [WRONG_SET]}},
        {"match": "tasks", "data": {"tasks": [TASK]}},
    ]))  # fmt: skip
    assert (
        main(["bootstrap", str(folder), "--tasks", "1", "--backend", f"scripted:{script}", "--recorded", str(db)]) == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("world pantry: state kept (existing state.json); tasks written 1, kept 0, dropped 0; ")
    assert 'rejected draft of set_quantity (attempts 1, 2, 3): the recorded call set_quantity {"name":"milk"' in out
    assert "grounding get_item: reproduces 3 recorded call(s)" in out
    assert (
        main(["bootstrap", str(folder), "--backend", f"scripted:{script}", "--recorded", str(tmp_path / "no.db")]) == 2
    )
    assert "no database at" in capsys.readouterr().err


def recording(tool: str, arguments: dict[str, Any], **answer: Any) -> Recording:
    """A call recorded on `STATE` (as `read_recordings` gives it), answered as `answer` says."""
    fields: dict[str, Any] = {"source": "real", "is_error": False, "error_code": None, "output": None, "text": ""}
    fields = {"episode": "ep", "seq": 1, "state": as_state(STATE), "seed": None, "patch": None, **fields}
    return Recording(tool=tool, arguments=arguments, **{**fields, **answer})


def why(tool: str, grounding: dict[str, Any], *calls: Recording) -> str | None:
    """Why the mock world's `tool`, declared `grounding`, answers one of `calls` otherwise (None: it does not)."""
    world = load_world(ROOT / "tool_specs" / "mock")
    found = disagreement(world, world.tools_by_name[tool], Grounding.model_validate(grounding), calls)
    return None if found is None else str(found["why"])


def test_a_guided_draft_agrees_on_what_it_declares_and_a_refusal_on_its_code() -> None:
    qty = {"read": {"expr": '{"qty": $lookup($state.items, $args.name).qty}'}, "mode": "guided"}
    written = recording("get_item", {"name": "apple"}, output={"name": "apple", "qty": 3, "note": "fresh"})
    assert why("get_item", qty, written) is None  # the model wrote the rest
    other = recording("get_item", {"name": "apple"}, output={"name": "apple", "qty": 4})
    assert why("get_item", qty, written, other) == "gives another output.qty"
    refused = recording("get_item", {"name": "rice"}, is_error=True, error_code="item_not_found", text="no rice")
    no_check = {"read": {"pointer": "/items/{name}"}}
    assert why("get_item", no_check, refused) == "fails with 'not_found', where it failed with 'item_not_found'"
    patch = [
        {"op": "add", "path": "/log/-", "value": "milk"},
        {"op": "replace", "path": "/items/milk/qty", "value": 1},
    ]
    arguments = {"name": "milk", "qty": 1}
    logged = recording("set_quantity", arguments, state=as_state({**STATE, "log": []}), patch=patch, source="state")
    log = {"effects": [{"op": "add", "path": "/log/-", "value": "{name}"}], "mode": "guided"}
    assert why("set_quantity", log, logged) is None  # the model changed the quantity besides
    wrong = {"effects": [{"op": "add", "path": "/log/-", "value": "{qty}"}], "mode": "guided"}
    assert why("set_quantity", wrong, logged) == "leaves another state (at /log/0)"
