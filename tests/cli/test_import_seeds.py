"""`simia import seeds`: the command prints what it read, wrote and skipped, exactly as docs/seeds.md shows; bad
input is one line and nothing written. The command runs through its own argparse registration (`register_seeds`
on a fresh parser shaped like `simia import`), and once through `simia.cli.main` for the exit code."""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import simia.cli
from simia.cli import CliError, main
from simia.cli.seeds import register_seeds
from simia.sim.importers.seeds import SEED_FORMATS

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "tests" / "fixtures" / "seeds"
PAGE = ROOT / "docs" / "seeds.md"


def import_parser() -> argparse.ArgumentParser:
    """A parser shaped like `simia import` with only `seeds` registered."""
    parser = argparse.ArgumentParser(prog="simia import")
    register_seeds(parser.add_subparsers(dest="source", required=True, metavar="SOURCE"))
    return parser


def run(*argv: str) -> int:
    """`simia import seeds ARGV...` through the command's own registration."""
    args = import_parser().parse_args(["seeds", *argv])
    code: int = args.func(args)
    return code


@pytest.fixture
def in_repo_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working directory holding tests/fixtures/seeds, as the docs' commands expect to run from the repo's root."""
    shutil.copytree(SEEDS, tmp_path / "tests" / "fixtures" / "seeds")
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def shown_import() -> tuple[list[str], list[str]]:
    """The `$ simia import seeds ...` command docs/seeds.md shows, and the output it shows under it."""
    text = PAGE.read_text(encoding="utf-8")
    block = re.search(r"^```\n\$ (simia import seeds .*?)\n(.*?)^```", text, flags=re.M | re.S)
    assert block is not None, "docs/seeds.md shows no `$ simia import seeds` block"
    return shlex.split(block.group(1)), block.group(2).splitlines()


def test_the_import_prints_what_it_read_wrote_and_skipped_as_the_docs_show(
    in_repo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    words, output = shown_import()
    assert words[:3] == ["simia", "import", "seeds"]

    assert run(*words[3:]) == 0

    assert capsys.readouterr().out.splitlines() == output
    assert main(["validate", "worlds/seeds"]) == 0
    assert sorted(p.name for p in (in_repo_copy / "worlds" / "seeds").iterdir()) == [
        "air-quality-2-tools",
        "convert-units",
        "member-renew-2-tools",
        "seeds_report.json",
        "ticket",
    ]


def test_the_docs_validate_command_is_the_one_the_import_suggests() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert "```bash\nsimia validate worlds/seeds\n```" in text
    assert "next: simia validate worlds/seeds  |  simia serve --worlds-dir worlds/seeds" in text


def test_a_file_whose_format_auto_cannot_tell_is_refused_as_the_docs_show(in_repo_copy: Path) -> None:
    shutil.copy(SEEDS / "unknown.jsonl", in_repo_copy / "data.jsonl")
    shown = next(line for line in PAGE.read_text(encoding="utf-8").splitlines() if line.startswith("error: data.jsonl"))

    with pytest.raises(CliError) as raised:
        run("data.jsonl", "--out", "worlds/seeds")

    assert f"error: {raised.value}" == shown
    assert not (in_repo_copy / "worlds").exists()


def test_bad_input_exits_2_with_one_line_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = simia.cli.build_parser

    def with_seeds() -> argparse.ArgumentParser:  # `simia import seeds` before the main parser registers it
        parser = real()
        command = next(a for a in parser._actions if a.dest == "command")
        kinds = next(a for a in command.choices["import"]._actions if a.dest == "source")
        if "seeds" not in kinds.choices:
            register_seeds(kinds)
        return parser

    monkeypatch.setattr(simia.cli, "build_parser", with_seeds)

    code = main(["import", "seeds", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "out")])

    assert code == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: no seed file at '{tmp_path / 'nope.jsonl'}'; give JSONL, JSON or Parquet files: simia import seeds "
        "FILE... --out DIR\n"
    )
    assert not (tmp_path / "out").exists()


def test_when_no_record_becomes_a_seed_the_reasons_go_to_stderr_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(line + "\n" for line in (SEEDS / "bad.jsonl").read_text().splitlines()[1:6]))

    with pytest.raises(CliError, match=r"none of the 5 record\(s\) became a seed, nothing written"):
        run(str(bad), "--out", str(tmp_path / "out"))

    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"        1  mixed formats  (first: {bad}:5: a record in xlam format in a file of openai records)" in (
        captured.err.splitlines()
    )
    assert not (tmp_path / "out").exists()


def test_an_existing_world_is_replaced_only_with_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(str(SEEDS / "glaive.jsonl"), "--out", str(tmp_path)) == 0

    with pytest.raises(CliError, match="already exists; pass --force to replace it, or --out another folder"):
        run(str(SEEDS / "glaive.jsonl"), "--out", str(tmp_path))
    assert run(str(SEEDS / "glaive.jsonl"), "--out", str(tmp_path), "--force") == 0
    assert "wrote 1 world(s)" in capsys.readouterr().out


def test_out_must_be_a_folder(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(CliError, match=r"--out .* is a file; give a folder"):
        run(str(SEEDS / "xlam.json"), "--out", str(tmp_path / "file"))


def test_max_examples_and_format_are_passed_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(str(SEEDS / "apigen.json"), "--out", str(tmp_path), "--format", "apigen", "--max-examples", "0") == 0

    out = capsys.readouterr().out
    assert f"  {SEEDS / 'apigen.json'}  apigen          3 record(s)        3 seed(s)" in out.splitlines()
    assert "  member-renew-2-tools    2 tool(s)       3 seed(s)  0 example(s)" in out.splitlines()
    assert not (tmp_path / "member-renew-2-tools" / "examples").exists()


def test_the_format_flag_takes_only_the_known_formats(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        import_parser().parse_args(["seeds", "x.jsonl", "--out", "w", "--format", "csv"])
    assert raised.value.code == 2
    assert "invalid choice: 'csv'" in capsys.readouterr().err
    seeds = import_parser()._subparsers._group_actions[0].choices["seeds"]  # type: ignore[union-attr]
    assert next(a for a in seeds._actions if a.dest == "format").choices == SEED_FORMATS


def test_exclude_skips_the_seeds_that_overlap_an_evaluation_set_as_the_docs_show(
    in_repo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = PAGE.read_text(encoding="utf-8")
    block = re.search(r"^```\n\$ (simia import seeds [^\n]*--exclude[^\n]*)\n(.*?)^```", text, flags=re.M | re.S)
    assert block is not None, "docs/seeds.md shows no `$ simia import seeds ... --exclude` block"

    assert run(*shlex.split(block.group(1))[3:]) == 0

    assert capsys.readouterr().out.splitlines() == block.group(2).splitlines()
    assert main(["validate", "worlds/clean"]) == 0


def test_an_exclude_file_that_is_missing_is_one_line_and_nothing_written(in_repo_copy: Path) -> None:
    with pytest.raises(CliError, match=r"no evaluation set at 'eval\.jsonl'"):
        run("tests/fixtures/seeds/apigen.json", "--exclude", "eval.jsonl", "--out", "worlds/clean")
    assert not (in_repo_copy / "worlds").exists()
