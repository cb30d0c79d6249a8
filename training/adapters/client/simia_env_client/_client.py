"""The client of one simia server: worlds, episodes (create, fork, get, end) and each episode's tools over MCP.

`EnvClient` (synchronous) and `AsyncEnvClient` have the same methods; both are thin senders over one table of
requests (`_Request`), so the two never drift. Retries: a request that never reached the server (connection
refused) is always resent; one whose answer was lost (a reset, a timeout, a 502/503/504) is resent only when
resending is safe: reads, `/end` (ending twice gives the same verdict, judged once) and tool calls, which are
resent with the same JSON-RPC id, so simia answers the repeat with the committed result instead of running the
call again.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx

from ._errors import ApiError, ServerUnreachable
from ._mcp import rpc_headers, rpc_request, rpc_result
from ._wire import Ended, Episode, ToolResult, World

__all__ = ["AsyncEnvClient", "EnvClient"]

T = TypeVar("T")
RESENT_STATUSES = frozenset({502, 503, 504})
"""Answers that say the server (or a proxy before it) did not do the request: resent when resending is safe."""


def _error(response: httpx.Response) -> ApiError:
    try:
        error = response.json()["error"]
        return ApiError(response.status_code, str(error["code"]), str(error["message"]))
    except (ValueError, KeyError, TypeError):
        return ApiError(response.status_code, "http_error", response.text[:200] or response.reason_phrase)


def _json(response: httpx.Response) -> Any:
    if not response.is_success:
        raise _error(response)
    try:
        return response.json()
    except ValueError:
        raise ApiError(response.status_code, "bad_answer", f"not JSON: {response.text[:200]!r}") from None


@dataclass(frozen=True)
class _Request(Generic[T]):
    """One request and how to read its answer. `safe`: resending it after a lost answer changes nothing."""

    method: str
    url: str
    decode: Callable[[httpx.Response], T]
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    safe: bool = True


def _rpc(
    episode: Episode, request_id: str, method: str, params: dict[str, Any], read: Callable[[dict[str, Any]], T]
) -> _Request[T]:
    """A JSON-RPC request to the episode's MCP URL; `read` turns its result into the answer."""

    def decode(response: httpx.Response) -> T:
        if not response.is_success:
            raise _error(response)
        return read(rpc_result(response.headers.get("content-type", ""), response.text, request_id))

    name = params.get("name") if method == "tools/call" else None
    return _Request("POST", episode.mcp_url, decode, rpc_request(request_id, method, params), rpc_headers(method, name))


class _Requests:
    """The table of requests both clients send (paths, bodies, how each answer is read)."""

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:12]
        self._ids = itertools.count(1)

    def next_id(self) -> str:
        """A JSON-RPC id no other request of this client (or of any other client) uses."""
        return f"{self._prefix}-{next(self._ids)}"

    @staticmethod
    def worlds() -> _Request[list[World]]:
        return _Request("GET", "/v1/worlds", lambda r: [World.of(w) for w in _json(r)["worlds"]])

    @staticmethod
    def create(
        world: str, task: str | None, seed: int | None, perturbation: dict[str, Any] | None
    ) -> _Request[Episode]:
        fields = {"world": world, "task": task, "seed": seed, "perturbation": perturbation}
        body = {k: v for k, v in fields.items() if v is not None}
        return _Request("POST", "/v1/episodes", lambda r: Episode.of(_json(r)), body, safe=False)

    @staticmethod
    def fork(episode_id: str, step: int | None) -> _Request[Episode]:
        body = {} if step is None else {"step": step}
        return _Request("POST", f"/v1/episodes/{episode_id}/fork", lambda r: Episode.of(_json(r)), body, safe=False)

    @staticmethod
    def get(episode_id: str) -> _Request[dict[str, Any]]:
        return _Request("GET", f"/v1/episodes/{episode_id}", _json)

    @staticmethod
    def end(episode_id: str, transcript: list[dict[str, Any]] | None, tokens: dict[str, Any] | None) -> _Request[Ended]:
        body = {k: v for k, v in {"transcript": transcript, "tokens": tokens}.items() if v is not None}
        return _Request("POST", f"/v1/episodes/{episode_id}/end", lambda r: Ended.of(_json(r)), body)

    def list_tools(self, episode: Episode) -> _Request[list[dict[str, Any]]]:
        return _rpc(episode, self.next_id(), "tools/list", {}, lambda result: list(result.get("tools") or []))

    def call_tool(
        self, episode: Episode, name: str, arguments: dict[str, Any], call_id: str | None
    ) -> _Request[ToolResult]:
        params = {"name": name, "arguments": arguments}
        return _rpc(episode, call_id or self.next_id(), "tools/call", params, ToolResult.of)


