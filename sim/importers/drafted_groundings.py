"""Groundings a model drafts for a world's undeclared tools, each kept only if it runs on the drafted state and
answers as the tool did where its calls were recorded.

`simia bootstrap` asks once for the tools that declare no grounding (a REST import declares its resources'
own): the tools whose answer follows from the state get a read, preconditions and effects, as world.yaml
would hold them, written out as templates or computed in JSONata (`let`, `expr`). A proposal is kept only when
it is a valid `Grounding`, passes the checks `simia validate` makes (`check_grounding`: its templates name the
tool's arguments, its pointers resolve, its codes are the tool's) and runs on the drafted state: called with ids
taken from the state where its pointers put an argument, it plans without the world's fault (`Broken`), and its
read's pointer finds a value. Where a database holds recorded calls of the tool (`read_recordings`: a real
server's answers, `source: real`, or a declaration's, `source: state`), it must also answer each of them as
recorded, replayed on the state before it (`disagreement`); a tool with none is checked as above only. A
rejected proposal's problems are fed back, then it is dropped with them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..engine.grounded import Broken, Plan, Refused, plan_call
from ..errors import StateError
from ..judging import json_equal
from ..records import REFUSED_ARGUMENTS, EventRecord, result_text
from ..schema import validate_instance
from ..storage import Store
from ..world import (
    Effect,
    Grounding,
    State,
    ToolSpec,
    World,
    apply_patch,
    as_state,
    compact_json,
    fill_pointer,
    grounding_issues,
    is_missing,
    resolve_pointer,
    state_diff,
    template_names,
    world_card,
)

__all__ = [
    "ANSWER",
    "DraftedGroundings",
    "Recording",
    "disagreement",
    "draft_groundings",
    "grounding_problems",
    "read_recordings",
]

GROUNDING: dict[str, Any] = {
    "type": "object",
    "properties": {
        "let": {"type": "object", "additionalProperties": {"type": "string"}},
        "preconditions": {"type": "array", "items": {"type": "object"}},
        "effects": {"type": "array", "items": {"type": "object"}},
        "read": {"type": "object"},
        "mode": {"enum": ["exact", "guided"]},
    },
}
ANSWER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "groundings": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"tool": {"type": "string"}, "grounding": GROUNDING},
                "required": ["tool", "grounding"],
            },
        }
    },
    "required": ["groundings"],
}
FORMAT = """\
A grounding is data (no code); `{name}` in a pointer or value is the tool's argument `name`:
- "read": {"pointer": "/orders/{order_id}", "missing": "<error code when nothing is there>"} answers with the value
  at that JSON Pointer; or {"jsonpath": "$.orders[?@.user_id == {user_id}]"} with the list of matches. "key":
  "orders" wraps the value as {"orders": value}; "fields": ["id", "name"] keeps only those members.
- "preconditions": [{"pointer": "/orders/{order_id}/status", "equals": "pending", "error": "<code>"}] (or
  "exists": true|false, or "schema": {...}) checked first; a failed one answers its error code.
- "effects": [{"op": "replace", "path": "/orders/{order_id}/status", "value": "cancelled"}] (RFC 6902) applied
  to the state.
- "mode": "exact" (the read is the whole answer, no model) or "guided" (a model writes the answer around the
  declared parts).
