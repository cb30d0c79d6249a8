"""Hints that name a command: every `simia ...` command the code names in a message, a hint or a help text parses
with the real `simia` parser (its subcommands and flags exist, its values are accepted), and the hint a bad model
SPEC gets names only flags of the command it was given to."""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from simia.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("cli", "server", "sim", "clients", "training", "testing")
PARSER = build_parser()
PLACEHOLDER = re.compile(r"\{X\}|[A-Z][A-Z_]*(=[A-Z_]+)?|[A-Z]:[A-Z]|options")
"""What a hint writes in place of a value: an f-string's `{...}`, a metavar (`URL`, `NAME=SECRET`, `K:V`)."""
SAMPLES = ("x", str(ROOT / "tool_specs"), "8770", "name=secret", "http://127.0.0.1:8765", "K: V")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


HINT = re.compile(rf"\bsimia (?:{'|'.join(_subcommands(PARSER))})\b[^`'\"()<>;|&\n]*")
"""A named command runs to the end of its quote (backticks, quotes, brackets, `;`, `|`, `&` or a line end)."""


def texts(path: Path) -> Iterator[tuple[int, str]]:
    """Each string literal of a module, f-strings with `{X}` for their placeholders."""
    tree = ast.parse(path.read_text())
    parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{X}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            yield node.lineno, node.value


def named_commands() -> list[tuple[str, str]]:
    """(file:line, the command) for every `simia COMMAND ...` named in the code's strings."""
    found = []
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, text in texts(path):
                for match in HINT.finditer(text):
                    found.append((f"{path.relative_to(ROOT)}:{line}", match.group(0).strip()))
    return found


def _value(action: argparse.Action, word: str | None) -> str:
    """`word` as the value of `action`, or (for a placeholder, or none given) a sample value it accepts."""
    if word is not None and not PLACEHOLDER.fullmatch(word):
        return word
    for sample in SAMPLES:
        try:
            value = action.type(sample) if callable(action.type) else sample
        except (argparse.ArgumentTypeError, TypeError, ValueError):
            continue
        if action.choices is None or value in action.choices:
            return sample
    return str(next(iter(action.choices or ["x"])))


def argv(command: str) -> tuple[list[str], list[str]]:
    """The command line a named command stands for (placeholders filled in), and the flags it names that its
    command does not have (an abbreviation counts as one: argparse would take it, a reader may not)."""
    words = [w.strip("[].,:") for w in command.split()[1:]]
    parser, line, unknown = PARSER, [], []
    while words and words[0] in _subcommands(parser):
        parser = _subcommands(parser)[words[0]]
        line.append(words.pop(0))
    positionals = [a for a in parser._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]
    i = 0
    while i < len(words) and words[i] != "--":  # after `--` comes a command to start (`import mcp -- CMD`)
        word = words[i]
        if word.startswith("-"):
            action = parser._option_string_actions.get(word)
            if action is None:
                unknown.append(word)
            elif action.nargs != 0:
                given = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("-") else None
                line += [word, _value(action, given)]
                i += given is not None
            else:
                line.append(word)
        elif positionals:
            line.append(_value(positionals[0], word))
        else:
            break  # prose after the command
        i += 1
    return line, unknown


def parse_error(line: list[str]) -> str | None:
    """What the real parser says against `line`, or None when it parses (a hint may leave out a required flag)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.suppress(SystemExit):
        PARSER.parse_args(line)
        return None
    message = stderr.getvalue().strip().splitlines()[-1]
    return None if "the following arguments are required" in message else message


def test_the_code_names_commands_of_every_kind() -> None:
    commands = {command.split()[1] for _, command in named_commands()}
    assert {"serve", "rollout", "validate", "import", "db", "view"} <= commands


def test_every_simia_command_named_in_the_code_parses_with_the_real_parser() -> None:
    wrong = {}
    for where, command in named_commands():
        line, unknown = argv(command)
        problem = f"names {', '.join(unknown)}, which it lacks" if unknown else parse_error(line)
        if problem is not None:
            wrong[f"{where}: {command}"] = problem
    assert wrong == {}


def test_a_missing_key_hint_names_only_flags_of_the_command_that_was_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    line = ["rollout", "--world", "mock", "--agent", "openai:gpt-5.4-mini", "--out", str(tmp_path / "out")]
    assert main(line) == 2
    error = capsys.readouterr().err
    assert "openai:gpt-5.4-mini needs an API key: set OPENAI_API_KEY" in error
    rollout = _subcommands(PARSER)["rollout"]
    assert [flag for flag in re.findall(r"--[a-z][a-z-]*", error) if flag not in rollout._option_string_actions] == []
    assert not (tmp_path / "out").exists()
