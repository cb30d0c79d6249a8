"""`parse_config`: defaults, a YAML `--config`, `--field value` overrides, and every mistake an argparse error."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from simia.training._config import parse_config


@dataclass
class Run:
    model: str = "embedded"
    max_steps: int = 10
    learning_rate: float = 1e-4
    save: bool = True
    token: str | None = None


def config_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return str(path)


def error_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line argparse prints, without its `prog: error: ` prefix; the exit status must be 2."""
    with pytest.raises(SystemExit) as exit_:
        parse_config(Run, argv)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("usage:")
    return lines[-1].split(" error: ", 1)[1]


def test_yaml_overrides_defaults_and_flags_override_yaml(tmp_path: Path) -> None:
    path = config_file(tmp_path, "max_steps: 20\nlearning_rate: 1e-5\nsave: false\ntoken: null\nmodel: tiny\n")
    run = parse_config(Run, ["--config", path, "--model", "gpt2", "--save", "yes", "--token", "c2Vj=="])
    assert run == Run(model="gpt2", max_steps=20, learning_rate=1e-5, save=True, token="c2Vj==")
    assert parse_config(Run, []) == Run()


def test_flags_parse_text_by_the_field_type() -> None:
    run = parse_config(Run, ["--max-steps", "3", "--learning-rate", "2e-4", "--save", "false"])
    assert run == Run(max_steps=3, learning_rate=2e-4, save=False)


def test_a_bool_typo_on_the_command_line_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert error_of(["--save", "ture"], capsys) == "argument --save: invalid value 'ture': expected true or false"


def test_a_bool_typo_in_the_yaml_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config_file(tmp_path, "save: ture\n")
    assert (
        error_of(["--config", path], capsys) == f"--config {path}: save: invalid value 'ture': expected true or false"
    )


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("max_steps: abc\n", "max_steps: invalid value 'abc': expected an integer"),
        ("max_steps: 1.5\n", "max_steps: invalid value 1.5: expected an integer"),
        ("max_steps: true\n", "max_steps: invalid value True: expected an integer"),
        ("max_steps: '10'\n", "max_steps: invalid value '10': expected an integer"),
        ("learning_rate: fast\n", "learning_rate: invalid value 'fast': expected a number"),
        ("token: 12345\n", "token: invalid value 12345: expected a string or null"),
    ],
)
def test_a_wrongly_typed_yaml_value_is_an_error_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], yaml_text: str, message: str
) -> None:
    path = config_file(tmp_path, yaml_text)
    assert error_of(["--config", path], capsys) == f"--config {path}: {message}"


def test_a_wrong_int_on_the_command_line_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert error_of(["--max-steps", "abc"], capsys) == "argument --max-steps: invalid value 'abc': expected an integer"


def test_an_unknown_yaml_field_is_an_error_with_a_suggestion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, "max_step: 3\n")
    assert (
        error_of(["--config", path], capsys) == f"--config {path}: unknown field 'max_step' (did you mean max_steps?)"
    )
    path = config_file(tmp_path, "epochs: 3\n")
    assert error_of(["--config", path], capsys) == (
        f"--config {path}: unknown field 'epochs' (known: model, max_steps, learning_rate, save, token)"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--epochs", "3"], "unrecognized arguments: --epochs 3"),
        (["--max-step", "3"], "unrecognized arguments: --max-step 3"),  # no silent abbreviation of --max-steps
    ],
)
def test_an_unknown_or_abbreviated_flag_is_an_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert error_of(argv, capsys) == message


@pytest.mark.parametrize(
    ("yaml_text", "kind"), [("- max_steps\n- 3\n", "list"), ("just text\n", "str"), ("[1, 2]\n", "list")]
)
def test_a_yaml_file_that_is_not_a_mapping_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], yaml_text: str, kind: str
) -> None:
    path = config_file(tmp_path, yaml_text)
    assert error_of(["--config", path], capsys) == f"--config {path}: expected a mapping of field: value, got {kind}"


def test_a_missing_config_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert error_of(["--config", str(missing)], capsys) == f"--config {missing}: no such file"


def test_a_config_file_that_is_not_yaml_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config_file(tmp_path, "max_steps: [1, 2\n")
    message = error_of(["--config", path], capsys)
    assert message.startswith(f"--config {path}: not valid YAML (") and "at line" in message


def test_an_empty_config_file_sets_nothing(tmp_path: Path) -> None:
    assert parse_config(Run, ["--config", config_file(tmp_path, "# nothing yet\n")]) == Run()


def test_the_training_scripts_configs_parse_their_own_defaults() -> None:
    from simia.training.sft import SFTRun

    run: Any = parse_config(SFTRun, ["--max-steps", "2", "--assistant-only-loss", "false"])
    assert run == SFTRun(max_steps=2, assistant_only_loss=False)
