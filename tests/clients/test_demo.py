"""`simia demo` for real on the embedded model (about 2 minutes on 2 cores; CI runs it)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from simia.cli.demo import run_demo
from simia.sim import load_world
from simia.sim.verdict import outcome

# About 2 minutes alone; beside three other workers building the trainers' venvs on the same 2 cores, over 5.
pytestmark = [pytest.mark.local_model, pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]


async def test_the_demo_runs_a_judged_retail_episode_offline_and_exports_it(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="needs the `local` extra")
    from simia.sim.backends.local import LocalBackend

    out = io.StringIO()
    roles = {role: LocalBackend(slot=role) for role in ("sim", "agent", "user", "judge")}
    result = await run_demo(
        load_world(ROOT / "tool_specs" / "retail"), "cancel_by_mistake", out_dir=tmp_path, max_turns=2, out=out, **roles
    )
    text = out.getvalue()
    assert result["episode_id"].startswith("ep_")
    assert result["verdict"] is not None and result["verdict"].rule_checks  # judged, with the task's rules
    assert "Trajectory (" in text and "VERDICT    " in text and "simia serve --backend openai:" in text
    verdict = result["verdict"]
    if not verdict.training_reward():  # masked (the 135M judge may fail, or blame the user) or failed: no SFT data
        assert not (tmp_path / "sft.jsonl").exists()
        assert f"VERDICT    {outcome(verdict)}" in text and "export checks passed" not in text
    else:
        record = json.loads((tmp_path / "sft.jsonl").read_text())
        assert record["messages"][0]["role"] == "system" and len(record["tools"]) == 10
    assert (tmp_path / "demo.db").is_file()
    assert "\nStopped: " in text and f"simia view --db {tmp_path / 'demo.db'}" in text
