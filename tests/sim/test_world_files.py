"""Writing world folders: whole and valid or not at all; nothing replaced without force."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from simia.sim.errors import WorldError, WorldExistsError
from simia.sim.world import atomic_write_text, write_world

TOOL = {"name": "ping", "inputSchema": {"type": "object", "properties": {}}}


def world_files(title: str = "Tiny", tools: list[dict[str, object]] | None = None) -> dict[str, str]:
    return {
        "world.yaml": f"name: tiny\ntitle: {title}\n",
        "tools.json": json.dumps(tools if tools is not None else [TOOL]),
        "examples/one.json": json.dumps(
            {
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "c1", "type": "function", "function": {"name": "ping", "arguments": "{}"}}
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "pong"},
                ]
            }
        ),
    }


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_atomic_write_text_replaces_the_whole_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    atomic_write_text(target, '{"new": true}')
    assert target.read_text() == '{"new": true}'
    assert leftovers(tmp_path) == []


def test_a_written_world_loads_from_its_final_folder_with_every_file(tmp_path: Path) -> None:
    world = write_world(tmp_path / "worlds" / "tiny", world_files())
    assert world.source == str(tmp_path / "worlds" / "tiny")
    assert (world.name, world.title, [t.name for t in world.tools], len(world.examples)) == (
        "tiny",
        "Tiny",
        ["ping"],
        1,
    )
    assert sorted(p.name for p in (tmp_path / "worlds" / "tiny").iterdir()) == ["examples", "tools.json", "world.yaml"]
    assert leftovers(tmp_path / "worlds") == []


def test_an_invalid_world_is_never_written_and_its_problems_name_the_final_folder(tmp_path: Path) -> None:
    bad = world_files(tools=[{"name": "bad name", "inputSchema": {"type": "object"}}])
    with pytest.raises(WorldError) as raised:
        write_world(tmp_path / "tiny", bad)
    assert "is not allowed by MCP" in str(raised.value)
    assert str(tmp_path / "tiny" / "tools.json") in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_an_existing_folder_is_kept_without_force_and_replaced_with_it(tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    write_world(folder, world_files(title="First"))
    (folder / "tasks.jsonl").write_text('{"id": "t", "instruction": "ping"}\n')
    with pytest.raises(WorldExistsError, match="pass --force"):
        write_world(folder, world_files(title="Second"))
    assert "First" in (folder / "world.yaml").read_text()
    replaced = write_world(folder, world_files(title="Second"), force=True)
    assert replaced.title == "Second" and not (folder / "tasks.jsonl").exists()
    assert leftovers(tmp_path) == []


def test_a_failed_forced_write_keeps_the_old_world(tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    write_world(folder, world_files(title="First"))
    with pytest.raises(WorldError):
        write_world(folder, world_files(tools=[]), force=True)
    assert "First" in (folder / "world.yaml").read_text()
    assert leftovers(tmp_path) == []


def test_file_paths_must_stay_inside_the_world_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="inside the world folder"):
        write_world(tmp_path / "tiny", {**world_files(), "../escape.txt": "x"})
    assert list(tmp_path.iterdir()) == []


def test_a_file_in_the_way_is_refused_even_with_force(tmp_path: Path) -> None:
    (tmp_path / "tiny").write_text("not a folder")
    with pytest.raises(WorldExistsError, match="is a file"):
        write_world(tmp_path / "tiny", world_files(), force=True)
