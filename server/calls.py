"""The call pipeline: one tool call of an episode, from its lock to its committed event (a retry's answer, a budget
hit, the real server's answer, an injected fault, or the simulator's step), then its metrics and log line.

Calls within one episode are serialized by a per-episode lock; different
episodes run concurrently. A call's event and new state are committed before
its result is returned, and a retried request (same request key) returns the
committed result instead of simulating again (`LiveEpisode.retried`).

Several processes (replicas on one Postgres database) may serve the same episode:
each commits at the `seq` its copy of the episode is at, and a commit that finds
the episode moved on (another replica committed, or ended it) writes nothing; the
call then reloads the episode from the store and runs again on the state the other
replica committed, this time holding the episode's row (`Store.hold`) so that it
cannot lose again. Without contention no lock outlives a commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from simia.sim.engine import Simulator, Step, ToolCall, shown_name
from simia.sim.errors import StoreConflict
from simia.sim.perturbation import PRE_CALL
from simia.sim.records import REFUSED_ARGUMENTS, EpisodeRecord, EventRecord
from simia.sim.storage import Store
from simia.sim.world import Side, World, compact_json

from .errors import ApiError, BadRequest, EpisodeClosed, NotFound, Overloaded
from .injection import draw_fault, injected, perturbed
from .live import LiveEpisode, LiveEpisodes
from .metrics import Metrics
from .real_tools import RealTools, routed
from .settings import ServerSettings

__all__ = ["CONFLICT_RETRIES", "LARGE_PATCH_BYTES", "CallPipeline"]

log = logging.getLogger("simia.calls")
CONFLICT_RETRIES = 8
"""How many times a call is run again after another replica committed a call of its episode first."""
LARGE_PATCH_BYTES = 65_536
"""A state patch over this many bytes is reported (its event's detail, `simia_large_state_patches`)."""


class CallPipeline:
    """Runs tool calls of episodes and commits them.

    Args:
        live: the live episodes (their records, latest events and locks).
        world: the loaded world of a name (raises NotFound for another).
        simulator: answers tool calls.
        store: where events are committed.
        settings: limits and budgets (read at each call).
        metrics: counts calls, conflicts, tokens and latency.
        real: calls the real server of tools routed `real`.
    """

    def __init__(
        self,
        live: LiveEpisodes,
        world: Callable[[str], World],
        simulator: Simulator,
        store: Store,
        settings: ServerSettings,
        metrics: Metrics,
        real: RealTools,
    ) -> None:
        self.live = live
        self.world = world
        self.simulator = simulator
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.real = real

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
        """Simulate one tool call and commit it; returns the committed event.

        Bad calls, simulated errors, backend failures and budget hits are all
        events (with `is_error` and `error_kind`); only an unknown or closed
        episode raises.
        """
        start = time.monotonic()
        entry = self.live.entry(episode_id)
        entry.users += 1
        try:
            async with entry.lock:
                try:
                    world, event = await self._call_serialized(
                        entry, episode_id, principal, ToolCall(tool, arguments, side), request_key
                    )
                finally:
                    self.live.rest(episode_id, entry)
        finally:
            entry.users -= 1
            if entry.record is None or entry.record.status != "active":  # a call on a closed episode: keep nothing
                self.live.forget(episode_id, entry)
        self._observe(world, episode_id, event, time.monotonic() - start)
        return event

    async def _call_serialized(
        self,
        entry: LiveEpisode,
        episode_id: str,
        principal: str,
        call: ToolCall,
        request_key: str | None,
    ) -> tuple[str, EventRecord]:
        """`_call_locked`; when another replica committed first, run again on the reloaded episode, holding it
        (`Store.hold`) so that the other replica's next call waits for this one instead of winning again."""
        for attempt in range(CONFLICT_RETRIES):
            try:
                if attempt == 0:
                    return await self._call_locked(entry, episode_id, principal, call, request_key)
                async with self.store.hold(episode_id):
                    return await self._call_locked(entry, episode_id, principal, call, request_key)
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
        entry: LiveEpisode,
        episode_id: str,
        principal: str,
        call: ToolCall,
        request_key: str | None,
    ) -> tuple[str, EventRecord]:
        tool, arguments = call.tool, call.arguments
        episode = await self.live.load(episode_id, entry)
        if episode is None or episode.principal != principal:
            raise NotFound(f"no episode {episode_id!r}; create one with POST /v1/episodes")
        if episode.status != "active":
            raise EpisodeClosed(episode_id, episode.status)
        previous = entry.retried(request_key) if request_key is not None else None
        if previous is not None:
            if not _same_call(previous, tool, arguments):  # a client's request id used again for another call
                raise BadRequest(
                    f"this request id was used for another call of the episode ({previous.tool!r}, "
                    f"call {previous.seq}); give each call its own request id"
                )
            return episode.world, previous
        world = self.world(episode.world)
        budget = _budget_problem(episode, self.settings)
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
                side=call.side,
            )
            event = await self.store.commit_event(episode_id, event, expected_seq=episode.seq)
            entry.applied(episode, event, None)
            return world.name, event
        max_bytes = self.settings.max_argument_bytes
        user = call.side == "user"  # the user's own tool: never routed to a real server, never perturbed
        routed_event, fell_back = (
            (None, "")
            if user
            else await routed(self.real, episode_id, world, tool, arguments, request_key, max_argument_bytes=max_bytes)
        )
        if routed_event is not None:  # answered by the real server (or its failure): the state is unchanged
            event = await self.store.commit_event(episode_id, routed_event, expected_seq=episode.seq)
            entry.applied(episode, event, None)
            return world.name, event
        fault = None if user else draw_fault(episode, world, tool, arguments, max_argument_bytes=max_bytes)
        if fault is not None and fault.kind in PRE_CALL:
            event = injected(world, tool, arguments, fault, request_key)
            new_state = None
        else:
            window = entry.window(world.simulator.window)
            seed = None if episode.seed is None else episode.seed * 100_003 + episode.seq
            state = episode.state
            assert state is not None  # a live episode's record holds its state (`LiveEpisodes.load`)
            step = await self.simulator.step(
                world,
                state,
                window,
                call,
                seed=seed,
                max_argument_bytes=max_bytes,
                task=world.task(episode.task) if episode.task else None,  # its reference grounds the simulator
            )
            new_state = step.state if step.state is not state and step.state_patch else None
            event = replace(_event_of(step, request_key), side=call.side)
            if fell_back:
                event = replace(event, detail=f"{fell_back}; simulated instead. {event.detail}".strip())
            if fault is not None:  # an error answer too: the rate holds (`simia.sim.engine.faults`)
                event, new_state = perturbed(world, event, new_state, fault, entry.recent, request_key)
            if new_state is not None:
                event = self._cost_of_patch(event)
        event = await self.store.commit_event(episode_id, event, expected_seq=episode.seq)
        entry.applied(episode, event, new_state)
        return world.name, event

    def _cost_of_patch(self, event: EventRecord) -> EventRecord:
        """Count what the call writes to the state; a patch over `LARGE_PATCH_BYTES` (a huge subtree replaced) is
        accepted, and says its size in the event's detail: it is stored once, in its event, and read again each
        time the episode's state is rebuilt."""
        size = len(compact_json(event.state_patch).encode())
        self.metrics.patch_bytes += size
        if size <= LARGE_PATCH_BYTES:
            return event
        self.metrics.large_patches += 1
        note = f"large state patch: {size} bytes (over {LARGE_PATCH_BYTES}); accepted, stored in this event"
        return replace(event, detail=f"{event.detail} {note}".strip())

    def _tool_label(self, world: str, tool: str, side: Side) -> str:
        """The tool's name as a metrics label: a name the world does not have is `<unknown>`, so an agent that
        guesses names cannot grow `/metrics` by a series per guess."""
        try:
            known = self.world(world).tool(tool, side) is not None
        except ApiError:
            known = False
        return tool if known else "<unknown>"

    def _observe(self, world: str, episode_id: str, event: EventRecord, seconds: float) -> None:
        outcome = "ok" if not event.is_error else (event.error_kind or "agent")
        usage = event.usage
        prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
        self.metrics.call(
            world,
            self._tool_label(world, event.tool, "user" if event.side == "user" else "agent"),
            outcome,
            seconds,
            error=(event.error_kind or "agent", event.error_code or "") if event.is_error else None,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost_usd=usage.get("cost_usd") or 0.0,
            cached_tokens=usage.get("cached_tokens", 0),
            cache_write_tokens=usage.get("cache_write_tokens", 0),
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


def _budget_problem(episode: EpisodeRecord, s: ServerSettings) -> tuple[str, str] | None:
    """The budget the episode has used up (an error code and the agent's message), if any."""
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


def _same_call(event: EventRecord, tool: str, arguments: dict[str, Any]) -> bool:
    """Whether `event` records this call: its tool and arguments as stored (a refused call's name as `shown_name`
    keeps it, arguments over the limits as a note, `REFUSED_ARGUMENTS`: compared by what was kept)."""
    if event.tool not in (tool, shown_name(tool)):
        return False
    return REFUSED_ARGUMENTS in event.arguments or event.arguments == arguments


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
        source=step.source,
    )
