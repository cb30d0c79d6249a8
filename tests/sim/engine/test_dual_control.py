"""Dual control in the engine and the world files: the user's own tools (`user_tools.json`), the world's named
functions, triggers kept after every call that succeeds, and task assertions computed on the final state. Every
call here is answered from the state: the scripted backend has nothing scripted, so a model call fails the test.
Bad files fail the load naming the file, the field and the fix; a failing trigger is an infra error that changes
nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from simia.sim.backends import ScriptedBackend
from simia.sim.engine import Simulator, ToolCall
from simia.sim.errors import WorldError
from simia.sim.judging.rules import rule_checks
from simia.sim.world import apply_patch, load_world

PHONE = Path(__file__).resolve().parents[2] / "fixtures" / "worlds" / "phone"


def copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(PHONE, tmp_path / "phone"))


def edit_yaml(folder: Path, change: Any) -> None:
    spec = yaml.safe_load((folder / "world.yaml").read_text())
    change(spec)
    (folder / "world.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


async def test_a_user_call_reads_through_the_worlds_functions_and_the_trigger_runs_after_the_answer() -> None:
    world = load_world(PHONE)
    task = world.task("no_service")
    assert task is not None
    state = apply_patch(world.initial_state, task.initial_state_patch, None)
    sim = Simulator(ScriptedBackend([]))
    resumed = await sim.step(world, state, [], ToolCall("resume_line", {"line_id": "L1"}))
    assert resumed.text == "Line L1 resumed"
    assert resumed.state_patch[-1] == {"op": "replace", "path": "/phone/line_active", "value": True}
    toggled = await sim.step(world, resumed.state, [], ToolCall("toggle_airplane_mode", {}, side="user"))
    assert toggled.text == "Airplane Mode is now OFF.\nStatus Bar: Service"
    assert toggled.state_patch == [{"op": "replace", "path": "/phone/airplane_mode", "value": False}]  # no restated
    read = await sim.step(world, toggled.state, [], ToolCall("check_status_bar", {}, side="user"))
    assert (read.text, read.state_patch) == ("Status Bar: Service", [])
    unknown = await sim.step(world, state, [], ToolCall("resume_line", {"line_id": "L1"}, side="user"))
    assert unknown.error_code == "unknown_tool"
    assert "The user's tools: check_status_bar, toggle_airplane_mode" in unknown.text


async def test_a_trigger_that_fails_is_an_infra_error_and_the_call_changes_nothing(tmp_path: Path) -> None:
    folder = copy(tmp_path)
    edit_yaml(folder, lambda spec: spec["triggers"].append({"name": "broken", "expr": "{'op': 'replace'}"}))
    world = load_world(folder)
    step = await Simulator(ScriptedBackend([])).step(
        world, world.initial_state, [], ToolCall("suspend_line", {"line_id": "L1"})
    )
    assert (step.is_error, step.error_kind, step.error_code) == (True, "infra", "invalid_simulation")
    assert (
        "trigger 'broken'" in step.detail
        and "its expression gives an operation whose path is no JSON Pointer" in step.detail
    )
    assert step.state is world.initial_state and step.state_patch == []


def test_the_assertion_holds_only_on_a_state_where_the_phone_has_service() -> None:
    world = load_world(PHONE)
    task = world.task("no_service")
    assert task is not None
    start = apply_patch(world.initial_state, task.initial_state_patch, None)
    fixed = apply_patch(
        start,
        [
            {"op": "replace", "path": "/phone/line_active", "value": True},
            {"op": "replace", "path": "/phone/airplane_mode", "value": False},
        ],
        None,
    )
    (done,) = rule_checks(task, fixed, functions=world.functions)
    (idle,) = rule_checks(task, start, functions=world.functions)
    (unbound,) = rule_checks(task, fixed)  # without the world's functions the expression cannot run
    assert (done.passed, done.expected, idle.passed, unbound.passed) == (True, "the phone has service", False, False)
    assert str(unbound.actual).startswith("failed:")


@pytest.mark.parametrize(
    ("change", "where", "words"),
    [
        (
            lambda f: (f / "user_tools.json").write_text(
                json.dumps([{"name": "resume_line", "inputSchema": {"type": "object"}}])
            ),
            "user_tools.json",
            "user tool 'resume_line' has the name of an agent tool",
        ),
        (
            lambda f: edit_yaml(f, lambda s: s["functions"].update({"args": "function() { 1 }"})),
            "$.functions.args",
            "function name 'args' is not usable",
        ),
        (
            lambda f: edit_yaml(f, lambda s: s["functions"].update({"bar": "1 + 1"})),
            "$.functions.bar",
            "it is not a function",
        ),
        (
            lambda f: edit_yaml(f, lambda s: s["triggers"].append({"name": "t", "expr": "$state.("})),
            "$.triggers[1].expr",
            "does not parse",
        ),
        (
            lambda f: (f / "tasks.jsonl").write_text(
                json.dumps({"id": "t", "instruction": "x", "assertions": [{"expr": "1 +"}]}) + "\n"
            ),
            "tasks.jsonl",
            "does not parse",
        ),
    ],
    ids=["user-tool-collides", "reserved-function-name", "function-not-a-function", "trigger-parse", "assertion-parse"],
)
def test_bad_dual_control_files_fail_the_load_naming_the_file_the_field_and_the_fix(
    tmp_path: Path, change: Any, where: str, words: str
) -> None:
    folder = copy(tmp_path)
    change(folder)
    with pytest.raises(WorldError) as caught:
        load_world(folder)
    found = [i for i in caught.value.issues if words in i.message]
    assert found, [str(i) for i in caught.value.issues]
    assert where in f"{found[0].file} {found[0].path}"
    assert found[0].hint
