"""`simia bootstrap`: a model drafts state and tasks for a world with only tools; every draft is checked."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from simia.sim import load_world
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.engine.grounded import plan_call
from simia.sim.importers import BootstrapConfig, bootstrap, check_task, import_openapi, load_spec
from simia.sim.judging import rule_checks
from simia.sim.schema import validate_instance
from simia.sim.world import Grounding, Task, write_world
from simia.testing import FakeProvider

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = {
    "type": "object",
    "required": ["items"],
    "properties": {"items": {"type": "object", "additionalProperties": {"type": "object", "required": ["qty"]}}},
}
STATE = {"items": {"apple": {"qty": 3, "unit": "pieces"}, "milk": {"qty": 0, "unit": "litres"}}}
GOOD = {
    "id": "restock_milk",
    "instruction": "Set the milk to 2 litres.",
    "user_hidden": "It is for breakfast.",
    "rubric": "The agent sets milk to 2 and confirms.",
    "expected_state": {"/items/milk/qty": 2},
}
ALREADY_TRUE = {**GOOD, "id": "keep_apples", "expected_state": {"/items/apple/qty": 3}}
UNREACHABLE = {**GOOD, "id": "fly", "expected_state": {"/planes/a380/seats": 4}}
SECOND = {**GOOD, "id": "more_apples", "instruction": "Make it 6 apples.", "expected_state": {"/items/apple/qty": 6}}


def tools_only_world(base: Path) -> Path:
    """The mock world's tools and policy, without state, state schema or tasks (as an import leaves it)."""
    folder = base / "pantry"
    folder.mkdir(parents=True)
    raw = yaml.safe_load((ROOT / "tool_specs" / "mock" / "world.yaml").read_text())
    raw.pop("state_schema", None)
    raw["name"] = "pantry"
    (folder / "world.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return folder


def drafter(request: CompletionRequest) -> dict[str, Any]:
    """A model that drafts the pantry; its first task batch has two bad tasks, fixed when told."""
    if request.schema_name == "world_state":
        return {"state_schema": SCHEMA, "state": STATE}
    told = any("already holds" in str(m["content"]) for m in request.messages)
    return {"tasks": [GOOD, SECOND] if told else [GOOD, ALREADY_TRUE, UNREACHABLE]}


async def test_bootstrap_writes_a_state_and_tasks_whose_rules_fail_before_the_agent_acts(tmp_path: Path) -> None:
    folder = tools_only_world(tmp_path)
    backend = FunctionBackend(drafter)
    report = await bootstrap(folder, backend, BootstrapConfig(tasks=2))
    world = load_world(folder)  # everything written loads
    assert world.initial_state == STATE and world.state_schema == SCHEMA
    assert [t.id for t in world.tasks] == ["restock_milk", "more_apples"]
    assert all(not any(c.passed for c in rule_checks(t, world.initial_state)) for t in world.tasks)
    assert (report.state, report.tasks_written, report.tasks_dropped) == (
        "drafted",
        ["restock_milk", "more_apples"],
        [],
    )
    feedback = str(backend.requests[2].messages[-1]["content"])  # the second task draft was told what was wrong
    assert "task 'keep_apples': every rule already holds before the agent acts" in feedback
    assert "task 'fly': /planes/a380/seats: its parent is not in the state" in feedback
    assert json.loads((folder / "bootstrap_report.json").read_text())["tasks_written"] == [
        "restock_milk",
        "more_apples",
    ]


async def test_a_rerun_keeps_what_exists_and_force_replaces_it(tmp_path: Path) -> None:
    folder = tools_only_world(tmp_path)
    await bootstrap(folder, FunctionBackend(drafter), BootstrapConfig(tasks=1))
    hand = {**STATE, "items": {**STATE["items"], "rice": {"qty": 1}}}
    (folder / "state.json").write_text(json.dumps(hand))
    again = FunctionBackend(drafter)
    report = await bootstrap(folder, again, BootstrapConfig(tasks=2))
    assert report.state == "kept (existing state.json)" and report.tasks_kept == ["restock_milk"]
    assert load_world(folder).initial_state == hand  # the hand-written state survived
    assert {r.schema_name for r in again.requests} == {"world_tasks", "world_groundings"}  # no state was drafted
    forced = await bootstrap(folder, FunctionBackend(drafter), BootstrapConfig(tasks=1, force=True))
    assert forced.state == "drafted" and load_world(folder).initial_state == STATE


async def test_drafts_that_stay_bad_are_dropped_with_reasons_and_nothing_breaks(tmp_path: Path) -> None:
    folder = tools_only_world(tmp_path)

    def stubborn(request: CompletionRequest) -> dict[str, Any]:
        if request.schema_name == "world_state":
            return {"state_schema": SCHEMA, "state": {"items": {"apple": {"unit": "pieces"}}}}  # breaks the schema
        return {"tasks": [ALREADY_TRUE]}

    report = await bootstrap(folder, FunctionBackend(stubborn), BootstrapConfig(tasks=1, max_attempts=2))
    assert report.state == "dropped" and report.state_problems[0].startswith("state breaks state_schema")
    assert not (folder / "state.json").exists() and not (folder / "tasks.jsonl").exists()
    assert "state_schema" not in yaml.safe_load((folder / "world.yaml").read_text())


def test_check_task_names_each_problem() -> None:
    bad_patch = Task.model_validate({**GOOD, "initial_state_patch": [{"op": "remove", "path": "/nothing"}]})
    assert check_task(bad_patch, STATE, SCHEMA)[0].startswith("initial_state_patch does not apply")
    assert check_task(Task.model_validate({**GOOD, "id": "a b"}), STATE, None) == [
        "id 'a b' must be 1-64 letters, digits, '_', '.', '-'"
    ]
    assert check_task(Task.model_validate(GOOD), STATE, SCHEMA) == []


async def simia(*args: str) -> subprocess.CompletedProcess[str]:
    """`simia ARGS` as a subprocess (in a thread: the fake provider answers from this event loop)."""
    command = [sys.executable, "-m", "simia.cli", *args]
    return await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
@pytest.mark.processes  # `simia bootstrap` and `simia rollout`
async def test_the_bootstrap_command_drafts_through_a_provider_then_a_rollout_is_judged(tmp_path: Path) -> None:
    folder = tools_only_world(tmp_path)

    def provider(body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("response_format", {}).get("json_schema", {}).get("name", "")
        return drafter(CompletionRequest(messages=body["messages"], schema={}, schema_name=name))

    async with FakeProvider(provider).running() as fake:
        base = ("--backend", "openai-compatible:drafter", "--base-url", fake.base_url)
        done = await simia("bootstrap", str(folder), "--tasks", "2", *base)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("world pantry: state drafted; tasks written 2, kept 0, dropped 0")
    validated = await simia("validate", str(folder))
    assert validated.returncode == 0, validated.stderr
    set_milk = {"name": "set_quantity", "arguments": {"name": "milk", "qty": 2}}
    agent = tmp_path / "agent.json"
    agent.write_text(json.dumps([
        {"match": "Set the milk", "data": {"message": "", "tool_calls": [set_milk]}},
        {"data": {"message": "Done.", "tool_calls": []}},
    ]))  # fmt: skip
    patch = [{"op": "replace", "path": "/items/milk/qty", "value": 2}]
    answer = {
        "is_error": False,
        "error_code": None,
        "message": "ok",
        "output": set_milk["arguments"],
        "state_patch": patch,
    }
    user = tmp_path / "user.json"  # the task has user_hidden facts: a simulated user plays it
    user.write_text(json.dumps([{"data": {"message": "Set the milk to 2 litres, please.", "done": True}}]))
    sim = tmp_path / "sim.json"
    verdict = {"criteria": [], "reasoning": "milk set to 2", "reward": 1}  # the in-process judge is this model too
    sim.write_text(
        json.dumps([{"match": "Call: set_quantity", "data": answer}, {"match": "# Rubric", "data": verdict}])
    )
    rolled = await simia(
        "rollout", "--world", "pantry", "--worlds-dir", str(tmp_path), "--tasks", "restock_milk",
        "--agent", f"scripted:{agent}", "--user", f"scripted:{user}", "--sim-backend", f"scripted:{sim}",
        "--out", str(tmp_path / "runs"),
    )  # fmt: skip
    assert rolled.returncode == 0, rolled.stderr
    [result] = [json.loads(line) for line in (tmp_path / "runs" / "results.jsonl").read_text().splitlines()]
    assert (result["status"], result["verdict_status"], result["reward"]) == ("judged", "ok", 1)


@pytest.mark.local_model
@pytest.mark.slow
async def test_on_the_embedded_model_bootstrap_writes_a_valid_world_or_says_why_not(tmp_path: Path) -> None:
    from simia.sim.backends.local import LocalBackend

    folder = tools_only_world(tmp_path)
    report = await bootstrap(
        folder, LocalBackend(slot="bootstrap"), BootstrapConfig(tasks=1, max_attempts=1, max_tokens=384)
    )
    world = load_world(folder)  # whatever was written loads
    print(report.render())  # the figure, not asserted: the 135M model rarely drafts usable tasks
    if report.state == "drafted":
        assert world.initial_state and (folder / "state.json").is_file()
    else:
        assert report.state == "dropped" and report.state_problems and not (folder / "state.json").exists()
    assert len(world.tasks) == len(report.tasks_written)
    assert all(d["problems"] for d in report.tasks_dropped)
    # What was kept is checked again here, independently of bootstrap's own checks: a drafted state fits its
    # schema, and every written task points into it and is not already done before the agent acts.
    assert validate_instance(world.state_schema or {}, world.initial_state) == []
    for task in world.tasks:
        assert check_task(task, world.initial_state, world.state_schema) == []
        assert not all(c.passed for c in rule_checks(task, world.initial_state))
    # The null drafter (a model that answers nothing usable) on the same world writes nothing and says so:
    # the figure above is measured against this zero.
    null_folder = tools_only_world(tmp_path / "null")
    null = await bootstrap(null_folder, FunctionBackend(lambda request: {}), BootstrapConfig(tasks=1, max_attempts=1))
    assert (null.state, null.tasks_written, sorted(p.name for p in null_folder.iterdir())) == (
        "dropped",
        [],
        ["bootstrap_report.json", "world.yaml"],
    )
    print(f"embedded: state {report.state}, {len(report.tasks_written)} task(s); null drafter: state dropped, 0")


async def test_a_hand_written_state_schema_is_kept_and_the_drafted_state_must_satisfy_it(tmp_path: Path) -> None:
    folder = tools_only_world(tmp_path)
    hand = {"type": "object", "properties": {"items": {"type": "object", "maxProperties": 1}}}
    raw = yaml.safe_load((folder / "world.yaml").read_text())
    (folder / "world.yaml").write_text(yaml.safe_dump({**raw, "state_schema": hand}, sort_keys=False))
    one = {"items": {"milk": {"qty": 0, "unit": "litres"}}}

    def careless(request: CompletionRequest) -> dict[str, Any]:
        if request.schema_name == "world_state":  # its own schema first, and a state the kept one refuses
            told = "state breaks state_schema" in str(request.messages[-1]["content"])
            return {"state_schema": {"type": "object"}, "state": one if told else STATE}
        return {"tasks": [GOOD]}

    backend = FunctionBackend(careless)
    report = await bootstrap(folder, backend, BootstrapConfig(tasks=1))
    world = load_world(folder)
    assert (world.state_schema, world.initial_state) == (hand, one)
    assert report.state == "drafted (to the existing state_schema)"
    assert "maxProperties" in str(backend.requests[0].messages[1]["content"])  # the model was shown it
    forced = await bootstrap(folder, FunctionBackend(drafter), BootstrapConfig(tasks=1, force=True))
    assert forced.state == "drafted" and load_world(folder).state_schema == SCHEMA


LIBRARY = Path(__file__).with_name("library_lending_openapi_3_1.yaml")
EMMA = {"id": "emma", "title": "Emma", "author": "Jane Austen", "year": 1815, "available": True}
DUNE = {"id": "dune", "title": "Dune", "author": "Frank Herbert", "available": False}
LIBRARY_TASK = {
    "id": "lend_dune",
    "instruction": "Mark Dune as available again.",
    "rubric": "Dune is available.",
    "expected_state": {"/books/dune/available": True},
}


def library_drafter(request: CompletionRequest) -> dict[str, Any]:
    """Drafts the books as a list first (the layout the declarations cannot read), keyed by id when told."""
    if request.schema_name == "world_state":
        told = "keys are record ids" in str(request.messages[-1]["content"])
        books: Any = {"emma": EMMA, "dune": DUNE} if told else [EMMA, DUNE]
        return {"state_schema": {"type": "object"}, "state": {"books": books, "members": {}, "loans": {}}}
    return {"tasks": [LIBRARY_TASK]}


async def test_an_imports_skeleton_is_drafted_over_keyed_by_id_so_the_declarations_answer_from_it(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "library"
    imported = import_openapi(load_spec(LIBRARY), base_uri=LIBRARY.resolve().as_uri(), name="library")
    write_world(folder, imported.files())
    assert load_world(folder).initial_state == {"books": {}, "members": {}, "loans": {}}
    backend = FunctionBackend(library_drafter)
    report = await bootstrap(folder, backend, BootstrapConfig(tasks=1))
    assert report.state == "drafted" and report.tasks_written == ["lend_dune"]
    assert "state.books must be an object whose keys are record ids" in str(backend.requests[1].messages)
    world = load_world(folder)
    assert world.initial_state["books"] == {"emma": EMMA, "dune": DUNE}
    get_book, list_books = world.tools_by_name["getBook"], world.tools_by_name["listBooks"]
    assert plan_call(world, get_book, world.base_state, {"book_id": "dune"}).output == DUNE  # type: ignore[union-attr]
    listed = plan_call(world, list_books, world.base_state, {})
    assert listed.output == {"books": [EMMA, DUNE]}  # type: ignore[union-attr]
    again = await bootstrap(folder, FunctionBackend(library_drafter), BootstrapConfig(tasks=1))
    assert again.state == "kept (existing state.json)"  # drafted once, it is the world's state now


async def test_bootstrapped_files_get_the_modes_new_files_get(tmp_path: Path) -> None:
    folder = tools_only_world(tmp_path)
    await bootstrap(folder, FunctionBackend(drafter), BootstrapConfig(tasks=1))
    mask = os.umask(0)
    os.umask(mask)
    modes = {name: stat.S_IMODE((folder / name).stat().st_mode) for name in ("state.json", "world.yaml", "tasks.jsonl")}
    assert modes == dict.fromkeys(modes, 0o666 & ~mask)


GET_ITEM = {"read": {"pointer": "/items/{name}", "missing": "item_not_found"}, "mode": "guided"}


def grounding_drafter(proposals: list[list[dict[str, Any]]]) -> Any:
    """A model that drafts the pantry's state and tasks, then each next batch of grounding proposals."""
    batches = iter(proposals)

    def answer(request: CompletionRequest) -> dict[str, Any]:
        if request.schema_name == "world_groundings":
            return {"groundings": next(batches)}
        return drafter(request)

    return answer


async def test_groundings_are_drafted_for_undeclared_tools_and_kept_only_when_they_run_on_the_state(
    tmp_path: Path,
) -> None:
    folder = tools_only_world(tmp_path)
    exact = {"tool": "get_item", "grounding": {"read": {"pointer": "/items/{name}", "missing": "item_not_found"}}}
    not_an_argument = {"tool": "list_items", "grounding": {"read": {"pointer": "/items/{kind}", "key": "items"}}}
    exists = {"pointer": "/items/{name}", "exists": True, "error": "gone"}
    unknown_code = {"tool": "set_quantity", "grounding": {"preconditions": [exists]}}
    wrong_layout = {
        "tool": "set_quantity",
        "grounding": {"effects": [{"op": "replace", "path": "/stock/{name}", "value": "{qty}"}]},
    }
    batches = [[exact, not_an_argument, unknown_code], [{"tool": "get_item", "grounding": GET_ITEM}, wrong_layout], []]
    backend = FunctionBackend(grounding_drafter(batches))
    report = await bootstrap(folder, backend, BootstrapConfig(tasks=1))
    assert report.groundings_written == ["get_item"]
    dropped = {d["tool"]: " ".join(d["problems"]) for d in report.groundings_dropped}
    assert set(dropped) == {"list_items", "set_quantity"}
    assert "kind" in dropped["list_items"] and "/stock" in dropped["set_quantity"]
    told = str([r for r in backend.requests if r.schema_name == "world_groundings"][1].messages[-1]["content"])
    # an exact read of records without `name` runs, but its answer would break get_item's outputSchema
    assert 'called with {"name":"apple"} on the drafted state it fails' in told and "outputSchema" in told
    assert "'gone'" in told
    world = load_world(folder)  # what was written loads, and plans from the state
    get_item = world.tools_by_name["get_item"]
    assert get_item.grounding == Grounding.model_validate(GET_ITEM)
    assert plan_call(world, get_item, world.base_state, {"name": "apple"}).output == STATE["items"]["apple"]  # type: ignore[union-attr]
    assert world.tools_by_name["list_items"].grounding is None
    assert "groundings written 1, dropped 2" in report.render()


async def test_an_mcp_imports_tools_json_gets_the_groundings_and_no_groundings_drafts_none(tmp_path: Path) -> None:
    folder = tmp_path / "memory"
    shutil.copytree(ROOT / "tests" / "fixtures" / "imported" / "memory", folder)
    graph = {"entities": [{"name": "Ada", "entityType": "person", "observations": ["writes code"]}], "relations": []}
    read_graph = {"read": {"pointer": "/graph"}}

    def answer(request: CompletionRequest) -> dict[str, Any]:
        if request.schema_name == "world_state":
            return {"state_schema": {"type": "object"}, "state": {"graph": graph}}
        if request.schema_name == "world_groundings":
            return {"groundings": [{"tool": "read_graph", "grounding": read_graph}]}
        return {"tasks": []}

    skipped = await bootstrap(folder, FunctionBackend(answer), BootstrapConfig(tasks=1, groundings=False))
    assert skipped.groundings_written == [] and load_world(folder).tools_by_name["read_graph"].grounding is None
    report = await bootstrap(folder, FunctionBackend(answer), BootstrapConfig(tasks=1))
    assert report.groundings_written == ["read_graph"]
    tools = json.loads((folder / "tools.json").read_text())
    assert [t["name"] for t in tools if "grounding" in t] == ["read_graph"]
    world = load_world(folder)
    assert plan_call(world, world.tools_by_name["read_graph"], world.base_state, {}).output == graph  # type: ignore[union-attr]
