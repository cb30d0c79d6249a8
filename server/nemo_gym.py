"""NeMo Gym resource servers: every world at `/nemo-gym/{world}`, one episode per rollout, as NeMo RL and verifiers'
`NeMoGymTaskset` drive a resource server.

    POST /nemo-gym/{world}/seed_session   the dataset row (`task`, `seed`, `perturbation`,
                                          `responses_create_params`, any other keys) -> a new episode:
                                          `{"mcp": {"url_path", "headers"}, "episode_id"}` and the cookie that
                                          names it for the rest of the rollout
    POST /nemo-gym/{world}/verify         the row plus `response` (a Responses-API object), with that cookie ->
                                          the episode ended with the response as its transcript, and judged:
                                          the row, `reward` (`Verdict.training_reward()`) and the verdict's fields

The rollout's tools are the episode's own MCP endpoint (`/episodes/{id}/mcp` on the same server): `url_path` is
relative to the resource server's URL (`../../episodes/{id}/mcp`), which is how the clients join it
(`resources_url + "/" + url_path`, dot segments resolved by their URL parsers). A repeated tool call is answered from
its committed event by that endpoint (its MCP session and JSON-RPC id); a repeated `/verify` with the same response
answers the stored verdict (an episode is judged once), and one with another response is a 409; a verdict with no
usable reward (a judge error, an infrastructure failure, a fabricated transcript) is a 422 `reward_masked`, never a
silent 0, so the trainer drops the rollout.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from simia.sim.errors import SimiaError, StoreUnavailable
from simia.sim.perturbation import Perturbation
from simia.sim.records import EpisodeRecord
from simia.sim.verdict import masked_why
from simia.sim.wire import EndEpisode, Seed
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, Router

from .episodes import EpisodeService
from .errors import ApiError, BadRequest, NotFound
from .requests import parse_body

__all__ = ["COOKIE", "NemoGym", "RewardMasked", "SeedSession", "Verify", "masked_why", "response_transcript"]

COOKIE = "simia_episode"
"""The cookie `/seed_session` sets and `/verify` reads: the rollout's episode id."""


class RewardMasked(ApiError):
    """The episode was judged, but its verdict has no reward a trainer may learn from (`training_reward()` is None)."""

    status = 422
    code = "reward_masked"


class SeedSession(BaseModel):
    """`POST /nemo-gym/{world}/seed_session`: one dataset row. NeMo Gym rows carry keys of their own (`agent_ref`,
    ids, metadata), so any other key is allowed and echoed back by `/verify`."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    responses_create_params: dict[str, Any] = Field(
        description="The Responses-API request of the rollout (its `input` and `instructions` open the transcript)."
    )
    task: str | None = Field(default=None, max_length=1024, description="A task id of the world.")
    seed: Seed | None = Field(default=None, description="Makes the simulation reproducible.")
    perturbation: Perturbation | None = Field(default=None, description="Inject realistic faults into its calls.")


class Verify(SeedSession):
    """`POST /nemo-gym/{world}/verify`: the row plus the rollout's Responses-API `response`."""

    response: dict[str, Any] = Field(description="A Responses-API response object: its `output` items.")


