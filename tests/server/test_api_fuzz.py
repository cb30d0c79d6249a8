"""API fuzzing in CI: a few hundred Schemathesis cases from `/openapi.json` against live `simia serve` processes,
with and without tokens (`bench/fuzz_api.py`; its long run is `--cases 10000`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _fuzz_api() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_api", BENCH / "fuzz_api.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_api"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(600)  # 400 generated requests against a real server: 240 s passed under a loaded 2-core CI run
@pytest.mark.processes  # bench/fuzz_api.py's `simia serve`
def test_a_few_hundred_generated_requests_get_no_5xx_and_only_documented_answers() -> None:
    fuzz = _fuzz_api()
    report = fuzz.run(cases=400, seed=0)
    assert report.failures == {}
    assert report.cases >= 400
    assert report.by_status[401] > 0 and report.by_status[404] > 0 and report.by_status[400] > 0
    assert report.by_status[200] + report.by_status[201] > 0


def test_the_fuzzer_reports_an_answer_that_breaks_the_error_contract() -> None:
    """The checks can fail: a plain-text 404 and a leaked foreign episode are both caught."""
    fuzz = _fuzz_api()

    class Answer:
        def __init__(self, status: int, text: str, ctype: str = "application/json") -> None:
            self.status_code, self.text, self.headers = status, text, {"content-type": ctype}

        def json(self) -> object:
            import json

            return json.loads(self.text)

    class Op:
        path = "/v1/episodes/{episode_id}"

    class Case:
        operation = Op()

    problems = fuzz._own_checks(Answer(404, "Not Found", "text/plain"), Case(), "own", foreign_id=False)
    assert problems == ["HTTP 404 without the error body"]
    assert fuzz._own_checks(Answer(200, "{}"), Case(), "own", foreign_id=True) == [
        "another principal's episode answered HTTP 200"
    ]
    assert fuzz._own_checks(Answer(200, "{}"), Case(), "none", foreign_id=False) == [
        "a request with none token got HTTP 200, not 401"
    ]
    assert fuzz._own_checks(Answer(500, '{"error": {"code": "x", "message": "y"}}'), Case(), "own", False) == [
        "HTTP 500"
    ]
