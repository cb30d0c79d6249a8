"""One vocabulary for what an episode is as training data: rewarded, unrewarded, or masked with its reason."""

from __future__ import annotations

from simia.sim.verdict import Outcome, Verdict, masked_why, outcome, tally


def test_each_verdict_has_one_outcome_and_a_masked_one_says_why() -> None:
    verdicts = [
        Verdict(reward=1),
        Verdict(reward=0),
        Verdict(reward=0, infra_failures=2),
        Verdict(reward=1, fabricated=True),
        Verdict(status="judge_error"),
        Verdict(status="unjudged"),
        None,
    ]
    assert [outcome(v) for v in verdicts] == [
        Outcome("rewarded"),
        Outcome("unrewarded"),
        Outcome("masked", "infrastructure failure"),
        Outcome("masked", "fabricated tool calls"),
        Outcome("masked", "judge error"),
        Outcome("masked", "unjudged"),
        Outcome("masked", "not judged"),
    ]
    assert all((v is not None and v.training_reward() is None) == (v is not None and v.mask_reason() is not None)
               for v in verdicts)  # fmt: skip
    assert [str(outcome(v)) for v in verdicts[1:3]] == ["unrewarded", "masked (infrastructure failure)"]


def test_a_tally_counts_each_outcome_and_the_reasons_of_the_masked() -> None:
    outcomes = [outcome(Verdict(reward=1)), outcome(None), outcome(Verdict(status="judge_error")), outcome(None)]
    assert tally(outcomes) == "rewarded 1  unrewarded 0  masked 3 (judge error 1, not judged 2)"
    assert tally([]) == "rewarded 0  unrewarded 0  masked 0"


def test_a_withheld_reward_is_explained_by_its_own_cause() -> None:
    """What the trainer protocols answer for a masked reward: a user or tool failure is not called fabricated
    (both protocols once fell through to that for any cause they did not name)."""
    verdicts = [
        Verdict(reward=0, failed_by="user", reasons=["the rule failed", "the simulated user left early"]),
        Verdict(reward=0, failed_by="tool", reasons=["the tool returned nonsense"]),
        Verdict(reward=1, fabricated=True, transcript_mismatches=["call 2 get_item never ran"]),
        Verdict(reward=1, fabricated=True),
        Verdict(reward=0, infra_failures=2),
        Verdict(status="judge_error", reasons=["judge backend down"]),
        None,
        Verdict(reward=1, reasons=["done"]),
    ]
    assert [masked_why(v) for v in verdicts] == [
        "user failure: the rule failed; the simulated user left early",
        "tool failure: the tool returned nonsense",
        "fabricated tool calls: call 2 get_item never ran",
        "fabricated tool calls: the transcript claims calls or results the server never ran",
        "infrastructure failure: 2 call(s) failed for infrastructure reasons",
        "judge error: judge backend down",
        "the episode has no verdict (the server has no judge)",
        "its reward is usable",
    ]
