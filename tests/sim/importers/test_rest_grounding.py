"""`simia import openapi` proposes grounding declarations for REST resources, over a state skeleton that lays
each collection out keyed by id; the proposals load, and answer from the state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simia.sim.engine.grounded import Plan, Refused, plan_call
from simia.sim.importers import ReportEntry, import_openapi, load_spec
from simia.sim.world import write_world

LIBRARY = Path(__file__).with_name("library_lending_openapi_3_1.yaml")
BOOK = "/books/{book_id}"
EXISTS = {"pointer": BOOK, "exists": True, "error": "not_found"}


def library() -> Any:
    return import_openapi(load_spec(LIBRARY), base_uri=LIBRARY.resolve().as_uri(), name="library")


def test_each_rest_operation_gets_the_declaration_its_method_implies() -> None:
    world = library()
    assert {tool["name"]: tool.get("grounding") for tool in world.tools} == {
        "listBooks": {"read": {"jsonpath": "$.books.*", "key": "books"}},
        "createBook": {
            "preconditions": [{"pointer": BOOK, "exists": False, "error": "conflict"}],
            "effects": [
                {"op": "add", "path": BOOK, "value": "{body}"},
                {"op": "add", "path": f"{BOOK}/id", "value": "{book_id}"},
            ],
            "read": {"pointer": BOOK},
        },
        "getBook": {"read": {"pointer": BOOK, "missing": "not_found"}},
        "replaceBook": {
            "preconditions": [EXISTS],
            "effects": [
                {"op": "replace", "path": BOOK, "value": "{body}"},
                {"op": "add", "path": f"{BOOK}/id", "value": "{book_id}"},
            ],
            "read": {"pointer": BOOK},
        },
        "updateBook": {"preconditions": [EXISTS], "mode": "guided"},
        "deleteBook": {"preconditions": [EXISTS], "effects": [{"op": "remove", "path": BOOK}]},
        "registerMember": {  # the library makes the id: drawn, as its schema (a string) allows
            "let": {
                "id": '$newid("", 8, $state.members, "abcdefghijklmnopqrstuvwxyz0123456789")',
                "record": '$merge([$args.body, {"id": $id}])',
            },
            "effects": [{"expr": '{"op": "add", "path": $pointer("members", $id), "value": $record}'}],
            "read": {"expr": "$lookup($state.members, $id)"},
        },
        "getMember": {"read": {"pointer": "/members/{member_id}", "missing": "not_found"}},
        "listLoans": None,
        "borrowBook": None,  # the loan's status and due date are the server's
        "getLoan": {"read": {"pointer": "/loans/{loan_id}", "missing": "not_found"}},
    }
    assert world.state == {"books": {}, "members": {}, "loans": {}}
    assert [e for e in world.report if "grounding" in e.reason] == [
        ReportEntry(
            "note",
            "POST /members",
            "grounding proposed: the server makes the new id (id): simia draws 8 lowercase letters and digits, "
            "never one in use (its own scheme, not the server's)",
        ),
        ReportEntry(
            "note",
            "GET /loans",
            "no grounding proposed: its query parameters (status) filter or page the list; declare the read by hand",
        ),
        ReportEntry(
            "note",
            "POST /loans",
            "no grounding proposed: the response requires fields the body need not give (due, status): the server "
            "fills them; declare them by hand",
        ),
    ]


def test_the_proposals_load_and_a_get_after_a_post_reads_the_posted_record(tmp_path: Path) -> None:
    world = write_world(tmp_path / "library", library().files())
    tools = world.tools_by_name
    body = {"title": "Emma", "author": "Jane Austen", "year": 1815}
    posted = plan_call(world, tools["createBook"], world.base_state, {"book_id": "emma", "body": body})
    assert isinstance(posted, Plan) and posted.exact
    stored = {**body, "id": "emma"}
    assert posted.output == stored
    got = plan_call(world, tools["getBook"], posted.state, {"book_id": "emma"})
    listed = plan_call(world, tools["listBooks"], posted.state, {})
    assert isinstance(got, Plan) and isinstance(listed, Plan)
    assert (got.output, listed.output) == (stored, {"books": [stored]})
    again = plan_call(world, tools["createBook"], posted.state, {"book_id": "emma", "body": body})
    assert isinstance(again, Refused) and again.code == "conflict"
    deleted = plan_call(world, tools["deleteBook"], posted.state, {"book_id": "emma"})
    assert isinstance(deleted, Plan) and not deleted.exact  # the model words the answer; the state is decided
    gone = plan_call(world, tools["getBook"], deleted.state, {"book_id": "emma"})
    assert isinstance(gone, Refused) and gone.code == "not_found"


def test_paths_that_are_not_collections_keyed_by_id_get_no_declaration(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("""
openapi: 3.0.3
info: {title: Odd, version: "1"}
paths:
  /status: {get: {operationId: status, responses: {"200": {description: ok}}}}
  /users/{user_id}/orders/{order_id}:
    parameters: [{name: user_id, in: path, required: true}, {name: order_id, in: path, required: true}]
    get: {operationId: nested, responses: {"200": {description: ok}}}
  /v1/things/{id}:
    parameters: [{name: id, in: path, required: true}]
    get: {operationId: v1Thing, responses: {"200": {description: ok}}}
  /v2/things/{id}:
    parameters: [{name: id, in: path, required: true}]
    get: {operationId: v2Thing, responses: {"200": {description: ok}}}
""")
    world = import_openapi(load_spec(spec), base_uri=spec.resolve().as_uri())
    assert {tool["name"]: tool.get("grounding") for tool in world.tools} == {
        "status": None,  # no item path: not a collection
        "nested": None,
        "v1Thing": {"read": {"pointer": "/things/{id}", "missing": "not_found"}},
        "v2Thing": None,  # its collection's key, things, is taken by /v1/things
    }
    assert world.state == {"things": {}}
