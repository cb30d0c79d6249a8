"""`simia fidelity --against-declarations`: a model as the simulator, scored against a world's exact declarations
with no real server, on the answers and on the state changes (by how many fields a call changes).

The reference simulators: one that answers what the declarations would (`plan_call` on the state its prompt shows)
agrees on every call and every field; one that never gives a usable answer scores the null figure; one that
answers right but never writes the state loses the state figure only."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from simia.cli import main
from simia.clients.fidelity import (
    CallSequence,
    exact_tools,
    example_sequences,
    run_declared_fidelity,
    task_sequences,
)
from simia.clients.fidelity.compare import change_bucket, state_change
from simia.sim import World, load_world
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.engine import Plan, Refused, ToolCall, plan_call
from simia.sim.world import as_state
from simia.testing import FakeProvider, parse_simulator_prompt, schema_answer

ROOT = Path(__file__).resolve().parents[2]
RETAIL = ROOT / "tool_specs" / "retail"

_COUNTER = {"type": "object", "required": ["name", "value"], "properties": {"name": {"type": "string"},
            "value": {"type": "integer"}}}  # fmt: skip
_NAMED = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"}},
    "additionalProperties": False,
}
SHELF: dict[str, Any] = {  # counters: writes of 1 field (bump), 2 (move), 4 (create), and a tool with no declaration
    "name": "shelf",
    "title": "Shelf",
    "description": "Named counters on a shelf.",
    "simulator": {"window": 4},
    "state_schema": {"type": "object", "required": ["counters"], "properties": {"counters": {"type": "object"}}},
    "tools": [
        {"name": "get_counter", "description": "Read a counter.", "inputSchema": _NAMED, "outputSchema": _COUNTER,
         "annotations": {"readOnlyHint": True}, "errors": [{"code": "not_found", "when": "no counter has the name"}],
         "grounding": {"read": {"pointer": "/counters/{name}", "missing": "not_found"}}},
        {"name": "bump", "description": "Add one to a counter.", "inputSchema": _NAMED, "outputSchema": _COUNTER,
         "errors": [{"code": "not_found", "when": "no counter has the name"}],
         "grounding": {
             "preconditions": [{"pointer": "/counters/{name}", "exists": True, "error": "not_found"}],
             "effects": [{"expr": '{"op": "replace", "path": $pointer("counters", $args.name, "value"),'
                                  ' "value": $lookup($state.counters, $args.name).value + 1}'}],
             "read": {"pointer": "/counters/{name}"}}},
        {"name": "move", "description": "Move one from a counter to another.",
         "inputSchema": {"type": "object", "required": ["source", "target"],
                         "properties": {"source": {"type": "string"}, "target": {"type": "string"}}},
         "errors": [{"code": "not_found", "when": "a counter is missing"},
                    {"code": "empty", "when": "the source is at 0"}],
         "grounding": {
             "let": {"from": "$lookup($state.counters, $args.source)", "to": "$lookup($state.counters, $args.target)"},
             "preconditions": [{"expr": "$exists($from) and $exists($to)", "error": "not_found"},
                               {"expr": "$from.value > 0", "error": "empty"}],
             "effects": [{"expr": '[{"op": "replace", "path": $pointer("counters", $args.source, "value"),'
                                  ' "value": $from.value - 1}, {"op": "replace",'
                                  ' "path": $pointer("counters", $args.target, "value"), "value": $to.value + 1}]'}],
             "read": {"expr": '{"source": $lookup($state.counters, $args.source).value,'
                              ' "target": $lookup($state.counters, $args.target).value}'}}},
        {"name": "create_counter", "description": "Create a counter at 0.",
         "inputSchema": {"type": "object", "required": ["name", "unit"],
                         "properties": {"name": {"type": "string"}, "unit": {"type": "string"}}},
         "outputSchema": _COUNTER, "errors": [{"code": "exists", "when": "a counter has the name"}],
         "grounding": {
             "preconditions": [{"pointer": "/counters/{name}", "exists": False, "error": "exists"}],
             "effects": [{"op": "add", "path": "/counters/{name}",
                          "value": {"name": "{name}", "value": 0, "unit": "{unit}", "created": True}}],
             "read": {"pointer": "/counters/{name}"}}},
        {"name": "shout", "description": "Say something about a counter (no declaration).", "inputSchema": _NAMED},
    ],
}  # fmt: skip
TASKS = [{"id": "from-zero", "instruction": "Bump pears, then move one to apples.",
          "initial_state_patch": [{"op": "replace", "path": "/counters/pears/value", "value": 0}],
          "expected_actions": [{"name": "bump", "arguments": {"name": "pears"}},
                               {"name": "move", "arguments": {"source": "pears", "target": "apples"}}]}]  # fmt: skip
EXAMPLE = {"name": "read-then-bump", "messages": [
    {"role": "user", "content": "Bump apples."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "get_counter", "arguments": '{"name": "apples"}'}},
        {"id": "2", "type": "function", "function": {"name": "bump", "arguments": '{"name": "apples"}'}}]},
]}  # fmt: skip
STATE = {"counters": {"apples": {"name": "apples", "value": 3}, "pears": {"name": "pears", "value": 1}}}
CALLS = [
    ToolCall("get_counter", {"name": "apples"}),  # 0 fields
    ToolCall("bump", {"name": "apples"}),  # 1
    ToolCall("get_counter", {"name": "apples"}),  # 0: the read after the write
    ToolCall("shout", {"name": "apples"}),  # not declared: skipped
    ToolCall("move", {"source": "pears", "target": "apples"}),  # 2
    ToolCall("move", {"source": "pears", "target": "apples"}),  # pears is at 0: `empty`
    ToolCall("create_counter", {"name": "plums", "unit": "kg"}),  # 4
    ToolCall("get_counter", {"name": "kiwis"}),  # `not_found`
]


def shelf(base: Path) -> World:
    folder = base / "shelf"
    folder.mkdir()
    (folder / "world.yaml").write_text(yaml.safe_dump(SHELF, sort_keys=False))
    (folder / "state.json").write_text(json.dumps(STATE))
    (folder / "tasks.jsonl").write_text("".join(json.dumps(task) + "\n" for task in TASKS))
    (folder / "examples").mkdir()
    (folder / "examples" / "read-then-bump.json").write_text(json.dumps(EXAMPLE))
    return load_world(folder)


def declared_answer(
    world: World, request: CompletionRequest | dict[str, Any], *, writes: bool = True
) -> dict[str, Any]:
    """What the world's declarations answer to the call of a simulator request, on the state its prompt shows (a
    slice of a large state: the records the call names, whole); `writes=False`: the same answer, no state patch."""
    messages = request.messages if isinstance(request, CompletionRequest) else request["messages"]
    prompt = next(m["content"] for m in messages if m["role"] == "user")
    name, arguments, view = parse_simulator_prompt(prompt)
    view = {k: {r: v for r, v in records.items() if r != "..."} for k, records in view.items()}  # slicer's notes
    tool = world.tool(name)
    assert tool is not None
    plan = plan_call(world, tool, as_state(view), arguments)
    if isinstance(plan, Refused):
        return {"is_error": True, "error_code": plan.code, "message": plan.text}
    assert isinstance(plan, Plan), plan
    return {"is_error": False, "output": plan.output, "state_patch": plan.effects if writes else []}


def never_answers(request: CompletionRequest | dict[str, Any]) -> dict[str, Any]:
    """A simulator whose every answer fails validation: each call ends as an infra `invalid_simulation`."""
    return {"is_error": False, "output": "no object"}


async def test_the_declarations_scored_against_themselves_agree_on_every_call_and_every_field(tmp_path: Path) -> None:
    world = shelf(tmp_path)
    assert exact_tools(world) == ["get_counter", "bump", "move", "create_counter"]
    report = await run_declared_fidelity(
        world, [CallSequence("calls", CALLS)], FunctionBackend(lambda r: declared_answer(world, r))
    )
    assert [(c.tool, c.changed) for c in report.calls] == [
        ("get_counter", 0), ("bump", 1), ("get_counter", 0), ("move", 2), ("move", 0), ("create_counter", 4),
        ("get_counter", 0),
    ]  # fmt: skip
    assert [c.real_code for c in report.calls] == [None, None, None, None, "empty", None, "not_found"]
    assert report.calls[2].real == {"name": "apples", "value": 4}  # the exact state went on after the bump
    assert report.agreement() == 1.0 and report.state_agreement() == 1.0
    assert [c.state for c in report.calls] == [None, 1.0, None, 1.0, None, 1.0, None]  # reads: nothing to score
    assert report.skipped == ["shout: 1 call skipped: the world does not declare it exactly"]
    assert report.by_change() == {
        "0": {"calls": 4, "agreement": 1.0, "null": 0.0, "constant": 0.25, "state": None},
        "1": {"calls": 1, "agreement": 1.0, "null": 0.0, "constant": 0.0, "state": 1.0},
        "2-3": {"calls": 1, "agreement": 1.0, "null": 0.0, "constant": 0.0, "state": 1.0},
        "4+": {"calls": 1, "agreement": 1.0, "null": 0.0, "constant": 0.0, "state": 1.0},
    }
    assert (report.baselines(), report.constant_code) == ((0.0, 1 / 7), "not_found")
    assert report.per_tool()["move"] == {
        "calls": 2, "outcome": 1.0, "schema_valid": None, "structure": 1.0, "values": 1.0, "agreement": 1.0,
        "null": 0.0, "constant": 0.0, "state": 1.0,
    }  # fmt: skip
    assert report.read_after_write.consistent == report.read_after_write.checked == 1
    shown = report.as_dict()
    assert (shown["real"], shown["state_agreement"], shown["skipped"]) == ("declarations", 1.0, report.skipped)
    assert shown["by_change"] == report.by_change() and shown["calls"][5]["state_disagrees"] == []
    table = report.render().splitlines()
    assert table[0].split() == [
        "TOOL", "CALLS", "OUTCOME", "SCHEMA", "STRUCTURE", "VALUES", "AGREEMENT", "STATE", "NULL", "CONSTANT",
    ]  # fmt: skip
    assert "agreement 1.00 over 7 calls; null simulator 0.00, constant simulator 0.14 (always not_found)" in table
    assert "state 1.00 over 3 calls changing the state (null and constant simulators change nothing: 0.00)" in table
    assert table[table.index("CHANGED  CALLS  AGREEMENT  STATE  NULL  CONSTANT") + 4] == (
        "4+       1      1.00       1.00   0.00  0.00"
    )
    assert table[-1] == "skipped: shout: 1 call skipped: the world does not declare it exactly"


async def test_a_simulator_that_never_answers_scores_the_null_figure(tmp_path: Path) -> None:
    world = shelf(tmp_path)
    report = await run_declared_fidelity(world, [CallSequence("calls", CALLS)], FunctionBackend(never_answers))
    assert all(c.sim_infra for c in report.calls)
    assert (report.agreement(), report.baselines()[0], report.state_agreement()) == (0.0, 0.0, 0.0)
    assert [c.state for c in report.calls if c.changed] == [0.0, 0.0, 0.0]
    assert report.calls[5].state_disagrees == [
        "/counters/plums/created", "/counters/plums/name", "/counters/plums/unit", "/counters/plums/value",
    ]  # fmt: skip


async def test_a_simulator_that_never_writes_answers_right_and_loses_every_state_change(tmp_path: Path) -> None:
    world = shelf(tmp_path)
    stateless = FunctionBackend(lambda r: declared_answer(world, r, writes=False))
    report = await run_declared_fidelity(world, [CallSequence("calls", CALLS)], stateless)
    assert report.agreement() == 1.0  # each call starts from the exact state: its answers are right
    assert report.state_agreement() == 0.0
    assert {bucket: figures["state"] for bucket, figures in report.by_change().items()} == {
        "0": None, "1": 0.0, "2-3": 0.0, "4+": 0.0,
    }  # fmt: skip


def test_a_state_change_scores_the_fields_either_side_changed() -> None:
    before = {"o": {"a": {"status": "pending", "paid": [{"x": 1}]}, "b": {"status": "pending"}}}
    exact = {
        "o": {"a": {"status": "cancelled", "paid": [{"x": 1}, {"x": -1, "kind": "refund"}]}, "b": before["o"]["b"]}
    }
    half = {"o": {"a": {"status": "cancelled", "paid": [{"x": 1}, {"x": -1}]}, "b": before["o"]["b"]}}
    assert state_change(before, exact, exact) == (3, 1.0, [])
    assert state_change(before, exact, half) == (3, 2 / 3, ["/o/a/paid/1/kind"])
    assert state_change(before, exact, before) == (3, 0.0, ["/o/a/paid/1/kind", "/o/a/paid/1/x", "/o/a/status"])
    wrong = {"o": {**before["o"], "b": {"status": "cancelled"}}}  # the other order
    assert state_change(before, exact, wrong).agreement == 0.0
    assert state_change(before, before, before) == (0, None, [])  # a read that writes nothing: nothing to score
    assert state_change(before, before, wrong) == (0, 0.0, ["/o/b/status"])  # one that writes: wrong
    assert state_change({"v": 0}, {"v": 1}, {"v": 1.0}) == (1, 1.0, [])  # 1 is 1.0 ...
    assert state_change({"v": 0}, {"v": 1}, {"v": True}) == (1, 0.0, ["/v"])  # ... but true is not 1
    assert [change_bucket(n) for n in (0, 1, 2, 3, 4, 40)] == ["0", "1", "2-3", "2-3", "4+", "4+"]


async def test_the_worlds_examples_and_tasks_are_call_sequences(tmp_path: Path) -> None:
    world = shelf(tmp_path)
    assert example_sequences(world) == [
        CallSequence(
            "read-then-bump", [ToolCall("get_counter", {"name": "apples"}), ToolCall("bump", {"name": "apples"})]
        )
    ]
    [task] = task_sequences(world)
    assert (task.name, [c.tool for c in task.calls]) == ("task from-zero", ["bump", "move"])
    assert task.start is not None and task.start["counters"]["pears"]["value"] == 0
    sequences = [*example_sequences(world), task]
    report = await run_declared_fidelity(world, sequences, FunctionBackend(lambda r: declared_answer(world, r)))
    assert [c.index for c in report.calls] == [0, 1, 2, 3]
    assert report.calls[2].real == {"name": "pears", "value": 1}  # from the task's state, not the world's
    assert report.calls[3].real == {"source": 0, "target": 4}
    assert report.agreement() == report.state_agreement() == 1.0
    no_tasks = world.model_copy(update={"tasks": []})
    with pytest.raises(ValueError, match="no task of world 'shelf' has expected actions"):
        task_sequences(no_tasks)


async def test_the_command_scores_a_calls_file_and_refuses_what_needs_a_real_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = shelf(tmp_path)
    calls, report = tmp_path / "calls.jsonl", tmp_path / "report.json"
    calls.write_text("".join(json.dumps({"tool": c.tool, "arguments": c.arguments}) + "\n" for c in CALLS))
    async with FakeProvider(lambda body: declared_answer(world, body)).running() as fake:
        argv = ["fidelity", str(tmp_path / "shelf"), "--against-declarations", "--calls", str(calls),
                "--backend", "openai-compatible:fake", "--base-url", fake.base_url, "--report", str(report),
                "--min-agreement", "1"]  # fmt: skip
        assert await asyncio.to_thread(main, argv) == 0
        examples = [*argv[:3], "--calls-from", "examples", *argv[5:9]]
        assert await asyncio.to_thread(main, examples) == 0
    out = capsys.readouterr().out
    assert "agreement 1.00 over 7 calls; null simulator 0.00, constant simulator 0.14 (always not_found)" in out
    assert "agreement 1.00 over 2 calls; null simulator 0.00, constant simulator 0.00 (always not_found)" in out
    saved = json.loads(report.read_text())
    assert (saved["agreement"], saved["state_agreement"], saved["by_change"]["4+"]["calls"]) == (1.0, 1.0, 1)
    refusals = {
        ("--real", "http://127.0.0.1:9/mcp"): "--against-declarations needs no real server: leave out --real,"
        " --header and -- COMMAND",
        ("--agent", "scripted:x"): "--agent runs on a real server; with --against-declarations give --calls FILE.jsonl",
        (
            "--calls-from",
            "tasks",
        ): "say what to run: --calls FILE.jsonl, or --calls-from examples|tasks (one of the two)",
    }
    for extra, message in refusals.items():
        assert main([*argv[:5], *extra]) == 2
        assert capsys.readouterr().err.strip() == f"error: {message}"
    assert main(["fidelity", str(tmp_path / "shelf"), "--calls-from", "examples"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --calls-from plays the world's own calls against its declarations: add --against-declarations"
        " (a real server runs --calls FILE.jsonl)"
    )
    (tmp_path / "shouts.jsonl").write_text('{"tool": "shout", "arguments": {"name": "apples"}}\n')
    assert main([*argv[:3], "--calls", str(tmp_path / "shouts.jsonl")]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: none of the calls is of a tool world 'shelf' declares exactly (get_counter, bump, move,"
        " create_counter): nothing to score"
    )


RETAIL_CALLS = [  # reads, a cancel and the read after it, a documented error, and each order write
    ("find_user_by_email", {"email": "mia.lee@example.com"}),
    ("get_user_details", {"user_id": "mia_lee_1021"}),
    ("get_order_details", {"order_id": "#W1001"}),
    ("list_products", {}),
    ("cancel_pending_order", {"order_id": "#W1001", "reason": "ordered by mistake"}),
    ("get_order_details", {"order_id": "#W1001"}),
    ("cancel_pending_order", {"order_id": "#W1002", "reason": "no longer needed"}),
    ("modify_pending_order_address", {"order_id": "#W1004", "address1": "401 Congress Ave", "city": "Austin",
                                      "state": "TX", "country": "USA", "zip": "78701"}),
    ("return_delivered_order_items", {"order_id": "#W1003", "item_ids": ["I2002"],
                                      "payment_method_id": "credit_card_9902"}),
    ("modify_pending_order_items", {"order_id": "#W1005", "item_ids": ["I1001"], "new_item_ids": ["I1002"],
                                    "payment_method_id": "paypal_5150"}),
]  # fmt: skip


async def retail_fidelity(tmp_path: Path, answer: Any, name: str) -> dict[str, Any]:
    """`simia fidelity tool_specs/retail --against-declarations` on RETAIL_CALLS, the fake provider answering with
    `answer`, in process: its JSON report (the table is printed)."""
    calls, report = tmp_path / "calls.jsonl", tmp_path / f"{name}.json"
    calls.write_text("".join(json.dumps({"tool": t, "arguments": a}) + "\n" for t, a in RETAIL_CALLS))
    async with FakeProvider(answer).running() as fake:
        argv = ["fidelity", str(RETAIL), "--against-declarations", "--calls", str(calls), "--backend",
                "openai-compatible:fake", "--base-url", fake.base_url, "--report", str(report)]  # fmt: skip
        assert await asyncio.to_thread(main, argv) == 0
    return dict(json.loads(report.read_text()))


async def test_the_retail_worlds_declarations_score_a_faithful_and_a_stateless_simulator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped retail world's state is over `max_state_chars`: each prompt shows a slice, the records the call
    names whole, which is what its declarations read. Tools it does not declare exactly are skipped."""
    world = load_world(RETAIL)
    faithful = await retail_fidelity(tmp_path, lambda body: declared_answer(world, body), "faithful")
    with capsys.disabled():
        print(f"\nsimia fidelity tool_specs/retail --against-declarations (faithful):\n{capsys.readouterr().out}")
    scored = [c["tool"] for c in faithful["calls"]]
    assert scored == [t for t, _ in RETAIL_CALLS if t in exact_tools(world)]
    assert (faithful["agreement"], faithful["null_agreement"]) == (1.0, 0.0)
    assert faithful["state_agreement"] == 1.0
    assert faithful["calls"][scored.index("cancel_pending_order")]["changed"] >= 2  # the status and a refund
    stateless = await retail_fidelity(tmp_path, lambda body: declared_answer(world, body, writes=False), "stateless")
    with capsys.disabled():
        print(f"\n(a simulator that never writes the state):\n{capsys.readouterr().out}")
    assert stateless["agreement"] == 1.0 and stateless["state_agreement"] == 0.0
    shaped = await retail_fidelity(tmp_path, schema_answer(0), "schema")  # `fake_provider --answer schema`
    with capsys.disabled():
        print(f"\n(the fake provider's answers shaped by the schema):\n{capsys.readouterr().out}")
    assert (shaped["agreement"], shaped["state_agreement"], round(shaped["constant_agreement"], 2)) == (0.0, 0.0, 0.1)


