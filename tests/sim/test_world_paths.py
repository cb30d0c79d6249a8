"""World names and files cannot escape their folder: a file that links outside is refused (not read), names are
URL-safe, and no request path reaches a world by a name that is not loaded."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from simia.sim import load_worlds

ROOT = Path(__file__).resolve().parents[2]
SECRET = "SECRET-FROM-OUTSIDE-9d1e"


def _mock_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "worlds" / "mock"
    shutil.copytree(ROOT / "tool_specs" / "mock", folder)
    return folder


@pytest.mark.parametrize("name", ["world.yaml", "state.json", "tasks.jsonl", "policy.md"])
def test_a_world_file_that_links_outside_the_folder_is_refused_and_never_read(tmp_path: Path, name: str) -> None:
    folder = _mock_copy(tmp_path)
    outside = tmp_path / "private.txt"
    outside.write_text(f'{{"x": "{SECRET}"}}\n' if name != "policy.md" else SECRET)
    (folder / name).unlink(missing_ok=True)
    (folder / name).symlink_to(outside)
    report = load_worlds([tmp_path / "worlds"])
    assert report.worlds == {}
    assert f"{folder / name}: $: the file leads outside the world's folder" in str(report.errors[0])
    assert SECRET not in str(report.errors[0])


def test_an_example_that_links_outside_is_refused(tmp_path: Path) -> None:
    folder = _mock_copy(tmp_path)
    (folder / "examples").mkdir(exist_ok=True)
    (tmp_path / "private.json").write_text(f'{{"messages": [{{"role": "user", "content": "{SECRET}"}}]}}')
    (folder / "examples" / "leak.json").symlink_to(tmp_path / "private.json")
    report = load_worlds([tmp_path / "worlds"])
    assert report.worlds == {}
    assert f"{folder / 'examples' / 'leak.json'}: $: the file leads outside" in str(report.errors[0])


def test_a_world_folder_that_is_itself_a_link_still_loads(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere" / "mock"
    shutil.copytree(ROOT / "tool_specs" / "mock", real)
    (tmp_path / "worlds").mkdir()
    (tmp_path / "worlds" / "mock").symlink_to(real, target_is_directory=True)
    assert list(load_worlds([tmp_path / "worlds"]).worlds) == ["mock"]


def test_a_world_name_that_is_a_path_is_refused(tmp_path: Path) -> None:
    folder = _mock_copy(tmp_path)
    text = (folder / "world.yaml").read_text()
    (folder / "world.yaml").write_text(text.replace("name: mock", "name: ../../etc", 1))
    report = load_worlds([tmp_path / "worlds"])
    assert report.worlds == {}
    assert "name" in repr(report)


@pytest.mark.parametrize(
    "path", ["/worlds/..%2Fmock/mcp", "/worlds/%2E%2E/mcp", "/worlds/mock%2F..%2Fretail/mcp", "/worlds/MOCK/mcp"]
)
async def test_no_request_path_reaches_a_world_by_another_name(make_server: Any, path: str) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        response = await http.post(path, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
