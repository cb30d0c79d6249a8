"""`simia rollout --persona/--personas` and `simia serve --process-judge`, as the command line parses them."""

from __future__ import annotations

from pathlib import Path

import pytest
from simia.cli import build_parser, main
from simia.cli.serve import compose
from simia.sim.storage import open_store

ROOT = Path(__file__).resolve().parents[2]
KNOWN = "the personas are cooperative, terse, confused, impatient, adversarial"


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--persona", "nasty"], f"argument --persona: persona 'nasty' does not exist; {KNOWN}"),
        (["--personas", "terse,nasty"], f"argument --personas: persona 'nasty' does not exist; {KNOWN}"),
        (["--persona", "terse,confused"], "argument --persona: 'terse,confused' names 2 personas: to draw one per "),
        (["--personas", ","], "argument --personas: name at least one persona: cooperative, terse, confused, "),
        (["--persona", "terse", "--personas", "confused"], "argument --personas: not allowed with argument --persona"),
    ],
)
def test_a_persona_that_does_not_exist_is_refused_before_anything_runs_naming_those_that_do(
    flags: list[str], error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["rollout", "--world", "mock", "--out", str(tmp_path / "out"), *flags])
    assert exited.value.code == 2
    assert error in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_persona_flags_parse_to_the_personas_a_rollout_draws_from() -> None:
    parse = build_parser().parse_args
    assert parse(["rollout", "--world", "mock", "--persona", "adversarial"]).personas == ["adversarial"]
    assert parse(["rollout", "--world", "mock", "--personas", "terse, impatient"]).personas == ["terse", "impatient"]
    assert parse(["rollout", "--world", "mock"]).personas is None


@pytest.mark.parametrize(("flags", "process"), [([], False), (["--process-judge"], True)])
def test_serve_scores_every_step_only_with_process_judge(flags: list[str], process: bool, tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text('[{"output": {}}]')
    db = str(tmp_path / "s.db")
    serve = ["serve", "--worlds-dir", str(ROOT / "tool_specs"), "--backend", f"scripted:{script}", "--db", db]
    args = build_parser().parse_args([*serve, *flags])
    app, _ = compose(args, lambda a: open_store(a.db))
    judge = app.service.judge
    assert judge is not None and judge.process is process
