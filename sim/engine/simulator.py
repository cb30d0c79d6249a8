"""The simulator: turns (world, state, recent calls, one call) into a validated result and a new state.

A call the tool's grounding fully decides is answered from the state without a model (`grounded`, a Step with
`source="state"`). Every other call is one structured model request (given the declared parts of a guided tool
as fixed facts). The answer is checked (answer shape, the tool's `outputSchema`, the patch applies, the new state
satisfies `state_schema`, nothing contradicts the declared parts); a bad answer is retried with the problem fed
back, and after the last attempt the call fails cleanly as an infrastructure error. The state passed in is never
modified; a `Step` carries the new one.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Literal

from ..backends import Backend, CompletionRequest, Usage
from ..errors import BackendError, BackendOutputError, ExpressionError, StateError
from ..records import REFUSED_ARGUMENTS, PastCall, result_text
from ..schema import non_finite_path, validate_instance
from ..storage import ResponseCache, cache_key
from ..world import Side, State, Task, ToolSpec, World, apply_patch, as_state, compact_json
from .grounded import Broken, Plan, Refused, contradiction, facts, keep_triggers, merged_patch, plan_call
from .index import StateIndexes
from .prompts import MAX_ROOTS, PROMPT_VERSION, UserMessage, answer_schema, system_prompt, user_prompt
from .slicing import StateView, state_view

__all__ = ["INTERNAL_TEXT", "ErrorKind", "Simulator", "Step", "ToolCall", "check_call", "shown_name"]

ErrorKind = Literal["agent", "infra"]
log = logging.getLogger("simia.simulator")


@dataclass(frozen=True)
class ToolCall:
    """A call an agent made: tool name and arguments."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    side: Side = "agent"  # "user": a tool of the user's own (a dual-control world's `user_tools`)

    @cached_property
    def arguments_json(self) -> str:
        """The arguments as compact JSON (measured against the size limit and shown to the simulator)."""
        return compact_json(self.arguments)


@dataclass(frozen=True)
class Step:
    """The outcome of one call.

    Attributes:
        output: the structured result (None on errors).
        text: the text rendering sent to the agent.
        is_error: whether the agent sees an error.
        error_code: a documented error code, `invalid_arguments`, `unknown_tool`, or an infra code.
        error_kind: `agent` (the agent's mistake, simulated tool errors included) or `infra`.
        state: the state after the call (the same object when nothing changed).
        state_patch: the RFC 6902 patch that was applied.
        detail: for developers only (never sent to the agent): why an infra error happened.
        source: `simulated` (a model answered) or `state` (the tool's grounding decided it, no model).
    """

    tool: str
    arguments: dict[str, Any]
    output: Any  # an object, or any JSON value a tool without an outputSchema answers from the state; None on error
    text: str
    is_error: bool
    state: dict[str, Any]
    state_patch: list[dict[str, Any]] = field(default_factory=list)
    error_code: str | None = None
    error_kind: ErrorKind | None = None
    usage: Usage = field(default_factory=Usage)
    latency_ms: float = 0.0
    attempts: int = 0
    cached: bool = False
    model: str = ""
    detail: str = ""
    source: str = "simulated"


def _agent_error(call: ToolCall, state: dict[str, Any], code: str, text: str) -> Step:
    return Step(call.tool, call.arguments, None, text, True, state, error_code=code, error_kind="agent")


def shown_name(text: str) -> str:
    """A name as it may be repeated and stored: valid Unicode (unpaired surrogates escaped), at most 64 characters."""
    safe = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return safe if len(safe) <= _SHOWN_NAME else safe[:_SHOWN_NAME] + "..."


