"""`GET /openapi.json`: a valid OpenAPI 3.1 document of every route, built from the wire models, that real
answers satisfy."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
import jsonschema
from openapi_spec_validator import validate
from simia.server.openapi import OPERATIONS, openapi_document, served_routes
from simia.server.settings import ServerSettings


def _answer_schema(document: dict[str, Any], path: str, method: str, status: int) -> dict[str, Any]:
    """The answer's schema with the document's components, ready for `jsonschema`."""
    content = document["paths"][path][method]["responses"][str(status)]["content"]["application/json"]
    return {**content["schema"], "components": document["components"]}


async def test_the_served_document_is_valid_openapi_and_lists_every_route_of_the_app(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        response = await http.get("/openapi.json")
    assert response.status_code == 200
    document = response.json()
    validate(document)  # raises on anything OpenAPI 3.1 forbids
    assert document["openapi"] == "3.1.0"
    assert document["servers"] == [{"url": server.url}]
    served = served_routes(server.app.starlette.routes)
    described = [(method, path) for path, item in document["paths"].items() for method in item]
    assert sorted(served) == sorted(described)
    assert len(served) == len(set(served)) == len(OPERATIONS)


async def test_real_answers_and_errors_satisfy_the_document(make_server: Any) -> None:
    async with make_server() as server, httpx.AsyncClient(base_url=server.url) as http:
        document = (await http.get("/openapi.json")).json()
        created = await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})
        episode_id = created.json()["id"]
        answers = [
            ("/healthz", "get", await http.get("/healthz")),
            ("/v1/worlds", "get", await http.get("/v1/worlds")),
            ("/v1/episodes", "post", created),
            ("/v1/episodes", "get", await http.get("/v1/episodes")),
            ("/v1/episodes/{episode_id}", "get", await http.get(f"/v1/episodes/{episode_id}")),
            ("/v1/episodes/{episode_id}/fork", "post", await http.post(f"/v1/episodes/{episode_id}/fork", json={})),
            ("/v1/episodes/{episode_id}/end", "post", await http.post(f"/v1/episodes/{episode_id}/end", json={})),
            ("/v1/episodes", "post", await http.post("/v1/episodes", json={"world": 3})),
            ("/v1/episodes/{episode_id}", "get", await http.get("/v1/episodes/ep_nope")),
        ]
    for path, method, response in answers:
        jsonschema.validate(response.json(), _answer_schema(document, path, method, response.status_code))
    assert [r.status_code for _, _, r in answers] == [200, 200, 201, 200, 200, 201, 200, 400, 404]


def test_request_schemas_are_the_wire_models_and_forbid_unknown_fields() -> None:
    schemas = openapi_document(requires_token=False)["components"]["schemas"]
    assert schemas["CreateEpisode"]["required"] == ["world"]
    assert schemas["CreateEpisode"]["additionalProperties"] is False
    assert set(schemas["EndEpisode"]["properties"]) == {"transcript", "tokens"}
    assert schemas["ErrorBody"]["properties"]["error"] == {"$ref": "#/components/schemas/ErrorDetail"}


def test_bearer_auth_is_described_only_when_tokens_are_set() -> None:
    open_doc = openapi_document(requires_token=False)
    assert "securitySchemes" not in open_doc["components"]
    assert all("401" not in op["responses"] for item in open_doc["paths"].values() for op in item.values())
    locked = openapi_document(requires_token=True)
    assert locked["components"]["securitySchemes"] == {
        "bearerAuth": {"type": "http", "scheme": "bearer", "description": "A token given to simia serve --token"}
    }
    for path, item in locked["paths"].items():
        for op in item.values():
            public = path == "/healthz"
            assert op["security"] == ([] if public else [{"bearerAuth": []}])
            assert ("401" in op["responses"]) is not public


def test_each_api_route_documents_its_error_statuses_with_the_error_body() -> None:
    document = openapi_document(requires_token=True)
    statuses = {
        (method, path): sorted(int(s) for s in op["responses"] if int(s) >= 400)
        for path, item in document["paths"].items()
        for method, op in item.items()
        if op["tags"] == ["api"]
    }
    assert statuses == {
        ("get", "/healthz"): [403, 421, 503],  # 503 on every route: a draining server
        ("get", "/openapi.json"): [401, 403, 421, 429, 503],  # 429: too many wrong tokens from one address
        ("get", "/metrics"): [401, 403, 421, 429, 503],
        ("get", "/v1/worlds"): [401, 403, 421, 429, 503],
        ("get", "/v1/episodes"): [400, 401, 403, 404, 421, 429, 503],
        ("post", "/v1/episodes"): [400, 401, 403, 404, 413, 415, 421, 429, 503],
        ("get", "/v1/episodes/{episode_id}"): [401, 403, 404, 421, 429, 503],
        ("post", "/v1/episodes/{episode_id}/fork"): [400, 401, 403, 404, 413, 415, 421, 429, 503],
        ("post", "/v1/episodes/{episode_id}/end"): [400, 401, 403, 404, 409, 413, 415, 421, 429, 503],
    }
    error = {"$ref": "#/components/schemas/ErrorBody"}
    for item in document["paths"].values():
        for op in item.values():
            for status, answer in op["responses"].items():
                if int(status) >= 400 and op["tags"] == ["api"]:
                    assert answer["content"]["application/json"]["schema"] == error


async def test_the_document_needs_a_token_when_the_server_has_tokens(make_server: Any) -> None:
    async with (
        make_server(ServerSettings(tokens=("s3cret",))) as server,
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        refused = await http.get("/openapi.json")
        served = await http.get("/openapi.json", headers={"Authorization": "Bearer s3cret"})
    assert refused.status_code == 401
    assert served.json()["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
