from __future__ import annotations

from pathlib import Path

import pytest
from simia.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_validate_passes_on_shipped_worlds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(ROOT / "tool_specs" / "mock"), str(ROOT / "tool_specs" / "retail")]) == 0
    out = capsys.readouterr().out
    assert "ok    mock" in out and "ok    retail" in out


def test_validate_fails_with_one_line_per_problem(capsys: pytest.CaptureFixture[str]) -> None:
    broken = ROOT / "tests" / "fixtures" / "broken_worlds"
    assert main(["validate", str(broken / "unknown_field"), str(broken / "bad_pointer")]) == 1
    err = capsys.readouterr().err
    assert "unknown_field/world.yaml: $.tools[0].descripton: unknown field 'descripton'" in err
    assert "bad_pointer/tasks.jsonl:1: $.expected_state['count']" in err
    assert "2 problem(s) in 2 world(s)" in err


def test_worlds_lists_name_title_tool_and_task_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worlds", "--worlds-dir", str(ROOT / "tool_specs")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "TITLE", "TOOLS", "TASKS"]
    assert lines[1].split() == ["mock", "Mock", "pantry", "3", "4"]
    assert lines[2].split()[0] == "retail" and lines[2].split()[-2:] == ["10", "11"]


def test_validate_names_each_path_that_holds_no_world_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty, mistyped = tmp_path / "empty", tmp_path / "worlds"
    empty.mkdir()
    (mistyped / "retail").mkdir(parents=True)
    (mistyped / "retail" / "world.yml").write_text("name: retail\ntools: []\n")  # .yml: not a world
    assert main(["validate", str(ROOT / "tool_specs" / "mock"), str(empty), str(mistyped)]) == 1
    captured = capsys.readouterr()
    assert "ok    mock" in captured.out
    assert captured.err.splitlines() == [
        f"FAIL  {empty}: no world here (a world is a folder with world.yaml, or pass a folder of them)",
        f"FAIL  {mistyped}: no world here (a world is a folder with world.yaml, or pass a folder of them)",
        "2 path(s) held no world",
    ]


def test_worlds_warns_of_a_worlds_dir_that_holds_no_world(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worlds", "--worlds-dir", str(ROOT / "tool_specs"), "--worlds-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert f"warning: no world in {str(tmp_path)!r} (a world is a folder with world.yaml)" in captured.err
    assert "mock" in captured.out
