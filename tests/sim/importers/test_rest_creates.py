"""`simia import openapi` proposes a declaration for a create whose new id is not an argument: the id in the body
(a second create with it is the conflict code), or made by the server (drawn with `$newid`, shaped by the id's
schema); the world validates, and a GET after the POST answers the created record with no model."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from simia.cli import main
from simia.sim.backends import ScriptedBackend
from simia.sim.engine import Simulator, Step, ToolCall
from simia.sim.importers import ReportEntry, import_openapi, load_spec
from simia.sim.world import World, load_world, write_world

SPEC = """
openapi: 3.0.3
info: {title: Clinic, version: "1"}
components:
  schemas:
    Pet:
      type: object
      required: [petId, name]
      properties:
        petId: {type: integer, format: int64}
        name: {type: string}
        tags: {type: array, items: {type: string}}
    Visit:
      type: object
      required: [id, pet, reason]
      properties:
        id: {type: string, format: uuid, readOnly: true}
        pet: {type: integer}
        reason: {type: string}
    Invoice:
      type: object
      required: [invoice_id, amount]
      properties:
        invoice_id: {type: integer, readOnly: true}
        amount: {type: number}
    Tag:
      type: object
      required: [id, label]
      properties:
        id: {type: string, pattern: "^[a-z0-9]+$"}
        label: {type: string}
      x-note: the id is optional in a request (the server makes one when it is left out)
    TagFields:
      type: object
      required: [label]
      properties:
        id: {type: string, pattern: "^[a-z0-9]+$"}
        label: {type: string}
  responses:
    NotFound: {description: No such record}
paths:
  /pets:
    post:
      operationId: createPet
      requestBody: {required: true, content: {application/json: {schema: {$ref: "#/components/schemas/Pet"}}}}
      responses:
        "201": {description: Created, content: {application/json: {schema: {$ref: "#/components/schemas/Pet"}}}}
        "409": {description: A pet with this id exists}
  /pets/{petId}:
    get:
      operationId: getPet
      parameters: [{name: petId, in: path, required: true, schema: {type: integer}}]
      responses:
        "200": {description: The pet, content: {application/json: {schema: {$ref: "#/components/schemas/Pet"}}}}
        "404": {$ref: "#/components/responses/NotFound"}
  /visits:
    post:
      operationId: bookVisit
      requestBody: {required: true, content: {application/json: {schema: {$ref: "#/components/schemas/Visit"}}}}
      responses:
        "201": {description: Booked, content: {application/json: {schema: {$ref: "#/components/schemas/Visit"}}}}
  /visits/{visit_id}:
    get:
      operationId: getVisit
      parameters: [{name: visit_id, in: path, required: true, schema: {type: string, format: uuid}}]
      responses:
        "200": {description: The visit, content: {application/json: {schema: {$ref: "#/components/schemas/Visit"}}}}
        "404": {$ref: "#/components/responses/NotFound"}
  /invoices:
    post:
      operationId: issueInvoice
      requestBody: {required: true, content: {application/json: {schema: {$ref: "#/components/schemas/Invoice"}}}}
      responses:
        "201": {description: Issued, content: {application/json: {schema: {$ref: "#/components/schemas/Invoice"}}}}
  /invoices/{invoice_id}:
    get:
      operationId: getInvoice
      parameters: [{name: invoice_id, in: path, required: true, schema: {type: integer}}]
      responses:
        "200": {description: The invoice, content: {application/json: {schema: {$ref: "#/components/schemas/Invoice"}}}}
        "404": {$ref: "#/components/responses/NotFound"}
  /tags:
    post:
      operationId: createTag
      requestBody: {required: true, content: {application/json: {schema: {$ref: "#/components/schemas/TagFields"}}}}
      responses:
        "201": {description: Created, content: {application/json: {schema: {$ref: "#/components/schemas/Tag"}}}}
        "409": {description: A tag with this id exists}
  /tags/{id}:
    get:
      operationId: getTag
      parameters: [{name: id, in: path, required: true, schema: {type: string}}]
      responses:
        "200": {description: The tag, content: {application/json: {schema: {$ref: "#/components/schemas/Tag"}}}}
        "404": {$ref: "#/components/responses/NotFound"}
