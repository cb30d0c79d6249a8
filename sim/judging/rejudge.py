"""Re-judging: score stored episodes again with a (new) judge and store each new verdict (`simia judge ID...`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence

from ..storage import Store
from ..verdict import Verdict
from ..world import World
from .judge import EpisodeView, Judge

__all__ = ["rejudge"]


async def rejudge(
    judge: Judge, store: Store, worlds: Mapping[str, World], episode_ids: Sequence[str]
) -> AsyncIterator[tuple[str, Verdict | str]]:
    """Judge stored episodes again and store each new verdict; yields (id, verdict) or (id, problem)."""
    for episode_id in episode_ids:
        episode = await store.get_episode(episode_id)
        if episode is None:
            yield episode_id, "no such episode in the database"
            continue
        world = worlds.get(episode.world)
        if world is None:
            yield episode_id, f"world {episode.world!r} is not loaded (pass --worlds-dir with it)"
            continue
        task = world.task(episode.task) if episode.task else None
        verdict = await judge.judge(world, task, await EpisodeView.read(store, episode, episode.transcript))
        await store.set_status(episode_id, episode.status, verdict=verdict)
        yield episode_id, verdict
