"""Re-judging: score stored episodes again with a (new) judge and store each new verdict (`simia judge ID...`).

Each episode is judged against the world it ran against, as the database recorded it (`EpisodeWorlds`), so a
world edited since is reported, not silently judged in its place.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from ..storage import EpisodeWorlds, Store
from ..verdict import Verdict
from .judge import EpisodeView, Judge

__all__ = ["rejudge"]


async def rejudge(
    judge: Judge, store: Store, worlds: EpisodeWorlds, episode_ids: Sequence[str], *, concurrency: int = 1
) -> AsyncIterator[tuple[str, Verdict | str]]:
    """Judge stored episodes again and store each new verdict; yields (id, verdict) or (id, problem), in the order
    of `episode_ids`.

    Args:
        worlds: the worlds of `store`'s episodes (what was found where is counted in it: `EpisodeWorlds.notes`).
        concurrency: episodes judged at once (a batch backend gathers their judge requests into one batch).
    """
    limit = asyncio.Semaphore(max(concurrency, 1))

    async def one(episode_id: str) -> tuple[str, Verdict | str]:
        async with limit:
            episode = await store.get_episode(episode_id)
            if episode is None:
                return episode_id, "no such episode in the database"
            world = await worlds.world_of(episode)
            if world is None:
                return episode_id, worlds.problem(episode)
            task = world.task(episode.task) if episode.task else None
            verdict = await judge.judge(world, task, await EpisodeView.read(store, episode, episode.transcript))
            await store.set_status(episode_id, episode.status, verdict=verdict)
            return episode_id, verdict

    pending = [asyncio.ensure_future(one(episode_id)) for episode_id in episode_ids]
    try:
        for future in pending:
            yield await future
    finally:
        for future in pending:
            future.cancel()
