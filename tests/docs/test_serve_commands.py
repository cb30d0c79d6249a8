"""The `simia serve`, `simia view`, `simia validate` and `simia db` commands the docs show, run as written
(what each changes is in doc_sandbox.py's docstring and the test's own)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
from typing import Any

import httpx2 as httpx
import pytest
from doc_commands import (  # type: ignore[import-not-found]
    MALFORMED_CALL,
    PG,
    PG_COPY_IN,
    PG_COPY_OUT,
    PG_MIGRATE,
    PG_SERVE,
    PG_SERVE_2,
    ROOT,
    SERVE_HELP,
    SERVE_RUNS_DB,
    VALIDATE,
    VIEW,
    output_of,
    paragraph,
    shown,
)
from doc_sandbox import Sandbox  # type: ignore[import-not-found]
from mcp import Client
from simia.server.inprocess import free_port
from simia.sim.storage import SCHEMA_VERSION

pytestmark = pytest.mark.processes  # each runs a command as a subprocess


async def served_lines(sandbox: Sandbox) -> tuple[list[str], list[str]]:
    """(what `$ simia serve --backend openai:gpt-5.4-mini --db runs.db` printed, what the docs show under it
    with its port 8765 as the free port P the test gave it and /home/me as the temp dir)."""
    async with sandbox.serve(SERVE_RUNS_DB) as printed:
        port = sandbox.server.rsplit(":", 1)[1]
    database = str((sandbox.cwd / "runs.db").resolve())
    expected = [line.replace("8765", port).replace("/home/me/runs.db", database) for line in output_of(SERVE_RUNS_DB)]
    return printed, expected


async def test_serve_prints_its_worlds_and_urls(sandbox: Sandbox) -> None:
    """The docs' `$ simia serve` block (Serving worlds), word for word (changed: `--port P`, see `served_lines`)."""
    printed, expected = await served_lines(sandbox)
    assert [line.split() for line in printed] == [line.split() for line in expected]


async def test_serve_prints_its_worlds_and_urls_column_for_column(sandbox: Sandbox) -> None:
    """The docs' `$ simia serve` block (Serving worlds), character for character (changed: `--port P`, see
    `served_lines`)."""
    printed, expected = await served_lines(sandbox)
    assert printed == expected


async def test_view_opens_the_runs_database_read_only_and_prints_its_url(sandbox: Sandbox) -> None:
    """The viewer page: `$ simia view --db runs.db` over the database `simia serve ... --db runs.db`
    wrote prints what the page shows (changed: `--port P`, and /home/me as the temp dir), serves the episode
    at /ui, and leaves the file as it was."""
    async with sandbox.serve(SERVE_RUNS_DB), httpx.AsyncClient(base_url=sandbox.server) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
    files = {p.name: p.read_bytes() for p in sandbox.cwd.glob("runs.db*") if p.suffix != ".db-shm"}
    port = free_port()
    argv = [*sandbox.argv(shown(VIEW).text, {}), "--port", str(port)]
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=sandbox.cwd, env=sandbox.env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(60):
            printed = [(await proc.stdout.readline()).decode().rstrip("\n") for _ in output_of(VIEW)]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                while True:
                    with contextlib.suppress(httpx.TransportError):
                        page = await http.get("/ui")
                        break
                    await asyncio.sleep(0.05)
                detail = await http.get(f"/ui/episodes/{episode['id']}")
    finally:
        proc.terminate()
        await proc.communicate()
    database = str((sandbox.cwd / "runs.db").resolve())
    expected = [line.replace("8766", str(port)).replace("/home/me/runs.db", database) for line in output_of(VIEW)]
    assert printed == expected
    assert page.status_code == 200 and episode["id"][:14] in page.text
    assert detail.status_code == 200 and "restock_milk" in detail.text
    # read-only: the database and its write-ahead log as they were (the -shm file is SQLite's shared-memory index;
    # serve's clean shutdown removes the log, and a reader of a WAL database then opens an empty one: no data)
    after = {p.name: p.read_bytes() for p in sandbox.cwd.glob("runs.db*") if p.suffix != ".db-shm"}
    if "runs.db-wal" not in files and after.get("runs.db-wal") == b"":
        del after["runs.db-wal"]
    assert after == files


