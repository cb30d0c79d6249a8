"""The docs tests import their shared helpers (doc_commands.py, doc_sandbox.py) from this folder; `sandbox`
is the temp dir their commands run in, with a fake OpenAI that every `openai:` spec reaches."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from doc_sandbox import Sandbox, fake_openai  # type: ignore[import-not-found]


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[Sandbox]:
    """A temp dir, and a fake OpenAI that every `openai:` spec in it reaches (OPENAI_BASE_URL)."""
    async with fake_openai() as fake:
        env = {
            **os.environ,
            "OPENAI_API_KEY": "test",
            "OPENAI_BASE_URL": fake.base_url,
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("ANTHROPIC_API_KEY", None)
        for name in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS"):  # a user's shell, not the `make test` this may run under
            env.pop(name, None)
        yield Sandbox(tmp_path, env, fake)