Where a template cannot say it, compute in JSONata: "let" names values ($order below); a precondition
{"expr": ..., "error": ..., "message": <an expression giving the error's text>}; an effect {"expr": ...} gives an
RFC 6902 operation or a list of them (build paths with $pointer(token, ...)); a read {"expr": ...} gives the
output. $args are the arguments, $state the state ($before in a read: the state before the effects). E.g.
{"let": {"order": "$lookup($state.orders, $args.order_id)"},
 "preconditions": [{"expr": "$exists($order)", "error": "order_not_found"},
  {"expr": "$order.status in ['pending', 'processing']", "error": "not_cancellable",
   "message": "'Error: a ' & $order.status & ' order cannot be cancelled'"}],
 "effects": [{"op": "replace", "path": "/orders/{order_id}/status", "value": "cancelled"},
  {"expr": "$order.items.{'op': 'add', 'path': $pointer('refunds', '-'), 'value': {'item_id': item_id}}"}],
 "read": {"expr": "{'order_id': $args.order_id, 'refund': $sum($order.items.price)}"}}"""

Ask = Callable[[list[dict[str, Any]]], Awaitable[dict[str, Any] | None]]
"""One model request (its messages) answered under `ANSWER`, or None when the model gave no usable answer."""

RECORDED_SOURCES = ("real", "state")
"""The events a drafted grounding must reproduce: a real server's answers and a declaration's (a model's are not
the tool's answers)."""
MAX_RECORDINGS = 100
"""Recorded calls read per tool (the newest episodes' first): each is replayed against every proposal."""
MAX_EPISODES = 2000
"""Episodes read at most for them, the newest first (a database of training runs holds many more)."""


@dataclass(frozen=True)
class Recording:
    """A recorded call of a tool, with the state before it: an answer a drafted grounding must reproduce.

    Attributes:
        episode, seq: where it is recorded (the event's episode and step).
        state: the episode's state before the call (`Store.state_at`).
        seed: the call's seed, as the server derived it from the episode's (ids `$newid` draws depend on it).
        source: `real` (the world's real server answered) or `state` (a declaration answered).
        patch: the state patch it made, where the state records one (a declaration's); None for a real server's
            answer, which changes no simulated state.
    """

    episode: str
    seq: int
    tool: str
    arguments: dict[str, Any]
    state: State
    seed: int | None
    source: str
    is_error: bool
    error_code: str | None
    output: Any
    text: str
    patch: list[dict[str, Any]] | None

    def answer(self) -> dict[str, Any]:
        """The recorded answer, as the report shows it."""
        if self.is_error:
            return {"error_code": self.error_code, "text": self.text}
        out: dict[str, Any] = {"output": self.output if self.output is not None else self.text}
        return out if self.patch is None else {**out, "state_patch": self.patch}


@dataclass
class DraftedGroundings:
    """What `draft_groundings` kept and dropped.

    Attributes:
        kept: each kept tool's grounding, as world.yaml holds it.
        dropped: the tools whose every proposal failed, each `{tool, problems}` (the last proposal's).
        rejected: each proposal that ran but answered a recorded call otherwise (`disagreement`), in the order
            they were drafted, with the proposal (`grounding`) and the attempt that drafted it.
        reproduced: each kept tool's number of recorded calls it answered as recorded (0: none were recorded, so
            it was checked on the drafted state only).
    """

    kept: dict[str, dict[str, Any]] = field(default_factory=dict)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    reproduced: dict[str, int] = field(default_factory=dict)


async def draft_groundings(
    world: World,
    state: dict[str, Any],
    ask: Ask,
    attempts: int,
    recorded: Mapping[str, Sequence[Recording]] | None = None,
) -> DraftedGroundings:
    """Draft, check and keep a grounding for each tool of `world` that declares none.

    Args:
        state: the world's (drafted) initial state, which a proposal must run on.
        ask: the model.
        attempts: proposals asked for in all (each next one told the previous one's problems).
        recorded: each tool's recorded calls (`read_recordings`), which its proposal must answer as recorded.
    """
    recorded = recorded or {}
    names = [tool.name for tool in world.tools if tool.grounding is None]
    drafted = DraftedGroundings()
    if not names or not state:
        return drafted
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You declare how simulated tools' answers follow from their state. Answer JSON."},
        {
            "role": "user",
            "content": f"{world_card(world)}\n\n# State\n{json.dumps(state, ensure_ascii=False)[:6000]}\n\n"
            f"{_recorded_examples(recorded, names)}# Your task\n{FORMAT}\n\nFor each of these tools whose answer "
            f"follows from the state alone, write its grounding: {', '.join(names)}. Leave out tools whose answers "
            "need judgment (ranking, free text, effects nobody wrote down). "
            'Answer {"groundings": [{"tool": name, "grounding": {...}}]}.',
        },
    ]
    failed: dict[str, list[str]] = {}
    for attempt in range(1, attempts + 1):
        data = await ask(messages)
        problems: list[str] = [] if data is not None else ["the model gave no usable answer: answer the JSON asked"]
        for item in (data or {}).get("groundings") or []:
            name = item.get("tool") if isinstance(item, dict) else None
            if name not in names or name in drafted.kept:
                problems.append(f"{name!r} is not one of the tools to declare ({', '.join(names)})")
                continue
            tool, raw = world.tools_by_name[name], item.get("grounding")
            found = grounding_problems(world, tool, raw, state)
            calls = recorded.get(name, ())
            if not found and calls:
                differs = disagreement(world, tool, Grounding.model_validate(raw), calls)
                if differs is not None:
                    drafted.rejected.append({**differs, "attempt": attempt, "grounding": raw})
                    found = [differs["problem"]]
            if found:
                failed[name] = found
                problems += [f"tool {name!r}: {p}" for p in found]
            else:
                drafted.kept[name] = raw
                drafted.reproduced[name] = len(calls)
                failed.pop(name, None)
        if not problems:
            break
        messages = [  # a new list: each request keeps the messages it was sent
            *messages,
            {"role": "assistant", "content": json.dumps(data)},
            {"role": "user", "content": "Fix these problems and answer again:\n- " + "\n- ".join(problems[:10])},
        ]
    drafted.dropped = [{"tool": name, "problems": found} for name, found in failed.items()]
    return drafted


def _recorded_examples(recorded: Mapping[str, Sequence[Recording]], names: list[str]) -> str:
    """A prompt section showing a couple of each tool's recorded answers (what its grounding must reproduce)."""
    lines = [
        f"- {call.tool} {_short(call.arguments, 200)} -> {_short(call.answer(), 300)}"
        for name in names
        for call in recorded.get(name, ())[:2]
    ]
    if not lines:
        return ""
    return (
        "# Recorded answers\nA grounding must answer these calls as recorded (each on the state at its time):\n"
        + "\n".join(lines)
        + "\n\n"
    )


def grounding_problems(world: World, tool: ToolSpec, raw: Any, state: dict[str, Any]) -> list[str]:
    """Why `raw` cannot be `tool`'s grounding in `world` with this initial `state` (empty when it can)."""
    try:
        grounding = Grounding.model_validate(raw)
    except ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc'])) or 'grounding'}: {e['msg']}" for e in exc.errors()[:3]]
    declared = tool.model_copy(update={"grounding": grounding})
    issues = grounding_issues(declared, state, [e.code for e in world.error_codes(declared)])
    if issues:
        return [f"{i.path}: {i.message}" + (f" ({i.hint})" if i.hint else "") for i in issues[:3]]
    tools = [declared if t.name == tool.name else t for t in world.tools]
    trial = world.model_copy(update={"tools": tools, "initial_state": state})
    arguments = witness(declared, grounding, state)
    planned = plan_call(trial, declared, as_state(state), arguments)
    if isinstance(planned, Broken):
        return [f"called with {compact_json(arguments)} on the drafted state it fails: {planned.detail}"]
    read = grounding.read.pointer if grounding.read else None
    pointer = fill_pointer(read, arguments) if read else None
    after = planned.state if isinstance(planned, Plan) else state  # a refused call changed nothing
    if pointer is not None and is_missing(resolve_pointer(after, pointer)):
        return [
            f"called with {compact_json(arguments)} (ids from the drafted state) its read finds nothing at {pointer}"
        ]
    return []


def witness(tool: ToolSpec, grounding: Grounding, state: dict[str, Any]) -> dict[str, Any]:
    """Arguments that point at records of `state`: where a pointer's token is `{name}`, the first key (or index)
    of what the state holds there; any other argument a template names gets an example value (`_example`)."""
    pointers = [c.pointer for c in grounding.preconditions if c.pointer is not None]
    pointers += [e.path for e in grounding.effects if isinstance(e, Effect)]
    if grounding.read and grounding.read.pointer:
        pointers.insert(0, grounding.read.pointer)
    arguments: dict[str, Any] = {}
    for template in pointers:
        node: Any = state
        for token in template.split("/")[1:]:
            name = token[1:-1] if token.startswith("{") and token.endswith("}") else None
            if name is not None and name not in arguments:
                keys = _keys(node)
                if not keys:
                    break
                arguments[name] = _typed(tool, name, keys[0])
            node = _child(node, str(arguments[name]) if name is not None else _unescaped(token))
    values = [e.value for e in grounding.effects if isinstance(e, Effect)]
    named = [*pointers, *values, grounding.read.jsonpath if grounding.read else None]
    properties = tool.input_schema.get("properties") or {}
    for name in template_names(named):
        schema = properties.get(name)
        if name not in arguments:
            arguments[name] = _example(schema if isinstance(schema, dict) else {})
    return arguments


def _keys(node: Any) -> list[str]:
    if isinstance(node, dict):
        return list(node)
    return [str(i) for i in range(len(node))] if isinstance(node, list) else []


def _child(node: Any, key: str) -> Any:
    if isinstance(node, dict):
        return node.get(key)
    if isinstance(node, list) and key.isdigit() and int(key) < len(node):
        return node[int(key)]
    return None


def _unescaped(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


_OF_TYPE: dict[str, Any] = {"integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}, "null": None}


def _example(schema: dict[str, Any]) -> Any:
    """An argument's default, first example or first enum value, else a value of its type ("example" for a
    string or an untyped one; its `minimum` for a number that has one)."""
    candidates = [schema.get("default"), *(schema.get("examples") or [])[:1], *(schema.get("enum") or [])[:1]]
    given = next((value for value in candidates if value is not None), None)
    if given is not None:
        return given
    kind = schema.get("type")
    if kind in ("integer", "number") and isinstance(schema.get("minimum"), int | float):
        return schema["minimum"]
    return _OF_TYPE.get(kind, "example") if isinstance(kind, str) else "example"


def _typed(tool: ToolSpec, name: str, key: str) -> Any:
    """A state key as the argument `name` takes it (an integer id from a key "3")."""
    schema = (tool.input_schema.get("properties") or {}).get(name)
    kind = schema.get("type") if isinstance(schema, dict) else None
    return int(key) if kind == "integer" and key.lstrip("-").isdigit() else key


async def read_recordings(
    store: Store,
    world: World,
    names: Collection[str],
    *,
    per_tool: int = MAX_RECORDINGS,
    max_episodes: int = MAX_EPISODES,
) -> dict[str, list[Recording]]:
    """The recorded calls of the tools `names` in `store`'s episodes of `world` (by name, any version), at most
    `per_tool` each, from the newest `max_episodes` episodes, newest first.

    A call counts when a real server or a declaration answered it (`RECORDED_SOURCES`), with arguments the tool's
    inputSchema accepts, no fault injected and no failure of the simulation's own (an infra error). A real
    server's answer counts only while the episode's simulated state may still hold what the server holds
    (`_in_sync`). A tool with none is left out.
    """
    found: dict[str, list[Recording]] = {name: [] for name in names if name in world.tools_by_name}
    offset, page = 0, 200
    while offset < max_episodes and any(len(calls) < per_tool for calls in found.values()):
        limit = min(page, max_episodes - offset)
        episodes = await store.list_episodes(world=world.name, limit=limit, offset=offset, newest_first=True)
        for episode in episodes:
            in_sync = not episode.fork_step  # a fork's real session is new: it lacks what the parent's calls wrote
            for event in await store.events(episode.id):
                calls = found.get(event.tool)
                tool = world.tools_by_name.get(event.tool)
                counts = calls is not None and tool is not None and _replayable(event, tool)
                counts = counts and (in_sync or event.source != "real")
                in_sync = in_sync and _in_sync(event, tool)
                if calls is None or len(calls) >= per_tool or not counts:
                    continue
                before = await store.state_at(episode.id, event.seq - 1)
                # the seed the server gave the call (simia.server.calls): the episode's, stepped by its seq before it
                seed = None if episode.seed is None else episode.seed * 100_003 + event.seq - 1
                calls.append(_recording(episode.id, event, before, seed))
        if len(episodes) < limit:
            break
        offset += limit
    return {name: calls for name, calls in found.items() if calls}


def _in_sync(event: EventRecord, tool: ToolSpec | None) -> bool:
    """Whether the simulated state may still hold what the real server holds after `event`: not after a change of
    the simulated state (the real server never sees it), nor after a real call that may have written (a tool not
    annotated `readOnlyHint`), which changes no simulated state."""
    if event.state_patch:
        return False
    read_only = tool is not None and (tool.annotations or {}).get("readOnlyHint") is True
    return event.source != "real" or event.is_error or read_only


def _replayable(event: EventRecord, tool: ToolSpec) -> bool:
    """Whether a recorded event is the tool's own answer to a call its declaration would be given."""
    return (
        event.source in RECORDED_SOURCES
        and event.injected is None
        and event.counts_as_call
        and event.error_kind != "infra"
        and REFUSED_ARGUMENTS not in event.arguments
        and not validate_instance(tool.input_schema, event.arguments)  # refused before any declaration runs
    )


def _recording(episode: str, event: EventRecord, before: State, seed: int | None) -> Recording:
    return Recording(
        episode=episode,
        seq=event.seq,
        tool=event.tool,
        arguments=event.arguments,
        state=before,
        seed=seed,
        source=event.source,
        is_error=event.is_error,
        error_code=event.error_code,
        output=event.output,
        text=event.text,
        patch=event.state_patch if event.source == "state" else None,
    )


def disagreement(
    world: World, tool: ToolSpec, grounding: Grounding, calls: Sequence[Recording]
) -> dict[str, Any] | None:
    """The first recorded call `grounding` (as `tool`'s) answers otherwise than recorded, or None when it answers
    each as recorded: `{tool, arguments, episode, seq, source, recorded, drafted, why, problem}` (`problem`: the
    whole in one line, as the model is told it).

    An exact grounding must give the recorded outcome (an error with the recorded code, when the record has one),
    output and, for a recorded patch, the same state after; a guided one (a model writes the answer around its
    declared parts) must give the recorded outcome where the state decides it, the output members it declares, and
    set what the recorded patch set where its effects write.
    """
    declared = tool.model_copy(update={"grounding": grounding})
    trial = world.model_copy(update={"tools": [declared if t.name == tool.name else t for t in world.tools]})
    for call in calls:
        planned = plan_call(trial, declared, call.state, call.arguments, seed=call.seed)
        why = _differs(planned, call)
        if not why:
            continue
        drafted = _drafted_answer(planned)
        where = f"episode {call.episode} step {call.seq}, answered by " + (
            "the real server" if call.source == "real" else "a declaration"
        )
        problem = (
            f"the recorded call {call.tool} {_short(call.arguments, 200)} ({where}) {why}: recorded "
            f"{_short(call.answer(), 300)}, drafted {_short(drafted, 300)}"
        )
        return {
            "tool": call.tool,
            "arguments": call.arguments,
            "episode": call.episode,
            "seq": call.seq,
            "source": call.source,
            "recorded": call.answer(),
            "drafted": drafted,
            "why": why,
            "problem": problem,
        }
    return None


def _differs(planned: Plan | Refused | Broken, call: Recording) -> str:
    """How the drafted answer differs from the recorded one ("" when it does not)."""
    if isinstance(planned, Broken):
        return f"fails on the state before it ({planned.detail})"
    if isinstance(planned, Refused):
        if not call.is_error:
            return f"is refused ({planned.code}), where it succeeded"
        if call.error_code is not None and planned.code != call.error_code:
            return f"fails with {planned.code!r}, where it failed with {call.error_code!r}"
        return ""
    if call.is_error:
        if planned.exact:
            return f"succeeds, where it failed ({call.error_code or 'an error'})"
        if call.error_code in planned.ruled_out:  # a model answers a guided call, but not with an error ruled out
            return f"rules out the error {call.error_code!r} it failed with"
        return ""
    if planned.exact and not _same_output(planned.output, call):
        return "gives another output"
    if not planned.exact and isinstance(planned.output, dict) and isinstance(call.output, dict):
        declared = planned.output if planned.read_key is None else {planned.read_key: planned.read_value}
        for name, value in declared.items():  # the model writes the rest of a guided answer
            if name not in call.output or not json_equal(value, call.output[name]):
                return f"gives another output.{name}"
    if call.patch is None:
        return ""
    try:
        recorded_after = apply_patch(call.state, call.patch, None)
    except StateError:  # a committed patch applies to the state it was made on; a broken record proves nothing
        return ""
    changed = state_diff(recorded_after, planned.state)
    if not planned.exact:  # the model may change more than the declared effects: compare what they set
        written = [effect["path"].removesuffix("/-") for effect in planned.effects]  # an append: the array
        changed = [op for op in changed if any(_overlaps(op["path"], path) for path in written)]
    if changed:
        return f"leaves another state (at {changed[0]['path']})"
    return ""


def _same_output(output: Any, call: Recording) -> bool:
    """Whether a drafted output is the recorded one: equal as JSON values (2 and 2.0 are one number); a recorded
    answer that was not JSON (a real server's plain text) is compared as the text the drafted output is sent as."""
    if call.output is None:
        return result_text(output if output is not None else {}) == call.text
    return json_equal(output, call.output)


def _overlaps(path: str, other: str) -> bool:
    """Whether one JSON Pointer is the other or inside it."""
    a, b = path.split("/"), other.split("/")
    return a[: len(b)] == b or b[: len(a)] == a


def _drafted_answer(planned: Plan | Refused | Broken) -> dict[str, Any]:
    """A drafted grounding's answer to a recorded call, as the report shows it."""
    if isinstance(planned, Broken):
        return {"fails": planned.detail}
    if isinstance(planned, Refused):
        return {"error_code": planned.code, "text": planned.text}
    return {"output": planned.output, "state_patch": planned.effects}


def _short(value: Any, limit: int) -> str:
    text = compact_json(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
