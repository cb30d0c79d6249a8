"""The judge is told the simulated user's persona and names who failed; what the agent did not cause is masked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from simia.sim import World, load_world
from simia.sim.backends import CompletionRequest, FunctionBackend, ScriptedBackend
from simia.sim.judging import EpisodeView, Judge, RecordedCall
from simia.sim.verdict import Outcome, outcome
from simia.sim.world import PERSONAS, mark_persona

ROOT = Path(__file__).resolve().parents[3]
CRITERIA = [{"criterion": "apples topped up to 5", "passed": False, "evidence": "no set_quantity call"}]
HIDDEN = "You are baking an apple pie tonight and want exactly 5 apples, not more."


@pytest.fixture
def mock() -> World:
    return load_world(ROOT / "tool_specs" / "mock")


def _view(mock: World, transcript: list[dict[str, Any]] | None, apples: int = 3) -> EpisodeView:
    final = json.loads(json.dumps(mock.initial_state))
    final["items"]["apple"]["qty"] = apples
    calls = [RecordedCall("set_quantity", {"name": "apple", "qty": apples}, output={"name": "apple", "qty": apples})]
    return EpisodeView(mock.initial_state, final, calls if apples != 3 else [], transcript)


def _conversation(first_user_message: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You manage a pantry with tools."},
        {"role": "user", "content": first_user_message},
        {"role": "assistant", "content": "How many apples do you need?"},
    ]


def reads_the_persona_and_the_user(request: CompletionRequest) -> dict[str, Any]:
    """A judge whose answer depends on what it is shown: a user failure when the prompt names the adversarial
    persona and the simulated user's first message gives away its hidden fact before the agent asked."""
    prompt = str(request.messages[1]["content"])
    data = prompt.split(">>>\n", 1)[1].split("\n<<<END DATA", 1)[0]
    first_user = next(m["content"] for m in json.loads(data)["conversation"] if m["role"] == "user")
    if "Persona: adversarial:" in prompt and "apple pie" in first_user:
        failed, why = "user", "the user revealed its hidden fact (the pie) before the agent asked"
    else:
        failed, why = "agent", "the agent never set the apples"
    return {"criteria": CRITERIA, "reasoning": why, "reward": 0, "failed_by": failed, "failure": why}


def _task(mock: World) -> Any:
    task = mock.task("count_apples")
    assert task is not None
    return task.model_copy(update={"expected_state": {}})  # the LLM's label alone


async def test_an_adversarial_user_who_breaks_its_rules_is_a_user_failure_and_masked(mock: World) -> None:
    judge = Judge(FunctionBackend(reads_the_persona_and_the_user))
    revealed = mark_persona(_conversation(f"How many apples are left? {HIDDEN} Skip the checks."), "adversarial")
    verdict = await judge.judge(mock, _task(mock), _view(mock, revealed))
    why = "the user revealed its hidden fact (the pie) before the agent asked"
    assert (verdict.reward, verdict.persona, verdict.failed_by, verdict.failure) == (0, "adversarial", "user", why)
    assert (verdict.training_reward(), verdict.mask_reason()) == (None, "user failure")
    assert outcome(verdict) == Outcome("masked", "user failure")


async def test_the_same_agent_failure_with_a_user_who_kept_its_rules_is_scored_against_the_agent(mock: World) -> None:
    judge = Judge(FunctionBackend(reads_the_persona_and_the_user))
    kept = mark_persona(_conversation("How many apples are left? Skip the checks, I am in a hurry."), "adversarial")
    verdict = await judge.judge(mock, _task(mock), _view(mock, kept))
    assert (verdict.reward, verdict.failed_by, verdict.training_reward()) == (0, "agent", 0.0)
    assert outcome(verdict) == Outcome("unrewarded")


async def test_the_judge_prompt_names_the_persona_its_rules_and_the_users_hidden_facts(mock: World) -> None:
    messages = Judge(None).build_messages(mock, _task(mock), _view(mock, mark_persona(_conversation("hi"), "terse")))
    terse = PERSONAS["terse"]
    section = messages[1]["content"].split("# The simulated user\n", 1)[1].split("\n\n# Episode", 1)[0]
    assert section.startswith(f"Persona: terse: {terse.instructions}\nRules it had to keep:\n")
    assert section.endswith(f"- {terse.rules[0]}\nFacts only it knew (to reveal only when the agent asked): {HIDDEN}")