@pytest.mark.slow  # two replicas, three copies and a migration
async def test_two_replicas_share_one_postgres_database_as_the_deployment_page_shows(
    sandbox: Sandbox, pg_url: str
) -> None:
    """Deployment, "Several replicas on Postgres": runs.db copied to Postgres, two replicas on it, `db migrate`,
    a copy back. Changed: the URL -> a throwaway database's (password included), `--port P`; runs.db is the previous
    release's fixture (tests/fixtures/previous_release.db: 3 episodes), which the copy upgrades first."""
    shutil.copy(ROOT / "tests" / "fixtures" / "previous_release.db", sandbox.cwd / "runs.db")
    url = {PG: pg_url}
    copied = await sandbox.run(PG_COPY_IN, replace=url)
    counts = "episodes 3, events 23, states 2, worlds 0, llm_cache 22 (counts checked)"
    assert copied.code == 0 and counts in copied.out, copied
    async with sandbox.serve(PG_SERVE, replace=url) as printed:
        first = sandbox.server
        assert "  database: postgresql://simia:***@127.0.0.1:" in "\n".join(printed)
        async with sandbox.serve(PG_SERVE_2, replace=url), httpx.AsyncClient() as http:
            second = sandbox.server
            episode = (await http.post(f"{first}/v1/episodes", json={"world": "mock"})).json()
            async with Client(f"{second}/episodes/{episode['id']}/mcp") as client:  # the other replica
                result = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
            assert not result.is_error, result
            stored = (await http.get(f"{first}/v1/episodes/{episode['id']}")).json()
            assert [e["seq"] for e in stored["events"]] == [1] and stored["state"]["items"]["milk"]["qty"] == 4
            listed = (await http.get(f"{second}/v1/episodes")).json()["episodes"]
            assert len(listed) == 4  # the 3 copied and the new one, seen from either replica
    migrated = await sandbox.run(PG_MIGRATE, replace=url)
    assert migrated.code == 0 and migrated.out.endswith(f"schema version {SCHEMA_VERSION}, up to date\n"), migrated
    back = await sandbox.run(PG_COPY_OUT, replace=url)
    assert back.code == 0 and "episodes 4, events 24," in back.out, back
    assert pg_url.split(":")[2].split("@")[0] not in copied.out + migrated.out + back.out  # no password shown


async def test_validate_prints_one_line_per_problem(sandbox: Sandbox) -> None:
    """`$ simia validate tests/fixtures/broken_worlds/unknown_field` prints what the Worlds page shows, and fails;
    the fixture is copied into the temp dir at the same relative path."""
    fixture = "tests/fixtures/broken_worlds/unknown_field"
    shutil.copytree(ROOT / fixture, sandbox.cwd / fixture)
    done = await sandbox.run(VALIDATE)
    assert done.code == 1, done
    assert (done.out + done.err).splitlines() == list(output_of(VALIDATE)), done


async def test_serve_help_lists_the_limits_the_docs_name(sandbox: Sandbox) -> None:
    """Serving worlds, "Limits and budgets" (`simia serve --help`): every flag that paragraph names is in the help,
    with the default it gives (--max-argument-bytes 32768). Run as written."""
    text = paragraph("**Limits and budgets**")
    flags = re.findall(r"`(--[a-z-]+)`", text)
    assert "--max-argument-bytes" in flags, text
    done = await sandbox.run(SERVE_HELP)
    assert done.code == 0, done
    assert [f for f in flags if f not in done.out] == [], done
    assert re.search(r"--max-argument-bytes [^(]*\(32768\)", " ".join(done.out.split())), done


async def test_a_malformed_tools_call_gets_the_json_rpc_error_the_serving_page_shows(make_server: Any) -> None:
    """The Serving page's `curl` of a `tools/call` whose arguments are an array, run as written (changed: the port,
    and EPISODE_ID is an episode of the mock world), answers the JSON-RPC error the page shows under it."""
    command = shown(MALFORMED_CALL)
    lines = (ROOT / "docs" / "serving.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("curl -s localhost:8765/episodes/EPISODE_ID"))
    answer = next(line for line in lines[start:] if line.startswith("# {")).removeprefix("# ")
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()["id"]
        port = server.url.rsplit(":", 1)[1]
        words = [w.replace("localhost:8765", f"localhost:{port}").replace("EPISODE_ID", episode) for w in command.words]
        process = await asyncio.create_subprocess_exec(*words, stdout=asyncio.subprocess.PIPE)
        printed, _ = await process.communicate()
        steps = (await http.get(f"/v1/episodes/{episode}")).json()["steps"]
    assert process.returncode == 0
    assert json.loads(printed) == json.loads(answer)
    assert steps == 0
