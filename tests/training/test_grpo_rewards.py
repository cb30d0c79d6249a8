"""What a GRPO reward is made of (`--reward outcome|progress|process|mix`), the warning of a step whose every
reward was masked, and the prompts a curriculum shares out from a seeded store; fast: no training (the TRL steps
are in test_grpo.py)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("datasets", reason="needs the `train` extra")

from simia.clients.api import SyncSimiaClient
from simia.sim.records import EpisodeRecord
from simia.sim.storage import open_store
from simia.sim.verdict import Outcome, ProcessScores, ProcessStep, ProgressCurve, Verdict, outcome
from simia.sim.wire import WorldInfo
from simia.training import grpo
from simia.training._config import parse_config
from simia.training.grpo import GRPORun, RewardMix, environment_class, read_curriculum, task_dataset
from simia.training.grpo_rewards import simia_env_reward, simia_reward

APPLES_6 = {"name": "apple", "qty": 6}
PROGRESS = ProgressCurve(start=0.25, end=0.75)
PROCESS = ProcessScores(steps=[ProcessStep(step=1, score="useful"), ProcessStep(step=2, score="neutral")])


def served(server: str) -> WorldInfo:
    with SyncSimiaClient(server) as api:
        return next(w for w in api.worlds() if w.name == "mock")


def test_the_outcome_reward_is_the_verdicts_training_reward_unchanged() -> None:
    verdicts = [
        Verdict(reward=1, progress=PROGRESS, process=PROCESS),
        Verdict(reward=0, progress=PROGRESS),
        Verdict(reward=0),
        Verdict(status="judge_error", progress=PROGRESS),
        Verdict(status="unjudged"),
        Verdict(reward=1, infra_failures=1),
        Verdict(reward=1, fabricated=True),
        Verdict(reward=0, failed_by="user"),
    ]
    scored = [RewardMix.parse("outcome").score(v) for v in verdicts]
    assert scored == [(v.training_reward(), outcome(v)) for v in verdicts]
    assert [r for r, _ in scored] == [1.0, 0.0, 0.0, None, None, None, None, None]
    assert RewardMix.parse().score(None) == (None, Outcome("masked", "no verdict"))


def test_a_mix_weighs_its_terms_and_is_masked_where_the_outcome_or_a_weighed_term_is_missing() -> None:
    mix = RewardMix.parse("mix", "outcome=1, progress=0.5,process=2")
    assert mix == RewardMix({"outcome": 1.0, "progress": 0.5, "process": 2.0})
    unrewarded = Outcome("unrewarded")
    assert mix.score(Verdict(reward=0, progress=PROGRESS, process=PROCESS)) == (0.5 * 0.75 + 2 * 0.5, unrewarded)
    assert RewardMix.parse("progress").score(Verdict(reward=0, progress=PROGRESS)) == (0.75, unrewarded)
    assert RewardMix.parse("process").score(Verdict(reward=1, process=PROCESS)) == (0.5, Outcome("rewarded"))
    assert RewardMix.parse("process").score(Verdict(reward=1, process=ProcessScores())) == (0.0, Outcome("rewarded"))
    masked = [
        mix.score(Verdict(status="judge_error", progress=PROGRESS, process=PROCESS)),
        mix.score(Verdict(reward=1, infra_failures=2, progress=PROGRESS, process=PROCESS)),
        mix.score(Verdict(reward=1, process=PROCESS)),
        mix.score(Verdict(reward=1, progress=PROGRESS)),
        mix.score(Verdict(reward=1, progress=PROGRESS, process=ProcessScores(status="judge_error"))),
    ]
    assert masked == [
        (None, Outcome("masked", "judge error")),
        (None, Outcome("masked", "infrastructure failure")),
        (None, Outcome("masked", "no progress (task without checks)")),
        (None, Outcome("masked", "no process score (serve with --process-judge)")),
        (None, Outcome("masked", "process judge error")),
    ]
    # a term weighed 0 is not read: its absence masks nothing
    assert RewardMix.parse("mix", "outcome=1,process=0").score(Verdict(reward=1)) == (1.0, Outcome("rewarded"))


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--reward", "progres"], "--reward 'progres' is not one of outcome, progress, process, mix"),
        (["--reward", "mix"], "--reward mix needs --reward-weights, e.g. --reward-weights outcome=1,progress=0.5"),
        (["--reward-weights", "progress=1"], "--reward-weights weighs the terms of --reward mix; use --reward mix"),
        (["--reward", "mix", "--reward-weights", "shaping=1"], "unknown term 'shaping' in 'shaping=1'; terms: outc"),
        (["--reward", "mix", "--reward-weights", "progress"], "'progress' needs a number after '=' (progress=0.5)"),
        (["--reward", "mix", "--reward-weights", "outcome=-1"], "the weight of outcome must be a number >= 0, got -1"),
        (["--reward", "mix", "--reward-weights", "outcome=nan"], "the weight of outcome must be a number >= 0, got n"),
        (["--reward", "mix", "--reward-weights", "outcome=0"], "'outcome=0': give at least one term a weight above"),
    ],
)
def test_a_bad_reward_flag_is_refused_naming_the_fix(
    flags: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_config(GRPORun, flags)
    assert exit_.value.code == 2
    assert error in capsys.readouterr().err.splitlines()[-1]


def test_progress_rewards_the_rollout_that_did_part_of_a_task_both_of_whose_outcomes_are_0(
    threaded_mock_server: str,
) -> None:
    # weekly_restock: apples to 6 (weight 2), milk to 2, the rice kept at 2 (it holds at the start); setting the
    # apples alone fails the outcome but reaches 3/4 of the potential, doing nothing keeps 1/4
    world = served(threaded_mock_server)
    rewards = {}
    for reward in ("outcome", "progress"):
        cls = environment_class(threaded_mock_server, world, reward=RewardMix.parse(reward))
        did_apples, idle = cls(), cls()
        for env in (did_apples, idle):
            env.reset(task="weekly_restock", group=f"weekly-{reward}")
        asyncio.run(did_apples.set_quantity(**APPLES_6))
        rewards[reward] = [env._end(None) for env in (did_apples, idle)]
        assert [env.outcome for env in (did_apples, idle)] == [Outcome("unrewarded")] * 2
    assert rewards == {"outcome": [0.0, 0.0], "progress": [0.75, 0.25]}


class State:
    global_step = 2


def test_a_step_whose_every_reward_was_masked_warns_with_the_reasons_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    judge_error, infra = Outcome("masked", "judge error"), Outcome("masked", "infrastructure failure")
    metrics: list[tuple[str, float]] = []
    extra: dict[str, Any] = {"trainer_state": State(), "log_metric": lambda name, value: metrics.append((name, value))}
    with caplog.at_level(logging.WARNING, logger="simia.training.grpo"):
        simia_reward([1, 2, 3], [None, None, None], simia_outcome=[judge_error, infra, judge_error], **extra)
        simia_reward([1, 2], [None, 0.0], simia_outcome=[judge_error, Outcome("unrewarded")], **extra)
        simia_env_reward([[{"role": "user", "content": "hi"}]], ["Done."], [None])
    assert caplog.messages == [
        "GRPO step 3: all 3 rewards were masked, so it learns nothing: "
        "rewarded 0  unrewarded 0  masked 3 (infrastructure failure 1, judge error 2)",
        "a GRPO step: all 1 rewards were masked, so it learns nothing: "
        "rewarded 0  unrewarded 0  masked 1 (no episode 1)",
    ]
    assert metrics == [("masked", 1.0), ("masked", 0.5)]


async def record_groups(db: Path, task: str, groups: int, rewards: list[int]) -> None:
    """`groups` recorded GRPO groups of `task` (a root episode and its forks at step 0), judged with `rewards`."""
    store = open_store(db)
    state = {"items": {}}
    try:
        for g in range(groups):
            root = f"{task}-{g}-0"
            for i, reward in enumerate(rewards):
                forked = {"parent_id": root, "group_id": root, "fork_step": 0} if i else {}
                episode = EpisodeRecord(
                    id=f"{task}-{g}-{i}", world="mock", world_hash="h", initial_state=state, task=task, **forked
                )
                await store.create_episode(episode)
                await store.set_status(episode.id, "ended", verdict=Verdict(reward=reward))
    finally:
        await store.close()


def test_a_curriculum_shares_the_prompts_out_by_recorded_pass_rate_most_near_one_half(
    threaded_mock_server: str, tmp_path: Path
) -> None:
    db = tmp_path / "history.db"
    asyncio.run(record_groups(db, "restock_milk", 5, [1] * 8))  # 40 of 40: confidently easy
    asyncio.run(record_groups(db, "no_bananas", 5, [0] * 8))  # 0 of 40: confidently hard
    asyncio.run(record_groups(db, "weekly_restock", 3, [1, 0] * 4))  # 12 of 24: near one half
    world = served(threaded_mock_server)
    curriculum = read_curriculum(GRPORun(curriculum=str(db)), world)
    assert curriculum is not None
    planned = {t.history.task: t.groups for t in curriculum.tasks}
    assert planned == {"restock_milk": 4, "count_apples": 12, "no_bananas": 4, "weekly_restock": 12}  # untried: 1
    rows = task_dataset(world, "all", rows=curriculum.attempts(1))
    assert Counter(rows["task"]) == planned and len(rows) == 4 * grpo.PROMPTS_PER_TASK
    assert rows["task"][:5] == ["restock_milk", "count_apples", "no_bananas", "weekly_restock", "restock_milk"]
    chosen = read_curriculum(GRPORun(curriculum=str(db), tasks="restock_milk,weekly_restock"), world)
    assert chosen is not None and chosen.attempts(1) == {"restock_milk": 4, "weekly_restock": 12}
    assert read_curriculum(GRPORun(), world) is None


def test_grpo_with_a_curriculum_that_is_not_there_exits_2_naming_it(
    threaded_mock_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.db"
    assert grpo.main(["--server", threaded_mock_server, "--curriculum", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"error: --curriculum {str(missing)!r}: no database there; pass the file `simia serve --db` wrote "
        "(or its postgresql:// URL)\n"
    )