def _resend(error: httpx.TransportError, safe: bool) -> bool:
    """Whether a try that failed with `error` may be sent again: always when it never reached the server, else
    only when resending it is safe."""
    return safe or isinstance(error, httpx.ConnectError | httpx.ConnectTimeout)


def _delay(attempt: int) -> float:
    """Seconds before try `attempt` (1, 2, ...): 0.25, 0.5, 1, ..., at most 4."""
    return float(min(4.0, 0.25 * 2 ** (attempt - 1)))


class _Base:
    def __init__(self, base_url: str, token: str | None, timeout: float, retries: int) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be the server's URL, e.g. http://127.0.0.1:8765 (got {base_url!r})")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self._requests = _Requests()
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _unreachable(self, request: _Request[Any], error: httpx.TransportError) -> ServerUnreachable:
        return ServerUnreachable(
            f"the simia server at {self.base_url} did not answer {request.method} {request.url}: {error!r} "
            "(is `simia serve` running there?)"
        )


class EnvClient(_Base):
    """Synchronous client of one simia server.

    Args:
        base_url: the server, e.g. `http://127.0.0.1:8765`.
        token: the bearer token, when the server was started with `--token`.
        timeout: seconds per request (`end` runs the judge: keep it generous).
        retries: how many times a request is resent when resending is safe (see the module docstring).
        transport: an httpx transport (tests pass `httpx.MockTransport`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 600.0,
        retries: int = 3,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, timeout, retries)
        self._http = httpx.Client(base_url=self.base_url, headers=self._headers, timeout=timeout, transport=transport)

    def __enter__(self) -> EnvClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, request: _Request[T]) -> T:
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(_delay(attempt))
            last = attempt == self.retries
            try:
                response = self._http.request(request.method, request.url, json=request.body, headers=request.headers)
            except httpx.TransportError as exc:
                if last or not _resend(exc, request.safe):
                    raise self._unreachable(request, exc) from None
                continue
            if last or not (request.safe and response.status_code in RESENT_STATUSES):
                return request.decode(response)
        raise AssertionError("unreachable: the last try returns or raises")

    def worlds(self) -> list[World]:
        """The served worlds, with their policy, tools (MCP wire shape) and tasks."""
        return self._send(self._requests.worlds())

    def world(self, name: str) -> World:
        """One served world.

        Raises:
            ApiError: `not_found`, naming the served worlds.
        """
        return _one_world(self.worlds(), name)

    def create(
        self,
        world: str,
        task: str | None = None,
        seed: int | None = None,
        *,
        perturbation: dict[str, Any] | None = None,
    ) -> Episode:
        """A new episode of `world` (a task's `initial_state_patch` applied), with its own MCP URL.

        Args:
            perturbation: `{"rate": 0.2, "kinds": [...]}` injects realistic faults, replayed by `seed`.
        """
        return self._send(self._requests.create(world, task, seed, perturbation))

    def fork(self, episode_id: str, step: int | None = None) -> Episode:
        """A new episode starting from the state after `step` of `episode_id` (default: its last); forks of one
        episode share a `group_id` (a GRPO group starts its rollouts from one snapshot)."""
        return self._send(self._requests.fork(episode_id, step))

    def get(self, episode_id: str) -> dict[str, Any]:
        """The episode as `GET /v1/episodes/{id}` answers: state, events, verdict, transcript."""
        return self._send(self._requests.get(episode_id))

    def list_tools(self, episode: Episode) -> list[dict[str, Any]]:
        """The episode's tools (`tools/list`), in MCP's wire shape."""
        return self._send(self._requests.list_tools(episode))

    def call_tool(
        self, episode: Episode, name: str, arguments: dict[str, Any], *, call_id: str | None = None
    ) -> ToolResult:
        """Call a tool of the episode; a failed call is a `ToolResult` with `is_error`, never an exception.

        Args:
            call_id: the JSON-RPC id to send (default: a new one). Send the same id again to repeat a call whose
                answer was lost: simia answers it with the committed result instead of running it twice.

        Raises:
            McpError: the MCP endpoint refused the request itself. ApiError: no such episode (404), or it is not
                yours. ServerUnreachable: no answer after the retries.
        """
        return self._send(self._requests.call_tool(episode, name, arguments, call_id))

    def end(
        self,
        episode_id: str,
        transcript: list[dict[str, Any]] | None = None,
        tokens: dict[str, Any] | None = None,
    ) -> Ended:
        """End the episode, have it judged, and return the verdict with the reward to train on.

        Args:
            transcript: the policy's conversation as OpenAI chat messages (the judge reads what it said; calls it
                claims but never made mask the reward).
            tokens: `{"prompt_ids", "completion_ids", "env_mask"?, "logprobs"?}`, kept on the episode for RL exports.
        """
        return self._send(self._requests.end(episode_id, transcript, tokens))


class AsyncEnvClient(_Base):
    """Asynchronous client of one simia server: `EnvClient`'s methods, awaited.

    Args:
        base_url: the server, e.g. `http://127.0.0.1:8765`.
        token: the bearer token, when the server was started with `--token`.
        timeout: seconds per request (`end` runs the judge: keep it generous).
        retries: how many times a request is resent when resending is safe (see the module docstring).
        transport: an httpx transport (tests pass `httpx.MockTransport`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 600.0,
        retries: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, timeout, retries)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers, timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncEnvClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, request: _Request[T]) -> T:
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(_delay(attempt))
            last = attempt == self.retries
            try:
                response = await self._http.request(
                    request.method, request.url, json=request.body, headers=request.headers
                )
            except httpx.TransportError as exc:
                if last or not _resend(exc, request.safe):
                    raise self._unreachable(request, exc) from None
                continue
            if last or not (request.safe and response.status_code in RESENT_STATUSES):
                return request.decode(response)
        raise AssertionError("unreachable: the last try returns or raises")

    async def worlds(self) -> list[World]:
        """The served worlds, with their policy, tools (MCP wire shape) and tasks."""
        return await self._send(self._requests.worlds())

    async def world(self, name: str) -> World:
        """One served world.

        Raises:
            ApiError: `not_found`, naming the served worlds.
        """
        return _one_world(await self.worlds(), name)

    async def create(
        self,
        world: str,
        task: str | None = None,
        seed: int | None = None,
        *,
        perturbation: dict[str, Any] | None = None,
    ) -> Episode:
        """A new episode of `world` (see `EnvClient.create`)."""
        return await self._send(self._requests.create(world, task, seed, perturbation))

    async def fork(self, episode_id: str, step: int | None = None) -> Episode:
        """A new episode from the state after `step` of `episode_id` (see `EnvClient.fork`)."""
        return await self._send(self._requests.fork(episode_id, step))

    async def get(self, episode_id: str) -> dict[str, Any]:
        """The episode as `GET /v1/episodes/{id}` answers: state, events, verdict, transcript."""
        return await self._send(self._requests.get(episode_id))

    async def list_tools(self, episode: Episode) -> list[dict[str, Any]]:
        """The episode's tools (`tools/list`), in MCP's wire shape."""
        return await self._send(self._requests.list_tools(episode))

    async def call_tool(
        self, episode: Episode, name: str, arguments: dict[str, Any], *, call_id: str | None = None
    ) -> ToolResult:
        """Call a tool of the episode (see `EnvClient.call_tool`: a failed call is data, `call_id` makes a
        repeat safe)."""
        return await self._send(self._requests.call_tool(episode, name, arguments, call_id))

    async def end(
        self,
        episode_id: str,
        transcript: list[dict[str, Any]] | None = None,
        tokens: dict[str, Any] | None = None,
    ) -> Ended:
        """End the episode, have it judged, and return the verdict (see `EnvClient.end`)."""
        return await self._send(self._requests.end(episode_id, transcript, tokens))


def _one_world(worlds: list[World], name: str) -> World:
    for world in worlds:
        if world.name == name:
            return world
    served = ", ".join(w.name for w in worlds) or "(none)"
    raise ApiError(404, "not_found", f"the server does not serve world {name!r}; it serves: {served}")
