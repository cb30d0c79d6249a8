"""`make demo` and `make test` install what is missing first, and nothing when everything is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # runs `make -n`
ROOT = Path(__file__).resolve().parent.parent


def planned(target: str, venv: Path) -> list[str]:
    """The commands `make TARGET` would run (dry run) with the venv at `venv`."""
    result = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"], capture_output=True, text=True, check=True, timeout=60
    )
    return [line for line in result.stdout.splitlines() if not line.startswith("make")]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize(("target", "runs"), [("test", "-m pytest"), ("demo", "simia demo")])
def test_a_fresh_checkout_installs_then_runs_and_an_installed_one_only_runs(
    tmp_path: Path, target: str, runs: str
) -> None:
    venv = tmp_path / "venv"
    fresh = planned(target, venv)
    assert any("pip install" in line and "[dev,local,recipes,train,docs]" in line for line in fresh)
    assert runs in fresh[-1]
    venv.mkdir()
    stamp = venv / ".simia-installed"
    stamp.touch()
    newer = (ROOT / "pyproject.toml").stat().st_mtime + 10
    os.utime(stamp, (newer, newer))
    installed = planned(target, venv)
    assert len(installed) == 1 and runs in installed[0]
    os.utime(stamp, (newer - 20, newer - 20))  # pyproject.toml changed since: install again
    assert any("pip install" in line for line in planned(target, venv))
