"""Bad requests against a real server: each gets a 4xx `{"error": {"code", "message"}}` that says what is wrong,
never a 5xx, and leaves every episode as it was. One server serves the module (each test has an episode of its own
on it): a request that changed something would show in every later snapshot too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx
import pytest
import pytest_asyncio
from mcp import Client
from simia.sim.backends import FunctionBackend
from simia.testing import mock_world_answer

pytestmark = pytest.mark.asyncio(loop_scope="module")

DEEP = b"[" * 5000 + b"]" * 5000
DEEP_OBJECT = b'{"a":' * 5000 + b"1" + b"}" * 5000
BIG = 5 * 1024 * 1024


def call(tool_calls: Any) -> dict[str, Any]:
    return {"transcript": [{"role": "assistant", "content": None, "tool_calls": tool_calls}]}


def message(**fields: Any) -> dict[str, Any]:
    return {"transcript": [{"role": "user", "content": "hi", **fields}]}


def tokens(**fields: Any) -> dict[str, Any]:
    return {"tokens": {"prompt_ids": [1], "completion_ids": [2], **fields}}


# (method, path: "{id}" is a live episode with one call, body: JSON value or raw bytes, status, what the message says)
BAD = [
    # wrong JSON types are refused, never converted
    ("POST", "/v1/episodes", {"world": "mock", "seed": True}, 400, "field 'seed' must be an integer, got boolean"),
    ("POST", "/v1/episodes", {"world": "mock", "seed": "12"}, 400, "field 'seed' must be an integer, got string"),
    ("POST", "/v1/episodes", {"world": "mock", "seed": 1.0}, 400, "field 'seed' must be an integer, got number"),
    ("POST", "/v1/episodes", {"world": "mock", "task": 5}, 400, "field 'task' must be a string, got integer"),
    (
        "POST",
        "/v1/episodes",
        b'{"world": "mock", "perturbation": {"rate": NaN}}',
        400,
        "must be a finite number (JSON has no NaN or Infinity)",
    ),
    ("POST", "/v1/episodes", {"world": ["mock"]}, 400, "field 'world' must be a string, got array"),
    ("POST", "/v1/episodes/{id}/fork", {"step": "0"}, 400, "field 'step' must be an integer, got string"),
    ("POST", "/v1/episodes/{id}/fork", {"step": 0.0}, 400, "field 'step' must be an integer, got number"),
    ("POST", "/v1/episodes/{id}/fork", {"step": False}, 400, "field 'step' must be an integer, got boolean"),
    ("POST", "/v1/episodes/{id}/end", {"transcript": "hi"}, 400, "field 'transcript' must be an array, got string"),
    ("POST", "/v1/episodes/{id}/end", {"tokens": []}, 400, "field 'tokens' must be an object, got array"),
    # huge and out-of-range numbers
    ("POST", "/v1/episodes", {"world": "mock", "seed": 10**40}, 400, "field 'seed': Input should be less than"),
    ("POST", "/v1/episodes", {"world": "mock", "seed": 1e300}, 400, "field 'seed' must be an integer, got number"),
    ("POST", "/v1/episodes", b'{"world": "mock", "seed": 1e400}', 400, "field 'seed' must be an integer"),
    ("POST", "/v1/episodes", b'{"world": "mock", "seed": Infinity}', 400, "field 'seed' must be an integer"),
    ("POST", "/v1/episodes", b'{"world": "mock", "seed": ' + b"9" * 5000 + b"}", 400, "not valid JSON"),
    ("POST", "/v1/episodes/{id}/fork", {"step": -1}, 400, "field 'step': Input should be greater than or equal to 0"),
    ("POST", "/v1/episodes/{id}/fork", {"step": 10**30}, 400, "field 'step': Input should be less than"),
    ("POST", "/v1/episodes/{id}/fork", {"step": 2**62}, 400, "step must be between 0 and 1"),
    ("POST", "/v1/episodes/{id}/end", tokens(prompt_ids=[10**30]), 400, "field 'tokens.prompt_ids.0'"),
    ("POST", "/v1/episodes/{id}/end", tokens(completion_ids=[-1]), 400, "field 'tokens.completion_ids.0'"),
    (
        "POST",
        "/v1/episodes/{id}/end",
        b'{"tokens": {"prompt_ids": [1], "completion_ids": [2], "logprobs": [-1e400]}}',
        400,
        "field 'tokens.logprobs.0' must be a finite number",
    ),
    # NaN and Infinity are not JSON; the store would keep them as null
    (
        "POST",
        "/v1/episodes/{id}/end",
        b'{"tokens": {"prompt_ids": [1], "completion_ids": [2], "logprobs": [NaN]}}',
        400,
        "field 'tokens.logprobs.0' must be a finite number",
    ),
    (
        "POST",
        "/v1/episodes/{id}/end",
        b'{"transcript": [{"role": "user", "content": "hi", "x": [-Infinity]}]}',
        400,
        "transcript[0] holds NaN or Infinity",
    ),
    # deeply nested JSON, in every body and in the transcript
    ("POST", "/v1/episodes", DEEP, 400, "request body is not valid JSON: Invalid JSON: recursion limit exceeded"),
    ("POST", "/v1/episodes", DEEP_OBJECT, 400, "recursion limit exceeded"),
    ("POST", "/v1/episodes", b'{"world": ' + DEEP + b"}", 400, "recursion limit exceeded"),
    ("POST", "/v1/episodes/{id}/fork", DEEP, 400, "recursion limit exceeded"),
    ("POST", "/v1/episodes/{id}/end", DEEP, 400, "recursion limit exceeded"),
    ("POST", "/v1/episodes/{id}/end", b'{"transcript": ' + DEEP + b"}", 400, "recursion limit exceeded"),
    (
        "POST",
        "/v1/episodes/{id}/end",
        b'{"transcript": [{"role": "user", "content": ' + DEEP_OBJECT + b"}]}",
        400,
        "recursion limit exceeded",
    ),
    # transcripts that are no OpenAI chat messages (the judge and the exports read these shapes)
    ("POST", "/v1/episodes/{id}/end", call(5), 400, "transcript[0].tool_calls must be a list of tool calls"),
    ("POST", "/v1/episodes/{id}/end", call([1]), 400, "transcript[0].tool_calls must be a list of tool calls"),
    ("POST", "/v1/episodes/{id}/end", call([{"function": 1}]), 400, "transcript[0].tool_calls[0] must be"),
    (
        "POST",
        "/v1/episodes/{id}/end",
        call([{"id": 5, "function": {"name": "list_items", "arguments": "{}"}}]),
        400,
        "transcript[0].tool_calls[0] must be",
    ),
    (
        "POST",
        "/v1/episodes/{id}/end",
        call([{"id": "c1", "function": {"name": 3, "arguments": "{}"}}]),
        400,
        "transcript[0].tool_calls[0] must be",
    ),
    (
        "POST",
        "/v1/episodes/{id}/end",
        call([{"id": "c1", "function": {"name": "list_items"}}]),
        400,
        "(arguments a JSON string or an object)",
    ),
    ("POST", "/v1/episodes/{id}/end", message(tool_call_id=["c1"]), 400, "transcript[0].tool_call_id must be a str"),
    ("POST", "/v1/episodes/{id}/end", message(content=5), 400, "transcript[0].content must be a string, a list"),
    ("POST", "/v1/episodes/{id}/end", message(content=[1]), 400, "transcript[0].content must be a string, a list"),
    ("POST", "/v1/episodes/{id}/end", {"transcript": [{"role": 1}]}, 400, "transcript[0] needs a string 'role'"),
    (
        "POST",
        "/v1/episodes/{id}/end",
        {"transcript": [{"role": "user", "content": "hi"}, {"role": "bogus"}]},
        400,
        "transcript[1].role is 'bogus'; a role is one of system, developer, user, assistant, tool, function",
    ),
    # bodies that are not JSON at all
    ("POST", "/v1/episodes", b'{"world": "caf\xe9"}', 400, "request body is not valid JSON"),
    ("POST", "/v1/episodes", b"\xff\xfe\x00", 400, "request body is not valid JSON"),
    ("POST", "/v1/episodes", b'{"world": "\\ud800"}', 400, "request body is not valid JSON"),
    ("POST", "/v1/episodes", b"world=mock", 400, "request body is not valid JSON"),
    ("POST", "/v1/episodes", b"null", 400, "request body must be a JSON object"),
    ("POST", "/v1/episodes/{id}/fork", b"\x00", 400, "request body is not valid JSON"),
    # huge bodies
    ("POST", "/v1/episodes", b"{" + b" " * BIG + b"}", 413, f"the limit is {4 * 1024 * 1024}"),
    ("POST", "/v1/episodes/{id}/end", b'{"transcript": "' + b"a" * BIG + b'"}', 413, "the limit is"),
    # query parameters and ids
    ("GET", "/v1/episodes?limit=-1", None, 400, "limit must be an integer from 1 to 1000, got '-1'"),
    (
        "GET",
        "/v1/episodes?lmit=5",
        None,
        400,
        "unknown query parameter 'lmit'; it takes: world, status, task, limit, offset",
    ),
    ("GET", "/v1/episodes?stauts=ended", None, 400, "unknown query parameter 'stauts'"),
    ("GET", "/v1/episodes?world=mock&world=retail", None, 400, "query parameter 'world' is given 2 times"),
    ("GET", "/v1/episodes?status=%00", None, 400, "status must be active, ended or abandoned, got '\\x00'"),
    ("GET", "/v1/episodes/%00", None, 404, "no episode '\\x00'"),
    ("GET", "/v1/episodes/{id}%00", None, 404, "no episode"),
    ("GET", "/v1/episodes/%ff%fe", None, 404, "no episode"),
    ("GET", "/v1/episodes/\u00e9\u4e2d\U0001f600", None, 404, "no episode '\u00e9\u4e2d\U0001f600'"),
    ("GET", "/v1/episodes/" + "x" * 20000, None, 404, "no episode 'xxxx"),
    ("POST", "/v1/episodes/%00/fork", {}, 404, "no episode '\\x00'"),
    ("POST", "/v1/episodes/" + "x" * 20000 + "/end", {}, 404, "no episode 'xxxx"),
    # routes and methods that do not exist
    ("POST", "/healthz", {}, 405, "POST is not allowed on /healthz; use GET, HEAD"),
    ("POST", "/v1/worlds", {}, 405, "POST is not allowed on /v1/worlds; use GET, HEAD"),
    ("DELETE", "/v1/episodes/{id}", None, 405, "DELETE is not allowed on /v1/episodes/"),
    ("PUT", "/v1/episodes", {}, 405, "PUT is not allowed on /v1/episodes; use GET, HEAD, POST"),
    ("GET", "/v1/episodes/{id}/fork", None, 405, "GET is not allowed on /v1/episodes/"),
    ("GET", "/v2/worlds", None, 404, "no route '/v2/worlds'; GET /openapi.json lists them"),
    ("GET", "/v1/episodes/a/b/c", None, 404, "no route '/v1/episodes/a/b/c'"),
]


@dataclass
class Live:
    http: httpx.AsyncClient
    episode: str

    async def snapshot(self) -> Any:
        """Everything a request could change: the episode in full and the list of episodes."""
        detail = await self.http.get(f"/v1/episodes/{self.episode}")
        listed = await self.http.get("/v1/episodes")
        return detail.json(), listed.json()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server_url(tmp_path_factory: pytest.TempPathFactory, serve_context: Any) -> AsyncIterator[str]:
    db = tmp_path_factory.mktemp("bad-requests") / "simia.db"
    async with serve_context(db, FunctionBackend(mock_world_answer)) as server:
        yield server.url


@pytest_asyncio.fixture(loop_scope="module")
async def live(server_url: str) -> AsyncIterator[Live]:
    async with httpx.AsyncClient(base_url=server_url, timeout=30) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        async with Client(episode["mcp_url"]) as client:
            assert not (await client.call_tool("set_quantity", {"name": "milk", "qty": 2})).is_error
        yield Live(http, episode["id"])


def _request(method: str, path: str, body: Any) -> dict[str, Any]:
    if isinstance(body, bytes):
        return {"content": body, "headers": {"content-type": "application/json"}}
    return {"json": body} if body is not None else {}


@pytest.mark.parametrize(("method", "path", "body", "status", "says"), BAD)
async def test_a_bad_request_is_a_json_4xx_that_says_what_is_wrong_and_changes_nothing(
    live: Live, method: str, path: str, body: Any, status: int, says: str
) -> None:
    before = await live.snapshot()
    response = await live.http.request(method, path.replace("{id}", live.episode), **_request(method, path, body))
    assert (response.status_code, response.headers["content-type"]) == (status, "application/json")
    error = response.json()
    assert list(error) == ["error"] and list(error["error"]) == ["code", "message"]
    assert says in error["error"]["message"]
    assert await live.snapshot() == before


async def test_a_huge_streamed_body_is_refused_without_being_read_whole(live: Live) -> None:
    async def chunks() -> AsyncIterator[bytes]:  # no content-length: the server counts as it reads
        yield b'{"world": "'
        for _ in range(BIG // 65536):
            yield b"a" * 65536
        yield b'"}'

    before = await live.snapshot()
    response = await live.http.post("/v1/episodes", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["message"] == f"request body is over the limit of {4 * 1024 * 1024} bytes"
    assert await live.snapshot() == before


async def test_a_body_is_read_as_json_only_when_it_says_it_is_json(live: Live) -> None:
    """`curl -d` sends a form content type with a JSON body: a 415 that says to send JSON (`curl --json`), never a
    guess at what the body is; a charset parameter is fine."""
    for kind in ("text/plain", "application/x-www-form-urlencoded"):
        response = await live.http.post("/v1/episodes", content=b'{"world": "mock"}', headers={"content-type": kind})
        assert response.status_code == 415, kind
        assert "Content-Type: application/json" in response.json()["error"]["message"]
    response = await live.http.post(
        "/v1/episodes", content=b'{"world": "mock"}', headers={"content-type": "application/json; charset=latin-1"}
    )
    assert response.status_code == 201


async def test_a_valid_transcript_in_every_documented_shape_is_still_accepted(live: Live) -> None:
    transcript = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": [{"type": "text", "text": "set the milk to 2"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "set_quantity", "arguments": '{"name": "milk", "qty": 2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"name": "milk", "qty": 2}'},
        {"role": "assistant", "content": "Done.", "tool_calls": []},
    ]
    body = {"transcript": transcript, "tokens": {"prompt_ids": [0, 5], "completion_ids": [7], "logprobs": [-0.5]}}
    response = await live.http.post(f"/v1/episodes/{live.episode}/end", json=body)
    assert response.status_code == 200, response.text
    assert (await live.http.get(f"/v1/episodes/{live.episode}")).json()["transcript"] == transcript
