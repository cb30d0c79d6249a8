"""Step rewards: the shaped reward of each tool call, given as a trainer protocol answers the call (ORS tool outputs,
OpenEnv step answers), computed from the task's checks on the states before and after it.

Each episode's `ProgressTracker` (`simia.sim.judging.progress`) holds its fold so far: the state before a call. A
protocol registers the episodes it opens (`opened`, from the record it got back) and passes each committed event
(`step`); the tracker folds the event's patch (the state after the call) and gives its `ProgressStep`, the same
one the verdict's progress curve will list for that `seq` (the judge's gamma). Nothing is read again on that
path. A resent call is answered the step it got the first time; an episode opened elsewhere (the HTTP API, another
replica, before a restart) has its initial state read once, and events the tracker missed (calls through another
endpoint, or answered out of order) are read once from the store, the events after the last one it folded. An
episode whose task has no checks has no step rewards (None). Trackers are kept for the most recent `size`
episodes, and dropped when their episode ends (`forget`).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from simia.sim.judging import Check, ProgressTracker, task_checks
from simia.sim.records import EpisodeRecord, EventRecord
from simia.sim.verdict import ProgressStep
from simia.sim.wire import META_PROGRESS

from .episodes import EpisodeService

__all__ = ["KEPT_STEPS", "META_PROGRESS", "StepRewards"]

KEPT_STEPS = 64
"""How many of an episode's latest steps a resent call is answered from."""


@dataclass
class _Tracked:
    """One episode's tracker (None: its task has no checks), the last `seq` it folded, and its latest steps."""

    tracker: ProgressTracker | None
    seq: int
    steps: OrderedDict[int, ProgressStep] = field(default_factory=OrderedDict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class StepRewards:
    """The shaped reward of each call of the episodes a protocol serves (see the module docstring).

    Args:
        service: the episodes (their worlds and store, and the judge whose gamma the rewards use).
        size: the most episodes tracked (the least recently used are dropped first, and read again if called).
    """

    def __init__(self, service: EpisodeService, *, size: int = 20_000) -> None:
        self.service = service
        self.size = size
        self._episodes: OrderedDict[str, _Tracked] = OrderedDict()

    @property
    def gamma(self) -> float:
        """The judge's discount, so that a call's reward is the one its verdict's curve gives."""
        return self.service.judge.gamma if self.service.judge is not None else 1.0

    def _checks(self, episode: EpisodeRecord) -> list[Check]:
        world = self.service.worlds.get(episode.world)
        task = world.task(episode.task) if world is not None and episode.task else None
        return task_checks(world, task) if world is not None and task is not None else []

    def _tracked(self, checks: list[Check], start: dict[str, Any] | None, seq: int) -> _Tracked:
        tracker = ProgressTracker(checks, start, gamma=self.gamma) if checks and start is not None else None
        return _Tracked(tracker, seq)

    def _keep(self, episode_id: str, tracked: _Tracked) -> _Tracked:
        self._episodes[episode_id] = tracked
        while len(self._episodes) > self.size:
            self._episodes.popitem(last=False)
        return tracked

    def opened(self, episode: EpisodeRecord) -> None:
        """Track an episode just created or forked, from its initial state (no read); a record that holds no state
        (a fork kept parked) is read on its first step instead."""
        if episode.initial_state is None:
            self._episodes.pop(episode.id, None)
            return
        self._keep(episode.id, self._tracked(self._checks(episode), episode.initial_state, episode.seq))

    def forget(self, episode_id: str) -> None:
        """Drop an ended episode's tracker."""
        self._episodes.pop(episode_id, None)

    async def step(self, episode_id: str, event: EventRecord) -> ProgressStep | None:
        """The progress step of a committed event of the episode; None when its task has no checks (or the
        event is older than the steps kept)."""
        tracked = self._episodes.get(episode_id)
        if tracked is None:
            tracked = await self._read(episode_id)
        else:
            self._episodes.move_to_end(episode_id)
        if tracked.tracker is None:
            return None
        async with tracked.lock:
            if event.seq <= tracked.seq:
                return tracked.steps.get(event.seq)
            if event.seq > tracked.seq + 1:  # events this tracker has not seen: read them once
                progress = await self.service.store.progress(episode_id, tracked.seq, event.seq - tracked.seq - 1)
                for missed in progress.events if progress is not None else []:
                    self._fold(tracked, missed)
                if tracked.seq + 1 != event.seq:
                    return None
            return self._fold(tracked, event)

    async def _read(self, episode_id: str) -> _Tracked:
        """Track an episode this process did not open: its record and initial state, read once."""
        store = self.service.store
        record = await store.get_episode(episode_id)
        checks = self._checks(record) if record is not None else []
        start = await store.state_at(episode_id, 0) if checks else None
        known = self._episodes.get(episode_id)  # a concurrent call of the episode read it first
        return known if known is not None else self._keep(episode_id, self._tracked(checks, start, 0))

    @staticmethod
    def _fold(tracked: _Tracked, event: EventRecord) -> ProgressStep:
        assert tracked.tracker is not None
        step = tracked.tracker.step(event)
        tracked.seq = event.seq
        tracked.steps[event.seq] = step
        while len(tracked.steps) > KEPT_STEPS:
            tracked.steps.popitem(last=False)
        return step
