"""The live episodes: what the episode service keeps in memory for the episodes it served recently (the record,
the latest events, the lock that serializes their calls), the store staying the truth.

With a `Store.shared` database (replicas on one Postgres), other processes commit calls of the same episodes: a
cached episode at most `CATCH_UP_EVENTS` events behind takes theirs and applies their patches before it is used;
further behind (or ended elsewhere), it is read again whole.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from simia.sim.errors import StateError
from simia.sim.records import EpisodeRecord, EventRecord, PastCall
from simia.sim.storage import Store
from simia.sim.world import Parked, State, apply_patch, park

from .metrics import Metrics

__all__ = ["CATCH_UP_EVENTS", "HOT_STATES", "RETRY_WINDOW", "LiveEpisode", "LiveEpisodes"]

RETRY_WINDOW = 16
"""How many of an episode's latest events a retried request is matched against."""
CATCH_UP_EVENTS = 16
"""A replica's cached episode at most this many events behind the database takes them and applies their
patches; further behind, it reads the episode again."""
HOT_STATES = 32
"""How many of the most recently called episodes keep their state whole between calls (`LiveEpisodes.rest`): the
next call of one copies nothing to start (parked, a state is made whole again by copying each collection its calls
wrote: ~0.2-0.6 ms for 16,000 records, and about as much again to free the copy). The memory this costs is
bounded: this many states' copies of the collections they wrote, whatever the number of live episodes."""


@dataclass
class LiveEpisode:
    """What the service keeps in memory for an episode it served recently (the store stays the truth)."""

    recent: deque[EventRecord]  # the latest events: the simulator's window and the retry window
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    record: EpisodeRecord | None = None
    parked: Parked | None = None  # the record's state between calls, when keeping it whole costs more (`park`)
    answered: deque[int] = field(default_factory=lambda: deque(maxlen=RETRY_WINDOW))  # `answered_sessionless`

    def park(self) -> None:
        """Between calls, keep the record's state as what it changed when it holds copies of large collections
        (`simia.sim.world.park`): a live episode's memory is then what its calls changed. Call under the lock."""
        if self.record is not None and isinstance(self.record.state, State):
            kept = park(self.record.state)
            if isinstance(kept, Parked):
                self.parked, self.record.state = kept, None

    def unpark(self) -> None:
        """Make the record's state whole again (before a call uses it)."""
        if self.parked is not None:
            if self.record is not None:
                self.record.state = self.parked.unpark()
            self.parked = None

    def window(self, size: int) -> list[PastCall]:
        """The last `size` calls the agent got a real answer for, as the simulator sees them: an
        infrastructure failure (invalid simulation, backend down, budget) is not the world's behaviour,
        and a model shown one imitates it."""
        if not size:
            return []
        answered = [event.past for event in self.recent if not (event.is_error and event.error_kind == "infra")]
        return answered[-size:]

    def retried(self, request_key: str) -> EventRecord | None:
        """The committed event `request_key` retries, if any.

        A request counts as a retry when its key matches one of the episode's last `RETRY_WINDOW` events and
        no event after that one changed the state. The key (session, JSON-RPC id, tool, arguments) is all a
        sessionless client offers, and clients that open a new connection per call reuse id 1: without the
        second condition, a read repeated after a write would get the stale first answer.
        """
        changed_since = False
        for event in islice(reversed(self.recent), RETRY_WINDOW):
            if event.request_key == request_key:
                return None if changed_since or event.seq in self.answered else event
            changed_since = changed_since or bool(event.state_patch)
        return None

    def answered_sessionless(self, event: EventRecord) -> None:
        """`event`'s result was handed back to a client without a session: the same request again is a new call.

        Such a client (protocol 2026-07-28, or one that connects per call) sends JSON-RPC id 1 every time, so
        a write it repeats on purpose has the key of the first one. One that lost its answer sees its handler
        cancelled before this is called, and its retry still gets the committed result. Kept in memory only: on
        another replica, or after a restart, the same request still counts as a retry.
        """
        if event.seq not in self.answered:
            self.answered.append(event.seq)

    def applied(self, episode: EpisodeRecord, event: EventRecord, new_state: dict[str, Any] | None) -> None:
        """Mirror a committed event into the cached record `episode` (the same arithmetic the store did)."""
        if event.seq <= episode.seq:
            return  # a retried request answered from the store: nothing new
        episode.advance(event, new_state)
        self.recent.append(event)


