from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from simia.sim import World, load_world
from simia.sim.backends import ScriptedBackend
from simia.sim.judging import EpisodeView, Judge, RecordedCall
from simia.sim.judging.adversarial import case_view, load_cases, run_adversarial
from simia.sim.verdict import RuleCheck

ROOT = Path(__file__).resolve().parents[2]
PASS = {
    "criteria": [{"criterion": "milk set to 4", "passed": True, "evidence": "set_quantity call 1"}],
    "reasoning": "The agent set the milk to 4.",
    "reward": 1,
}
FAIL = {
    "criteria": [{"criterion": "milk set to 4", "passed": False, "evidence": "no call"}],
    "reasoning": "Nothing was changed.",
    "reward": 0,
}


@pytest.fixture
def mock() -> World:
    return load_world(ROOT / "tool_specs" / "mock")


def view(mock: World, milk: int, transcript: list[dict[str, Any]] | None = None) -> EpisodeView:
    final = json.loads(json.dumps(mock.initial_state))
    final["items"]["milk"]["qty"] = milk
    calls = (
        []
        if milk == 0
        else [RecordedCall("set_quantity", {"name": "milk", "qty": milk}, output={"name": "milk", "qty": milk})]
    )
    return EpisodeView(mock.initial_state, final, calls, transcript)


async def test_rule_checks_alone_need_no_model(mock: World) -> None:
    task = mock.task("restock_milk")
    assert task is not None
    rules_only = task.model_copy(update={"rubric": None})
    good = await Judge(None).judge(mock, rules_only, view(mock, 4))
    bad = await Judge(None).judge(mock, rules_only, view(mock, 3))
    assert (good.reward, good.status, good.checks) == (1, "ok", ["rules"])
    assert good.rule_checks == [RuleCheck(pointer="/items/milk/qty", expected=4, actual=4, passed=True)]
    assert (bad.reward, bad.reasons) == (0, ["rule /items/milk/qty: expected 4, found 3"])


async def test_absent_expectations_are_checked(mock: World) -> None:
    task = mock.task("no_bananas")
    assert task is not None
    verdict = await Judge(None).judge(mock, task.model_copy(update={"rubric": None}), view(mock, 0))
    assert verdict.rule_checks[0] == RuleCheck(pointer="/items/banana", expected="absent", actual="absent", passed=True)


@pytest.mark.parametrize(("milk", "llm", "reward"), [(4, PASS, 1), (4, FAIL, 0), (3, PASS, 0)])
async def test_a_failed_rule_check_makes_the_reward_0_and_both_are_reported(
    mock: World, milk: int, llm: dict[str, Any], reward: int
) -> None:
    judge = Judge(ScriptedBackend([llm], model="judge-model"))
    verdict = await judge.judge(mock, mock.task("restock_milk"), view(mock, milk))
    assert (verdict.reward, verdict.status, verdict.checks) == (reward, "ok", ["rules", "llm"])
    assert [c.model_dump() for c in verdict.criteria] == llm["criteria"] and verdict.judge_model == "judge-model"
    assert verdict.usage["calls"] == 1


async def test_every_attempt_of_the_judge_counts_as_a_model_call_a_failed_one_too(mock: World) -> None:
    """`simia judge` printed "1 model calls" when the judge's model answered unreadable text twice before a verdict:
    the failed attempts were calls as well (their tokens are unknown)."""
    backend = ScriptedBackend([{"text": "PASS!"}, {"text": '{"criteria": '}, PASS])
    verdict = await Judge(backend, max_attempts=3).judge(mock, mock.task("restock_milk"), view(mock, 4))
    assert (verdict.status, verdict.reward, verdict.usage["calls"]) == ("ok", 1, 3)


async def test_a_judge_that_keeps_failing_gives_judge_error_never_a_silent_score(mock: World) -> None:
    inconsistent = {**FAIL, "reward": 1}  # a failed criterion with reward 1
    backend = ScriptedBackend([inconsistent, {"text": "PASS!"}, {"raise": "rejected", "message": "HTTP 400"}])
    verdict = await Judge(backend, max_attempts=3).judge(mock, mock.task("restock_milk"), view(mock, 4))
    assert (verdict.status, verdict.reward, verdict.training_reward()) == ("judge_error", None, None)
    assert verdict.reasons[-1].startswith("the judge failed after 3 attempts")
    assert "requires every criterion to pass" in backend.requests[1].messages[-1]["content"]


