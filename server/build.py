"""Building a ready server: the one place where worlds, a simulator backend, a store, a judge and settings
become an ASGI app. `simia serve`, stdio, in-process rollouts and the demo, and the tests all use it."""

from __future__ import annotations

from collections.abc import Mapping

from simia.sim.backends import Backend
from simia.sim.engine import Simulator
from simia.sim.judging import Judge
from simia.sim.storage import Store
from simia.sim.world import World

from .app import SimiaApp
from .settings import ServerSettings

__all__ = ["build_server"]


def build_server(
    worlds: Mapping[str, World],
    backend: Backend,
    store: Store,
    settings: ServerSettings | None = None,
    *,
    judge: Judge | None = None,
    sim_max_tokens: int = 1024,
) -> SimiaApp:
    """The server over `worlds`, simulating with `backend` and committing to `store`.

    Args:
        worlds: the worlds to serve, by name.
        backend: the simulator's model; seeded answers are cached in `store`.
        store: where episodes and events are committed (the caller closes it).
        settings: limits, budgets, auth (defaults: `ServerSettings()`).
        judge: scores ended episodes; None ends them without a verdict.
        sim_max_tokens: cap on each simulator answer.

    Returns:
        The app; serve it with uvicorn (`simia.server.inprocess.serving` inside a running loop).
    """
    settings = settings or ServerSettings()
    simulator = Simulator(
        backend, cache=store, max_tokens=sim_max_tokens, max_argument_bytes=settings.max_argument_bytes
    )
    return SimiaApp(dict(worlds), simulator, store, settings, judge)
