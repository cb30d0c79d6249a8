"""Each framework recipe in examples/ drives a running simia server, no external model needed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def recipe(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", ROOT / "examples" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("mode", "era"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
async def test_the_mcp_sdk_client_recipe_works_in_both_eras(make_server: Any, mode: str, era: str) -> None:
    async with make_server() as server:
        result = await recipe("mcp_sdk_client").main(server.url, mode)
    assert result["era"] == era and result["tools"] == ["list_items", "get_item", "set_quantity"]
    assert (result["before"], result["after"]) == ({"name": "milk", "qty": 0}, {"name": "milk", "qty": 4})


async def test_the_pydantic_ai_recipe_calls_simulated_tools(make_server: Any) -> None:
    pytest.importorskip("pydantic_ai", reason="install the `recipes` extra")
    async with make_server() as server:
        result = await recipe("pydantic_ai_agent").main(server.url)
    assert result["milk"] == 4 and "4" in result["output"]


async def test_the_openai_agents_sdk_recipe_calls_simulated_tools(make_server: Any, monkeypatch: Any) -> None:
    pytest.importorskip("agents", reason="install the `recipes` extra")
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")  # no key here: nothing to export traces to
    async with make_server() as server:
        result = await recipe("openai_agents_sdk").main(server.url)
    assert result["milk"] == 4 and '"qty": 4' in result["output"]


@pytest.mark.slow
@pytest.mark.processes  # simia over stdio
async def test_the_claude_desktop_config_runs_simia_over_stdio(tmp_path: Path) -> None:
    """Runs the config's command as Claude Desktop would, and speaks MCP to it over stdin/stdout."""
    import asyncio
    import os
    import sqlite3

    from mcp import Client, StdioServerParameters

    config = json.loads((ROOT / "examples" / "claude_desktop_config.json").read_text())["mcpServers"]["simia-retail"]
    assert Path(config["command"]).name == "simia"  # the console script, run here as `python -m simia.cli`
    args = list(config["args"])
    args[args.index("--world") + 1] = "mock"  # this machine's paths and a scripted model instead of a real one
    args[args.index("--db") + 1] = str(tmp_path / "simia.db")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "simia.cli", *args, "--backend", f"scripted:{ROOT / 'tests' / 'fixtures' / 'mock_script.json'}"],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=str(tmp_path),  # a desktop client starts it anywhere: the bundled worlds are found without a path
    )
    async with asyncio.timeout(60), Client(params) as client:
        tools = await client.list_tools()
        changed = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
    assert [t.name for t in tools.tools] == ["list_items", "get_item", "set_quantity"]
    assert (changed.is_error, changed.structured_content) == (False, {"name": "milk", "qty": 4})
    with sqlite3.connect(tmp_path / "simia.db") as db:
        rows = db.execute(
            "SELECT e.world, e.seq, json_extract(v.state_patch, '$[0].value') FROM episodes e "
            "JOIN events v ON v.episode_id = e.id"
        ).fetchall()
    assert rows == [
        ("mock", 1, 4)
    ]  # the call (its patch: states are the events' patches) committed to the config's --db


@pytest.mark.slow
@pytest.mark.processes  # the recipe runs in .venv-langchain
async def test_the_langchain_recipe_works_from_its_own_venv(make_server: Any, tmp_path: Path) -> None:
    """langchain-mcp-adapters pins mcp<2: CI builds its venv (.ci/langchain-venv.sh) before the tests."""
    import asyncio

    python = ROOT / ".venv-langchain" / "bin" / "python"
    assert python.exists(), "run `bash .ci/langchain-venv.sh` to create .venv-langchain"
    async with make_server() as server:
        proc = await asyncio.create_subprocess_exec(
            str(python),
            str(ROOT / "examples" / "langchain_mcp.py"),
            server.url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result["tools"] == ["get_item", "list_items", "set_quantity"] and result["milk"] == 4