def _too_deep(value: Any, limit: int) -> bool:
    """Whether objects and arrays nest deeper than `limit` (iterative: no recursion on hostile input)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            stack.extend((inner, depth + 1) for inner in (item.values() if isinstance(item, dict) else item))
    return False


def _recordable(call: ToolCall, max_argument_bytes: int) -> ToolCall:
    """What a refused call's event keeps: the name made safe to store, and the arguments unless they are over
    the limits (then a note of what was refused: a refused call must not grow the database by megabytes)."""
    try:
        size = len(call.arguments_json.encode()) if not _too_deep(call.arguments, MAX_ARGUMENT_DEPTH) else -1
    except ValueError:
        size = -1
    if non_finite_path(call.arguments) is not None:
        return ToolCall(shown_name(call.tool), {REFUSED_ARGUMENTS: "NaN or Infinity, which JSON does not have"})
    if 0 <= size <= max_argument_bytes:
        return ToolCall(shown_name(call.tool), call.arguments)
    note = f"{size} bytes" if size >= 0 else "not storable (too deep or invalid Unicode)"
    return ToolCall(shown_name(call.tool), {REFUSED_ARGUMENTS: note})


_ERROR_PREFIX = re.compile(r"^\s*(?:error\s*(?:\([^)]*\))?\s*:\s*)+", re.IGNORECASE)
"""An `Error (code):` the model wrote itself at the start of an error's message (simia writes its own)."""

TASK_PROMPTS = 1024
"""System prompts of tasks with a reference kept built (one per task; a world of seeds may have thousands)."""
MAX_ARGUMENT_DEPTH = 32
"""Arguments nested deeper than this (objects and arrays) are refused before any model call."""
_SHOWN_NAME = 64  # characters of an unknown tool's name that are repeated back and recorded


def check_call(world: World, call: ToolCall, *, max_argument_bytes: int = 32_768) -> tuple[ToolSpec | None, str | None]:
    """Check a call before any model sees it.

    Returns:
        (the tool, None) when the call is valid, else (tool or None, a message for the agent).
    """
    tool = world.tool(call.tool, call.side)
    if tool is None:
        names = ", ".join(t.name for t in (world.user_tools if call.side == "user" else world.tools)) or "none"
        whose = "the user's tools" if call.side == "user" else "Available tools"
        return None, f"Unknown tool {shown_name(call.tool)!r}. {whose.capitalize()}: {names}."
    if _too_deep(call.arguments, MAX_ARGUMENT_DEPTH):
        return tool, f"Arguments are nested too deeply (the limit is {MAX_ARGUMENT_DEPTH} levels)."
    try:
        size = len(call.arguments_json.encode())
    except ValueError:  # a lone surrogate (valid as a JSON escape, not as Unicode text)
        return tool, "Arguments must be valid Unicode text (a string holds an unpaired surrogate)."
    if size > max_argument_bytes:
        return tool, f"Arguments are too large ({size} bytes; the limit is {max_argument_bytes})."
    where = non_finite_path(call.arguments)
    if where is not None:
        return tool, f"Arguments hold NaN or Infinity at {where}, which JSON does not have: send a number or a string."
    problems = validate_instance(tool.input_schema, call.arguments, formats=True)
    if problems:
        return tool, f"Invalid arguments for {tool.name}: " + "; ".join(problems[:5])
    return tool, None


