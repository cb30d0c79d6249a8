"""Tuning the Python runtime for a long-lived server: the cyclic garbage collector kept off a tool call's path."""

from __future__ import annotations

import gc

__all__ = ["tune_gc"]


def tune_gc() -> None:
    """Keep the cyclic garbage collector off a tool call's path.

    Everything alive once the server is up (modules, worlds, schemas, the ASGI stack) lives as
    long as the server: frozen, it is no longer walked by every full collection. Collections
    then run every 10,000 net allocations instead of 700. Measured under the overhead bench:
    collections cost ~120 us of a ~750 us call before, ~50 us with the freeze alone, ~0 with both.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