@pytest.mark.slow
@pytest.mark.processes  # the simia CLI
@pytest.mark.local_model
@pytest.mark.timeout(1500)  # about 3 minutes a call on 2 CPU cores
def test_the_embedded_model_is_scored_against_the_retail_declarations_on_the_worlds_examples(tmp_path: Path) -> None:
    """The Own tools page's command: the embedded SmolLM2-135M simulating the calls of retail's example (a lookup,
    a read, a cancel), minutes on a few CPU cores. It runs them all and prints its figures (run with -s), held
    only to the null figure's floor: a 135M model's answers are what they are."""
    report = tmp_path / "local.json"
    command = [sys.executable, "-m", "simia.cli", "fidelity", str(RETAIL), "--against-declarations",
               "--calls-from", "examples", "--backend", "local", "--report", str(report)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1400)
    print(f"\nsimia fidelity tool_specs/retail --against-declarations --calls-from examples (local):\n{done.stdout}")
    assert done.returncode == 0, done.stderr
    saved = json.loads(report.read_text())
    assert [c["tool"] for c in saved["calls"]] == ["find_user_by_email", "get_order_details", "cancel_pending_order"]
    assert saved["null_agreement"] == 0.0 and saved["agreement"] >= saved["null_agreement"]
    assert saved["calls"][2]["changed"] >= 2  # the cancel: its status, and a refund
