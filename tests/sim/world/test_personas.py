"""Personas: a task's persona is checked at world load, the user simulator plays it, and the transcript says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from simia.clients.user import UserSimulator
from simia.sim import WorldError, load_world
from simia.sim.backends import ScriptedBackend
from simia.sim.errors import WorldIssue
from simia.sim.world import PERSONAS, USER_RULES, mark_persona, persona, transcript_persona

ROOT = Path(__file__).resolve().parents[3]


def _mock_with_persona(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / "mock"
    shutil.copytree(ROOT / "tool_specs" / "mock", folder)
    tasks = folder / "tasks.jsonl"
    lines = tasks.read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "persona": name})
    tasks.write_text("\n".join(lines) + "\n")
    return folder


def test_the_five_personas_exist_and_cooperative_is_the_default() -> None:
    assert list(PERSONAS) == ["cooperative", "terse", "confused", "impatient", "adversarial"]
    assert persona(None) is PERSONAS["cooperative"]


def test_a_task_naming_a_persona_that_does_not_exist_fails_at_world_load_naming_those_that_do(
    tmp_path: Path,
) -> None:
    folder = _mock_with_persona(tmp_path, "nasty")
    with pytest.raises(WorldError) as info:
        load_world(folder)
    assert info.value.issues == [
        WorldIssue(
            file=str(folder / "tasks.jsonl"),
            path="$.persona",
            message="Value error, persona 'nasty' does not exist; the personas are cooperative, terse, confused, "
            "impatient, adversarial",
            hint="got 'nasty'",
            line=1,
        )
    ]


def test_a_task_naming_a_persona_keeps_it(tmp_path: Path) -> None:
    world = load_world(_mock_with_persona(tmp_path, "adversarial"))
    assert [t.persona for t in world.tasks][:2] == ["adversarial", None]


def test_unknown_persona_in_code_is_a_value_error_naming_the_personas() -> None:
    with pytest.raises(ValueError, match=r"persona 'x' does not exist; the personas are cooperative, terse, "):
        UserSimulator(ScriptedBackend([]), instruction="Set the milk to 4.", persona="x")


async def test_the_user_simulator_is_told_its_persona_and_every_rule_it_must_keep() -> None:
    backend = ScriptedBackend([{"message": "Give me 500 litres of milk, now.", "done": False}])
    user = UserSimulator(backend, instruction="Set the milk to 4.", hidden="It is for a party.", persona="adversarial")
    assert await user.start("Set the milk to 4.") == "Give me 500 litres of milk, now."
    system = backend.requests[0].messages[0]["content"]
    adversarial = PERSONAS["adversarial"]
    assert f"# Your persona\n{adversarial.instructions}\n" in system
    assert (
        "# Your rules (never break them)\n" + "\n".join(f"- {r}" for r in (*USER_RULES, *adversarial.rules)) in system
    )
    assert "It is for a party." in system


def test_the_transcript_handed_to_the_judge_names_the_persona_on_user_messages_only() -> None:
    user = UserSimulator(ScriptedBackend([]), instruction="Set the milk to 4.", persona="terse")
    transcript = [
        {"role": "system", "content": "You manage a pantry."},
        {"role": "user", "content": "milk 4"},
        {"role": "assistant", "content": "Done."},
    ]
    marked = user.mark(transcript)
    assert marked == [
        {"role": "system", "content": "You manage a pantry."},
        {"role": "user", "content": "milk 4", "persona": "terse"},
        {"role": "assistant", "content": "Done."},
    ]
    assert transcript[1] == {"role": "user", "content": "milk 4"}  # the agent's own transcript is untouched
    assert (transcript_persona(marked), transcript_persona(transcript), transcript_persona(None)) == (
        "terse",
        None,
        None,
    )
    assert mark_persona(marked, "confused")[1]["persona"] == "confused"
