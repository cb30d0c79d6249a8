"""`simia demo` writes its SFT record only after the export checks, for a successful episode, and says why it stopped
and where its results are (scripted models, no embedded model)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from simia.cli import build_parser
from simia.cli.demo import run_demo
from simia.sim import load_world
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.testing import mock_world_answer

ROOT = Path(__file__).resolve().parents[2]
MOCK = load_world(ROOT / "tool_specs" / "mock")


def agent_setting(qty: Any) -> FunctionBackend:
    def answer(request: CompletionRequest) -> dict[str, Any]:
        if str(request.messages[-1]["content"]).startswith("Result of"):
            return {"message": "Done.", "tool_calls": []}
        return {"message": "", "tool_calls": [{"name": "set_quantity", "arguments": {"name": "milk", "qty": qty}}]}

    return FunctionBackend(answer)


def user(request: CompletionRequest) -> dict[str, Any]:
    return {"message": "Set the milk to 4 litres, please.", "done": True}


async def demo(tmp_path: Path, qty: Any) -> tuple[dict[str, Any], str]:
    out = io.StringIO()
    result = await run_demo(
        MOCK,
        "restock_milk",
        sim=FunctionBackend(mock_world_answer),
        agent=agent_setting(qty),
        user=FunctionBackend(user),
        judge=FunctionBackend(lambda r: {"criteria": [], "reasoning": "ok", "reward": 1}),
        out_dir=tmp_path,
        max_turns=2,
        out=out,
    )
    return result, out.getvalue()


async def test_a_good_trajectory_is_written_as_an_sft_record(tmp_path: Path) -> None:
    result, text = await demo(tmp_path, 4)
    assert result["record"] == str(tmp_path / "sft.jsonl") and result["dropped"] == []
    record = json.loads((tmp_path / "sft.jsonl").read_text())
    assert [m["role"] for m in record["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert "export checks passed" in text
    assert "Stopped: the agent gave its final answer\n" in text


async def test_a_failed_episode_is_no_sft_record_and_the_demo_says_why_it_stopped_and_where_it_is(
    tmp_path: Path,
) -> None:
    """The agent sets the milk to 3 (the task wants 4), in its 2 turns: the episode is judged and failed, a real
    reward 0, which SFT data never holds (`simia export --min-reward 1`); the demo wrote it under "export checks
    passed". It now says so, why the episode stopped, and where its results are and how to see them."""
    result, text = await demo(tmp_path, 3)
    assert result["verdict"] is not None and result["verdict"].reward == 0
    assert result["record"] is None and not (tmp_path / "sft.jsonl").exists()
    assert result["dropped"] == [
        "the episode failed its task (reward 0): SFT data is successes, as `simia export --min-reward 1` writes"
    ]
    assert "export checks passed" not in text
    lines = text.splitlines()
    assert "Stopped: the agent gave its final answer" in lines
    assert (
        f"Results: {tmp_path / 'results.jsonl'} (one line per run, every run appended), {tmp_path / 'summary.json'} "
        f"(this run); in the browser: simia view --db {tmp_path / 'demo.db'}"
    ) in lines


async def test_an_agent_out_of_turns_is_named_as_why_the_demo_stopped(tmp_path: Path) -> None:
    out = io.StringIO()
    await run_demo(
        MOCK,
        "restock_milk",
        sim=FunctionBackend(mock_world_answer),
        agent=FunctionBackend(lambda r: {"message": "", "tool_calls": [{"name": "list_items", "arguments": {}}]}),
        user=FunctionBackend(user),
        judge=FunctionBackend(lambda r: {"criteria": [], "reasoning": "ok", "reward": 0, "failed_by": "agent"}),
        out_dir=tmp_path,
        max_turns=2,
        out=out,
    )
    assert "Stopped: the agent used all 2 of its turns (--max-turns 2) before finishing\n" in out.getvalue()


def test_the_demos_and_rollouts_default_output_folders_are_git_ignored() -> None:
    """`make demo` writes simia-demo/ and `simia rollout` rollouts/ in the checkout: `git status` must not list them."""
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    for command in ("demo", "rollout"):
        folder = commands[command].get_default("out")
        assert f"/{folder}/" in ignored or f"{folder}/" in ignored, (command, folder)


async def test_a_trajectory_the_export_checks_reject_is_not_written(tmp_path: Path) -> None:
    result, text = await demo(tmp_path, "four")  # breaks set_quantity's inputSchema (qty is an integer)
    assert result["record"] is None and not (tmp_path / "sft.jsonl").exists()
    assert result["dropped"] == [
        "the episode failed its task (reward 0): SFT data is successes, as `simia export --min-reward 1` writes",
        'message 2: set_quantity arguments break its inputSchema: $.qty: "four" is not of type "integer"',
    ]
    assert "writes; message 2: set_quantity arguments break its inputSchema" in text


async def test_a_masked_episode_is_not_written_and_every_line_says_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The simulator fails (an infrastructure failure): the verdict is masked, so no SFT record, no "export checks
    passed", and neither the verdict line nor the progress line calls it failed or reward 0."""
    out = io.StringIO()
    result = await run_demo(
        MOCK,
        "restock_milk",
        sim=FunctionBackend(lambda r: {"nonsense": True}),
        agent=agent_setting(4),
        user=FunctionBackend(user),
        judge=FunctionBackend(lambda r: {"criteria": [], "reasoning": "ok", "reward": 0}),
        out_dir=tmp_path,
        max_turns=2,
        out=out,
    )
    text = out.getvalue()
    assert result["record"] is None and not (tmp_path / "sft.jsonl").exists()
    assert result["dropped"][0] == (
        "the episode is masked (infrastructure failure): simia export leaves it out unless --include-masked"
    )
    assert "  VERDICT    masked (infrastructure failure)\n" in text
    assert "export checks passed" not in text and "reward=" not in text
    progress = capsys.readouterr().err
    assert progress.startswith("[1/1] rewarded 0  unrewarded 0  masked 1 (infrastructure failure 1)  mean reward -")
