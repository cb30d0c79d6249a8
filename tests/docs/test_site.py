"""The docs site builds with `mkdocs build --strict`: no broken link or anchor, no page missing from the nav."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import pytest
from doc_commands import ROOT, SITE, shown  # type: ignore[import-not-found]


@pytest.mark.processes
async def test_the_site_builds_strict_as_the_docs_show(tmp_path: Path) -> None:
    """`python -m mkdocs build --strict -d site`, as written, on a copy of mkdocs.yml and docs/ (so the
    site lands in the temp dir); every page of the nav is built."""
    pytest.importorskip("mkdocs", reason="install the `docs` extra")
    pytest.importorskip("material", reason="install the `docs` extra")
    words = shown(SITE).words
    assert words[0] == "python"
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *words[1:],
        cwd=tmp_path,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, (out + err).decode()[-4000:]
    site = tmp_path / "site"
    pages = sorted(
        p.relative_to(tmp_path / "docs").with_suffix("").as_posix() for p in (tmp_path / "docs").rglob("*.md")
    )
    built = [p for p in pages if (site / ("" if p == "index" else p) / "index.html").is_file()]
    assert built == pages
    assert not (site / "_gen").exists(), "the generator is not part of the site"