class Simulator:
    """Simulates tool calls with a model backend.

    Args:
        backend: the model that plays the environment.
        cache: where seeded answers are cached (and recorded for `replay:`); None disables caching.
        max_attempts: answers tried per call before failing as infra (the first included).
        max_tokens: cap on each answer.
        temperature: sampling temperature of the simulator.
        max_argument_bytes: arguments above this size are refused before any model call.
        indexes: where the indexes of the states it slices are kept (one per base state, built off the event
            loop on first need); a new one by default.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        cache: ResponseCache | None = None,
        max_attempts: int = 3,
        max_tokens: int = 1024,
        temperature: float = 0.3,
        max_argument_bytes: int = 32_768,
        indexes: StateIndexes | None = None,
    ) -> None:
        self.backend = backend
        self.cache = cache
        self.max_attempts = max_attempts
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.max_argument_bytes = max_argument_bytes
        self._system: dict[str, str] = {}  # world hash -> its system prompt
        # (world hash, task id) -> the system prompt of a task with a reference, the most recently used kept
        self._task_system: OrderedDict[tuple[str, str], tuple[str, str]] = OrderedDict()
        # (world hash, tool, the state's top-level members) -> the answer schema
        self._schemas: dict[tuple[str, str, tuple[str, ...] | None], dict[str, Any]] = {}
        self.indexes = indexes if indexes is not None else StateIndexes()

    def build_messages(
        self,
        world: World,
        state: dict[str, Any],
        window: Sequence[PastCall],
        call: ToolCall,
        *,
        task: Task | None = None,
    ) -> list[dict[str, Any]]:
        """The prompt for `call`: the world's stable system message (the task's, when it names a reference), then
        window, state and call. (Indexes a state whose base it has not seen here, on the calling thread: `step`
        does that in a worker thread.)"""
        current = _current(world, state)
        indexed = self.indexes.index_of(current)
        view = state_view(indexed, call.arguments, world.simulator.max_state_chars)
        tool = world.tool(call.tool, call.side)
        plan = plan_call(world, tool, current, call.arguments) if tool is not None and tool.grounding else None
        messages, _ = self._messages(world, task, window, call, view, plan if isinstance(plan, Plan) else None)
        return messages

    def _system_prompt(self, world: World, task: Task | None) -> str:
        """The system message of `world`'s calls, built once per world; or of `task`'s episodes when it names a
        reference (`_task_prompt`)."""
        if task is None or task.reference is None:
            system = self._system.get(world.content_hash)
            if system is None:
                system = self._system[world.content_hash] = system_prompt(world)
            return system
        return self._task_prompt(world, task)[0]

    def _own_prompt(self, world: World, task: Task | None) -> str | None:
        """The hash of `task`'s own system message when it names a reference, else None (the world's is used)."""
        return None if task is None or task.reference is None else self._task_prompt(world, task)[1]

    def _task_prompt(self, world: World, task: Task) -> tuple[str, str]:
        """(the system message, a hash of it) of the episodes of `task`, which names a reference: built once per
        (world, task), kept for the `TASK_PROMPTS` most recently used tasks."""
        key = (world.content_hash, task.id)
        found = self._task_system.get(key)
        if found is None:
            system = system_prompt(world, reference=task.reference)
            found = self._task_system[key] = (system, hashlib.sha256(system.encode()).hexdigest())
            if len(self._task_system) > TASK_PROMPTS:
                self._task_system.popitem(last=False)
        else:
            self._task_system.move_to_end(key)
        return found

    def _messages(
        self,
        world: World,
        task: Task | None,
        window: Sequence[PastCall],
        call: ToolCall,
        view: StateView,
        plan: Plan | None = None,
    ) -> tuple[list[dict[str, Any]], UserMessage]:
        """The request's messages, and its user message with where its reusable parts end."""
        system = self._system_prompt(world, task)
        recent = list(window)[-world.simulator.window :] if world.simulator.window else []
        user = user_prompt(call.tool, call.arguments_json, view.text, recent)
        text = user.text if plan is None else f"{user.text}\n\n{facts(plan)}"
        return [{"role": "system", "content": system}, {"role": "user", "content": text}], user

    async def step(
        self,
        world: World,
        state: dict[str, Any],
        window: Sequence[PastCall],
        call: ToolCall,
        *,
        seed: int | None = None,
        max_argument_bytes: int | None = None,
        task: Task | None = None,
    ) -> Step:
        """Simulate one call. Never raises for agent mistakes, backend failures or a failure simia did not foresee
        (`internal_error`, infra): they are data in the Step, so the call is recorded and its reward masked.

        Args:
            seed: makes the call cacheable and replayable (same seed, state and call -> same answer).
            max_argument_bytes: overrides the simulator's own limit for this call.
            task: the episode's task; when it names a `reference`, the simulator follows that conversation
                instead of the world's examples (Simia-RL).
        """
        limit = self.max_argument_bytes if max_argument_bytes is None else max_argument_bytes
        tool, problem = check_call(world, call, max_argument_bytes=limit)
        if problem is not None or tool is None:
            code = "unknown_tool" if tool is None else "invalid_arguments"
            return _agent_error(_recordable(call, limit), state, code, problem or "")
        start = time.monotonic()
        try:
            step = await self._step(world, task, tool, state, window, call, seed, start)
            return _triggered(world, state, step, call, start) if world.triggers and not step.is_error else step
        except Exception as exc:  # a bug here or in a library: a recorded infra failure, never a lost call
            log.exception("simulating %s failed", call.tool)
            detail = f"{type(exc).__name__}: {exc}"[:2000]
            return _infra(call, state, "internal_error", INTERNAL_TEXT, Usage(), start, 0, detail=detail)

    async def _step(
        self,
        world: World,
        task: Task | None,
        tool: ToolSpec,
        state: dict[str, Any],
        window: Sequence[PastCall],
        call: ToolCall,
        seed: int | None,
        start: float,
    ) -> Step:
        """`step` for a call whose tool and arguments were checked."""
        current = _current(world, state)
        plan: Plan | None = None
        if tool.grounding is not None:
            decided = plan_call(world, tool, current, call.arguments, seed=seed)
            if not isinstance(decided, Plan) or decided.exact:  # the state decides: no model, nothing cached
                return _from_state(decided, call, state, start, ascii=world.simulator.ascii_json)
            plan = decided
        view = state_view(await self.indexes.aindex_of(current), call.arguments, world.simulator.max_state_chars)
        if view.named_chars > world.simulator.max_named_chars:
            return _too_large(world, call, state, view, start)
        keys = self._cache_keys(world, task, tool, current, call, seed)
        if keys is not None and self.cache is not None:
            hit = await self.cache.get(keys[0])
            result = self._check(world, tool, state, current, hit, plan) if hit is not None else None
            if isinstance(result, Step):
                return _finish(result, call, Usage(), start, 0, cached=True, model=self.backend.model)
        return await self._simulate(world, task, tool, state, current, window, call, view, seed, keys, start, plan)

    def _answer_schema(self, world: World, tool: ToolSpec, state: State) -> dict[str, Any]:
        """The answer schema of `tool` on a state with `state`'s top-level members, built once per world, tool
        and members (they rarely change), not on every call."""
        roots = tuple(state) if len(state) <= MAX_ROOTS else None
        key = (world.content_hash, tool.name, roots)
        schema = self._schemas.get(key)
        if schema is None:
            if len(self._schemas) > 4096:
                self._schemas.clear()
            schema = self._schemas[key] = answer_schema(world, tool, roots)
        return schema

    def _cache_keys(
        self, world: World, task: Task | None, tool: ToolSpec, state: State, call: ToolCall, seed: int | None
    ) -> tuple[str, str] | None:
        """(this backend's cache key, the replay key any backend may serve) of a seeded call; None unseeded.
        The state enters by its digest (O(1): a patched state's digest chains its patches' hashes); a task's
        reference by its hash (its prompt differs from the world's)."""
        if seed is None:
            return None
        digest = state.digest
        own = self._own_prompt(world, task)
        prompt = world.content_hash if own is None else own
        key, replay_key = (
            cache_key(
                world_hash=prompt,
                tool=tool.name,
                arguments=call.arguments,
                state_hash=digest,
                backend=backend,
                prompt_version=PROMPT_VERSION,
                seed=seed,
            )
            for backend in (self.backend.spec, "*")
        )
        return key, replay_key

    async def _simulate(
        self,
        world: World,
        task: Task | None,
        tool: ToolSpec,
        state: dict[str, Any],
        current: State,
        window: Sequence[PastCall],
        call: ToolCall,
        view: StateView,
        seed: int | None,
        keys: tuple[str, str] | None,
        start: float,
        plan: Plan | None,
    ) -> Step:
        """Ask the model, feeding each invalid answer's problem back, up to `max_attempts` times."""
        schema = self._answer_schema(world, tool, current)
        messages, user = self._messages(world, task, window, call, view, plan)
        usage = Usage()
        last_problem = ""
        for attempt in range(1, self.max_attempts + 1):
            request = CompletionRequest(
                messages=messages,
                schema=schema,
                schema_name="simulate_tool_call",
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                seed=None if seed is None else seed + attempt - 1,
                key=keys[1] if keys is not None else None,
                cache_key=_prompt_cache_key(world, self._own_prompt(world, task)),
                cache_breaks=user.stable,
            )
            try:
                completion = await self.backend.complete(request)
            except BackendOutputError as exc:
                last_problem = str(exc)
                retry = "your answer was not a complete JSON object; answer with one short JSON object."
                messages = [*messages, {"role": "user", "content": _feedback(retry)}]
                continue
            except Exception as exc:  # BackendError, or a backend bug: a recorded infra failure, never a lost call
                return self._backend_failed(exc, call, state, usage, start, attempt)
            usage = usage + completion.usage
            result = self._check(world, tool, state, current, completion.data, plan)
            if isinstance(result, Step):
                if keys is not None and self.cache is not None:
                    await self.cache.put(keys[0], keys[1], completion.data, completion.model)
                return _finish(result, call, usage, start, attempt, cached=False, model=completion.model)
            last_problem = result
            messages = [
                *messages,
                {"role": "assistant", "content": completion.text},
                {"role": "user", "content": _feedback(result)},
            ]
        return _infra(
            call,
            state,
            "invalid_simulation",
            "The tool failed to produce a valid result. Try again.",
            usage,
            start,
            self.max_attempts,
            detail=f"simulator output invalid after {self.max_attempts} attempts: {last_problem}",
        )

    def _backend_failed(
        self, exc: Exception, call: ToolCall, state: dict[str, Any], usage: Usage, start: float, attempt: int
    ) -> Step:
        """The infra Step of a backend that raised: its kind for the agent, the whole error for the developer."""
        if isinstance(exc, BackendError):
            message, detail = f"The tool is temporarily unavailable ({_kind(exc)}).", str(exc)
        else:
            log.exception("backend %s failed unexpectedly", self.backend.spec, exc_info=exc)
            message = "The tool is temporarily unavailable (backend error)."
            detail = f"unexpected {type(exc).__name__} in {self.backend.spec}: {exc}"
        return _infra(call, state, "backend_error", message, usage, start, attempt, detail=detail)

    def _check(
        self,
        world: World,
        tool: ToolSpec,
        state: dict[str, Any],
        current: State,
        data: dict[str, Any],
        plan: Plan | None = None,
    ) -> Step | str:
        """Validate an answer (against the declared parts of a guided call too); returns the Step (its state:
        `state` itself when unchanged, else `current` patched), or the problem to feed back."""
        problem = _envelope_problem(world, tool, data)
        if problem:
            return "the answer does not match the answer schema: " + problem
        is_error = bool(data["is_error"])
        patch: list[dict[str, Any]] = data.get("state_patch") or []
        if is_error:
            # Errors never change the state: a patch that came with one is dropped, not applied.
            code = data["error_code"]  # checked: one of the tool's codes
            problem = contradiction(plan, is_error=True, code=code, output=None, patch=[]) if plan else ""
            if problem:
                return problem
            message = _ERROR_PREFIX.sub("", str(data.get("message") or "")).strip() or code.replace("_", " ")
            return Step(
                tool.name,
                {},
                None,
                f"Error ({code}): {message}",
                True,
                state,
                error_code=code,
                error_kind="agent",
            )
        if tool.annotations and tool.annotations.get("readOnlyHint") is True:
            patch = []  # a read-only tool never changes the state, whatever the model proposed
        output = data.get("output")
        if not isinstance(output, dict):
            return "output must be a JSON object when is_error is false"
        if tool.output_schema:
            problems = validate_instance(tool.output_schema, output)
            if problems:
                return "output breaks the tool's outputSchema: " + "; ".join(problems[:3])
        if plan is not None:
            problem = contradiction(plan, is_error=False, code=None, output=output, patch=patch)
            if problem:
                return problem
            patch = merged_patch(plan, patch)
        try:
            new_state = apply_patch(current, patch, world.state_schema) if patch else state
        except StateError as exc:
            return str(exc)
        text = result_text(output, ascii=world.simulator.ascii_json)
        return Step(tool.name, {}, output, text, False, new_state, state_patch=patch)