"""

UUID_ID = (
    '($h := "0123456789abcdef"; $newid($newid("", 8, [], $h) & "-" & $newid("", 4, [], $h) & "-4" & '
    '$newid("", 3, [], $h) & "-" & $newid("", 1, [], "89ab") & $newid("", 3, [], $h) & "-", 12, $state.visits, $h))'
)
TAG_ID = '$newid("", 8, $state.tags, "abcdefghijklmnopqrstuvwxyz0123456789")'
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def clinic(tmp_path: Path) -> Path:
    path = tmp_path / "clinic.yaml"
    path.write_text(SPEC)
    return path


def imported_world(tmp_path: Path) -> World:
    path = clinic(tmp_path)
    world = import_openapi(load_spec(path), base_uri=path.resolve().as_uri(), name="clinic")
    return write_world(tmp_path / "clinic", world.files())


async def run(world: World, *calls: tuple[str, dict[str, Any]], state: dict[str, Any] | None = None) -> list[Step]:
    """The calls in order on one episode's state (the world's initial one unless given), with no model: nothing is
    scripted, so a model call would be an infra error."""
    sim = Simulator(backend=ScriptedBackend([]))
    state = world.initial_state if state is None else state
    steps = []
    for tool, arguments in calls:
        step = await sim.step(world, state, [], ToolCall(tool, arguments), seed=3)
        assert step.model == "" and step.error_kind != "infra", (tool, step.detail)
        steps.append(step)
        state = step.state
    return steps


def test_a_create_with_the_id_in_the_body_or_made_by_the_server_gets_a_computed_declaration(tmp_path: Path) -> None:
    path = clinic(tmp_path)
    world = import_openapi(load_spec(path), base_uri=path.resolve().as_uri())
    groundings = {tool["name"]: tool.get("grounding") for tool in world.tools}
    assert groundings["createPet"] == {
        "let": {"id": "$string($floor($args.body.petId))"},
        "preconditions": [{"expr": "$not($exists($lookup($state.pets, $id)))", "error": "conflict"}],
        "effects": [{"expr": '{"op": "add", "path": $pointer("pets", $id), "value": $args.body}'}],
        "read": {"expr": "$lookup($state.pets, $id)"},
    }
    assert groundings["bookVisit"] == {
        "let": {"id": UUID_ID, "record": '$merge([$args.body, {"id": $id}])'},
        "effects": [{"expr": '{"op": "add", "path": $pointer("visits", $id), "value": $record}'}],
        "read": {"expr": "$lookup($state.visits, $id)"},
    }
    assert groundings["issueInvoice"] == {
        "let": {
            "id": '$newid($newid("", 1, [], "123456789"), 8, $state.invoices)',
            "record": '$merge([$args.body, {"invoice_id": $floor($number($id))}])',
        },
        "effects": [{"expr": '{"op": "add", "path": $pointer("invoices", $id), "value": $record}'}],
        "read": {"expr": "$lookup($state.invoices, $id)"},
    }
    assert groundings["createTag"] == {
        "let": {
            "id": f"$exists($args.body.id) ? $args.body.id : {TAG_ID}",
            "record": '$merge([$args.body, {"id": $id}])',
        },
        "preconditions": [{"expr": "$not($exists($lookup($state.tags, $id)))", "error": "conflict"}],
        "effects": [{"expr": '{"op": "add", "path": $pointer("tags", $id), "value": $record}'}],
        "read": {"expr": "$lookup($state.tags, $id)"},
    }
    assert world.state == {"pets": {}, "visits": {}, "invoices": {}, "tags": {}}
    drawn = "never one in use (its own scheme, not the server's)"
    assert [e for e in world.report if "grounding" in e.reason] == [
        ReportEntry(
            "note",
            "POST /visits",
            f"grounding proposed: the server makes the new id (id): simia draws a UUID (version 4), {drawn}",
        ),
        ReportEntry(
            "note",
            "POST /invoices",
            f"grounding proposed: the server makes the new id (invoice_id): simia draws a 9-digit number, {drawn}",
        ),
        ReportEntry(
            "note",
            "POST /tags",
            "grounding proposed: the body may name the new id, else the server makes it "
            f"(id): simia draws 8 lowercase letters and digits, {drawn}",
        ),
    ]


async def test_get_after_a_post_with_the_id_in_the_body_answers_the_record_and_a_second_post_is_a_conflict(
    tmp_path: Path,
) -> None:
    world = imported_world(tmp_path)
    rex = {"petId": 7, "name": "Rex", "tags": ["good"]}
    posted, got, again, other, missing = await run(
        world,
        ("createPet", {"body": rex}),
        ("getPet", {"petId": 7}),
        ("createPet", {"body": {"petId": 7, "name": "Max"}}),
        ("getPet", {"petId": 7}),
        ("getPet", {"petId": 8}),
    )
    assert (posted.is_error, posted.output, posted.source) == (False, rex, "state")
    assert posted.state["pets"] == {"7": rex}
    assert (got.is_error, got.output, got.source) == (False, rex, "state")
    assert (again.is_error, again.error_code, again.state) == (True, "conflict", posted.state)
    assert other.output == rex  # the refused create changed nothing
    assert (missing.is_error, missing.error_code) == (True, "not_found")


async def test_ids_the_server_makes_are_drawn_in_the_ids_shape_differ_and_each_get_answers_its_record(
    tmp_path: Path,
) -> None:
    world = imported_world(tmp_path)
    first, second, bill, bill_2 = await run(
        world,
        ("bookVisit", {"body": {"pet": 7, "reason": "checkup"}}),
        ("bookVisit", {"body": {"pet": 7, "reason": "checkup"}}),  # the same body again: a new visit, a new id
        ("issueInvoice", {"body": {"amount": 12.5}}),
        ("issueInvoice", {"body": {"amount": 12.5}}),
    )
    ids = [first.output["id"], second.output["id"]]
    assert all(UUID.fullmatch(i) for i in ids) and ids[0] != ids[1]
    numbers = [bill.output["invoice_id"], bill_2.output["invoice_id"]]
    assert all(isinstance(n, int) and 10**8 <= n < 10**9 for n in numbers) and numbers[0] != numbers[1]
    gets = await run(
        world,
        *[("getVisit", {"visit_id": i}) for i in ids],
        *[("getInvoice", {"invoice_id": n}) for n in numbers],
        state=bill_2.state,
    )
    assert [(g.is_error, g.output) for g in gets] == [
        (False, {"pet": 7, "reason": "checkup", "id": ids[0]}),
        (False, {"pet": 7, "reason": "checkup", "id": ids[1]}),
        (False, {"amount": 12.5, "invoice_id": numbers[0]}),
        (False, {"amount": 12.5, "invoice_id": numbers[1]}),
    ]
    assert bill_2.state["invoices"] == {str(n): {"amount": 12.5, "invoice_id": n} for n in numbers}


async def test_an_optional_body_id_is_used_when_given_and_drawn_when_not(tmp_path: Path) -> None:
    world = imported_world(tmp_path)
    named, drawn, taken, got = await run(
        world,
        ("createTag", {"body": {"id": "urgent", "label": "Urgent"}}),
        ("createTag", {"body": {"label": "Later"}}),
        ("createTag", {"body": {"id": "urgent", "label": "Again"}}),
        ("getTag", {"id": "urgent"}),
    )
    assert named.output == {"id": "urgent", "label": "Urgent"}
    new_id = drawn.output["id"]
    assert re.fullmatch(r"[a-z0-9]{8}", new_id) and drawn.state["tags"][new_id] == {"label": "Later", "id": new_id}
    assert (taken.is_error, taken.error_code) == (True, "conflict")
    assert got.output == {"id": "urgent", "label": "Urgent"}


async def test_the_cli_import_validates_and_answers_get_after_post_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "worlds" / "clinic"
    assert main(["import", "openapi", str(clinic(tmp_path)), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "note     POST /invoices: grounding proposed: the server makes the new id (invoice_id)" in printed
    report = json.loads((out / "import_report.json").read_text())["report"]
    assert [e["item"] for e in report if e["reason"].startswith("grounding proposed")] == [
        "POST /visits",
        "POST /invoices",
        "POST /tags",
    ]
    assert main(["validate", str(out)]) == 0
    world = load_world(out)
    posted, got, clash, visit, seen = await run(
        world,
        ("createPet", {"body": {"petId": 1, "name": "Kit"}}),
        ("getPet", {"petId": 1}),
        ("createPet", {"body": {"petId": 1, "name": "Kat"}}),
        ("bookVisit", {"body": {"pet": 1, "reason": "shots"}}),
        ("getVisit", {"visit_id": "00000000-0000-4000-8000-000000000000"}),
    )
    assert (posted.output, got.output) == ({"petId": 1, "name": "Kit"}, {"petId": 1, "name": "Kit"})
    assert (clash.is_error, clash.error_code) == (True, "conflict")
    assert UUID.fullmatch(visit.output["id"]) and (seen.is_error, seen.error_code) == (True, "not_found")


TICKETS = """
openapi: 3.1.0
info: {title: Desk, version: "1"}
components:
  schemas:
    Ticket: {type: object, required: [id, text], properties: {id: ID_SCHEMA, text: {type: string}}}
    TicketFields: {type: object, required: [text], properties: {text: {type: string}}}
