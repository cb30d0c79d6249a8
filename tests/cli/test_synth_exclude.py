"""`simia synth --exclude FILE`: seeds and generated trajectories whose user turns overlap an evaluation set are
dropped and counted in the report, through the command as a user runs it (a scripted model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from simia.cli import main

LEAKED = "How many apples are left? I need 5 for a pie: if there are fewer, top them up to 5."  # an eval instruction


def seed(user: str) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": user},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_item", "arguments": '{"name": "rice"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": '{"name": "rice", "qty": 2}'},
            {"role": "assistant", "content": "There are 2 kg of rice."},
        ]
    }


def trajectory(user: str) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": user},
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [{"name": "get_item", "arguments": {"name": "rice"}}],
            },
            {"role": "tool", "content": '{"name": "rice", "qty": 2}'},
            {"role": "assistant", "content": "2 kg of rice."},
        ]
    }


def test_synth_drops_and_counts_seeds_and_trajectories_that_overlap_the_evaluation_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seeds = tmp_path / "seeds.jsonl"
    rows = [
        {"id": "rice", **seed("How much rice do we have for tonight's dinner?")},
        {"id": "beans", **seed("Do we still have any beans in the pantry?")},
        {"id": "leaked", **seed("Hello! " + LEAKED)},
    ]
    seeds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"match": "tonight's dinner", "data": trajectory("Is there rice left for a risotto tonight, please?")},
                {"match": "any beans", "data": trajectory("Quick one. " + LEAKED)},  # the model recites the eval set
            ]
        )
    )
    evals = tmp_path / "tau2_test.jsonl"
    evals.write_text(json.dumps({"id": "count_apples", "instruction": LEAKED}) + "\n")
    out = tmp_path / "out"

    flags = ["--seeds", str(seeds), "--n", "1", "--no-prefilter", "--exclude", str(evals), "--out", str(out)]
    code = main(["synth", "--world", "mock", "--backend", f"scripted:{script}", *flags])

    assert code == 0
    report = json.loads((out / "synth_report.json").read_text())
    assert (report["seeds"], report["generated"], report["kept"]) == (3, 2, 1)
    assert report["dropped"] == {"overlaps_exclude": 1}
    assert list(report["prefilter_dropped"]) == ["leaked"]
    assert report["prefilter_dropped"]["leaked"].startswith("overlaps the evaluation set (--exclude)")
    kept = [json.loads(line) for line in (out / "synth.jsonl").read_text().splitlines()]
    assert [r["messages"][1]["content"] for r in kept] == ["Is there rice left for a risotto tonight, please?"]
    assert "dropped: overlaps_exclude 1; kept 1" in capsys.readouterr().out
