"""Episodes: create, fork, call tools, end. The rules every endpoint shares live here, MCP-free.

Calls within one episode are serialized by a per-episode lock; different
episodes run concurrently. A call's event and new state are committed before
its result is returned, and a retried request (same request key) returns the
committed result instead of simulating again.

Several processes (replicas on one Postgres database) may serve the same episode:
each commits at the `seq` its copy of the episode is at, and a commit that finds
the episode moved on (another replica committed, or ended it) writes nothing; the
call then reloads the episode from the store and runs again on the state the other
replica committed, this time holding the episode's row (`Store.hold`) so that it
cannot lose again. Without contention no lock outlives a commit.

A request counts as a retry when its key matches one of the episode's last
`RETRY_WINDOW` events and no event after that one changed the state. The key
(session, JSON-RPC id, tool, arguments) is all a sessionless client offers, and
clients that open a new connection per call reuse id 1: without the second
condition, a read repeated after a write would get the stale first answer.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import secrets
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any

from pydantic_core import to_json
from simia.sim.engine import Simulator, Step, ToolCall, applicable, choose_fault, injected_error, perturb_output
from simia.sim.errors import StateError, StoreConflict
from simia.sim.judging import EpisodeView, Judge
from simia.sim.perturbation import PRE_CALL, Perturbation
from simia.sim.records import EpisodeRecord, EventRecord, PastCall
from simia.sim.schema import validate_instance
from simia.sim.storage import Store
from simia.sim.world import World, apply_patch

from .errors import BadRequest, Conflict, NotFound, Overloaded
from .metrics import Metrics
from .real_tools import RealServerFailed, RealTools
from .settings import ServerSettings

__all__ = ["EpisodeService", "new_episode_id"]

log = logging.getLogger("simia.calls")
RETRY_WINDOW = 16
"""How many of an episode's latest events a retried request is matched against."""
CONFLICT_RETRIES = 8
"""How many times a call is run again after another replica committed a call of its episode first."""
CATCH_UP_EVENTS = 16
"""A replica's cached episode at most this many events behind the database takes them and applies their
patches; further behind, it reads the episode again."""


def new_episode_id() -> str:
    """An unguessable episode id: 192 random bits."""
    return "ep_" + secrets.token_urlsafe(24)


@dataclass
class _Live:
    """What the service keeps in memory for an episode it served recently (the store stays the truth)."""

    recent: deque[EventRecord]  # the latest events: the simulator's window and the retry window
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    record: EpisodeRecord | None = None

    def window(self, size: int) -> list[PastCall]:
        """The last `size` calls the agent got a real answer for, as the simulator sees them: an
        infrastructure failure (invalid simulation, backend down, budget) is not the world's behaviour,
        and a model shown one imitates it."""
        if not size:
            return []
        answered = [event.past for event in self.recent if not (event.is_error and event.error_kind == "infra")]
        return answered[-size:]

    def retried(self, request_key: str) -> EventRecord | None:
        """The committed event `request_key` retries, if any (see the module docstring)."""
        changed_since = False
        for event in islice(reversed(self.recent), RETRY_WINDOW):
            if event.request_key == request_key:
                return None if changed_since else event
            changed_since = changed_since or bool(event.state_patch)
        return None