paths:
  /tickets:
    post:
      operationId: openTicket
      requestBody: {required: true, content: {application/json: {schema: {$ref: "#/components/schemas/TicketFields"}}}}
      responses:
        "201": {description: Opened, content: {application/json: {schema: {$ref: "#/components/schemas/Ticket"}}}}
  /tickets/{ticket_id}:
    get:
      operationId: getTicket
      parameters: [{name: ticket_id, in: path, required: true, schema: {type: string}}]
      responses:
        "200": {description: The ticket, content: {application/json: {schema: {$ref: "#/components/schemas/Ticket"}}}}
"""


@pytest.mark.parametrize(
    ("id_schema", "new_id"),
    [
        ('{type: string, pattern: "^[0-9]+$"}', '$newid("", 8, $state.tickets, "0123456789")'),
        ("{type: string, maxLength: 5}", '$newid("", 5, $state.tickets, "abcdefghijklmnopqrstuvwxyz0123456789")'),
        ("{type: [integer, string]}", '$newid($newid("", 1, [], "123456789"), 8, $state.tickets)'),
        ('{type: string, pattern: "^T-[0-9]+$"}', None),
        ("{type: boolean}", None),
    ],
)
def test_a_server_made_id_is_drawn_in_the_first_shape_its_schema_accepts_or_left_to_the_model(
    tmp_path: Path, id_schema: str, new_id: str | None
) -> None:
    path = tmp_path / "tickets.yaml"
    path.write_text(TICKETS.replace("ID_SCHEMA", id_schema))
    world = import_openapi(load_spec(path), base_uri=path.resolve().as_uri())
    grounding = next(tool for tool in world.tools if tool["name"] == "openTicket").get("grounding")
    (note,) = [e.reason for e in world.report if e.item == "POST /tickets"]
    if new_id is None:
        assert grounding is None
        assert note.startswith("no grounding proposed: the server makes the new id (id), whose schema")
        assert note.endswith("simia cannot draw: the model picks it")
    else:
        assert grounding is not None and grounding["let"]["id"] == new_id
        write_world(tmp_path / "desk", world.files())  # the proposal loads
