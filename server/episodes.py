"""Episodes: create, fork, get, end and sweep them, the rules every endpoint shares, MCP-free. The service
composes the live episodes it keeps in memory (live.py) and the pipeline its tool calls run through (calls.py)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_core import to_json
from simia.sim.engine import Simulator
from simia.sim.judging import EpisodeView, Judge
from simia.sim.perturbation import Perturbation
from simia.sim.records import EpisodeRecord, EventRecord
from simia.sim.storage import Store
from simia.sim.world import Parked, Side, State, World, apply_patch, apply_patches, parked_patches

from .calls import CallPipeline
from .errors import BadRequest, Conflict, NotFound, Overloaded, PayloadTooLarge, TooManyEpisodes
from .live import LiveEpisodes
from .metrics import Metrics
from .real_tools import RealTools
from .settings import ServerSettings

__all__ = ["EpisodeService", "new_episode_id"]


def new_episode_id() -> str:
    """An unguessable episode id: 192 random bits."""
    return "ep_" + secrets.token_urlsafe(24)


def _warm(world: World) -> None:
    """Compute the world's cached hashes (its content hash, its base state's digest) now."""
    _ = world.content_hash, world.base_state


class EpisodeService:
    """Everything an endpoint may do to episodes.

    Args:
        worlds: the loaded worlds by name.
        simulator: answers tool calls.
        store: where episodes and events are committed.
        settings: limits and budgets.
        metrics: what `/metrics` reports (default: a new `Metrics()`).
        judge: scores an ended episode (None: episodes end without a verdict).
        real: calls the real server of tools routed `real`, a session per episode (default: `RealTools()` with
            `settings.max_real_sessions`); an episode's session closes when it ends or is swept.
    """

    def __init__(
        self,
        worlds: dict[str, World],
        simulator: Simulator,
        store: Store,
        settings: ServerSettings,
        metrics: Metrics | None = None,
        judge: Judge | None = None,
        real: RealTools | None = None,
    ) -> None:
        self.worlds = worlds
        self.real = real if real is not None else RealTools(max_sessions=settings.max_real_sessions)
        self.simulator = simulator
        self.store = store
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.judge = judge
        window = max((w.simulator.window for w in worlds.values()), default=0)
        self._live = LiveEpisodes(store, self.metrics, window=window)
        self._calls = CallPipeline(self._live, self.world, simulator, store, settings, self.metrics, self.real)

    async def start(self) -> None:
        """Make each world ready before serving, O(its state's size) once and off the event loop: its hashes, its
        state's one stored copy, which every episode of the world references (so creating one writes no state),
        and the index of its records, through which the simulator finds the records a call names."""
        for world in self.worlds.values():
            await asyncio.to_thread(_warm, world)
            await self.store.put_base(world.base_state)
            await self.simulator.indexes.aindex_of(world.base_state)  # the records a call names, found per call

    def world(self, name: str) -> World:
        world = self.worlds.get(name)
        if world is None:
            known = ", ".join(sorted(self.worlds)) or "(none)"
            raise NotFound(f"unknown world {name!r}; loaded worlds: {known} (see GET /v1/worlds)")
        return world

    async def create(
        self,
        world_name: str,
        *,
        task: str | None = None,
        seed: int | None = None,
        principal: str = "",
        perturbation: Perturbation | None = None,
    ) -> EpisodeRecord:
        """Start an episode; a task's `initial_state_patch` is applied to the world's state. `perturbation`
        (default: the world's `simulator.perturbation`) injects faults into its calls."""
        world = self.world(world_name)
        await self._check_capacity(principal)
        base = world.base_state
        await self.store.put_base(base)  # stored once per process and world (the store remembers)
        patches: list[list[dict[str, Any]]] = []
        state: State = base
        if task is not None:
            spec = world.task(task)
            if spec is None:
                ids = ", ".join(t.id for t in world.tasks) or "(this world has no tasks)"
                raise NotFound(f"unknown task {task!r} in world {world.name!r}; tasks: {ids}")
            if spec.initial_state_patch:
                state = apply_patch(state, spec.initial_state_patch, world.state_schema)
                patches.append(spec.initial_state_patch)
        chosen = perturbation or world.simulator.perturbation
        return await self._open(
            world,
            state,
            base.digest,
            patches,
            task=task,
            seed=seed,
            principal=principal,
            perturbation=chosen.model_dump() if chosen is not None else None,
        )

    async def fork(self, episode_id: str, *, step: int | None, principal: str) -> EpisodeRecord:
        """A new active episode starting from `episode_id`'s state after `step` (default: its last step)."""
        parent = await self.get(episode_id, principal)
        world = self.world(parent.world)
        if step is None:
            step = parent.seq
        if step < 0 or step > parent.seq:
            raise BadRequest(f"step must be between 0 and {parent.seq} (the episode's last step), got {step}")
        await self._check_capacity(principal)
        path = await self.store.state_path(parent.id, step)
        base = await self.store.base(path.base_hash)
        # O(what the parent changed): parked when it wrote into a large collection, which is copied on first use
        state = parked_patches(base, path.patches) or apply_patches(base, path.patches)
        return await self._open(
            world,
            state,
            path.base_hash,
            path.patches,
            task=parent.task,
            seed=parent.seed,
            principal=principal,
            parent_id=parent.id,
            fork_step=step,
            group_id=parent.group_id or parent.id,
            perturbation=parent.perturbation,
        )

    async def _open(
        self,
        world: World,
        state: State | Parked,
        base_hash: str,
        base_patches: list[list[dict[str, Any]]],
        **fields: Any,
    ) -> EpisodeRecord:
        """Create, store and remember a new active episode of `world` starting from `state`, which is the stored
        base `base_hash` with `base_patches` applied (the row references them: no state is written). A `Parked`
        state stays parked in memory until the episode's first call; the record returned then holds no state."""
        whole = state if isinstance(state, State) else None
        episode = EpisodeRecord(
            id=new_episode_id(),
            world=world.name,
            world_hash=world.content_hash,
            initial_state=whole,
            state=whole,
            base_hash=base_hash,
            base_patches=base_patches,
            **fields,
        )
        await self.store.put_world(world)  # the world as served, once per hash and process: the log stands alone
        await self.store.create_episode(episode)
        self._live.remember(episode, state if isinstance(state, Parked) else None)
        self.metrics.episodes[episode.world] += 1
        self.metrics.live += 1
        return episode

    async def _check_capacity(self, principal: str) -> None:
        """Room for one more live episode: the principal's own (429 past `max_live_episodes_per_principal`), then
        the server's (503 past `max_live_episodes`)."""
        cap = self.settings.max_live_episodes_per_principal
        mine = await self.store.count_live(principal)
        if mine >= cap:
            raise TooManyEpisodes(
                f"this token has {mine} live episodes, its limit (--max-live-episodes-per-principal {cap}); end "
                "finished ones with POST /v1/episodes/{id}/end, or raise --max-live-episodes-per-principal"
            )
        live = await self.store.count_live()
        if live >= self.settings.max_live_episodes:
            raise Overloaded(
                f"{live} live episodes reach the cap of {self.settings.max_live_episodes}; end finished ones with "
                "POST /v1/episodes/{id}/end or raise --max-live-episodes"
            )

    async def get(self, episode_id: str, principal: str) -> EpisodeRecord:
        """The episode, if it exists and belongs to `principal` (otherwise NotFound, never Forbidden)."""
        episode = await self.store.get_episode(episode_id)
        if episode is None or episode.principal != principal:
            raise NotFound(f"no episode {episode_id!r}; create one with POST /v1/episodes")
        return episode

    async def owns(self, episode_id: str, principal: str) -> bool:
        """Fast ownership check for MCP requests (from memory for recently served episodes)."""
        entry = self._live.get(episode_id)
        record = entry.record if entry is not None else None
        if record is None:
            record = await self.store.get_episode(episode_id)
        return record is not None and record.principal == principal

    async def call(
        self,
        episode_id: str,
        principal: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        request_key: str | None = None,
        side: Side = "agent",
    ) -> EventRecord:
        """Simulate one tool call (of the agent's tools, or `side="user"` the user's own) and commit it; returns the
        committed event (see `CallPipeline.call`).

        Bad calls, simulated errors, backend failures and budget hits are all
        events (with `is_error` and `error_kind`); only an unknown or closed
        episode raises.
        """
        return await self._calls.call(episode_id, principal, tool, arguments, request_key=request_key, side=side)

    def answered_sessionless(self, episode_id: str, event: EventRecord) -> None:
        """`event`'s result went back to a client without a session (`LiveEpisode.answered_sessionless`): the
        same request again is a new call, not a retry."""
        entry = self._live.get(episode_id)
        if entry is not None:
            entry.answered_sessionless(event)

    async def end(
        self,
        episode_id: str,
        principal: str,
        transcript: list[dict[str, Any]] | None = None,
        tokens: dict[str, Any] | None = None,
        *,
        judge: bool = True,
        transcript_of: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None,
    ) -> EpisodeRecord:
        """Close the episode, judge it when a judge is configured (and `judge`), and store the verdict.

        With `judge=False` the episode is closed at once, unjudged: a later `end` judges it (as `simia judge ID`
        does), so a client that kills the process after leaving (the MCP SDK's stdio client) still finds it ended.

        Idempotent: ending an ended episode again with the same body (or none) answers the stored episode and judges
        nothing again. Its verdict stands: a transcript or tokens other than those stored raise `Conflict`, or an
        agent could replace a transcript flagged as fabricated by a clean one. An abandoned episode is ended and
        judged as an active one is.

        `transcript_of` builds the transcript (of an active episode) from its committed calls, for a protocol where
        the server keeps the conversation (ORS): it runs under the episode's lock, after every call that holds it
        has committed and before any later one runs (which then finds the episode ended), so the judged
        transcript holds every call the episode acknowledged.

        A posted `transcript` (not one `transcript_of` builds from the server's own record) over
        `settings.max_transcript_bytes` of JSON is refused before anything is read or judged: the judge's request
        is bounded by what the server chose, not by what a client sent.

        Raises:
            Conflict: the episode was ended before with another transcript or other tokens.
            PayloadTooLarge: a posted transcript over `max_transcript_bytes`.
        """
        if transcript is not None:
            self._check_transcript_size(transcript)
        entry = self._live.entry(episode_id)
        entry.users += 1
        try:
            async with entry.lock:
                episode = await self.get(episode_id, principal)
                was_active = episode.status == "active"
                if transcript_of is not None and was_active:
                    transcript = await transcript_of()
                if episode.status == "ended":
                    _same_end(episode, transcript, tokens)
                    transcript, tokens = episode.transcript, episode.tokens
                verdict = episode.verdict
                judging = judge and self.judge is not None and verdict is None
                if self.judge is not None and judging:
                    world = self.world(episode.world)
                    task = world.task(episode.task) if episode.task else None
                    view = await EpisodeView.read(self.store, episode, transcript)
                    verdict = await self.judge.judge(world, task, view)
                    self.metrics.judgement(verdict.usage)
                if judging or episode.status != "ended":  # an ended episode's row holds all this already
                    await self.store.set_status(
                        episode_id,
                        "ended",
                        reason=_END_REASONS.get(episode.status),
                        verdict=verdict,
                        transcript=transcript,
                        tokens=tokens,
                    )
                    entry.record = None  # reload from the store next time
        finally:
            entry.users -= 1
        self._live.forget(episode_id, entry)
        await self.real.close(episode_id)  # its real server's session (a process, for a command server)
        if was_active:
            self.metrics.live -= 1
        return await self.get(episode_id, principal)

    def _check_transcript_size(self, transcript: list[dict[str, Any]]) -> None:
        cap = self.settings.max_transcript_bytes
        try:
            size = len(to_json(transcript))
        except ValueError:  # no JSON can carry it: the store refuses it later, with its own message
            return
        if size > cap:
            raise PayloadTooLarge(
                f"the transcript is {size} bytes of JSON, over the limit of {cap} (--max-transcript-bytes {cap}); "
                "send a shorter one (the judge reads the recorded calls and state changes whatever the transcript "
                "says), or raise --max-transcript-bytes"
            )

    async def sweep_idle(self) -> list[str]:
        """Abandon the idle episodes (of every replica: the store's update is global and each id is returned to
        one sweeper only), and set the live gauge to the store's count (other replicas create and end too)."""
        ids = await self.store.abandon_idle(self.settings.idle_timeout)
        for episode_id in ids:
            entry = self._live.get(episode_id)
            if entry is not None and entry.record is not None:
                entry.record.status = "abandoned"
            if entry is not None:
                self._live.forget(episode_id, entry)
            await self.real.close(episode_id)
        for episode_id in self.real.episodes():  # closed by another replica: its session here goes too
            record = await self.store.get_episode(episode_id)
            if record is None or record.status != "active":
                await self.real.close(episode_id)
        self.metrics.live = await self.store.count_live()
        return ids

    async def close(self) -> None:
        """Close what the service holds open outside the store: the real servers' sessions (the server stops)."""
        await self.real.close_all()


_END_REASONS = {"active": "ended by client", "abandoned": "ended by client after the idle timeout abandoned it"}
"""An ended episode's `status_reason` by the status it had (an ended one keeps its own)."""


def _same_end(episode: EpisodeRecord, transcript: list[dict[str, Any]] | None, tokens: dict[str, Any] | None) -> None:
    """Raise `Conflict` unless ending the ended `episode` again with this body changes nothing it stored."""
    for what, sent, stored in (("transcript", transcript, episode.transcript), ("tokens", tokens, episode.tokens)):
        if sent is not None and sent != stored:
            had = f"without {what}" if stored is None else f"with other {what}"
            raise Conflict(
                f"episode {episode.id} is already ended, {had}: its verdict stands and is not judged "
                f"again. Send the same body (or none) to read it, or GET /v1/episodes/{episode.id}; to judge its "
                f"stored transcript again, run: simia judge {episode.id} --db DB",
                episode_id=episode.id,
            )