_OPS = {"add", "remove", "replace", "move", "copy", "test"}


_MEMBERS = ("is_error", "error_code", "message", "output", "state_patch")


def _envelope_problem(world: World, tool: ToolSpec, data: dict[str, Any]) -> str:
    """Check the answer's envelope (everything but `output`, which is checked against the tool's schema).

    A success needs `is_error: false` and `output`, and `state_patch` when it changes the state; an error needs
    `is_error: true` and `error_code`, and may say a `message`. The members an outcome does not need may be
    written as null (a code, an output), "" (a message) or [] (a patch): the full envelope of earlier prompts."""
    extra = sorted(set(data) - set(_MEMBERS))
    if extra:
        return f"$: unexpected field(s) {', '.join(repr(k) for k in extra)}"
    if "is_error" not in data:
        return "$: missing 'is_error'"
    if not isinstance(data["is_error"], bool):
        return "$.is_error: must be true or false"
    code = data.get("error_code")
    if code is not None and not isinstance(code, str):
        return "$.error_code: must be a string or null"
    if data["is_error"]:
        codes = [e.code for e in world.error_codes(tool)]
        if code not in codes:
            what = "is missing" if code is None else f"{code!r} is not a code of this tool"
            return f"$.error_code: {what}: an error needs one of {codes}"
    elif "output" not in data:
        return "$: missing 'output' (a success answers with the tool's result)"
    if not isinstance(data.get("message", ""), str):
        return "$.message: must be a string"
    if data.get("output") is not None and not isinstance(data["output"], dict):
        return "$.output: must be an object or null"
    patch = data.get("state_patch", [])
    if not isinstance(patch, list):
        return "$.state_patch: must be a list of RFC 6902 operations"
    for i, op in enumerate(patch):
        if not isinstance(op, dict) or op.get("op") not in _OPS or not isinstance(op.get("path"), str):
            return f"$.state_patch[{i}]: each operation needs 'op' (add, remove, replace, ...) and a string 'path'"
    return ""


