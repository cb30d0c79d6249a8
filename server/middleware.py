"""The ASGI middlewares in front of the API: the guard (DNS-rebinding checks, then the bearer token -> principal, with
failed authentication slowed per client address), the shortcut that sends a tool call straight to its episode's MCP
endpoint, and the split that gives `/ui` to the viewer's own app."""

from __future__ import annotations

import math
import re
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from urllib.parse import quote

from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .responses import error_response
from .settings import ServerSettings
from .ui import PUBLIC_PATHS, cookie_token

__all__ = ["FAILED_LOGINS", "FAILED_LOGINS_WINDOW_S", "EpisodeMcpShortcut", "FailedLogins", "Guard", "ViewerSplit"]

FAILED_LOGINS = 5
"""How many failed authentications one client address may make in `FAILED_LOGINS_WINDOW_S` before the next is a 429."""
FAILED_LOGINS_WINDOW_S = 60.0


class FailedLogins:
    """The failed authentications (a wrong token: a missing one guesses nothing) of each client address in the last
    `window` seconds: past `limit`, a further failure is answered 429 with Retry-After (a guesser gets `limit` tries
    a window). A correct token is never counted nor slowed. At most `max_addresses` addresses are remembered (the
    least recently failed go first)."""

    def __init__(
        self,
        limit: int = FAILED_LOGINS,
        window: float = FAILED_LOGINS_WINDOW_S,
        *,
        max_addresses: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.window, self.max_addresses, self.clock = limit, window, max_addresses, clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def failed(self, address: str) -> int:
        """Count a failure of `address`; the seconds it must wait before its next try is answered (0: none)."""
        now = self.clock()
        times = self._failures.pop(address, None) or deque()
        while times and times[0] <= now - self.window:
            times.popleft()
        times.append(now)
        self._failures[address] = times
        while len(self._failures) > self.max_addresses:
            self._failures.popitem(last=False)
        if len(times) <= self.limit:
            return 0
        return max(1, math.ceil(times[-self.limit] + self.window - now))  # then `limit - 1` remain: room for one


def _host_allowed(value: str | None, patterns: list[str]) -> bool:
    if not value:
        return False
    return any(value == p or (p.endswith(":*") and value.startswith(p[:-1])) for p in patterns)


class Guard:
    """Outermost middleware: Host/Origin checks (DNS rebinding), then the bearer token -> principal."""

    def __init__(self, app: ASGIApp, settings: ServerSettings, logins: FailedLogins | None = None) -> None:
        self.app = app
        self.settings = settings
        self.logins = logins if logins is not None else FailedLogins(settings.max_failed_logins)
        self.hosts = settings.hosts()
        self.origins = settings.origins()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _guard_headers(scope["headers"])
        if not _host_allowed(headers.get("host"), self.hosts):
            await error_response(
                421,
                "misdirected_request",
                "Host header not allowed (DNS-rebinding protection); "
                "start the server with --allowed-host for this name",
            )(scope, receive, send)
            return
        origin = headers.get("origin")
        if origin and not _host_allowed(origin, self.origins):
            await error_response(
                403, "forbidden_origin", "Origin not allowed (DNS-rebinding protection); add it with --allowed-origin"
            )(scope, receive, send)
            return
        principal = ""
        path: str = scope["path"]
        if self.settings.requires_token and path != "/healthz" and not path.startswith(PUBLIC_PATHS):
            given = sum(1 for k, _ in scope["headers"] if k.lower() == b"authorization")
            if given > 1:  # never resolved to one of them: a proxy and the server could read different tokens
                await error_response(
                    400,
                    "duplicate_authorization",
                    f"the request carries {given} Authorization headers (or X-API-Key headers); send one",
                )(scope, receive, send)
                return
            auth = headers.get("authorization", "")
            token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            presented = token.encode("latin-1")  # the header's own bytes
            viewer = path == "/ui" or path.startswith("/ui/")
            if not token and viewer:  # a browser on the viewer: its token is in the login cookie (UTF-8)
                presented = (cookie_token(headers.get("cookie", "")) or "").encode()
            found = self.settings.principal_for(presented) if presented else None
            if found is None and viewer:
                await RedirectResponse(f"/ui/login?next={quote(path, safe='/')}", status_code=303)(scope, receive, send)
                return
            if found is None:
                client = scope.get("client")
                wait = self.logins.failed(str(client[0]) if client else "") if token else 0  # a wrong token
                if wait:
                    response = error_response(
                        429,
                        "too_many_failed_logins",
                        f"more than {self.logins.limit} failed authentications from this address in "
                        f"{self.logins.window:g} s; retry in {wait} s with a token given to simia serve --token",
                    )
                    response.headers["Retry-After"] = str(wait)
                    await response(scope, receive, send)
                    return
                message = "missing bearer token" if not token else "unknown bearer token"
                response = error_response(
                    401,
                    "unauthorized",
                    f"{message}; send 'Authorization: Bearer <token>' with a token given to simia serve --token",
                )
                response.headers["WWW-Authenticate"] = 'Bearer realm="simia"'
                await response(scope, receive, send)
                return
            principal = found
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


_GUARD_HEADERS = {b"host", b"origin", b"authorization", b"cookie"}


def _guard_headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The headers the guard reads (ASGI servers send names in lower case)."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in raw if k.lower() in _GUARD_HEADERS}


class EpisodeMcpShortcut:
    """Sends `/episodes/{id}/mcp` requests straight to the episode gate, as the router's Mount would.

    Every tool call takes this path; skipping the router's walk over the API routes and
    Starlette's outer middleware keeps simia's share of a call small. Anything else
    (and any deployment under a root path) goes through the full app.
    """

    def __init__(self, gate: ASGIApp, app: ASGIApp) -> None:
        self.gate = gate
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] == "http" and not scope.get("root_path") and path.endswith("/mcp"):
            match = _EPISODE_MCP.fullmatch(path)
            if match is not None:
                scope["path_params"] = {"episode_id": match[1]}
                scope["app_root_path"] = ""
                scope["root_path"] = path[: -len("/mcp")]
                await self.gate(scope, receive, send)
                return
        await self.app(scope, receive, send)


_EPISODE_MCP = re.compile(r"/episodes/([^/]+)/mcp")


class ViewerSplit:
    """Sends `/ui` and everything under it to the viewer's own app (HTML pages, not part of the JSON API or its
    OpenAPI document), and the rest, lifespan included, to the API."""

    def __init__(self, viewer: ASGIApp, api: ASGIApp) -> None:
        self.viewer = viewer
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] == "http" and (path == "/ui" or path.startswith("/ui/")):
            await self.viewer(scope, receive, send)
            return
        await self.api(scope, receive, send)
