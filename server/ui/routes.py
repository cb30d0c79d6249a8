"""The viewer's routes under `/ui`: pages over a `Store` (read only: the viewer never writes), login, assets.

Auth is the server's: with tokens configured, the `Guard` (server/middleware.py) accepts on `/ui` the bearer token from
the `simia_token` cookie as well as from the header, and sends a browser without one to `/ui/login`, which
takes the token from a form or a `?token=` link and stores it in an HttpOnly, SameSite=Strict cookie.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from simia.sim.storage import PAGE_LIMIT, EpisodeQuery, Store
from simia.sim.world import World
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from .episode import render_episode, render_state, timeline_rows
from .html import h, page
from .runs import render_runs
from .worlds import render_world, render_worlds

__all__ = ["COOKIE", "PUBLIC_PATHS", "Viewer", "cookie_token"]

COOKIE = "simia_token"
"""The cookie that carries a browser's bearer token on `/ui` (HttpOnly: page scripts cannot read it)."""

PUBLIC_PATHS = ("/ui/login", "/ui/static/")
"""Viewer paths served without a token: the login form and the CSS/JavaScript (no data in either)."""

_ASSETS = {
    name: (resources.files(__package__).joinpath("static", name).read_bytes(), kind)
    for name, kind in (("viewer.css", "text/css"), ("viewer.js", "text/javascript"))
}
_PAGE_SIZE = 50
_RUN_FILTERS = ("world", "task", "status", "reward", "text", "group", "sort", "dir", "page")
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # "no-referrer" makes Chromium send `Origin: null` on the login form
}


def cookie_token(cookie_header: str) -> str | None:
    """The bearer token in a `Cookie` header's `simia_token`, if any."""
    for part in cookie_header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name == COOKIE and value:
            return unquote(value)
    return None


