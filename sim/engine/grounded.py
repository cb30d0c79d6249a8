"""State-grounded answers: what a tool's declared grounding (`simia.sim.world.grounding`) decides of one call.

`plan_call` runs a declaration on the episode's state: the preconditions in order (the first that fails is the
answer, a `Refused` with its declared code), then the effects (RFC 6902 with the arguments filled in, applied and
schema-checked as a model's patch is), then the read (a pointer's value or a JSONPath query's matches, on the state
after the effects). The `Plan` it returns answers an exact call without a model; for a guided call `facts` is the
text the model is given as fixed facts and `contradiction` the check its answer must pass, and `merged_patch` is
the declared effects followed by what the model changed besides them. Pure functions over `State` values.

Computed parts (JSONata, `simia.sim.world.expressions`) run in the same order: the `let` values on the state before
the call, an `expr` precondition where it stands, an `expr` effect's operations in its place among the others (every
effect reads the state before the call: effects are one patch, applied all or none), and an `expr` read on the state
after. A failing precondition expression is its declared error; a failing `let`, effect or read expression is a
`Broken` declaration (an infra error with the detail), never a crash and never a half-applied state. A refusal
changes nothing unless its precondition declares `effects` (what a real API writes before it fails): then they are
applied whole, as the grounding's own are.

`keep_triggers` runs a world's triggers (state that follows from other state, as tau2's telecom keeps the phone in
step with the line) on the state a call that succeeded left; the simulator adds their operations to the call's
patch, whoever answered it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from jsonpath_rfc9535 import JSONPathError
from jsonpath_rfc9535 import compile as compile_jsonpath

from ..errors import StateError
from ..schema import validate_instance
from ..world import (
    UNFILLED,
    ComputedEffect,
    ExpressionError,
    Grounding,
    Precondition,
    State,
    ToolSpec,
    World,
    apply_patch,
    canonical_json,
    compact_json,
    evaluate,
    fill_jsonpath,
    fill_pointer,
    fill_value,
    is_missing,
    resolve_pointer,
    state_hash,
)

__all__ = [
    "Broken",
    "Plan",
    "Refused",
    "contradiction",
    "facts",
    "keep_triggers",
    "merged_patch",
    "plan_call",
    "undeclared",
]


@dataclass(frozen=True)
class Refused:
    """The state decides the call fails: a precondition does not hold, or the read finds nothing. `effects` (and
    the `state` they leave) are what a precondition declares the call writes although it fails (`Precondition.
    effects`); a refusal without them changes nothing."""

    code: str
    text: str
    detail: str
    effects: list[dict[str, Any]] = field(default_factory=list)
    state: State | None = None


@dataclass(frozen=True)
class Broken:
    """The declaration cannot answer on this state for a reason that is the world's, not the call's."""

    detail: str


@dataclass(frozen=True)
class Plan:
    """What the state decides of a call whose preconditions hold.

    Attributes:
        exact: whether the call is answered without a model.
        effects: the declared effects with the arguments filled in (the call's patch, or its start when guided).
        state: the state after the effects.
        output: the read's output (None without a read): an object, or any JSON value for a tool without an
            outputSchema.
        held: the preconditions that held, as `(pointer, what held, error code)`.
        ruled_out: error codes the state rules out (those of the preconditions that held, the read's `missing`).
    """

    exact: bool
    effects: list[dict[str, Any]]
    state: State
    output: Any = None
    read_key: str | None = None
    read_value: Any = None
    held: list[tuple[str, str, str]] = field(default_factory=list)
    ruled_out: frozenset[str] = frozenset()


def plan_call(
    world: World, tool: ToolSpec, state: State, arguments: Mapping[str, Any], *, seed: int | None = None
) -> Plan | Refused | Broken:
    """Run `tool`'s grounding on `state` for a call with `arguments` (already valid under its inputSchema; an
    absent one whose inputSchema property has a `default` is that default). `seed` (the call's) makes the ids
    `$newid` draws depend on the episode's seed as well as on its state and the call."""
    grounding = tool.grounding
    assert grounding is not None, "plan_call needs a tool with a grounding"
    properties = tool.input_schema.get("properties") or {}
    defaults = {k: v["default"] for k, v in properties.items() if isinstance(v, dict) and "default" in v}
    arguments = {**defaults, **arguments}
    scope = _Scope(tool, state, arguments, seed, world.bind)
    for name, text in grounding.let.items():
        try:
            scope.variables[name] = scope.evaluate(text)
        except ExpressionError as exc:
            return Broken(f"tool {tool.name!r}: grounding.let.{name} failed: {exc}")
    held: list[tuple[str, str, str]] = []
    for condition in grounding.preconditions:
        if condition.expr is not None:
            try:
                ok = _truthy(scope.evaluate(condition.expr))
                why = ""
            except ExpressionError as exc:
                ok, why = False, f": {exc}"
            if not ok:
                refused = _refused(
                    world,
                    tool,
                    condition.error,
                    f"precondition {condition.expr!r} does not hold{why}",
                    scope,
                    condition.message,
                )
                return _written_anyway(world, tool, condition, refused, arguments, scope)
            held.append((condition.expr, "holds", condition.error))
            continue
        pointer = fill_pointer(condition.pointer or "", arguments)
        value = resolve_pointer(state, pointer) if pointer is not None else UNFILLED
        what = _holds(condition, value, arguments)
        if what is None:
            where = pointer if pointer is not None else condition.pointer
            refused = _refused(
                world, tool, condition.error, f"precondition on {where} does not hold", scope, condition.message
            )
            return _written_anyway(world, tool, condition, refused, arguments, scope)
        held.append((pointer or condition.pointer or "", what, condition.error))
    ruled_out = {code for _, _, code in held}
    if any(c.test in ("expr", "equals") or (c.test == "exists" and c.exists) for c in grounding.preconditions):
        ruled_out.add("not_found")  # what the call names was found: the generic code cannot apply either
    try:
        effects = _effects(grounding.effects, arguments, scope)
    except ExpressionError as exc:
        return Broken(f"tool {tool.name!r}: an effect expression failed: {exc}")
    try:
        after = apply_patch(state, effects, None)
    except StateError as exc:
        missing = grounding.read.missing if grounding.read and grounding.read.missing else "not_found"
        return _refused(world, tool, missing, f"the declared effects do not apply: {exc}", scope)
    if world.state_schema is not None and effects:
        try:
            after = apply_patch(state, effects, world.state_schema)
        except StateError as exc:
            return _refused(
                world, tool, "invalid_argument", f"the declared effects break the state schema: {exc}", scope
            )
    plan = Plan(grounding.exact, effects, after, held=held, ruled_out=frozenset(ruled_out))
    if grounding.read is None:
        return plan
    return _read(world, tool, grounding, plan, arguments, scope)


class _Scope:
    """What a call's expressions see: `$args`, `$state` and `$before`, the `let` values, the world's functions
    (`bind`); `$newid`'s seed."""

    def __init__(
        self,
        tool: ToolSpec,
        state: State,
        arguments: Mapping[str, Any],
        seed: int | None,
        bind: Callable[[str], str] = str,
    ) -> None:
        self.tool = tool
        self.state = state
        self.arguments = arguments
        self.seed = seed
        self.bind = bind
        self.variables: dict[str, Any] = {"args": dict(arguments), "state": state, "before": state}

    def id_seed(self) -> str:
        digest = getattr(self.state, "digest", None) or state_hash(self.state)
        return f"{self.seed}|{digest}|{self.tool.name}|{canonical_json(self.arguments)}"

    def evaluate(self, text: str, **extra: Any) -> Any:
        return evaluate(self.bind(text), {**self.variables, **extra}, id_seed=self.id_seed)


def keep_triggers(world: World, before: State, after: State) -> tuple[State, list[dict[str, Any]]]:
    """The state after `world`'s triggers ran on `after` (the state a call that succeeded left; `before` the one it
    found), and the operations they applied, each trigger on the state the previous left. An operation that
    leaves its value as it was is dropped.

    Raises:
        ExpressionError: a trigger's expression failed or gave something that is no operation, or its operations
            do not apply (or break the state schema).
    """
    applied: list[dict[str, Any]] = []
    state = after
    for trigger in world.triggers:
        variables = {"state": state, "before": before}
        try:
            ops = _computed(evaluate(world.bind(trigger.expr), variables), "its expression")
        except ExpressionError as exc:
            raise ExpressionError(f"trigger {trigger.name!r}: {exc}") from None
        changing = [op for op in ops if not _restates(state, op)]
        if not changing:
            continue
        try:
            state = apply_patch(state, changing, None)
        except StateError as exc:
            raise ExpressionError(f"trigger {trigger.name!r}: its operations do not apply: {exc}") from None
        applied.extend(changing)
    if applied and world.state_schema is not None:
        try:
            state = apply_patch(after, applied, world.state_schema)
        except StateError as exc:
            raise ExpressionError(f"the triggers break the state schema: {exc}") from None
    return state, applied


def _restates(state: State, op: Mapping[str, Any]) -> bool:
    """Whether a `replace`, or an `add` of an object's member, would leave the value at its path as it is (an `add`
    into an array inserts)."""
    path = op["path"]
    if op["op"] not in ("add", "replace") or not path:
        return False
    if op["op"] == "add" and not isinstance(resolve_pointer(state, path.rsplit("/", 1)[0]), dict):
        return False
    current = resolve_pointer(state, path)
    if is_missing(current):
        return False
    return canonical_json(current) == canonical_json(op["value"])


def _truthy(value: Any) -> bool:
    """JSONata's boolean cast of an expression's value (an empty list, "", 0 and nothing are false)."""
    if isinstance(value, list):
        return any(_truthy(item) for item in value)
    if isinstance(value, dict):
        return bool(value)
    return bool(value)


def _holds(condition: Precondition, value: Any, arguments: Mapping[str, Any]) -> str | None:
    """What held (for the model's facts), or None when the precondition fails."""
    absent = value is UNFILLED or is_missing(value)
    if condition.test == "exists":
        return ("exists" if condition.exists else "does not exist") if absent != condition.exists else None
    if absent:
        return None
    if condition.test == "equals":
        expected = fill_value(condition.equals, arguments)
        same = expected is not UNFILLED and canonical_json(value) == canonical_json(expected)
        return f"equals {compact_json(expected)}" if same else None
    return "satisfies its schema" if not validate_instance(condition.schema_ or {}, value) else None


def _written_anyway(
    world: World,
    tool: ToolSpec,
    condition: Precondition,
    refused: Refused | Broken,
    arguments: Mapping[str, Any],
    scope: _Scope,
) -> Refused | Broken:
    """`refused` with the effects its precondition declares the call writes although it fails, applied and
    schema-checked as the grounding's own (a failure of theirs is the declaration's: `Broken`)."""
    if not condition.effects or isinstance(refused, Broken):
        return refused
    try:
        ops = _effects(condition.effects, arguments, scope)
        state = apply_patch(scope.state, ops, world.state_schema)
    except (ExpressionError, StateError) as exc:
        return Broken(f"tool {tool.name!r}: the {condition.error!r} precondition's effects failed: {exc}")
    return replace(refused, effects=ops, state=state)


def _effects(items: Sequence[Any], arguments: Mapping[str, Any], scope: _Scope) -> list[dict[str, Any]]:
    """The declared operations with the arguments filled in, and the computed ones in their place; an operation
    naming an absent argument is left out."""
    ops: list[dict[str, Any]] = []
    for i, effect in enumerate(items):
        if isinstance(effect, ComputedEffect):
            ops.extend(_computed(scope.evaluate(effect.expr), f"effects[{i}].expr"))
            continue
        op = effect.operation()
        path = fill_pointer(op["path"], arguments)
        source = fill_pointer(op["from"], arguments) if "from" in op else ""
        value = fill_value(op["value"], arguments) if "value" in op else None
        if path is None or source is None or value is UNFILLED:
            continue
        filled: dict[str, Any] = {"op": op["op"], "path": path}
        if "from" in op:
            filled["from"] = source
        if "value" in op:
            filled["value"] = value
        ops.append(filled)
    return ops


_OPS = {"add": {"value"}, "replace": {"value"}, "test": {"value"}, "remove": set(), "move": {"from"}, "copy": {"from"}}


def _computed(value: Any, where: str) -> list[dict[str, Any]]:
    """An effect expression's value as RFC 6902 operations (checked: an op, a path, what the op needs)."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    ops: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict) or item.get("op") not in _OPS:
            raise ExpressionError(
                f"{where} gives {compact_json(item)[:120]}, not an RFC 6902 operation "
                '({"op": "add", "path": "/...", "value": ...})'
            )
        needs = _OPS[item["op"]]
        path = item.get("path")
        if not isinstance(path, str) or (path and not path.startswith("/")):
            raise ExpressionError(f"{where} gives an operation whose path is no JSON Pointer: {path!r}")
        if needs - set(item) or set(item) - {"op", "path"} - needs:
            raise ExpressionError(
                f"{where} gives a {item['op']!r} operation with members {sorted(item)}; it takes "
                f"{sorted({'op', 'path'} | needs)}"
            )
        ops.append(item)
    return ops


def _read(
    world: World, tool: ToolSpec, grounding: Grounding, plan: Plan, arguments: Mapping[str, Any], scope: _Scope
) -> Plan | Refused | Broken:
    read = grounding.read
    assert read is not None
    if read.expr is not None:
        try:
            value = scope.evaluate(read.expr, state=plan.state)
        except ExpressionError as exc:
            return Broken(f"tool {tool.name!r}: grounding.read.expr failed: {exc}")
        if value is None and read.missing:
            return _refused(world, tool, read.missing, "the read's expression gives nothing", scope)
    elif read.pointer is not None:
        pointer = fill_pointer(read.pointer, arguments)
        value = resolve_pointer(plan.state, pointer) if pointer is not None else UNFILLED
        if value is UNFILLED or is_missing(value):
            return _refused(world, tool, read.missing or "not_found", f"nothing at {pointer or read.pointer}", scope)
    else:
        query = fill_jsonpath(read.jsonpath or "", arguments)
        try:
            value = [node.value for node in compile_jsonpath(query).find(plan.state)] if query is not None else []
        except JSONPathError as exc:  # an argument made the query invalid (e.g. an object where a literal goes)
            return _refused(world, tool, "invalid_argument", f"the read's JSONPath does not run: {exc}", scope)
        if not value and read.missing:
            return _refused(world, tool, read.missing, f"nothing matches {query}", scope)
        if value and read.key is not None and _single(tool, read.key):
            value = value[0]
    if read.fields is not None:
        value = [_only(item, read.fields) for item in value] if isinstance(value, list) else _only(value, read.fields)
    if read.key is not None:
        output: Any = {read.key: value}
    elif isinstance(value, dict) or tool.output_schema is None:
        output = value  # a tool without an outputSchema may answer any JSON value (sent as its text)
    else:
        return Broken(f"tool {tool.name!r}: the read gives {type(value).__name__}, not an object: add read.key")
    problems = validate_instance(tool.output_schema, output) if tool.output_schema and plan.exact else []
    if problems:
        return Broken(f"tool {tool.name!r}: the read's output breaks its outputSchema: " + "; ".join(problems[:3]))
    return Plan(
        plan.exact,
        plan.effects,
        plan.state,
        output=output,
        read_key=read.key,
        read_value=value,
        held=plan.held,
        ruled_out=plan.ruled_out | ({read.missing} if read.missing else set()),
    )


def _only(value: Any, fields: list[str]) -> Any:
    """`value`'s members named in `fields` (a record the state keeps more of than the API shows); a value that is
    not an object is kept as it is (the output schema then says what is wrong)."""
    return {name: value[name] for name in fields if name in value} if isinstance(value, dict) else value


def _single(tool: ToolSpec, key: str) -> bool:
    """Whether the outputSchema gives `key` one value (a JSONPath read then answers its first match)."""
    schema = ((tool.output_schema or {}).get("properties") or {}).get(key)
    kind = schema.get("type") if isinstance(schema, dict) else None
    return kind is not None and kind != "array" and not (isinstance(kind, list) and "array" in kind)


def _refused(
    world: World, tool: ToolSpec, code: str, detail: str, scope: _Scope | None = None, message: str | None = None
) -> Refused | Broken:
    """The call's declared error: the precondition's `message` when it has one, else the code's text."""
    spec = next((e for e in world.error_codes(tool) if e.code == code), None)
    when = spec.when if spec is not None else code.replace("_", " ")
    text = spec.text if spec is not None and spec.text else f"Error ({code}): {when}"
    if message is not None and scope is not None:
        try:
            said = scope.evaluate(message)
        except ExpressionError as exc:
            return Broken(f"tool {tool.name!r}: the {code!r} precondition's message failed: {exc}")
        if not isinstance(said, str) or not said:
            return Broken(f"tool {tool.name!r}: the {code!r} precondition's message gives {said!r}, not a text")
        text = said
    return Refused(code, text, f"state-grounded {tool.name}: {detail}")


def facts(plan: Plan) -> str:
    """The declared parts of a guided call, as fixed facts appended to the model's user message."""
    lines = ["Fixed facts (computed from the state; your answer must agree with them):"]
    lines += [f"- {pointer} {what}." for pointer, what, _ in plan.held]
    if plan.ruled_out:
        lines.append(f"- These errors do not apply: {', '.join(sorted(plan.ruled_out))}.")
    if plan.effects:
        lines.append(
            "- These state changes are applied for you (leave them out of state_patch): " + compact_json(plan.effects)
        )
    if plan.output is not None and plan.read_key is not None:
        lines.append(f"- output.{plan.read_key} is {compact_json(plan.read_value)}.")
    elif plan.output is not None:
        lines.append(f"- The output holds these fields with these values: {compact_json(plan.output)}.")
    return "\n".join(lines)


def contradiction(
    plan: Plan, *, is_error: bool, code: str | None, output: dict[str, Any] | None, patch: list[dict[str, Any]]
) -> str:
    """Why a model's answer to a guided call contradicts the declared parts ("" when it does not)."""
    if is_error:
        if code in plan.ruled_out:
            return f"error_code {code!r} contradicts the state (the fixed facts rule it out)"
        return ""
    if isinstance(plan.output, dict) and output is not None:
        problem = _output_contradicts(plan, output)
        if problem:
            return problem
    for op in patch:
        declared = _overlapping(plan.effects, op)
        if declared is not None and canonical_json(op) != canonical_json(declared):
            return (
                f"state_patch operation {op.get('op')} {op.get('path')} changes what the declared effect "
                f"{declared['op']} {declared['path']} sets: leave it out"
            )
    return ""


def _output_contradicts(plan: Plan, output: dict[str, Any]) -> str:
    if plan.read_key is not None:
        if plan.read_key not in output:
            return f"output lacks {plan.read_key!r}, which the state decides"
        given, expected = output[plan.read_key], plan.read_value
        if isinstance(expected, list) and not isinstance(given, list):
            if all(canonical_json(given) != canonical_json(item) for item in expected):
                return f"output.{plan.read_key} is not one of the state's values {compact_json(expected)}"
            return ""
        if canonical_json(given) != canonical_json(expected):
            return f"output.{plan.read_key} must be {compact_json(expected)} (the state decides it)"
        return ""
    assert plan.output is not None
    for name in sorted(set(output) & set(plan.output)):
        if canonical_json(output[name]) != canonical_json(plan.output[name]):
            return f"output.{name} must be {compact_json(plan.output[name])} (the state decides it)"
    return ""


def _tokens(pointer: str) -> list[str]:
    return pointer.split("/")[1:] if pointer else []


def _overlapping(effects: list[dict[str, Any]], op: dict[str, Any]) -> dict[str, Any] | None:
    """The declared effect whose path is the operation's path, inside it or around it, if any."""
    paths = [_tokens(str(op.get("path", "")))] + ([_tokens(str(op["from"]))] if "from" in op else [])
    for effect in effects:
        target = _tokens(effect["path"])
        for path in paths:
            if path[: len(target)] == target or target[: len(path)] == path:
                return effect
    return None


def merged_patch(plan: Plan, patch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The call's patch: the declared effects, then the model's operations that are not among them."""
    declared = {canonical_json(op) for op in plan.effects}
    return [*plan.effects, *(op for op in patch if canonical_json(op) not in declared)]


def undeclared(world: World) -> World:
    """`world` with no tool's grounding: every call is model-answered (the baseline a declaration is measured
    against, and a world where a tool's simulation itself is under test)."""
    return world.model_copy(update={"tools": [tool.model_copy(update={"grounding": None}) for tool in world.tools]})
