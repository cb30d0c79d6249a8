"""SIMIA_NO_SKIPS=1 (what CI sets): a test or module skipped for a missing extra fails instead of passing silently."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = [pytest.mark.processes, pytest.mark.slow]  # runs pytest in a subprocess
ROOT = Path(__file__).resolve().parents[1]

MODULE_SKIP = """
import pytest

pytest.importorskip("simia_extra_nobody_installed")


def test_never_collected() -> None:
    pass
"""

TEST_SKIPS = """
import pytest


def test_needs_an_extra() -> None:
    pytest.importorskip("simia_extra_nobody_installed", reason="needs the `nope` extra")


@pytest.mark.skipif(True, reason="a condition")
def test_skipped_by_a_mark() -> None:
    pass


@pytest.mark.allowed_skip
def test_allowed_to_skip() -> None:
    pytest.skip("intended: nothing to do here")


@pytest.mark.xfail(strict=True, reason="a known bug")
def test_a_known_bug() -> None:
    raise AssertionError


def test_runs() -> None:
    pass
"""


def outcomes(tmp_path: Path, no_skips: bool) -> tuple[int, dict[str, str]]:
    """Run pytest with the suite's conftest as a plugin on two small modules; exit code and name -> outcome."""
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    (tmp_path / "test_skips.py").write_text(TEST_SKIPS)
    env = {k: v for k, v in os.environ.items() if k != "SIMIA_NO_SKIPS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if no_skips:
        env["SIMIA_NO_SKIPS"] = "1"
    report = tmp_path / "report.xml"
    # a collection error stops a run before any test (exit 2): go on here, to see every outcome of one run
    args = ["-p", "tests.conftest", "-p", "no:cacheprovider", "--continue-on-collection-errors", f"--junitxml={report}"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = {}
    for case in ET.parse(report).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in {"failure", "error", "skipped"}]
        skipped = next((c for c in case if c.tag == "skipped"), None)
        xfailed = skipped is not None and skipped.get("type") == "pytest.xfail"
        found[case.get("name") or ""] = "xfailed" if xfailed else (kinds[0] if kinds else "passed")
    return run.returncode, found


def test_without_the_variable_skips_stay_skips(tmp_path: Path) -> None:
    code, found = outcomes(tmp_path, no_skips=False)
    assert code == 0
    assert found == {
        "test_module_skip": "skipped",
        "test_needs_an_extra": "skipped",
        "test_skipped_by_a_mark": "skipped",
        "test_allowed_to_skip": "skipped",
        "test_a_known_bug": "xfailed",
        "test_runs": "passed",
    }


def test_with_simia_no_skips_a_skip_fails_unless_allowed(tmp_path: Path) -> None:
    code, found = outcomes(tmp_path, no_skips=True)
    assert code == 1
    assert found == {
        "test_module_skip": "error",  # the whole module was skipped at collection
        "test_needs_an_extra": "failure",
        "test_skipped_by_a_mark": "error",  # skipped in setup
        "test_allowed_to_skip": "skipped",
        "test_a_known_bug": "xfailed",
        "test_runs": "passed",
    }
