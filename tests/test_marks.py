"""A test names what it needs: one that starts a process without a mark that says so fails, in any phase it runs
in and from any thread, so `make test-fast` (which deselects those marks) never starts one."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # runs pytest in a subprocess
ROOT = Path(__file__).resolve().parents[1]

TESTS = """
import subprocess
import sys
import threading

import pytest


def start() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.fixture
def starts_in_setup() -> None:
    start()


@pytest.fixture
def sandbox() -> None:  # named as the docs tests' fixture, which marks its tests `processes`
    start()


def test_in_process() -> None:
    assert sum([1, 2]) == 3


def test_starts_a_process_unmarked() -> None:
    start()


def test_starts_one_from_a_thread_unmarked() -> None:
    thread = threading.Thread(target=start)
    thread.start()
    thread.join()


def test_its_fixture_starts_one_unmarked(starts_in_setup: None) -> None:
    pass


@pytest.mark.processes
def test_starts_a_process_marked() -> None:
    start()


@pytest.mark.postgres
def test_starts_one_under_another_mark_that_needs_processes() -> None:
    start()


def test_marked_by_its_fixture(sandbox: None) -> None:
    pass
"""


def test_a_test_that_starts_a_process_fails_unless_a_mark_says_it_needs_one(tmp_path: Path) -> None:
    (tmp_path / "test_starts.py").write_text(TESTS)
    env = {k: v for k, v in os.environ.items() if k not in ("SIMIA_NO_SKIPS", "PYTEST_XDIST_WORKER")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    report = tmp_path / "report.xml"
    args = ["-p", "tests.conftest", "-p", "no:cacheprovider", "-p", "no:xdist", f"--junitxml={report}"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    found = {}
    for case in ET.parse(report).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in {"failure", "error", "skipped"}]
        found[case.get("name") or ""] = kinds[0] if kinds else "passed"
    assert run.returncode == 1, run.stdout[-3000:]
    assert found == {
        "test_in_process": "passed",
        "test_starts_a_process_unmarked": "failure",
        "test_starts_one_from_a_thread_unmarked": "failure",
        "test_its_fixture_starts_one_unmarked": "error",  # in setup
        "test_starts_a_process_marked": "passed",
        "test_starts_one_under_another_mark_that_needs_processes": "passed",
        "test_marked_by_its_fixture": "passed",
    }
    assert "test_starts_a_process_unmarked started a process (" in run.stdout
    assert "but has none of the marks processes, postgres, browser, npm" in run.stdout
