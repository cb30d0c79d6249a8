"""Shared fixtures: the repository's worlds and the blocking of real model providers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from simia.sim.backends.mock_world import mock_world_answer

ROOT = Path(__file__).resolve().parent.parent
WORLDS = ROOT / "tool_specs"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Tests must never reach a real provider by accident.
for _key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
    os.environ.pop(_key, None)


@pytest.fixture
def worlds_dir() -> Path:
    return WORLDS


@pytest.fixture
def mock_answer() -> Any:
    return mock_world_answer