def _current(world: World, state: dict[str, Any]) -> State:
    """`state` as a `State`: O(1) for a State or the world's own initial state, O(its size) for another dict."""
    return world.base_state if state is world.initial_state else as_state(state)


def _too_large(world: World, call: ToolCall, state: dict[str, Any], view: StateView, start: float) -> Step:
    """The infra Step of a call whose named records alone are over `simulator.max_named_chars`."""
    limit = world.simulator.max_named_chars
    named = sorted(view.named, key=lambda record: -record.chars)
    listed = ", ".join(map(str, named[:8])) + (f" and {len(named) - 8} more" if len(named) > 8 else "")
    where = f"{world.source}/world.yaml" if world.source else f"the world.yaml of world {world.name!r}"
    detail = (
        f"the records this call names take {view.named_chars:,} characters ({listed}), over the limit of "
        f"{limit:,} the simulator may be shown (simulator.max_named_chars); raise simulator.max_named_chars in "
        f"{where} to simulate such calls"
    )
    text = "The tool cannot answer this call: the records it names are too large to process."
    return _infra(call, state, "state_too_large", text, Usage(), start, 0, detail=detail)


def _prompt_cache_key(world: World, task_prompt: str | None = None) -> str:
    """The provider prompt-cache key of `world`'s calls: all its episodes share the system block's prefix; the
    episodes of a task with a reference share theirs (`task_prompt`: its hash)."""
    if task_prompt is None:
        return f"simia-{world.content_hash[:16]}-{PROMPT_VERSION}"
    return f"simia-{world.content_hash[:16]}-{task_prompt[:12]}-{PROMPT_VERSION}"


