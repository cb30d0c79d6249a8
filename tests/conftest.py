"""Shared fixtures: the repository's worlds and the blocking of real model providers."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

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


def mock_world_answer(request: Any) -> dict[str, Any]:
    """A correct simulator for the `mock` world, reading the call and state from the simulator's prompt."""
    prompt = str(request.messages[1]["content"])
    state = json.loads(prompt.split("Current state", 1)[1].split("\n", 2)[1])
    tool = prompt.split("Call: ", 1)[1].split("\n", 1)[0]
    args = json.loads(prompt.split("Arguments: ", 1)[1])
    items = state["items"]

    def ok(output: dict[str, Any], patch: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {"is_error": False, "error_code": None, "message": "ok", "output": output, "state_patch": patch or []}

    if tool == "list_items":
        return ok({"items": [{"name": k, "qty": v["qty"]} for k, v in items.items()]})
    if args.get("name") not in items:
        return {
            "is_error": True,
            "error_code": "item_not_found",
            "message": f"No item named {args.get('name')}.",
            "output": None,
            "state_patch": [],
        }
    name = args["name"]
    if tool == "get_item":
        return ok({"name": name, "qty": items[name]["qty"]})
    patch = [{"op": "replace", "path": f"/items/{name}/qty", "value": args["qty"]}]
    return ok({"name": name, "qty": args["qty"]}, patch)


@pytest.fixture
def mock_answer() -> Any:
    return mock_world_answer