class EpisodeService:
    """Everything an endpoint may do to episodes.

    Args:
        worlds: the loaded worlds by name.
        simulator: answers tool calls.
        store: where episodes and events are committed.
        settings: limits and budgets.
        judge: scores an ended episode (None: episodes end without a verdict).
        real: calls the real server of tools routed `real` (default: `RealTools()`).
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
        self.real = real or RealTools()
        self.simulator = simulator
        self.store = store
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.judge = judge
        self._live: OrderedDict[str, _Live] = OrderedDict()
        self._keep = max([RETRY_WINDOW, *(w.simulator.window for w in worlds.values())])  # events kept per episode
        self.cache_size = 20_000

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
        await self._check_capacity()
        state = copy.deepcopy(world.initial_state)
        if task is not None:
            spec = world.task(task)
            if spec is None:
                ids = ", ".join(t.id for t in world.tasks) or "(this world has no tasks)"
                raise NotFound(f"unknown task {task!r} in world {world.name!r}; tasks: {ids}")
            state = apply_patch(state, spec.initial_state_patch, world.state_schema)
        chosen = perturbation or world.simulator.perturbation
        return await self._open(
            world,
            state,
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
        await self._check_capacity()
        state = await self.store.state_at(parent.id, step)
        return await self._open(
            world,
            state,
            task=parent.task,
            seed=parent.seed,
            principal=principal,
            parent_id=parent.id,
            fork_step=step,
            group_id=parent.group_id or parent.id,
            perturbation=parent.perturbation,
        )

    async def _open(self, world: World, state: dict[str, Any], **fields: Any) -> EpisodeRecord:
        """Create, store and remember a new active episode of `world` starting from `state`."""
        episode = EpisodeRecord(
            id=new_episode_id(),
            world=world.name,
            world_hash=world.content_hash,
            initial_state=state,
            state=state,
            **fields,
        )
        await self.store.create_episode(episode)
        self._remember(episode)
        self.metrics.episodes[episode.world] += 1
        self.metrics.live += 1
        return episode

    def _remember(self, episode: EpisodeRecord) -> None:
        entry = self._entry(episode.id)
        entry.record = copy.deepcopy(episode)

    def _entry(self, episode_id: str) -> _Live:
        entry = self._live.get(episode_id)
        if entry is None:
            entry = self._live[episode_id] = _Live(deque(maxlen=self._keep))
            while len(self._live) > self.cache_size:
                oldest, candidate = next(iter(self._live.items()))
                if candidate.users:
                    break
                del self._live[oldest]
        else:
            self._live.move_to_end(episode_id)
        return entry

    async def _load(self, episode_id: str, entry: _Live) -> EpisodeRecord | None:
        """The cached record (loading it, its window and its latest events on first use); with a `Store.shared`
        database, first brought up to what other replicas committed since, so that a call is simulated on
        what they committed and not twice. Call under the lock."""
        if entry.record is not None and self.store.shared and not await self._caught_up(episode_id, entry):
            entry.record = None
        if entry.record is None:
            record = await self.store.get_episode(episode_id)
            if record is None:
                return None
            entry.recent.clear()
            entry.recent.extend(await self.store.recent_events(episode_id, self._keep))
            entry.record = record
        return entry.record

    async def _caught_up(self, episode_id: str, entry: _Live) -> bool:
        """Apply to the cached record the events other replicas committed after it (one read, `Store.progress`);
        False when it cannot be caught up that way (ended, gone, too far behind): read it again whole."""
        record = entry.record
        assert record is not None
        progress = await self.store.progress(episode_id, record.seq, CATCH_UP_EVENTS)
        if progress is None or progress.status != record.status or progress.seq != record.seq + len(progress.events):
            return False
        try:
            for event in progress.events:
                new_state = apply_patch(record.state, event.state_patch, None) if event.state_patch else None
                self._applied(entry, record, event, new_state)
        except StateError:  # cannot happen for patches that were committed; reading again is always right
            return False
        if progress.events:
            self.metrics.caught_up += 1
        return True

    async def _check_capacity(self) -> None:
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
        self, episode_id: str, principal: str, tool: str, arguments: dict[str, Any], *, request_key: str | None = None
    ) -> EventRecord:
        """Simulate one tool call and commit it; returns the committed event.

        Bad calls, simulated errors, backend failures and budget hits are all
        events (with `is_error` and `error_kind`); only an unknown or closed
        episode raises.
        """
        start = time.monotonic()
        entry = self._entry(episode_id)
        entry.users += 1
        try:
            async with entry.lock:
                world, event = await self._call_serialized(entry, episode_id, principal, tool, arguments, request_key)
        finally:
            entry.users -= 1
            if entry.record is None or entry.record.status != "active":  # a call on a closed episode: keep nothing
                self._forget(episode_id, entry)
        self._observe(world, episode_id, event, time.monotonic() - start)
        return event

    async def _call_serialized(
        self,
        entry: _Live,
        episode_id: str,
        principal: str,
        tool: str,
        arguments: dict[str, Any],
        request_key: str | None,
    ) -> tuple[str, EventRecord]:
        """`_call_locked`; when another replica committed first, run again on the reloaded episode, holding it
        (`Store.hold`) so that the other replica's next call waits for this one instead of winning again."""
        for attempt in range(CONFLICT_RETRIES):
            try:
                if attempt == 0:
                    return await self._call_locked(entry, episode_id, principal, tool, arguments, request_key)
                async with self.store.hold(episode_id):
                    return await self._call_locked(entry, episode_id, principal, tool, arguments, request_key)
            except StoreConflict:
                entry.record = None  # another process committed (or ended it): reload from the store
                self.metrics.conflicts += 1
            except BaseException:
                entry.record = None  # e.g. a commit whose outcome is unknown (the database went away): reload
                raise
        raise Overloaded(
            f"episode {episode_id} is busy: other replicas committed {CONFLICT_RETRIES} of its calls first; retry"
        )

    async def _call_locked(
        self,
        entry: _Live,
        episode_id: str,
        principal: str,
        tool: str,
        arguments: dict[str, Any],
        request_key: str | None,
    ) -> tuple[str, EventRecord]:
        episode = await self._load(episode_id, entry)
        if episode is None or episode.principal != principal:
            raise NotFound(f"no episode {episode_id!r}; create one with POST /v1/episodes")
        if episode.status != "active":
            raise Conflict(f"episode {episode_id} is {episode.status}; start a new one with POST /v1/episodes")
        previous = entry.retried(request_key) if request_key is not None else None
        if previous is not None:
            return episode.world, previous
        world = self.world(episode.world)
        budget = self._budget_problem(episode)
        if budget is not None:
            code, text = budget
            event = EventRecord(
                tool=tool,
                arguments=arguments,
                output=None,
                text=text,
                is_error=True,
                error_code=code,
                error_kind="infra",
                request_key=request_key,
            )
            event = await self.store.commit_event(episode_id, event, None, expected_seq=episode.seq)
            self._applied(entry, episode, event, None)
            return world.name, event
        routed, fell_back = await self._routed(world, tool, arguments, request_key)
        if routed is not None:  # answered by the real server (or its failure): the state is unchanged
            event = await self.store.commit_event(episode_id, routed, None, expected_seq=episode.seq)
            self._applied(entry, episode, event, None)
            return world.name, event
        fault = self._fault(episode, world, tool, arguments)
        if fault in PRE_CALL:
            event = _injected(world, tool, arguments, fault, request_key)
            new_state = None
        else:
            window = entry.window(world.simulator.window)
            seed = None if episode.seed is None else episode.seed * 100_003 + episode.seq
            step = await self.simulator.step(
                world,
                episode.state,
                window,
                ToolCall(tool, arguments),
                seed=seed,
                max_argument_bytes=self.settings.max_argument_bytes,
            )
            new_state = step.state if step.state is not episode.state and step.state_patch else None
            event = _event_of(step, request_key)
            if fell_back:
                event = replace(event, detail=f"{fell_back}; simulated instead. {event.detail}".strip())
            if fault is not None and not step.is_error:
                event, new_state = _perturbed(world, event, new_state, fault, entry.recent, request_key)
        event = await self.store.commit_event(episode_id, event, new_state, expected_seq=episode.seq)
        self._applied(entry, episode, event, new_state)
        return world.name, event

    def _applied(
        self, entry: _Live, episode: EpisodeRecord, event: EventRecord, new_state: dict[str, Any] | None
    ) -> None:
        """Mirror a committed event into the cached record (the same arithmetic the store did)."""
        if event.seq <= episode.seq:
            return  # a retried request answered from the store: nothing new
        episode.advance(event, new_state)
        entry.recent.append(event)

    async def _routed(
        self, world: World, tool: str, arguments: dict[str, Any], key: str | None
    ) -> tuple[EventRecord | None, str]:
        """For a tool routed `real` and a call that fits its input schema: the real server's event, or
        (it failed) an infra error event, or with `fallback: simulate` no event and why it fell back. Any
        other call: (None, "")."""
        spec = world.tool(tool)
        if spec is None or spec.route != "real" or not self._fits(spec.input_schema, arguments):
            return None, ""
        try:
            return await self.real.event(world, spec, arguments, key), ""
        except RealServerFailed as exc:
            if spec.fallback == "simulate":
                return None, f"the real server failed ({exc})"
            text = "The tool's server did not answer. Try again later."
            failed = EventRecord(
                tool=tool,
                arguments=arguments,
                output=None,
                text=text,
                is_error=True,
                error_code="real_server_failed",
                error_kind="infra",
                detail=str(exc),
                request_key=key,
                source="real",
            )
            return failed, ""

    def _fits(self, schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
        """Whether the simulator would take these arguments (size and input schema)."""
        try:
            size = len(to_json(arguments))
        except ValueError:  # not serializable (too deep, bad unicode): the simulator refuses it
            return False
        return size <= self.settings.max_argument_bytes and not validate_instance(schema, arguments)

    def _fault(self, episode: EpisodeRecord, world: World, tool: str, arguments: dict[str, Any]) -> str | None:
        """The fault injected into the episode's next call, if its perturbation draws one. A call the simulator
        would refuse (unknown tool, arguments too large or breaking the input schema) gets no fault: the
        agent's own mistake is reported as such."""
        if episode.perturbation is None:  # the common case: nothing more to look at on a call's path
            return None
        spec = world.tool(tool)
        if spec is None or not self._fits(spec.input_schema, arguments):
            return None
        perturbation = Perturbation.model_validate(episode.perturbation)
        key = str(episode.seed) if episode.seed is not None else episode.id
        return choose_fault(perturbation, key, episode.seq + 1)

    def _budget_problem(self, episode: EpisodeRecord) -> tuple[str, str] | None:
        s = self.settings
        if episode.calls >= s.max_calls_per_episode:
            return "budget_calls", (
                f"This episode reached its limit of {s.max_calls_per_episode} tool calls; no more calls are accepted."
            )
        tokens = episode.prompt_tokens + episode.completion_tokens
        if tokens >= s.max_sim_tokens_per_episode:
            return "budget_tokens", (
                f"This episode reached its simulator budget of {s.max_sim_tokens_per_episode} tokens; "
                "no more calls are accepted."
            )
        return None

    def _observe(self, world: str, episode_id: str, event: EventRecord, seconds: float) -> None:
        outcome = "ok" if not event.is_error else (event.error_kind or "agent")
        usage = event.usage
        prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
        self.metrics.call(
            world,
            event.tool if len(event.tool) <= 64 else "<long>",
            outcome,
            seconds,
            error=(event.error_kind or "agent", event.error_code or "") if event.is_error else None,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost_usd=usage.get("cost_usd") or 0.0,
        )
        if log.isEnabledFor(logging.INFO):
            log.info(
                "call episode=%s seq=%d tool=%s outcome=%s code=%s latency_ms=%.1f tokens=%d",
                episode_id,
                event.seq,
                event.tool,
                outcome,
                event.error_code or "-",
                seconds * 1000,
                prompt + completion,
            )

    async def end(
        self,
        episode_id: str,
        principal: str,
        transcript: list[dict[str, Any]] | None = None,
        tokens: dict[str, Any] | None = None,
    ) -> EpisodeRecord:
        """Close the episode (idempotent), judge it when a judge is configured, and store the verdict."""
        entry = self._entry(episode_id)
        entry.users += 1
        try:
            async with entry.lock:
                episode = await self.get(episode_id, principal)
                was_active = episode.status == "active"
                verdict = episode.verdict
                if self.judge is not None and (verdict is None or transcript is not None):
                    events = await self.store.events(episode_id)
                    world = self.world(episode.world)
                    task = world.task(episode.task) if episode.task else None
                    view = EpisodeView.of(episode, events, transcript)
                    verdict = await self.judge.judge(world, task, view)
                await self.store.set_status(
                    episode_id,
                    "ended",
                    reason="ended by client" if was_active else None,
                    verdict=verdict,
                    transcript=transcript,
                    tokens=tokens,
                )
                entry.record = None  # reload from the store next time
        finally:
            entry.users -= 1
        self._forget(episode_id, entry)
        if was_active:
            self.metrics.live -= 1
        return await self.get(episode_id, principal)

    async def sweep_idle(self) -> list[str]:
        """Abandon the idle episodes (of every replica: the store's update is global and each id is returned to
        one sweeper only), and set the live gauge to the store's count (other replicas create and end too)."""
        ids = await self.store.abandon_idle(self.settings.idle_timeout)
        for episode_id in ids:
            entry = self._live.get(episode_id)
            if entry is not None and entry.record is not None:
                entry.record.status = "abandoned"
            if entry is not None:
                self._forget(episode_id, entry)
        self.metrics.live = await self.store.count_live()
        return ids

    def _forget(self, episode_id: str, entry: _Live) -> None:
        """Drop a closed episode's memory (its window and record; the store keeps everything), unless a request
        is waiting on its lock. Without this, every ended episode's last events stayed in memory until
        `cache_size` newer episodes pushed them out: ~25 KB each, 500 MB at the cap (found by bench/soak.py)."""
        if entry.users == 0 and self._live.get(episode_id) is entry:
            del self._live[episode_id]


def _injected(world: World, tool: str, arguments: dict[str, Any], fault: str, key: str | None) -> EventRecord:
    """The event of a call a pre-call fault stopped (a kind that does not apply falls back to `rate_limit`)."""
    spec = world.tool(tool)
    assert spec is not None  # _fault draws faults for known tools only
    kind = fault if applicable(fault, spec) else "rate_limit"
    code, message = injected_error(kind, spec)
    return EventRecord(
        tool=tool,
        arguments=arguments,
        output=None,
        text=f"Error ({code}): {message}",
        is_error=True,
        error_code=code,
        error_kind="agent",
        request_key=key,
        injected=kind,
    )


def _perturbed(
    world: World,
    event: EventRecord,
    new_state: dict[str, Any] | None,
    fault: str,
    recent: deque[EventRecord],
    key: str | None,
) -> tuple[EventRecord, dict[str, Any] | None]:
    """A successful call's event after a post-call fault; a fault that does not apply (or whose result would
    break the tool's output schema) becomes a `rate_limit` instead, and the call's state change is dropped."""
    spec = world.tool(event.tool)
    assert spec is not None and event.output is not None
    earlier = [(e.tool, e.arguments, e.output) for e in recent if not e.is_error]
    output = perturb_output(fault, spec, event.arguments, event.output, earlier)
    if output is None or (spec.output_schema and validate_instance(spec.output_schema, output)):
        return _injected(world, event.tool, event.arguments, "rate_limit", key), None
    text = to_json(output).decode()
    return replace(event, output=output, text=text, injected=fault), new_state


def _event_of(step: Step, request_key: str | None) -> EventRecord:
    return EventRecord(
        tool=step.tool,
        arguments=step.arguments,
        output=step.output,
        text=step.text,
        is_error=step.is_error,
        error_code=step.error_code,
        error_kind=step.error_kind,
        state_patch=step.state_patch,
        usage=step.usage.as_dict(),
        latency_ms=step.latency_ms,
        model=step.model,
        detail=step.detail,
        request_key=request_key,
    )