def _from_state(
    decided: Plan | Refused | Broken, call: ToolCall, state: dict[str, Any], start: float, *, ascii: bool = False
) -> Step:
    """The Step of a call the state decided: an exact answer, its declared error, or a declaration that failed."""
    latency = (time.monotonic() - start) * 1000
    if isinstance(decided, Broken):
        text = "The tool failed to produce a valid result. Try again."
        step = _infra(call, state, "invalid_simulation", text, Usage(), start, 0, detail=decided.detail)
        return replace(step, source="state")
    if isinstance(decided, Refused):
        return Step(
            call.tool,
            call.arguments,
            None,
            decided.text,
            True,
            decided.state if decided.effects and decided.state is not None else state,
            state_patch=decided.effects,
            error_code=decided.code,
            error_kind="agent",
            latency_ms=latency,
            detail=decided.detail,
            source="state",
        )
    output = decided.output if decided.output is not None else {}
    new_state = decided.state if decided.effects else state
    return Step(
        call.tool,
        call.arguments,
        output,
        result_text(output, ascii=ascii),
        False,
        new_state,
        state_patch=decided.effects,
        latency_ms=latency,
        source="state",
    )


def _triggered(world: World, state: dict[str, Any], step: Step, call: ToolCall, start: float) -> Step:
    """`step` with the world's triggers kept after it (in its patch and its state), or, when a trigger fails, an
    infra failure that changes nothing."""
    before = _current(world, state)
    after = before if step.state is state else _current(world, step.state)
    try:
        kept, ops = keep_triggers(world, before, after)
    except ExpressionError as exc:
        text = "The tool failed to produce a valid result. Try again."
        return _infra(call, state, "invalid_simulation", text, step.usage, start, step.attempts, detail=str(exc))
    return replace(step, state=kept, state_patch=[*step.state_patch, *ops]) if ops else step


