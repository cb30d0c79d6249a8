"""The viewer served alone (`simia view`): the episode viewer's pages over a store, with `/healthz`, behind the same
guard as the full server, and nothing simulated or written."""

from __future__ import annotations

from simia.sim.storage import Store
from simia.sim.wire import Health
from simia.sim.world import World
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from .errors import route_errors
from .middleware import Guard
from .responses import json_response
from .settings import ServerSettings
from .ui import Viewer

__all__ = ["viewer_app"]


def viewer_app(store: Store, worlds: dict[str, World], settings: ServerSettings) -> ASGIApp:
    """The viewer alone over `store` (`simia view`): `/ui` and `/healthz`, behind the same guard as `SimiaApp`.

    Every principal's episodes are shown (the database's owner looks at their file); nothing is simulated
    and nothing is written.
    """

    async def healthz(request: Request) -> Response:
        return json_response(Health(status="ok", worlds=len(worlds)))

    viewer = Viewer(store, worlds, scoped=False, principal_for=settings.principal_for)
    inner = Starlette(
        routes=[Route("/healthz", healthz), *viewer.routes()],
        exception_handlers={HTTPException: route_errors("the viewer serves /ui and /healthz")},
    )
    return Guard(inner, settings)
