"""Shared fixtures: the repository's worlds and the blocking of real model providers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORLDS = ROOT / "tool_specs"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Tests must never reach a real provider by accident.
for _key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
    os.environ.pop(_key, None)


@pytest.fixture
def worlds_dir() -> Path:
    return WORLDS