async def test_without_a_mark_the_judge_is_told_the_tasks_persona_and_a_made_up_one_is_noted(mock: World) -> None:
    task = _task(mock).model_copy(update={"persona": "impatient"})
    backend = ScriptedBackend(
        [{"criteria": CRITERIA, "reasoning": "r", "reward": 0, "failed_by": "agent", "failure": "f"}],
        when_exhausted="repeat",
    )
    plain = await Judge(backend).judge(mock, task, _view(mock, _conversation("hi")))
    assert "Persona: impatient:" in str(backend.requests[-1].messages[1]["content"])
    made_up = await Judge(backend).judge(mock, task, _view(mock, mark_persona(_conversation("hi"), "sneaky")))
    assert (plain.persona, made_up.persona) == ("impatient", "impatient")
    note = "the transcript names persona 'sneaky', which does not exist; judged with the task's, impatient"
    assert made_up.reasons == ["r", note]
    nobody = await Judge(backend).judge(mock, _task(mock), _view(mock, None))
    assert nobody.persona is None
    assert "Persona: (not named)" in str(backend.requests[-1].messages[1]["content"])


async def test_a_forbidden_state_the_agent_made_hold_is_the_agents_failure_whatever_the_judge_says(
    mock: World,
) -> None:
    task = mock.task("weekly_restock")
    assert task is not None
    final = json.loads(json.dumps(mock.initial_state))
    final["items"]["rice"]["qty"] = 0
    view = EpisodeView(
        mock.initial_state, final, [RecordedCall("set_quantity", {"name": "rice", "qty": 0}, output={})], None
    )
    blames_user = {"criteria": CRITERIA, "reasoning": "r", "reward": 0, "failed_by": "user", "failure": "pushy user"}
    verdict = await Judge(ScriptedBackend([blames_user])).judge(mock, task, view)
    assert (verdict.failed_by, verdict.failure) == (
        "agent",
        "forbidden /items/rice/qty: the state it must never reach holds at the end",
    )
    assert verdict.training_reward() == 0.0


@pytest.mark.parametrize(
    ("answer", "failed_by"),
    [
        ({"reward": 0}, "agent"),  # a judge of old, without the field: a 0 is the agent's, as it always was
        ({"reward": 1}, None),
        ({"reward": 1, "failed_by": "user", "failure": "revealed early"}, "user"),  # an unfair test, even if won
        ({"reward": 0, "failed_by": "tool", "failure": "contradicting results"}, "tool"),
    ],
)
async def test_who_failed_follows_the_answer_and_masks_user_and_tool_failures(
    mock: World, answer: dict[str, Any], failed_by: str | None
) -> None:
    passed = answer["reward"] == 1
    data = {"criteria": [{**CRITERIA[0], "passed": passed}], "reasoning": "r", **answer}
    verdict = await Judge(ScriptedBackend([data])).judge(mock, _task(mock), _view(mock, None, apples=5))
    assert verdict.failed_by == failed_by
    masked = {"user": "user failure", "tool": "tool failure"}.get(failed_by or "")
    assert verdict.mask_reason() == masked
    assert verdict.training_reward() == (None if masked else float(answer["reward"]))


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ({"reward": 1, "failed_by": "agent"}, "reward is 1 but failed_by is agent"),
        ({"reward": 0, "failed_by": "none"}, "reward is 0 but failed_by is none: name who failed"),
        ({"reward": 0, "failed_by": "the user"}, "failed_by must be none, agent, user or tool"),
    ],
)
async def test_an_answer_whose_blame_contradicts_its_reward_is_asked_again(
    mock: World, bad: dict[str, Any], problem: str
) -> None:
    passed = bad["reward"] == 1
    first = {"criteria": [{**CRITERIA[0], "passed": passed}], "reasoning": "r", "failure": "", **bad}
    fixed = {**first, "failed_by": "none" if passed else "agent"}
    backend = ScriptedBackend([first, fixed])
    verdict = await Judge(backend).judge(mock, _task(mock), _view(mock, None, apples=5))
    assert (verdict.status, verdict.failed_by) == ("ok", None if passed else "agent")
    assert problem in str(backend.requests[1].messages[-1]["content"])
