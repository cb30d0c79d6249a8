"""The generated reference pages (docs/reference/cli.md, docs/reference/http.md) match the code that
generates them: the CLI's argument parsers and the OpenAPI document of the HTTP API.

When one fails, the code changed and the page did not: run `python docs/_gen/reference.py` and commit both
pages (as simonw/llm does with its CLI help)."""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
from doc_commands import REFERENCE, ROOT, shown  # type: ignore[import-not-found]

GENERATOR = ROOT / "docs" / "_gen" / "reference.py"
FIX = f"run `{REFERENCE}` and commit the pages it writes"


def generator() -> ModuleType:
    """docs/_gen/reference.py, imported from its path (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("simia_docs_reference", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_matches_the_argument_parser() -> None:
    reference = generator()
    assert reference.CLI_PAGE.read_text(encoding="utf-8") == reference.cli_reference(), (
        f"docs/reference/cli.md is out of date with simia.cli's parser: {FIX}"
    )


def test_the_http_reference_matches_the_openapi_document() -> None:
    reference = generator()
    assert reference.HTTP_PAGE.read_text(encoding="utf-8") == reference.http_reference(), (
        f"docs/reference/http.md is out of date with simia.server.openapi: {FIX}"
    )


def test_the_cli_reference_has_every_command_and_flag() -> None:
    """Wrong-proof: every sub-command of `simia` has a section, and every flag of `simia serve` a row."""
    from simia.cli import build_parser

    page = generator().cli_reference()
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert [c for c in commands if f"## simia {c}\n" not in page] == []
    serve = commands["serve"]
    flags = [o for a in serve._actions for o in a.option_strings if o.startswith("--") and o != "--help"]
    assert [f for f in flags if f"| `{f}" not in page] == []


def test_the_http_reference_has_every_route_of_the_openapi_document() -> None:
    from simia.server.openapi import openapi_document

    page = generator().http_reference()
    document = openapi_document(requires_token=True)
    routes = [f"### {m.upper()} {path}\n" for path, methods in document["paths"].items() for m in methods]
    assert [r for r in routes if r not in page] == []
    assert [s for s in document["components"]["schemas"] if f"### {s}\n" not in page] == []


@pytest.mark.processes
async def test_the_fix_command_writes_the_checked_in_references(tmp_path: Path) -> None:
    """`python docs/_gen/reference.py`, as the docs show it, run on a copy of the generator: it writes both
    pages, and they are the checked-in ones (the checkout's own pages are never rewritten by a test)."""
    words = shown(REFERENCE).words
    assert words[0] == "python"
    copy = tmp_path / "docs" / "_gen"
    copy.mkdir(parents=True)
    shutil.copy(GENERATOR, copy / "reference.py")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *words[1:], cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    assert out.decode().splitlines() == ["wrote docs/reference/cli.md", "wrote docs/reference/http.md"]
    for name in ("cli.md", "http.md"):
        written = (tmp_path / "docs" / "reference" / name).read_text(encoding="utf-8")
        assert written == (ROOT / "docs" / "reference" / name).read_text(encoding="utf-8"), f"{name}: {FIX}"
