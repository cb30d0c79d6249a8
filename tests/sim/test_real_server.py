"""A world's real server carries the headers and environment it needs as `${NAME}` references, never secrets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from simia.sim import load_world
from simia.sim.errors import WorldError
from simia.sim.importers import ReportEntry, real_server_record
from simia.sim.world import RealServer


def test_references_are_filled_from_the_environment_and_a_missing_one_is_named() -> None:
    server = RealServer(url="http://x/mcp", headers={"Authorization": "Bearer ${GH}", "X-Team": "${TEAM}-a"})
    assert server.variables() == ["GH", "TEAM"]
    assert server.resolved({"GH": "t0k", "TEAM": "red"}) == ({"Authorization": "Bearer t0k", "X-Team": "red-a"}, {})
    with pytest.raises(ValueError, match=r"read GH, TEAM from the environment.*run `export GH=\.\.\.` first"):
        server.resolved({})


def test_a_world_with_a_literal_credential_is_refused_without_showing_it(tmp_path: Path) -> None:
    tool = {"name": "t", "inputSchema": {"type": "object"}, "route": "real"}
    problems = {}
    for name, real_server in {
        "header": {"url": "http://x/mcp", "headers": {"Authorization": "Bearer s3cret"}},
        "env": {"command": ["srv"], "env": {"API_KEY": "s3cret"}},
        "malformed": {"command": ["srv"], "env": {"MODE": "${mode"}},
        "misplaced": {"command": ["srv"], "headers": {"X-Mode": "fast"}},
    }.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "world.yaml").write_text(yaml.safe_dump({"name": name, "tools": [tool], "real_server": real_server}))
        with pytest.raises(WorldError) as caught:
            load_world(folder)
        assert "s3cret" not in str(caught.value)
        problems[name] = str(caught.value.issues[0]).split(": ", 1)[1]
    credential = (
        "this looks like a credential written as a literal value; refer to an environment variable instead (e.g. "
        "\"Bearer ${TOKEN}\") and set it where simia serve runs (hint: got '(not shown)')"
    )
    assert problems == {
        "header": f"$.real_server.headers.Authorization: {credential}",
        "env": f"$.real_server.env.API_KEY: {credential}",
        "malformed": "$.real_server.env.MODE: write a variable as ${NAME} (letters, digits and _) "
        "(hint: got '(not shown)')",
        "misplaced": "$.real_server: Value error, headers are for a url server; a command server takes env "
        '(hint: got {"command": ["srv"], "headers": {"X-Mode": "fast"}})',
    }


def test_the_importer_writes_references_in_place_of_the_values_it_was_given() -> None:
    record, given, notes = real_server_record(
        "http://x/mcp", {"Authorization": "Bearer s3cret", "X-Api-Key": "k3y", "X-Org": "${ORG}"}, {}
    )
    assert record == {
        "url": "http://x/mcp",
        "headers": {"Authorization": "Bearer ${AUTHORIZATION}", "X-Api-Key": "${X_API_KEY}", "X-Org": "${ORG}"},
    }
    assert given == {"AUTHORIZATION": "s3cret", "X_API_KEY": "k3y"}  # what the import itself connects with
    assert notes == [
        ReportEntry(
            "note",
            "real_server",
            "world.yaml reads AUTHORIZATION, ORG, X_API_KEY from the environment (its headers/env name them, never "
            "the values given here): set them where simia serve runs",
        )
    ]
    assert real_server_record(["srv", "--fast"], {}, {"API_KEY": "s3cret"})[:2] == (
        {"command": ["srv", "--fast"], "env": {"API_KEY": "${API_KEY}"}},
        {"API_KEY": "s3cret"},
    )
    assert real_server_record(["srv"], {}, {}) == ({"command": ["srv"]}, {}, [])
    with pytest.raises(ValueError, match=r"^real_server\.env\.MODE: write a variable as \$\{NAME\}"):
        real_server_record(["srv"], {}, {"MODE": "${mode"})
