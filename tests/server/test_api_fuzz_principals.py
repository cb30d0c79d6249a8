"""The API fuzzer's "another principal's token" case is real (`bench/fuzz_api.py`): it sends the second
principal's valid token, and a server that lets that token read the first principal's episodes is caught."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import fuzz_api  # type: ignore[import-not-found]  # bench/ is a folder of scripts, not a package


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.processes  # bench/fuzz_api.py's `simia serve`
def test_the_fuzzer_catches_a_server_that_shows_one_principals_episodes_to_anothers_token() -> None:
    """Test of the test: the control server gives bob's token to alice, so bob's token reads alice's episodes."""
    report = fuzz_api.run_mixed_up(cases=300, seed=0)
    caught = {key.split(": ", 1)[1] for key in report.failures if "another principal's token" in key}
    leaks = {f"another principal's token got HTTP {status} on the caller's episode" for status in (200, 201)}
    assert caught and caught <= leaks  # read, forked or ended alice's episode with bob's token; never a 401
