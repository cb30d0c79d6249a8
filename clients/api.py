"""The typed client of simia's HTTP API: worlds, episodes (create, get, list, fork, end) and their MCP URLs.

One client for every caller (rollouts, the demo, GRPO, `synth --via-server`, your own
harness); answers are the server's own wire models (`simia.sim.wire`). Errors:

    SimiaApiError            the server answered {"error": {"code", "message"}} (status, code, message)
    ServerUnreachable        no answer at all (connection refused, timeout, reset)

    async with SimiaClient("http://127.0.0.1:8765", token=None) as api:
        episode = await api.create("retail", task="cancel_by_mistake")
        async with api.mcp(episode) as session:          # an mcp.Client on the episode's URL
            await session.call_tool("find_user_by_email", {"email": "mia.lee@example.com"})
        ended = await api.end(episode.id, transcript=messages)
        reward = ended.verdict.training_reward() if ended.verdict else None
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import httpx2 as httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel, ValidationError
from simia.sim.errors import SimiaError
from simia.sim.perturbation import Perturbation
from simia.sim.wire import (
    CreateEpisode,
    EndedEpisode,
    EndEpisode,
    Episode,
    EpisodeDetail,
    EpisodeList,
    ErrorBody,
    ForkEpisode,
    Health,
    TokenData,
    WorldInfo,
    WorldList,
)

__all__ = ["ServerUnreachable", "SimiaApiError", "SimiaClient", "SyncSimiaClient"]

M = TypeVar("M", bound=BaseModel)


class SimiaApiError(SimiaError):
    """The server refused a request: HTTP `status`, the error `code` and its `message` (what to fix)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class ServerUnreachable(SimiaError):
    """No answer from the server (not running, wrong URL, network failure or timeout)."""


def _decode(response: httpx.Response, model: type[M]) -> M:
    if response.is_success:
        try:
            return model.model_validate_json(response.content)
        except ValidationError as exc:
            raise SimiaApiError(response.status_code, "bad_answer", f"unexpected answer shape: {exc}") from None
    try:
        error = ErrorBody.model_validate_json(response.content).error
        raise SimiaApiError(response.status_code, error.code, error.message)
    except ValidationError:
        text = response.text[:200] or response.reason_phrase
        raise SimiaApiError(response.status_code, "http_error", text) from None


