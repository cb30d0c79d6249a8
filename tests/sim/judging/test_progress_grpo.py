"""A GRPO group whose outcome rewards are all 0 carries no signal; with progress shaping its advantages are not 0.

Advantages are computed as TRL's GRPOTrainer computes them (`scale_rewards="group"`): each reward minus its
group's mean, over the group's standard deviation (TRL's `nanstd`) plus 1e-4."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from simia.sim import load_world
from simia.sim.judging import EpisodeView, Judge
from simia.sim.records import EventRecord
from simia.sim.verdict import Verdict

ROOT = Path(__file__).resolve().parents[3]


def trl_group_advantages(rewards: list[float]) -> list[float]:
    """One group's advantages, as `GRPOTrainer._generate_and_score_completions` computes them. (torch and TRL are
    imported here, not at the top: importing them takes seconds, which every test worker would pay at collection.)
    """
    torch = pytest.importorskip("torch", reason="needs the `train` extra")
    trl_utils = pytest.importorskip("trl.trainer.utils", reason="needs the `train` extra")
    tensor = torch.tensor(rewards, dtype=torch.float32)
    advantages = (tensor - torch.nanmean(tensor)) / (trl_utils.nanstd(tensor) + 1e-4)
    return [float(a) for a in advantages]


async def rollout(calls: list[tuple[str, int]]) -> Verdict:
    mock = load_world(ROOT / "tool_specs" / "mock")
    task = mock.task("weekly_restock")
    assert task is not None
    events = [
        EventRecord(
            "set_quantity",
            {"name": name, "qty": value},
            {"name": name, "qty": value},
            "",
            False,
            state_patch=[{"op": "replace", "path": f"/items/{name}/qty", "value": value}],
            seq=seq,
        )
        for seq, (name, value) in enumerate(calls, start=1)
    ]
    return await Judge(None).judge(mock, task, EpisodeView(mock.initial_state, mock.initial_state, events=events))


def shaped(verdict: Verdict) -> float:
    """The outcome plus the episode's shaped rewards (with gamma 1: the progress it gained)."""
    assert verdict.reward is not None and verdict.progress is not None
    return verdict.reward + sum(verdict.progress.rewards)


@pytest.mark.slow  # importing torch and TRL takes 5-7 s: out of the inner loop
async def test_an_all_zero_outcome_group_gets_non_zero_advantages_with_progress_shaping() -> None:
    group: list[Any] = [[], [("apple", 6)], [("milk", 2)], [("rice", 3)]]  # nothing, 2/4, 1/4, undoing a kept check
    verdicts = [await rollout(calls) for calls in group]
    outcome = [float(v.reward or 0) for v in verdicts]
    assert outcome == [0.0, 0.0, 0.0, 0.0] and trl_group_advantages(outcome) == [0.0, 0.0, 0.0, 0.0]
    progress = [shaped(v) for v in verdicts]
    assert progress == [0.0, 0.5, 0.25, -0.5]
    advantages = trl_group_advantages(progress)
    assert all(a != 0 for a in advantages)
    assert sorted(range(4), key=lambda i: advantages[i]) == [3, 0, 2, 1]  # the undo ranks below doing nothing
