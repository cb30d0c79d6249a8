"""`simia import openapi` of a description with REST resources: a world named after its folder, with normal file
modes, whose proposed declarations pass `simia validate` and answer GET-after-POST from the state, with no model;
`$ref`s to the network only with `--allow-remote-refs` (over real HTTP)."""

from __future__ import annotations

import http.server
import json
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from simia.cli import main
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.errors import BackendUnavailable

LIBRARY = Path(__file__).resolve().parents[1] / "sim" / "importers" / "library_lending_openapi_3_1.yaml"


def offline(request: CompletionRequest) -> dict[str, Any]:
    raise BackendUnavailable("no model here: a declared call must not need one")


def modes(folder: Path) -> set[tuple[str, int]]:
    return {("dir" if p.is_dir() else "file", stat.S_IMODE(p.stat().st_mode)) for p in [folder, *folder.rglob("*")]}


async def test_an_imported_rest_world_validates_and_answers_get_after_post_from_the_state(
    tmp_path: Path, make_server: Callable[..., Any], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "worlds" / "train-library"
    assert main(["import", "openapi", str(LIBRARY), "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}: world 'train-library', 11 tool(s)")
    mask = os.umask(0)
    os.umask(mask)
    assert modes(out) == {("dir", 0o777 & ~mask), ("file", 0o666 & ~mask)}
    assert json.loads((out / "state.json").read_text()) == {"books": {}, "members": {}, "loans": {}}
    assert main(["validate", str(out)]) == 0
    book = {"title": "Emma", "author": "Jane Austen", "year": 1815, "tags": ["classic"]}
    async with (
        make_server(worlds_dir=tmp_path / "worlds", backend=FunctionBackend(offline)) as running,
        Client(f"{running.url}/worlds/train-library/mcp") as client,
    ):
        posted = await client.call_tool("createBook", {"book_id": "emma", "body": book})
        got = await client.call_tool("getBook", {"book_id": "emma"})
        listed = await client.call_tool("listBooks", {})
        missing = await client.call_tool("getBook", {"book_id": "dune"})
        ada = {"name": "Ada Byron", "email": "ada@example.org"}
        joined = await client.call_tool("registerMember", {"body": ada})  # the id is the server's: drawn
        member = await client.call_tool("getMember", {"member_id": (joined.structured_content or {}).get("id", "")})
    stored = {**book, "id": "emma"}
    assert (posted.is_error, posted.structured_content) == (False, stored)
    assert (got.is_error, got.structured_content) == (False, stored)
    assert (listed.is_error, listed.structured_content) == (False, {"books": [stored]})
    assert missing.is_error and "not_found" in str(missing.content)
    new_id = (joined.structured_content or {}).get("id")
    assert isinstance(new_id, str) and (joined.is_error, joined.structured_content) == (False, {**ada, "id": new_id})
    assert (member.is_error, member.structured_content) == (False, {**ada, "id": new_id})


def test_the_name_flag_still_wins_over_the_folder_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "worlds" / "train-library"
    assert main(["import", "openapi", str(LIBRARY), "--out", str(out), "--name", "lending"]) == 0
    assert "world 'lending'" in capsys.readouterr().out


@pytest.fixture
def schema_host(tmp_path: Path) -> Iterator[str]:
    """A real HTTP server with one schema document, /shared.yaml (port chosen by the OS)."""
    served = tmp_path / "served"
    served.mkdir()
    (served / "shared.yaml").write_text("Note: {type: object, properties: {text: {type: string}}}\n")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(served), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_remote_reference_is_fetched_only_with_allow_remote_refs(
    tmp_path: Path, schema_host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = f"{schema_host}/shared.yaml#/Note"
    spec = tmp_path / "notes.json"
    media = {"application/json": {"schema": {"$ref": ref}}}
    operation = {"operationId": "getNote", "responses": {"200": {"description": "ok", "content": media}}}
    spec.write_text(
        json.dumps(
            {"openapi": "3.1.0", "info": {"title": "Notes", "version": "1"}, "paths": {"/note": {"get": operation}}}
        )
    )
    out = tmp_path / "notes"
    assert main(["import", "openapi", str(spec), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"error: refused $ref {ref!r} in GET /note: {schema_host}/shared.yaml is remote; "
        "pass --allow-remote-refs to fetch it\n"
    )
    assert not out.exists()
    assert main(["import", "openapi", str(spec), "--out", str(out), "--allow-remote-refs"]) == 0
    [tool] = json.loads((out / "tools.json").read_text())
    assert tool["outputSchema"] == {"type": "object", "properties": {"text": {"type": "string"}}}
