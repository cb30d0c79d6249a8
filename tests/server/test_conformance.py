"""The official MCP conformance suite against `simia serve` (needs npm; select with -m conformance)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.conformance, pytest.mark.npm, pytest.mark.processes, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_the_mcp_conformance_suite_passes_every_generic_server_scenario() -> None:
    assert shutil.which("npm"), "npm is needed to install the conformance suite (see .ci/conformance)"
    env = {**os.environ, "SIMIA": f"{sys.executable} -m simia.cli"}
    run = subprocess.run(
        ["bash", str(ROOT / ".ci" / "conformance" / "run.sh")], env=env, capture_output=True, text=True, timeout=600
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    for scenario in (
        "server-initialize",
        "ping",
        "tools-list",
        "json-schema-2020-12",
        "dns-rebinding-protection",
        "server-sse-multiple-streams",
        "tools-call-simple-text",
        "tools-call-error",
    ):
        assert output.count(f"✓ {scenario}:") == 2, f"{scenario} did not pass on both URLs"
    assert output.count("Baseline check passed: all failures are expected.") == 2