def _feedback(problem: str) -> str:
    return f"Your answer was invalid: {problem}\nAnswer again with corrected JSON."


def _kind(exc: BackendError) -> str:
    return {"BackendTimeout": "timeout", "BackendUnavailable": "backend unavailable"}.get(
        type(exc).__name__, "backend error"
    )


def _finish(step: Step, call: ToolCall, usage: Usage, start: float, attempts: int, *, cached: bool, model: str) -> Step:
    return Step(
        tool=step.tool,
        arguments=call.arguments,
        output=step.output,
        text=step.text,
        is_error=step.is_error,
        state=step.state,
        state_patch=step.state_patch,
        error_code=step.error_code,
        error_kind=step.error_kind,
        usage=usage,
        latency_ms=(time.monotonic() - start) * 1000,
        attempts=attempts,
        cached=cached,
        model=model,
        detail=step.detail,
    )


INTERNAL_TEXT = "Internal error in the tool simulator. Try again."
"""What the agent reads of a failure simia did not foresee (the developer's detail is in the event and the log)."""


def _infra(
    call: ToolCall,
    state: dict[str, Any],
    code: str,
    text: str,
    usage: Usage,
    start: float,
    attempts: int,
    *,
    detail: str,
) -> Step:
    return Step(
        call.tool,
        call.arguments,
        None,
        text,
        True,
        state,
        error_code=code,
        error_kind="infra",
        usage=usage,
        latency_ms=(time.monotonic() - start) * 1000,
        attempts=attempts,
        model="",
        detail=detail,
    )