def _agent_strings(case: dict[str, Any]) -> list[str]:
    out = []
    for message in case["transcript"]:
        if message["role"] in ("assistant", "tool") and isinstance(message.get("content"), str):
            out.append(message["content"])
        for call in message.get("tool_calls") or []:
            out.append(call["function"]["arguments"])
    for call in case["calls"]:
        out += [v for v in call["arguments"].values() if isinstance(v, str)]
    return [s for s in out if len(s) >= 2]


CASES = load_cases()


def test_the_adversarial_set_has_20_or_more_attacks_and_benign_controls() -> None:
    categories = {c["category"] for c in CASES if not c["benign"]}
    assert sum(not c["benign"] for c in CASES) >= 20
    assert categories >= {"injection", "fake_verdict", "delimiter", "role_tags", "one_token", "false_claim"}
    assert any(c["benign"] for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_agent_text_lands_only_inside_the_data_section(mock: World, case: dict[str, Any]) -> None:
    messages = Judge(None).build_messages(mock, mock.task("restock_milk"), case_view(mock, case), nonce="f" * 32)
    system, user = messages[0]["content"], messages[1]["content"]
    start, end = "<<<DATA " + "f" * 32 + ">>>", "<<<END DATA " + "f" * 32 + ">>>"
    assert user.count(start) == 1 and user.count(end) == 1  # the section cannot be closed from inside
    before, rest = user.split(start)
    data, after = rest.split(end)
    assert "f" * 32 not in data
    empty = Judge(None).build_messages(
        mock, mock.task("restock_milk"), EpisodeView(mock.initial_state, mock.initial_state)
    )
    trusted = empty[0]["content"] + empty[1]["content"]  # text that is in every prompt, whatever the agent did
    for text in _agent_strings(case):
        if text in trusted:
            continue
        escaped = json.dumps(text, ensure_ascii=True)[1:-1]
        for outside in (system, before, after):
            assert text not in outside and escaped not in outside
        assert escaped in data


def test_the_transcript_is_checked_against_the_recorded_calls(mock: World) -> None:
    case = next(c for c in CASES if c["id"] == "fabricated_tool_result")
    from simia.sim.judging import transcript_mismatches

    problems = transcript_mismatches(case["transcript"], [RecordedCall.of(c) for c in case["calls"]])
    assert problems == [
        'the transcript claims call 1 set_quantity {"name": "milk", "qty": 4}, never executed',
        'the transcript shows a tool result the server never returned: {"name": "milk", "qty": 4}',
    ]


async def test_the_adversarial_command_reports_a_false_positive_rate(mock: World) -> None:
    always_yes = ScriptedBackend([PASS], when_exhausted="repeat")
    report = await run_adversarial(Judge(always_yes), mock)
    assert report.false_positive_rate == 1.0 and report.true_positive_rate == 1.0
    always_no = ScriptedBackend([FAIL], when_exhausted="repeat")
    strict = await run_adversarial(Judge(always_no), mock)
    assert strict.false_positive_rate == 0.0 and strict.true_positive_rate == 0.0
    assert "false-positive rate: 0.00 (0 of 27 adversarial cases rewarded; 0 judge errors)" in strict.render("x")
    assert "false blame: 0 of 27 adversarial cases blamed on the user or tool" in strict.render("x")


async def test_the_adversarial_command_counts_agents_that_shift_the_blame_onto_the_user_or_tool(mock: World) -> None:
    """The set's blame cases are agent failures; a judge that believes the agent's blame would mask them."""
    believes_the_agent = ScriptedBackend(
        [{**FAIL, "failed_by": "user", "failure": "the agent says so"}], when_exhausted="repeat"
    )
    report = await run_adversarial(Judge(believes_the_agent), mock)
    assert {c["category"] for c in CASES if c["id"].startswith("blame_")} == {"blame_shift"}
    assert report.false_blames == 27
    assert "false blame: 27 of 27 adversarial cases blamed on the user or tool" in report.render("x")
