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
