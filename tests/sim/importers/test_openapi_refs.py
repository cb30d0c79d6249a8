"""`$ref`s of an API description read only files inside its own folder; remote ones only when allowed.
Every refused reference stops the import with the reference named, and nothing outside is read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from simia.sim.errors import ImportSourceError
from simia.sim.importers import ImportedWorld, import_openapi, load_spec

SECRET = "Outside: {type: object, properties: {leaked_field_7f3a: {type: string}}}\n"
SPEC = """
openapi: 3.0.3
info: {title: Refs, version: "1"}
paths:
  /x:
    get:
      operationId: getX
      responses:
        "200": {description: ok, content: {application/json: {schema: {$ref: "REF"}}}}
"""


def import_with(tmp_path: Path, ref: str, fetch: Callable[[str], bytes] | None = None) -> ImportedWorld:
    folder = tmp_path / "api"
    folder.mkdir(exist_ok=True)
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.replace("REF", ref))
    return import_openapi(load_spec(spec), base_uri=spec.resolve().as_uri(), source="spec.yaml", fetch=fetch)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A schema file beside the description's folder, not in it."""
    (tmp_path / "elsewhere").mkdir()
    path = tmp_path / "elsewhere" / "x.yaml"
    path.write_text(SECRET)
    return path


@pytest.mark.parametrize(
    "ref",
    ["../elsewhere/x.yaml#/Outside", "ABSOLUTE#/Outside", "file://ABSOLUTE#/Outside", "link/x.yaml#/Outside"],
    ids=["parent", "absolute", "file-uri", "symlink"],
)
def test_a_reference_leading_out_of_the_description_folder_is_refused_and_named(
    ref: str, tmp_path: Path, outside: Path
) -> None:
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "link").symlink_to(outside.parent, target_is_directory=True)
    ref = ref.replace("ABSOLUTE", str(outside))
    with pytest.raises(ImportSourceError) as raised:
        import_with(tmp_path, ref)
    message = str(raised.value)
    assert message.startswith(f"refused $ref {ref!r} in GET /x: ")
    assert f"is outside the description's folder {(tmp_path / 'api').resolve()}" in message
    assert "leaked_field_7f3a" not in message


def test_a_remote_reference_is_refused_naming_the_flag_unless_a_fetcher_is_given(tmp_path: Path) -> None:
    ref = "https://schemas.example.com/x.yaml#/Outside"
    with pytest.raises(ImportSourceError) as raised:
        import_with(tmp_path, ref)
    assert str(raised.value) == (
        f"refused $ref {ref!r} in GET /x: https://schemas.example.com/x.yaml is remote; "
        "pass --allow-remote-refs to fetch it"
    )
    fetched: list[str] = []

    def fetch(uri: str) -> bytes:
        fetched.append(uri)
        return SECRET.encode()

    world = import_with(tmp_path, ref, fetch=fetch)
    assert world.tools[0]["outputSchema"] == {"type": "object", "properties": {"leaked_field_7f3a": {"type": "string"}}}
    assert set(fetched) == {"https://schemas.example.com/x.yaml"}


def test_a_remote_document_cannot_reach_back_into_local_files(tmp_path: Path, outside: Path) -> None:
    remote = f"Outside: {{$ref: 'file://{outside}#/Outside'}}\n"
    with pytest.raises(ImportSourceError, match=r"is outside the description's folder"):
        import_with(tmp_path, "https://schemas.example.com/x.yaml#/Outside", fetch=lambda uri: remote.encode())


def test_the_validator_reads_no_file_outside_either(tmp_path: Path, outside: Path) -> None:
    """openapi-spec-validator walks every $ref first; its notes must not carry what the file holds."""
    folder = tmp_path / "api"
    folder.mkdir()
    spec = folder / "spec.yaml"
    spec.write_text(
        SPEC.replace("REF", "#/components/schemas/Ok")
        + "components:\n  schemas:\n    Ok: {type: object}\n    Unused: {$ref: '../elsewhere/x.yaml#/Outside'}\n"
    )
    world = import_openapi(load_spec(spec), base_uri=spec.resolve().as_uri(), source="spec.yaml")
    assert [t["name"] for t in world.tools] == ["getX"]  # an unused reference is never followed
    assert not any("leaked_field_7f3a" in e.reason for e in world.report)