class NemoGym:
    """The resource servers of every world, over one `EpisodeService` (mount `routes` at `/nemo-gym/{world}`)."""

    def __init__(self, service: EpisodeService) -> None:
        self.service = service
        self.routes = Router(
            routes=[
                Route("/seed_session", self.seed_session, methods=["POST"]),
                Route("/verify", self.verify, methods=["POST"]),
            ]
        )

    def _world(self, request: Request) -> str:
        name = str(request.path_params.get("world", ""))
        self.service.world(name)  # NotFound names the loaded worlds
        return name

    async def seed_session(self, request: Request) -> Response:
        world = self._world(request)
        row = await parse_body(request, SeedSession)
        episode = await self.service.create(
            world, task=row.task, seed=row.seed, principal=request.state.principal, perturbation=row.perturbation
        )
        body = {"mcp": {"url_path": f"../../episodes/{episode.id}/mcp", "headers": {}}, "episode_id": episode.id}
        response = JSONResponse(body)
        scope = request.url.path.rsplit("/", 1)[0] or "/"
        response.set_cookie(COOKIE, episode.id, path=scope, httponly=True, samesite="strict")
        return response

    async def verify(self, request: Request) -> Response:
        world = self._world(request)
        row = await parse_body(request, Verify)
        transcript = response_transcript(row.responses_create_params, row.response)
        try:
            EndEpisode(transcript=transcript)  # the checks `/v1/episodes/{id}/end` makes on a transcript
        except ValueError as exc:
            raise BadRequest(f"response: {_first_error(exc)}") from None
        episode_id = request.cookies.get(COOKIE)
        if not episode_id:
            raise BadRequest(f"no {COOKIE} cookie: POST /seed_session first and send back the cookie it sets")
        principal = request.state.principal
        episode = await self.service.get(episode_id, principal)
        if episode.world != world:
            raise NotFound(f"no episode {episode_id!r} in world {world!r}; seed a session on this world's URL")
        ended = await self._end_once(episode_id, principal, transcript)
        verdict = ended.verdict
        reward = verdict.training_reward() if verdict is not None else None
        if verdict is None or reward is None:
            raise RewardMasked(
                f"episode {episode_id} has no usable reward ({masked_why(verdict)}); drop this rollout "
                f"(its verdict: GET /v1/episodes/{episode_id})"
            )
        fields = verdict.as_json()
        del fields["reward"]
        echoed = row.model_dump(mode="json", exclude_unset=True)
        return JSONResponse({**echoed, **fields, "reward": reward, "episode_id": episode_id})

    async def _end_once(self, episode_id: str, principal: str, transcript: list[dict[str, Any]]) -> EpisodeRecord:
        """End and judge the episode with `transcript`, once: a repeated `/verify` with the same response (or an end
        through the API with the same transcript) answers the stored verdict; another response is a 409
        (`Conflict`), as `POST /v1/episodes/{id}/end` answers, so a rollout can never be judged on a second try."""
        try:
            return await self.service.end(episode_id, principal, transcript)
        except (StoreUnavailable, ApiError):
            raise
        except SimiaError as exc:
            raise BadRequest(str(exc)) from None


def response_transcript(params: dict[str, Any], response: dict[str, Any]) -> list[dict[str, Any]]:
    """The rollout as OpenAI chat messages, the transcript simia's judge reads: the request's `instructions` and
    `input`, then the response's `output` items (`message` -> a message of its role, `function_call` -> a tool call
    of the assistant message before it, `function_call_output` -> a tool message). Item types that carry no
    conversation (`reasoning`, built-in tool calls) are left out.

    Raises:
        BadRequest: an item that is not what the Responses API sends, named by its place.
    """
    transcript = _Transcript()
    instructions = params.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise BadRequest("responses_create_params.instructions must be a string")
        transcript.add({"role": "system", "content": instructions})
    given = params.get("input", [])
    if isinstance(given, str):
        transcript.add({"role": "user", "content": given})
    elif isinstance(given, list):
        for i, item in enumerate(given):
            transcript.item(item, f"responses_create_params.input[{i}]")
    else:
        raise BadRequest("responses_create_params.input must be a string or a list of items")
    output = response.get("output")
    if not isinstance(output, list):
        raise BadRequest("response.output must be a list of items (a Responses-API response object)")
    for i, item in enumerate(output):
        transcript.item(item, f"response.output[{i}]")
    return transcript.messages


_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


class _Transcript:
    """Chat messages built from Responses-API items; `calling` is the assistant message the next function calls
    join (the Responses API lists an answer's text and its calls as separate items)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.calling: dict[str, Any] | None = None

    def add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.calling = message if message["role"] == "assistant" else None

    def item(self, item: Any, where: str) -> None:
        if not isinstance(item, dict):
            raise BadRequest(f"{where} must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            role = _ROLES.get(item.get("role"))  # type: ignore[arg-type]
            if role is None:
                raise BadRequest(f"{where}.role must be one of {', '.join(_ROLES)}")
            self.add({"role": role, "content": _text(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
            if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str)):
                raise BadRequest(f"{where} must have string call_id, name and arguments (a JSON string)")
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            if self.calling is None:
                self.add({"role": "assistant", "content": None})
            assert self.calling is not None
            self.calling.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str):
                raise BadRequest(f"{where}.call_id must be a string")
            if isinstance(output, list):
                output = _text(output, f"{where}.output")
            if not isinstance(output, str):
                raise BadRequest(f"{where}.output must be a string or a list of content parts")
            self.add({"role": "tool", "tool_call_id": call_id, "content": output})
        elif not isinstance(kind, str):
            raise BadRequest(f"{where}.type must be a string")


def _text(content: Any, where: str) -> str:
    """A message's content as text: a string, or the text of its content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("text", ""), str):
                raise BadRequest(f"{where}[{j}] must be a content part with a string text")
            texts.append(part.get("text", ""))
        return "".join(texts)
    raise BadRequest(f"{where} must be a string or a list of content parts")


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        found = errors(include_url=False)
        if found:
            return str(found[0].get("ctx", {}).get("error", found[0]["msg"]))
    return str(exc)