class LiveEpisodes:
    """The live episodes by id, least recently used first; past `size` the oldest are dropped, except one a
    request is waiting on.

    Args:
        store: where an episode missing from memory (or too far behind) is read from.
        metrics: counts the episodes caught up with other replicas' events.
        window: the largest simulator window of the served worlds (each episode keeps at least that many events,
            and at least `RETRY_WINDOW`).
        size: the most episodes kept.
        hot: the most episodes whose states stay whole between calls (`HOT_STATES`; the others are parked).
    """

    def __init__(
        self, store: Store, metrics: Metrics, *, window: int = 0, size: int = 20_000, hot: int = HOT_STATES
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.keep = max(RETRY_WINDOW, window)  # events kept per episode
        self.size = size
        self.hot = hot  # the most episodes whose states are kept whole between calls (`rest`)
        self._entries: OrderedDict[str, LiveEpisode] = OrderedDict()
        self._hot: OrderedDict[str, LiveEpisode] = OrderedDict()  # those episodes, least recently called first

    def __contains__(self, episode_id: object) -> bool:
        return episode_id in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def get(self, episode_id: str) -> LiveEpisode | None:
        """The episode's entry if it is in memory (without counting as a use)."""
        return self._entries.get(episode_id)

    def entry(self, episode_id: str) -> LiveEpisode:
        """The episode's entry, made the most recently used (a new, empty one when it is not in memory)."""
        entry = self._entries.get(episode_id)
        if entry is None:
            entry = self._entries[episode_id] = LiveEpisode(deque(maxlen=self.keep))
            while len(self._entries) > self.size:
                oldest, candidate = next(iter(self._entries.items()))
                if candidate.users:
                    break
                del self._entries[oldest]
                self._hot.pop(oldest, None)
        else:
            self._entries.move_to_end(episode_id)
        return entry

    def rest(self, episode_id: str, entry: LiveEpisode) -> None:
        """After a call of `entry` (under its lock): its state stays whole, as one of the `hot` most recently called
        episodes'; the least recently called one past that number is parked (`LiveEpisode.park`), unless a
        request is waiting on it (the call it waits for rests it again)."""
        self._hot[episode_id] = entry
        self._hot.move_to_end(episode_id)
        while len(self._hot) > self.hot:
            _, coldest = self._hot.popitem(last=False)
            if coldest is entry or not coldest.users:  # no call holds its lock: parking it races nothing
                coldest.park()

    def remember(self, episode: EpisodeRecord, parked: Parked | None = None) -> None:
        """Keep a copy of a just-created episode, so that its first call reads nothing (states are values: the copy
        shares them, and a live episode's memory is what its calls changed); `parked`: its state, when the record
        holds none (a fork's, made whole by its first call)."""
        entry = self.entry(episode.id)
        entry.record, entry.parked = dataclasses.replace(episode), parked

    async def load(self, episode_id: str, entry: LiveEpisode) -> EpisodeRecord | None:
        """The cached record (loading it, its window and its latest events on first use); with a `Store.shared`
        database, first brought up to what other replicas committed since, so that a call is simulated on
        what they committed and not twice. Call under the lock."""
        entry.unpark()
        if entry.record is not None and self.store.shared and not await self._caught_up(episode_id, entry):
            entry.record = None
        if entry.record is None:
            record = await self.store.get_episode(episode_id)
            if record is None:
                return None
            record.state = await self.store.state_at(episode_id, record.seq)  # its base and patches: O(its changes)
            entry.recent.clear()
            entry.recent.extend(await self.store.recent_events(episode_id, self.keep))
            entry.record = record
        return entry.record

    async def _caught_up(self, episode_id: str, entry: LiveEpisode) -> bool:
        """Apply to the cached record the events other replicas committed after it (one read, `Store.progress`);
        False when it cannot be caught up that way (ended, gone, too far behind): read it again whole."""
        record = entry.record
        assert record is not None
        progress = await self.store.progress(episode_id, record.seq, CATCH_UP_EVENTS)
        if progress is None or progress.status != record.status or progress.seq != record.seq + len(progress.events):
            return False
        try:
            for event in progress.events:
                state = record.state
                assert state is not None
                new_state = apply_patch(state, event.state_patch, None) if event.state_patch else None
                entry.applied(record, event, new_state)
        except StateError:  # cannot happen for patches that were committed; reading again is always right
            return False
        if progress.events:
            self.metrics.caught_up += 1
        return True

    def forget(self, episode_id: str, entry: LiveEpisode) -> None:
        """Drop a closed episode's memory (its window and record; the store keeps everything), unless a request
        is waiting on its lock. Without this, every ended episode's last events stayed in memory until
        `size` newer episodes pushed them out: ~25 KB each, 500 MB at the cap (found by bench/soak.py)."""
        if entry.users == 0 and self._entries.get(episode_id) is entry:
            del self._entries[episode_id]
            self._hot.pop(episode_id, None)
