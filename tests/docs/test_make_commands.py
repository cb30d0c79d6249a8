"""The docs' `make` commands that can run here: `make help` (make install, test and demo are checked by
tests/test_make.py, which reads what they would run)."""

from __future__ import annotations

import re
import shutil

import pytest
from doc_commands import MAKE_HELP, ROOT  # type: ignore[import-not-found]
from doc_sandbox import Sandbox  # type: ignore[import-not-found]

pytestmark = pytest.mark.processes  # each runs a command as a subprocess


async def test_make_help_lists_every_target(sandbox: Sandbox) -> None:
    """README "Set up, run, test" and Getting started: `make help` lists every target; run as written on a
    copy of the Makefile."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    shutil.copy(ROOT / "Makefile", sandbox.cwd / "Makefile")
    done = await sandbox.run(MAKE_HELP)
    assert done.code == 0, done
    phony = re.search(r"^\.PHONY: (.*)$", makefile, flags=re.M)
    assert phony is not None, "the Makefile declares no .PHONY targets"
    assert sorted(line.split()[0] for line in done.out.splitlines()) == sorted(phony[1].split()), done
