"""`simia fidelity` against a real MCP server (a stateful SDK server over stdio, exact answers)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client, StdioServerParameters
from simia.clients.agent import Agent
from simia.clients.fidelity import (
    AgentSummary,
    Check,
    FidelityReport,
    Pair,
    load_calls,
    run_agent_fidelity,
    run_fidelity,
)
from simia.clients.fidelity.compare import Answer, compare
from simia.sim import load_world
from simia.sim.backends import CompletionRequest, FunctionBackend, resolve_backend
from simia.sim.engine import Step, ToolCall
from simia.sim.judging import DIMENSIONS
from simia.testing import FakeProvider, parse_simulator_prompt

pytestmark = pytest.mark.processes  # the real server (tests/fixtures/servers/counters.py) is a subprocess
ROOT = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, str(ROOT / "tests" / "fixtures" / "servers" / "counters.py")]
CALLS = [
    {"tool": "get_counter", "arguments": {"name": "apples"}},
    {"tool": "get_counter", "arguments": {"name": "apples"}},
    {"tool": "increment", "arguments": {"name": "apples", "by": 2}},
    {"tool": "get_counter", "arguments": {"name": "apples"}},
    {"tool": "get_counter", "arguments": {"name": "kiwis"}},
]


async def counters_world(base: Path) -> Path:
    """The counters server's tools, as `simia import mcp` would save them, plus a hand-written state."""
    async with Client(StdioServerParameters(command=SERVER[0], args=SERVER[1:])) as client:
        tools = [t.model_dump(by_alias=True, exclude_none=True) for t in (await client.list_tools()).tools]
    folder = base / "counters"
    folder.mkdir()
    (folder / "world.yaml").write_text(yaml.safe_dump({"name": "counters", "title": "Counters"}))
    (folder / "tools.json").write_text(json.dumps(tools))
    (folder / "state.json").write_text(json.dumps({"counters": {"apples": 3, "pears": 7}}))
    task = {"id": "two-apples", "instruction": "Add two apples, check the count, and look for kiwis."}
    (folder / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    (base / "calls.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CALLS))
    return folder


def faithful(request: CompletionRequest | dict[str, Any], *, off_by: int = 0) -> dict[str, Any]:
    """A simulator that answers as the real server does (or `off_by` wrong on every value it reads)."""
    tool, arguments, state = parse_simulator_prompt(str(request.messages[-1]["content"]))
    counters = state["counters"]
    name = arguments["name"]
    if name not in counters:
        return {"is_error": True, "error_code": "not_found", "message": f"there is no counter named {name}",
                "output": None, "state_patch": []}  # fmt: skip
    value = counters[name] + (arguments.get("by", 1) if tool == "increment" else 0)
    patch = [{"op": "replace", "path": f"/counters/{name}", "value": value}] if tool == "increment" else []
    return {"is_error": False, "error_code": None, "message": "ok",
            "output": {"name": name, "value": value + off_by}, "state_patch": patch}  # fmt: skip


AGENT_CALLS = [CALLS[0], CALLS[2], CALLS[3], CALLS[4]]


def scripted_agent(body: dict[str, Any]) -> dict[str, Any]:
    """An agent (OpenAI-format requests, native tool calls): one call of AGENT_CALLS a turn, then an answer."""
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if turn < len(AGENT_CALLS):
        return {
            "message": "",
            "tool_calls": [{"name": c["tool"], "arguments": c["arguments"]} for c in AGENT_CALLS[turn : turn + 1]],
        }
    return {"message": "Apples are at 5 now; there is no kiwi counter.", "tool_calls": []}


async def test_the_agents_calls_on_the_real_server_are_replayed_on_the_simulation(tmp_path: Path) -> None:
    world = load_world(await counters_world(tmp_path))
    task = world.task("two-apples")
    assert task is not None
    async with FakeProvider(scripted_agent).running() as fake:
        model = resolve_backend("openai-compatible:agent", base_url=fake.base_url, env={})
        try:
            report = await run_agent_fidelity(
                world, SERVER, Agent(model), task, FunctionBackend(faithful), allow_writes=True
            )
        finally:
            await model.aclose()
    assert report.agent == AgentSummary(task="two-apples", stop="answered", turns=5, calls=4)
    assert [(c.tool, c.arguments) for c in report.calls] == [(c["tool"], c["arguments"]) for c in AGENT_CALLS]
    assert [c.real for c in report.calls[:3]] == [{"name": "apples", "value": v} for v in (3, 5, 5)]
    assert report.agreement() == 1.0 and report.read_after_write == Check(consistent=1, checked=1, found=1)
    assert report.calls[-1].real_code == report.calls[-1].sim_code == "not_found"
    assert report.render().splitlines()[0] == (
        "agent on task two-apples: 4 calls on the real server in 5 turns, stop: answered"
    )


async def test_a_faithful_simulation_agrees_fully_and_a_wrong_one_does_not(tmp_path: Path) -> None:
    world = load_world(await counters_world(tmp_path))
    calls = load_calls(tmp_path / "calls.jsonl", world)
    good = await run_fidelity(world, SERVER, calls, FunctionBackend(faithful), allow_writes=True)
    assert good.agreement() == 1.0 and all(c.outcome_agrees and c.schema_valid in (True, None) for c in good.calls)
    assert good.calls[-1].real_code == good.calls[-1].sim_code == "not_found" and good.calls[-1].code_agrees
    assert good.repeated_read == good.read_after_write == Check(consistent=1, checked=1, found=1)
    bad = await run_fidelity(world, SERVER, calls, FunctionBackend(lambda r: faithful(r, off_by=1)), allow_writes=True)
    assert [round(c.agreement, 2) for c in bad.calls] == [0.5, 0.5, 0.5, 0.5, 1.0]  # name right, value wrong
    assert bad.per_tool()["increment"] == {
        "calls": 1, "outcome": 1.0, "schema_valid": 1.0, "structure": 1.0, "values": 0.5, "agreement": 0.5,
        "null": 0.0, "constant": 0.0,
    }  # fmt: skip
    # its read after the increment shows 6, not the 5 the real increment set
    assert bad.read_after_write == Check(consistent=0, checked=1, found=1)
    assert bad.pairs[1] == Pair("read_after_write", 2, 3, True, False, "the read lacks what the write set: 5")


def no_answer(request: CompletionRequest | dict[str, Any]) -> dict[str, Any]:
    """A simulator whose every answer fails validation: each call ends as an infra `invalid_simulation`."""
    return {"is_error": False, "error_code": None, "message": "ok", "output": "no object", "state_patch": []}


def wrong_code(request: CompletionRequest | dict[str, Any]) -> dict[str, Any]:
    """`faithful`, with `conflict` where the real server says `not_found`."""
    answer = faithful(request)
    return {**answer, "error_code": "conflict"} if answer["is_error"] else answer


def always_not_found(request: CompletionRequest | dict[str, Any]) -> dict[str, Any]:
    """A constant simulator: the same documented error for every call."""
    return {"is_error": True, "error_code": "not_found", "message": "no such counter", "output": None,
            "state_patch": []}  # fmt: skip


async def test_an_error_call_agrees_only_on_the_same_code_and_never_on_a_simulator_failure(tmp_path: Path) -> None:
    world = load_world(await counters_world(tmp_path))
    calls = load_calls(tmp_path / "calls.jsonl", world)
    failing = await run_fidelity(world, SERVER, calls, FunctionBackend(no_answer), allow_writes=True)
    kiwis = failing.calls[-1]
    assert (kiwis.real_code, kiwis.sim_code, kiwis.sim_infra, kiwis.outcome_agrees, kiwis.code_agrees) == (
        "not_found", "invalid_simulation", True, False, False,
    )  # fmt: skip
    assert [c.agreement for c in failing.calls] == [0.0] * 5  # it once scored the kiwis call 1.0 (0.20 overall)
    assert (failing.agreement(), failing.baselines()) == (0.0, (0.0, 0.2))  # exactly the null simulator
    coded = await run_fidelity(world, SERVER, calls, FunctionBackend(wrong_code), allow_writes=True)
    assert [c.agreement for c in coded.calls] == [1.0, 1.0, 1.0, 1.0, 0.0]
    assert (coded.calls[-1].real_code, coded.calls[-1].sim_code, coded.calls[-1].code_agrees) == (
        "not_found", "conflict", False,
    )  # fmt: skip
    constant = await run_fidelity(world, SERVER, calls, FunctionBackend(always_not_found), allow_writes=True)
    assert constant.agreement() == constant.baselines()[1] == 0.2 and constant.constant_code == "not_found"
    assert [c.constant for c in constant.calls] == [c.agreement for c in constant.calls] == [0, 0, 0, 0, 1]
    assert [c.null for c in constant.calls] == [0.0] * 5


def test_calls_answered_from_the_state_and_by_the_model_are_reported_apart() -> None:
    def step(source: str, value: int) -> Step:
        return Step("get_counter", {"name": "apples"}, {"name": "apples", "value": value}, "", False, {}, source=source)

    real = Answer(False, value={"name": "apples", "value": 3})
    report = FidelityReport(world="counters", real="counters.py", constant_code="not_found", calls=[
        compare(0, ToolCall("get_counter", {"name": "apples"}), None, real, step("state", 3)),
        compare(1, ToolCall("get_counter", {"name": "apples"}), None, real, step("simulated", 4)),
        compare(2, ToolCall("get_counter", {"name": "apples"}), None, real, step("simulated", 3)),
    ])  # fmt: skip
    assert [c.source for c in report.calls] == ["state", "simulated", "simulated"]
    assert report.by_source() == {
        "simulated": {"calls": 2, "agreement": 0.75, "null": 0.0, "constant": 0.0},
        "state": {"calls": 1, "agreement": 1.0, "null": 0.0, "constant": 0.0},
    }
    assert report.as_dict()["by_source"] == report.by_source()
    assert "by source: model 2 calls agreement 0.75 (null 0.00, constant 0.00); state 1 calls agreement 1.00" \
        " (null 0.00, constant 0.00)" in report.render().splitlines()  # fmt: skip


async def test_a_real_server_that_dies_mid_run_gives_the_report_of_the_calls_before(tmp_path: Path) -> None:
    world = load_world(await counters_world(tmp_path))
    calls = load_calls(tmp_path / "calls.jsonl", world)
    report = await run_fidelity(
        world, [*SERVER, "--die-after", "3"], calls, FunctionBackend(faithful), allow_writes=True
    )
    assert [c.tool for c in report.calls] == ["get_counter", "get_counter", "increment"]
    assert report.agreement() == 1.0
    assert report.stopped.startswith("the real server failed: ") and report.stopped.endswith(" after 3 of 5 calls")
    assert report.render().splitlines()[-1] == f"stopped: {report.stopped}"


async def test_bad_calls_and_tool_drift_are_refused_before_anything_runs(tmp_path: Path) -> None:
    world = load_world(await counters_world(tmp_path))
    (tmp_path / "bad.jsonl").write_text(
        '{"tool": "fly", "arguments": {}}\n{"tool": "increment", "arguments": {"by": 1}}\nnope\n'
    )
    with pytest.raises(ValueError) as caught:
        load_calls(tmp_path / "bad.jsonl", world)
    assert str(caught.value).split(" | ") == [
        f"{tmp_path / 'bad.jsonl'}:1: unknown tool 'fly' ('counters' has get_counter, increment)",
        f'{tmp_path / "bad.jsonl"}:2: increment arguments break its inputSchema: $: "name" is a required property',
        f'{tmp_path / "bad.jsonl"}:3: expected a JSON object with "tool" and "arguments"',
    ]
    drifted = world.model_copy(update={"tools": world.tools[:1]})
    with pytest.raises(ValueError, match="the world lacks increment"):
        await run_fidelity(drifted, SERVER, load_calls(tmp_path / "calls.jsonl", world)[:1], FunctionBackend(faithful))


def grade_data(body: dict[str, Any]) -> dict[str, Any]:
    """The DATA section of a grader request."""
    block = str(body["messages"][1]["content"]).split("\n", 1)[1]
    return dict(json.loads(block.split("\n<<<END DATA", 1)[0]))


def scripted_grader(body: dict[str, Any]) -> dict[str, Any]:
    """5 everywhere for a simulated answer equal to the real one, 2 for one that differs, and an answer
    that is no grade (a score of 9) for a real error."""
    data = grade_data(body)
    if data["real_answer"]["is_error"]:
        return {d: {"score": 9, "reason": "off the scale"} for d in DIMENSIONS}
    same = data["real_answer"]["answer"] == data["simulated_answer"]["answer"]
    return {d: {"score": 5 if same else 2, "reason": "equal" if same else "differs"} for d in DIMENSIONS}


async def test_a_grader_scores_each_step_and_a_bad_grade_is_that_steps_error(tmp_path: Path) -> None:
    world = load_world(await counters_world(tmp_path))
    calls = load_calls(tmp_path / "calls.jsonl", world)
    async with FakeProvider(scripted_grader).running() as fake:
        grader = resolve_backend("openai-compatible:grader", base_url=fake.base_url, env={})
        try:
            wrong = FunctionBackend(lambda r: faithful(r, off_by=1))
            bad = await run_fidelity(world, SERVER, calls, wrong, grader=grader, allow_writes=True)
            good = await run_fidelity(world, SERVER, calls, FunctionBackend(faithful), grader=grader, allow_writes=True)
        finally:
            await grader.aclose()
        seen = [grade_data(r) for r in fake.requests]
    assert bad.grades() == dict.fromkeys(DIMENSIONS, 2.0) and good.grades() == dict.fromkeys(DIMENSIONS, 5.0)
    assert bad.calls[0].grade == {d: {"score": 2, "reason": "differs"} for d in DIMENSIONS}
    assert bad.calls[-1].grade is None
    assert bad.calls[-1].grade_error == (
        "the grader's answer is not a grade: format.score: Input should be less than or equal to 5"
    )
    assert [len(s["earlier_calls"]) for s in seen[:5]] == [0, 1, 2, 3, 4]  # the simulator's window, up to 4
    assert seen[3]["earlier_calls"][-1] == {
        "tool": "increment", "arguments": {"name": "apples", "by": 2}, "answer": {"name": "apples", "value": 6},
        "is_error": False,
    }  # fmt: skip
    table = bad.render().splitlines()
    assert table[0].split() == [
        "TOOL", "CALLS", "OUTCOME", "SCHEMA", "STRUCTURE", "VALUES", "AGREEMENT", "NULL", "CONSTANT", "GRADE",
    ]  # fmt: skip
    assert table[1].split()[-1] == "2.00"
    assert table[-1] == (
        "grades (1-5): format 2.00  factuality 2.00  consistency 2.00  realism 2.00  quality 2.00"
        "  (1 steps not graded; see the report)"
    )
    assert bad.as_dict()["grades"] == dict.fromkeys(DIMENSIONS, 2.0)


@pytest.mark.slow
async def test_the_fidelity_command_prints_a_table_writes_a_report_and_gates_on_agreement(tmp_path: Path) -> None:
    folder = await counters_world(tmp_path)

    def provider(body: dict[str, Any]) -> dict[str, Any]:
        return faithful(CompletionRequest(messages=body["messages"], schema={}), off_by=1)

    async with FakeProvider(provider).running() as fake:
        calls, report = str(tmp_path / "calls.jsonl"), str(tmp_path / "r.json")
        model = ("--backend", "openai-compatible:sim", "--base-url", fake.base_url)
        command = [sys.executable, "-m", "simia.cli", "fidelity", str(folder), "--calls", calls, *model,
                   "--report", report, "--min-agreement", "0.9", "--allow-writes", "--", *SERVER]  # fmt: skip
        done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        "TOOL", "CALLS", "OUTCOME", "SCHEMA", "STRUCTURE", "VALUES", "AGREEMENT", "NULL", "CONSTANT",
    ]  # fmt: skip
    assert lines[1].split() == ["get_counter", "4", "1.00", "1.00", "1.00", "0.50", "0.62", "0.00", "0.25"]
    assert lines[3:8] == [
        "agreement 0.60 over 5 calls; null simulator 0.00, constant simulator 0.20 (always not_found)",
        "by source: model 5 calls agreement 0.60 (null 0.00, constant 0.20); state 0 calls",
        "repeated read: 1/1 consistent (1 pair found, 1 checked)",
        "read after write: 0/1 consistent (1 pair found, 1 checked)",
        "report: " + report,
    ]
    assert lines[-1] == "agreement 0.60 is under --min-agreement 0.9"
    report_data = json.loads((tmp_path / "r.json").read_text())
    assert {k: report_data[k] for k in ("agreement", "null_agreement", "constant_agreement", "constant_code")} == {
        "agreement": 0.6, "null_agreement": 0.0, "constant_agreement": 0.2, "constant_code": "not_found",
    }  # fmt: skip
    assert report_data["read_after_write"] == {"consistent": 0, "checked": 1, "found": 1}


@pytest.mark.slow
async def test_the_fidelity_command_runs_the_agent_on_a_task_and_names_a_missing_one(tmp_path: Path) -> None:
    folder = await counters_world(tmp_path)

    def provider(body: dict[str, Any]) -> dict[str, Any]:  # the agent's requests carry tools, the simulator's not
        if body.get("tools"):
            return scripted_agent(body)
        if "step_grade" in json.dumps(body.get("response_format")):
            return scripted_grader(body)
        return faithful(CompletionRequest(messages=body["messages"], schema={}))

    async with FakeProvider(provider).running() as fake:
        model = ("--backend", "openai-compatible:sim", "--agent", "openai-compatible:agent",
                 "--grade", "openai-compatible:grader", "--base-url", fake.base_url)  # fmt: skip
        command = [sys.executable, "-m", "simia.cli", "fidelity", str(folder), *model]

        def run(*more: str) -> subprocess.CompletedProcess[str]:
            argv = [*command, *more, "--allow-writes", "--", *SERVER]
            return subprocess.run(argv, capture_output=True, text=True, timeout=120)

        done = await asyncio.to_thread(run, "--task", "two-apples")
        missing = await asyncio.to_thread(run, "--task", "nope")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "agent on task two-apples: 4 calls on the real server in 5 turns, stop: answered"
    assert "agreement 1.00 over 4 calls; null simulator 0.00, constant simulator 0.25 (always not_found)" in lines
    assert lines[-1] == (
        "grades (1-5): format 5.00  factuality 5.00  consistency 5.00  realism 5.00  quality 5.00"
        "  (1 steps not graded; see the report)"
    )
    assert missing.returncode == 2
    assert missing.stderr.strip() == "error: world 'counters' has no task 'nope' (its tasks: two-apples)"


@pytest.mark.slow
@pytest.mark.local_model
async def test_the_embedded_model_simulates_a_small_sequence_and_its_figures_are_printed(tmp_path: Path) -> None:
    """The embedded SmolLM2 as the simulator of the counters server's tools (`--backend local`): the command
    runs the whole sequence and reports every call beside the null and constant baselines; its figures are
    printed (run with -s), and held only to beating the null simulator: a 135M model's answers are what they
    are."""
    folder = await counters_world(tmp_path)
    command = [sys.executable, "-m", "simia.cli", "fidelity", str(folder), "--calls", str(tmp_path / "calls.jsonl"),
               "--backend", "local", "--report", str(tmp_path / "r.json"), "--allow-writes", "--", *SERVER]  # fmt: skip
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=900)
    print(f"\nsimia fidelity counters --backend local (embedded SmolLM2-135M):\n{done.stdout}")
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert len(report["calls"]) == len(CALLS) and done.stdout.splitlines()[0].split()[0] == "TOOL"
    # the baselines on this sequence: the null simulator scores 0, always `not_found` scores the kiwis call
    assert (report["null_agreement"], report["constant_agreement"], report["constant_code"]) == (0.0, 0.2, "not_found")
    # the state shows every counter the calls read, so a model answering from it gets names right at least:
    # above the null simulator (a model that never gives a usable answer scores exactly that)
    assert report["agreement"] > report["null_agreement"]