def _headers(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def _create(
    world: str, task: str | None, seed: int | None, perturbation: Perturbation | dict[str, Any] | None
) -> dict[str, Any]:
    chosen = Perturbation.model_validate(perturbation) if isinstance(perturbation, dict) else perturbation
    return CreateEpisode(world=world, task=task, seed=seed, perturbation=chosen).model_dump(exclude_none=True)


def _end(transcript: list[dict[str, Any]] | None, tokens: TokenData | dict[str, Any] | None) -> dict[str, Any]:
    data = TokenData.model_validate(tokens) if isinstance(tokens, dict) else tokens
    return EndEpisode(transcript=transcript, tokens=data).model_dump(exclude_none=True)


def _query(world: str | None, status: str | None, task: str | None) -> dict[str, str]:
    return {k: v for k, v in {"world": world, "status": status, "task": task}.items() if v is not None}


class SimiaClient:
    """Async client of one simia server.

    Args:
        base_url: the server, e.g. `http://127.0.0.1:8765`.
        token: bearer token, when the server was started with `--token`.
        timeout: seconds per request (`/end` runs the judge: keep it generous).
    """

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=_headers(token), timeout=timeout)

    async def __aenter__(self) -> SimiaClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, method: str, path: str, model: type[M], **kwargs: Any) -> M:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"simia server at {self.base_url} did not answer: {exc!r}") from None
        return _decode(response, model)

    async def health(self) -> Health:
        return await self._send("GET", "/healthz", Health)

    async def worlds(self) -> list[WorldInfo]:
        """The served worlds, with tools, policy and tasks (never rubrics or expected states)."""
        return (await self._send("GET", "/v1/worlds", WorldList)).worlds

    async def world(self, name: str) -> WorldInfo:
        """One served world; SimiaApiError `not_found` names the served ones."""
        worlds = await self.worlds()
        found = next((w for w in worlds if w.name == name), None)
        if found is None:
            names = [w.name for w in worlds]
            close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            served = ", ".join(names) or "(none)"
            raise SimiaApiError(
                404, "not_found", f"the server does not serve world {name!r}{hint}; it serves: {served}"
            )
        return found

    async def create(
        self,
        world: str,
        *,
        task: str | None = None,
        seed: int | None = None,
        perturbation: Perturbation | dict[str, Any] | None = None,
    ) -> Episode:
        """A new episode (of `task`, seeded, with injected faults: each optional)."""
        body = _create(world, task, seed, perturbation)
        return await self._send("POST", "/v1/episodes", Episode, json=body)

    async def get(self, episode_id: str) -> EpisodeDetail:
        return await self._send("GET", f"/v1/episodes/{episode_id}", EpisodeDetail)

    async def list_episodes(
        self, *, world: str | None = None, status: str | None = None, task: str | None = None
    ) -> list[Episode]:
        query = _query(world, status, task)
        return (await self._send("GET", "/v1/episodes", EpisodeList, params=query)).episodes

    async def fork(self, episode_id: str, *, step: int | None = None) -> Episode:
        body = ForkEpisode(step=step).model_dump(exclude_none=True)
        return await self._send("POST", f"/v1/episodes/{episode_id}/fork", Episode, json=body)

    async def end(
        self,
        episode_id: str,
        *,
        transcript: list[dict[str, Any]] | None = None,
        tokens: TokenData | dict[str, Any] | None = None,
    ) -> EndedEpisode:
        """Close the episode; the server judges it and the answer carries the verdict."""
        body = _end(transcript, tokens)
        return await self._send("POST", f"/v1/episodes/{episode_id}/end", EndedEpisode, json=body)

    @contextlib.asynccontextmanager
    async def mcp(self, episode: Episode | str) -> AsyncIterator[Client]:
        """An MCP SDK client session on an episode (an `Episode` or its `mcp_url`), with this client's token."""
        url = episode.mcp_url if isinstance(episode, Episode) else episode
        async with (
            httpx.AsyncClient(headers=_headers(self.token), timeout=self.timeout) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            yield client


class SyncSimiaClient:
    """Blocking twin of `SimiaClient` (same methods and answers) for synchronous harnesses such as
    TRL's `environment_factory`."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, headers=_headers(token), timeout=timeout)

    def __enter__(self) -> SyncSimiaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, path: str, model: type[M], **kwargs: Any) -> M:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"simia server at {self.base_url} did not answer: {exc!r}") from None
        return _decode(response, model)

    def health(self) -> Health:
        return self._send("GET", "/healthz", Health)

    def worlds(self) -> list[WorldInfo]:
        return self._send("GET", "/v1/worlds", WorldList).worlds

    def create(
        self,
        world: str,
        *,
        task: str | None = None,
        seed: int | None = None,
        perturbation: Perturbation | dict[str, Any] | None = None,
    ) -> Episode:
        return self._send("POST", "/v1/episodes", Episode, json=_create(world, task, seed, perturbation))

    def get(self, episode_id: str) -> EpisodeDetail:
        return self._send("GET", f"/v1/episodes/{episode_id}", EpisodeDetail)

    def list_episodes(
        self, *, world: str | None = None, status: str | None = None, task: str | None = None
    ) -> list[Episode]:
        return self._send("GET", "/v1/episodes", EpisodeList, params=_query(world, status, task)).episodes

    def fork(self, episode_id: str, *, step: int | None = None) -> Episode:
        body = ForkEpisode(step=step).model_dump(exclude_none=True)
        return self._send("POST", f"/v1/episodes/{episode_id}/fork", Episode, json=body)

    def end(
        self,
        episode_id: str,
        *,
        transcript: list[dict[str, Any]] | None = None,
        tokens: TokenData | dict[str, Any] | None = None,
    ) -> EndedEpisode:
        return self._send("POST", f"/v1/episodes/{episode_id}/end", EndedEpisode, json=_end(transcript, tokens))