def _html(body: str, status: int = 200, headers: Mapping[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers={**_SECURITY_HEADERS, **(headers or {})})


def _problem(status: int, title: str, message: str) -> HTMLResponse:
    body = f'<h1>{h(title)}</h1><p class="problem">{h(message)}</p><p><a href="/ui">back to the runs</a></p>'
    return _html(page(title, body), status)


class _Bad(Exception):
    """A query parameter the viewer cannot use: answered with a 400 page that says which and why."""


def _int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise _Bad(f"{name} must be a whole number from {low} to {high}, got {text!r}")
    return int(text)


def _run_query(params: Mapping[str, str], principal: str | None) -> EpisodeQuery:
    unknown = sorted(set(params) - set(_RUN_FILTERS))
    if unknown:
        raise _Bad(f"unknown query parameter {unknown[0]!r}; the runs page takes {', '.join(_RUN_FILTERS)}")
    status = params.get("status") or None
    if status not in (None, "active", "ended", "abandoned"):
        raise _Bad(f"status must be active, ended or abandoned, got {status!r}")
    reward = params.get("reward") or None
    if reward not in (None, "1", "0", "none"):
        raise _Bad(f"reward must be 1, 0 or none, got {reward!r}")
    direction = params.get("dir") or "desc"
    if direction not in ("asc", "desc"):
        raise _Bad(f"dir must be asc or desc, got {direction!r}")
    number = _int(params, "page", 0, 0, 10_000_000 // _PAGE_SIZE)
    try:
        return EpisodeQuery(
            world=params.get("world") or None,
            task=params.get("task") or None,
            status=status,
            principal=principal,
            group=params.get("group") or None,
            reward=reward,  # type: ignore[arg-type]  # checked above
            text=(params.get("text") or "").strip()[:200] or None,
            sort=params.get("sort") or "time",
            descending=direction == "desc",
            offset=number * _PAGE_SIZE,
            limit=min(_PAGE_SIZE, PAGE_LIMIT),
        )
    except ValueError as exc:
        raise _Bad(str(exc)) from None


class Viewer:
    """The viewer's pages over `store` (and the `worlds` whose files are loaded, for tools and tasks).

    Args:
        store: where the episodes are; only read.
        worlds: loaded worlds by name (may be empty: the pages then show what the database holds).
        scoped: show each principal only its own episodes (`simia serve`); False shows every episode
            (`simia view`, the database owner's own look at a file).
        principal_for: the principal of a presented token, or None (the server's token check), for the login form.
    """

    def __init__(
        self,
        store: Store,
        worlds: Mapping[str, World],
        *,
        scoped: bool,
        principal_for: Callable[[bytes], str | None],
    ) -> None:
        self.store = store
        self.worlds = dict(worlds)
        self.scoped = scoped
        self.principal_for = principal_for

    def routes(self) -> list[Route]:
        return [
            Route("/ui", self.runs),
            Route("/ui/worlds", self.world_list),
            Route("/ui/worlds/{world}", self.world),
            Route("/ui/episodes/{episode_id}", self.episode),
            Route("/ui/episodes/{episode_id}/state", self.state),
            Route("/ui/episodes/{episode_id}/live", self.live),
            Route("/ui/login", self.login, methods=["GET", "POST"]),
            Route("/ui/logout", self.logout),
            Route("/ui/static/{name}", self.asset),
        ]

    def _principal(self, request: Request) -> str | None:
        return str(request.state.principal) if self.scoped else None

    async def runs(self, request: Request) -> Response:
        params = dict(request.query_params)
        try:
            query = _run_query(params, self._principal(request))
        except _Bad as exc:
            return _problem(400, "Bad filter", str(exc))
        result = await self.store.query_episodes(query)
        stats = await self.store.task_stats(principal=query.principal)
        return _html(render_runs(params, query, result, stats))

    async def world_list(self, request: Request) -> Response:
        stats = await self.store.task_stats(principal=self._principal(request))
        return _html(render_worlds(self.worlds, stats))

    async def world(self, request: Request) -> Response:
        name = request.path_params["world"]
        stats = await self.store.task_stats(world=name, principal=self._principal(request))
        if name not in self.worlds and not stats:
            return _problem(404, "No such world", f"no world {name!r} is loaded or has episodes")
        return _html(render_world(name, self.worlds.get(name), stats))

    async def _episode(self, request: Request) -> Any:
        episode = await self.store.get_episode(request.path_params["episode_id"])
        principal = self._principal(request)
        if episode is None or (principal is not None and episode.principal != principal):
            return None
        return episode

    async def episode(self, request: Request) -> Response:
        ep = await self._episode(request)
        if ep is None:
            return _problem(404, "No such episode", f"no episode {request.path_params['episode_id']!r}")
        try:
            step = _int(request.query_params, "step", ep.seq, 1 if ep.seq else 0, ep.seq)
        except _Bad as exc:
            return _problem(400, "Bad step", str(exc))
        events = await self.store.events(ep.id)
        before = await self.store.state_at(ep.id, step - 1) if step else {}
        after = await self.store.state_at(ep.id, step) if step else {}
        group_id = ep.group_id or ep.id
        query = EpisodeQuery(group=group_id, principal=self._principal(request), sort="group", limit=PAGE_LIMIT)
        group = (await self.store.query_episodes(query)).rows
        return _html(render_episode(ep, events, step or None, before, after, group))

    async def state(self, request: Request) -> Response:
        ep = await self._episode(request)
        if ep is None:
            return _problem(404, "No such episode", f"no episode {request.path_params['episode_id']!r}")
        try:
            step = _int(request.query_params, "step", ep.seq, 0, ep.seq)
        except _Bad as exc:
            return _problem(400, "Bad step", str(exc))
        return _html(render_state(ep, step, await self.store.state_at(ep.id, step)))

    async def live(self, request: Request) -> Response:
        """New timeline rows since `after` (JSON: status, seq, rows as escaped HTML), polled by an active page."""
        ep = await self._episode(request)
        if ep is None:
            return JSONResponse({"error": {"code": "not_found", "message": "no such episode"}}, status_code=404)
        try:
            after = _int(request.query_params, "after", 0, 0, 1 << 62)
        except _Bad as exc:
            return JSONResponse({"error": {"code": "bad_request", "message": str(exc)}}, status_code=400)
        fresh = await self.store.recent_events(ep.id, ep.seq - after) if ep.seq > after else []
        return JSONResponse({"status": ep.status, "seq": ep.seq, "rows": timeline_rows(ep.id, fresh, None)})

    async def login(self, request: Request) -> Response:
        """The login form (GET), or a token from the form (POST) or a `?token=` link (GET) -> the cookie."""
        target = request.query_params.get("next", "/ui")
        if not target.startswith("/ui") or urlsplit(target).netloc:  # only back into the viewer
            target = "/ui"
        token = request.query_params.get("token")
        if request.method == "POST":
            form = await request.form()
            token = str(form.get("token") or "")
        message = ""
        if token is not None:
            if token and self.principal_for(token.encode()) is not None:
                response = RedirectResponse(target, status_code=303)
                response.headers.append(
                    "Set-Cookie", f"{COOKIE}={quote(token, safe='')}; Path=/ui; HttpOnly; SameSite=Strict"
                )
                return response
            message = '<p class="problem" role="alert">Unknown token: give one passed to simia serve --token.</p>'
        body = f"""<h1>Sign in</h1>{message}
<form class="login" method="post" action="/ui/login?next={h(quote(target, safe="/"))}">
<label>Bearer token <input type="password" name="token" autocomplete="current-password" autofocus></label>
<button type="submit">Open the viewer</button></form>
<p class="note">The token is kept in an HttpOnly cookie for /ui only.
A link with <code>?token=...</code> works too.</p>"""
        return _html(page("Sign in", body), 401 if message else 200)

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse("/ui/login", status_code=303)
        response.headers.append("Set-Cookie", f"{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0")
        return response

    async def asset(self, request: Request) -> Response:
        found = _ASSETS.get(request.path_params["name"])
        if found is None:
            return Response("not found", status_code=404, media_type="text/plain")
        return Response(found[0], media_type=found[1], headers={"Cache-Control": "max-age=3600"})
