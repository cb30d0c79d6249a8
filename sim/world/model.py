"""A world: the data that defines one simulated environment (tools, policy, state, examples, tasks).

Worlds are pure data, loaded from a folder in `tool_specs/` by `simia.sim.world.loader`
into these frozen pydantic models. Tools use MCP's own wire shape (camelCase on
the wire, snake_case in Python) plus simia's `errors` list, so the `tools` array
of any server's `tools/list` answer is a valid tools list.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import jsonpointer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails, PydanticCustomError, to_json

from ..perturbation import Perturbation
from .expressions import RESERVED_NAMES, parse_problem, with_functions
from .grounding import Grounding
from .personas import unknown_persona

if TYPE_CHECKING:
    from .state import State

__all__ = [
    "ABSENT",
    "GENERIC_ERRORS",
    "Example",
    "ExpectedAction",
    "RealServer",
    "Side",
    "SimulatorHints",
    "StateAssertion",
    "Task",
    "ToolErrorSpec",
    "ToolSpec",
    "Trigger",
    "World",
    "canonical_json",
    "compact_json",
]

Side = Literal["agent", "user"]
"""Who makes a call: the agent (its MCP URL) or, in a dual-control world, the user (the episode's user URL)."""

ABSENT: dict[str, Any] = {"$absent": True}
"""The `expected_state` value that asserts a JSON Pointer resolves to nothing."""


def compact_json(value: Any) -> str:
    """JSON without spaces, Unicode as is: how prompts show data and the store keeps it (pydantic-core's
    serializer, five times faster than `json.dumps`; every call renders several values)."""
    return to_json(value).decode()


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the form hashed for world, state and cache keys."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ToolErrorSpec(_Strict):
    """A documented error a tool may return: a short code and when it happens."""

    code: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$", description="Short identifier, e.g. order_not_found.")
    when: str = Field(min_length=1, description="The condition, in plain words.")
    text: str | None = Field(
        default=None,
        min_length=1,
        description="The exact text the tool answers with this error, as the real server words it (e.g. 'Error: "
        "Order not found'); default 'Error (CODE): WHEN'.",
    )
    pattern: str | None = Field(
        default=None,
        min_length=1,
        description="A regular expression matching a real server's error texts of this code (searched), so "
        "`simia fidelity` scores errors a server answers in prose; default: the text itself.",
    )

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"pattern is not a regular expression: {exc}") from exc
        return value

    def matches(self, text: str) -> bool:
        """Whether a real server's error `text` is this error as worded: its `pattern` matches, or it is `text`."""
        if self.pattern is not None and re.search(self.pattern, text):
            return True
        return self.text is not None and text.strip() == self.text.strip()


_ANNOTATION_HINTS = frozenset({"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"})


class ToolSpec(_Strict):
    """One tool, in MCP's `Tool` wire shape plus simia's `errors`."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, alias_generator=to_camel, serialize_by_alias=True
    )

    name: str
    title: str | None = None
    description: str | None = None
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None
    icons: list[dict[str, Any]] | None = None
    execution: dict[str, Any] | None = None
    meta: dict[str, Any] | None = Field(default=None, alias="_meta")
    errors: list[ToolErrorSpec] = Field(default_factory=list)
    route: Literal["simulate", "real"] = Field(
        default="simulate", description="`real`: calls go to the world's `real_server` instead of the simulator."
    )
    fallback: Literal["simulate"] | None = Field(
        default=None, description="With `route: real`: simulate the call when the real server fails."
    )
    grounding: Grounding | None = Field(
        default=None, description="How the answer follows from the state (simia.sim.world.grounding)."
    )

    @field_validator("annotations")
    @classmethod
    def _annotation_types(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """MCP's hints are booleans and its title a string: `readOnlyHint: "yes"` would read as true to simia and
        as garbage to a client. Other members pass through, as MCP allows."""
        for key, item in (value or {}).items():
            if key in _ANNOTATION_HINTS and not isinstance(item, bool):
                raise ValueError(f"annotations.{key} must be true or false, got {item!r}")
            if key == "title" and not isinstance(item, str):
                raise ValueError(f"annotations.title must be a string, got {item!r}")
        return value

    def mcp_dict(self) -> dict[str, Any]:
        """The tool exactly as MCP's `tools/list` sends it (without simia's `errors`, `route`, `fallback`,
        `grounding`)."""
        return self.model_dump(by_alias=True, exclude_none=True, exclude={"errors", "route", "fallback", "grounding"})


GENERIC_ERRORS: tuple[ToolErrorSpec, ...] = (
    ToolErrorSpec(code="not_found", when="a record the call names does not exist"),
    ToolErrorSpec(code="invalid_argument", when="an argument is well-formed but not acceptable"),
    ToolErrorSpec(code="conflict", when="the call contradicts the current state"),
    ToolErrorSpec(code="permission_denied", when="the policy forbids the call"),
    ToolErrorSpec(code="rate_limited", when="too many calls in a short time"),
)
"""Error codes every tool has, beside its documented `errors` (imported tools document none): a simulated
error is always one of these or a documented code, never free text."""


class RealServer(_Strict):
    """The real MCP server a world stands for (written by `simia import mcp`): tools with `route: real`
    are called there, over one MCP session per episode.

    `headers` (a url server) and `env` (a command server) carry what the server needs; `${NAME}` in a value
    is read from the environment `simia serve` runs in, at call time, so world.yaml names where a secret
    comes from and never holds it (`Authorization: "Bearer ${GITHUB_TOKEN}"`). Other text is sent as
    written; a literal value under a name that looks like a credential (Authorization, Cookie, *key*,
    *token*, *secret*, *password*, *auth*) is refused."""

    url: str | None = Field(default=None, description="Its streamable HTTP URL.")
    command: list[str] | None = Field(
        default=None, min_length=1, description="Or the command that starts it over stdio (a process per episode)."
    )
    headers: dict[str, str] = Field(
        default_factory=dict, description="HTTP headers sent to a url server; `${NAME}` reads an environment variable."
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables of a command server (beside the MCP SDK's safe defaults: PATH, HOME, "
        "...); `${NAME}` reads one of simia's own.",
    )
    timeout: float = Field(default=30.0, gt=0, le=600, description="Seconds a real call may take.")

    @model_validator(mode="after")
    def _one_address(self) -> RealServer:
        if (self.url is None) == (self.command is None):
            raise ValueError("give the real server's url or its command (one of the two)")
        if self.headers and self.url is None:
            raise ValueError("headers are for a url server; a command server takes env")
        if self.env and self.command is None:
            raise ValueError("env is for a command server; a url server takes headers")
        for field, values in (("headers", self.headers), ("env", self.env)):
            for name, value in values.items():
                problem = _reference_problem(name, value)
                if problem:  # the value is not echoed back: it may be a secret
                    kind = PydanticCustomError("value_error", problem)
                    error = InitErrorDetails(type=kind, loc=(field, name), input="(not shown)")
                    raise ValidationError.from_exception_data("RealServer", [error])
        return self

    @property
    def address(self) -> str:
        return self.url if self.url is not None else " ".join(self.command or [])

    def variables(self) -> list[str]:
        """The environment variables its headers and env refer to (`${NAME}`), sorted."""
        values = [*self.headers.values(), *self.env.values()]
        return sorted({name for value in values for name in _REFERENCE.findall(value)})

    def resolved(self, environ: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """Its headers and env with every `${NAME}` replaced by NAME's value in `environ`.

        Raises:
            ValueError: a variable that `environ` lacks, named with how to set it.
        """
        missing = [name for name in self.variables() if name not in environ]
        if missing:
            names = ", ".join(missing)
            raise ValueError(
                f"the real server's headers/env read {names} from the environment, which does not set it: "
                f"run `export {missing[0]}=...` first (in the shell that starts simia)"
            )

        def fill(values: dict[str, str]) -> dict[str, str]:
            return {k: _REFERENCE.sub(lambda m: environ[m.group(1)], v) for k, v in values.items()}

        return fill(self.headers), fill(self.env)


_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CREDENTIAL_NAME = re.compile(r"authorization|cookie|key|token|secret|passw|auth|credential", re.IGNORECASE)


def _reference_problem(name: str, value: str) -> str:
    """What is wrong with a header or variable of a real server: a malformed `${...}`, or a literal credential
    (world.yaml is shared, committed and logged)."""
    if "${" in _REFERENCE.sub("", value):
        return "write a variable as ${NAME} (letters, digits and _)"
    if _CREDENTIAL_NAME.search(name) and not _REFERENCE.search(value):
        return (
            "this looks like a credential written as a literal value; refer to an environment variable instead "
            '(e.g. "Bearer ${TOKEN}") and set it where simia serve runs'
        )
    return ""


class SimulatorHints(_Strict):
    """Optional per-world knobs for the simulator."""

    instructions: str | None = Field(default=None, description="Extra rules for the simulator, appended to the prompt.")
    window: int = Field(default=4, ge=0, le=50, description="How many recent calls the simulator sees.")
    ascii_json: bool = Field(
        default=False,
        description="Write answers' JSON text with non-ASCII characters escaped (\\uXXXX), as Python's json.dumps "
        "does by default: a world that mirrors a Python API byte for byte (simia import tau2 sets it).",
    )
    max_state_chars: int = Field(
        default=3_000,
        ge=500,
        description="Above this size the state is sliced to the records a call names (shown whole, whatever "
        "their size) and this many characters of context around them.",
    )
    max_state_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=1024,
        description="The largest state.json this world may load (bytes, 256 MiB by default): each served world keeps "
        "its state and an index of its records in memory.",
    )
    max_named_chars: int = Field(
        default=60_000,
        ge=1_000,
        description="The most characters the records a call names may take in a prompt: a call naming more is "
        "refused (an infra error, `state_too_large`) rather than simulated without them.",
    )
    errors: list[ToolErrorSpec] = Field(
        default_factory=list,
        description="More error codes every tool of this world may return (beside the generic ones).",
    )
    perturbation: Perturbation | None = Field(
        default=None, description="Inject realistic faults into this world's episodes (see simia.sim.engine.faults)."
    )
    forbidden_state: dict[str, Any] = Field(
        default_factory=dict,
        description="JSON Pointer -> a value it must never hold after a call of any task's episode (a policy "
        "violation: a negative check of weight 1 in progress; a task naming the pointer itself overrides it); "
        '{"$absent": true}: the value must never be removed.',
    )

    @model_validator(mode="after")
    def _forbidden_pointers(self) -> SimulatorHints:
        bad = _not_pointers(self.forbidden_state)
        if bad:
            raise ValueError(f"forbidden_state key {bad[0]!r} is not a JSON Pointer: {_POINTER_HINT}")
        return self


class Example(_Strict):
    """A reference trajectory in OpenAI chat format, used as grounding for the simulator."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = ""
    messages: list[dict[str, Any]]


class ExpectedAction(_Strict):
    """A call a task expects the agent to make (tau2-bench's gold action)."""

    name: str = Field(min_length=1, description="The tool.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="The arguments the call must have.")
    compare_args: list[str] | None = Field(
        default=None, description="Compare only these arguments (default: all of `arguments`)."
    )

    def matches(self, tool: str, arguments: Mapping[str, Any]) -> bool:
        """Whether a call of `tool` with `arguments` is this action (the compared arguments equal as JSON)."""
        names = self.arguments.keys() if self.compare_args is None else self.compare_args
        return tool == self.name and all(
            canonical_json(arguments.get(n)) == canonical_json(self.arguments.get(n)) for n in names
        )


class StateAssertion(_Strict):
    """A fact the final state must show, computed (tau2-bench's env assertions: "the user's phone can send an MMS")."""

    expr: str = Field(
        min_length=1,
        description="A JSONata expression over $state (the final state) that is true when the assertion holds; the "
        "world's functions are bound, e.g. $can_send_mms($state.user_db) = true.",
    )
    message: str | None = Field(default=None, description="What the assertion checks, in words (the verdict's reason).")

    @field_validator("expr")
    @classmethod
    def _parses(cls, text: str) -> str:
        return _parsed(text)


class Trigger(_Strict):
    """State that follows from other state, kept after every call that succeeds: an expression giving RFC 6902
    operations on the state after the call's effects (tau2-bench's telecom syncs the user's phone with the line the
    agent's database holds: a line suspended there is no service here)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$", description="What it keeps, in a word.")
    expr: str = Field(
        min_length=1,
        description="A JSONata expression giving an RFC 6902 operation or a list of them ($state: the state after the "
        "call and the triggers before this one; $before: the state before the call). An operation that leaves its "
        "value as it was is dropped, so a trigger may restate a value on every call.",
    )

    @field_validator("expr")
    @classmethod
    def _parses(cls, text: str) -> str:
        return _parsed(text)


def _parsed(text: str) -> str:
    problem = parse_problem(text)
    if problem:
        raise ValueError(
            f"the JSONata expression does not parse: {problem} (see docs/worlds.md#declarations-that-compute)"
        )
    return text


class Task(_Strict):
    """Something an agent is asked to do in a world, with what the judge needs to score it."""

    id: str = Field(min_length=1)
    instruction: str = Field(min_length=1, description="What the user wants.")
    user_hidden: str | None = Field(default=None, description="Facts only the simulated user knows.")
    reference: list[dict[str, Any]] | None = Field(
        default=None,
        description="The seed conversation this task comes from, in OpenAI chat format (checked as the world's "
        "examples are): the simulator follows it instead of the world's examples, as Simia-RL does, and the "
        "simulated user is given its user turns. Never shown to the agent.",
    )
    rubric: str | None = Field(default=None, description="What the judge checks.")
    expected_state: dict[str, Any] = Field(
        default_factory=dict,
        description='JSON Pointer -> expected value; {"$absent": true} means "must not exist".',
    )
    initial_state_patch: list[dict[str, Any]] = Field(
        default_factory=list,
        description="RFC 6902 patch applied to the world's state when an episode starts.",
    )
    weights: dict[str, float] = Field(
        default_factory=dict,
        description="JSON Pointer of a check (an `expected_state` or `forbidden_state` key) -> its weight in "
        "progress; unnamed checks weigh 1, 0 reports a check without counting it.",
    )
    forbidden_state: dict[str, Any] = Field(
        default_factory=dict,
        description="JSON Pointer -> a value it must never hold after any call (a policy violation: a negative "
        'check; the episode fails); {"$absent": true}: the value must never be removed.',
    )
    persona: str | None = Field(
        default=None,
        description="How the simulated user behaves (`simia.sim.world.personas`: cooperative, terse, confused, "
        "impatient, adversarial); none: cooperative, or what the rollout chooses.",
    )
    state_exact: bool = Field(
        default=False,
        description="The final state must be the initial state with expected_state applied: nothing else changed "
        "(tau2-bench's whole-database check; a task whose goal changes nothing then checks that nothing changed).",
    )
    expected_actions: list[ExpectedAction] = Field(
        default_factory=list,
        description="Calls the agent must make, each matched by a call of that tool with those arguments "
        "(tau2-bench's ACTION check).",
    )
    communicate_info: list[str] = Field(
        default_factory=list,
        description="Facts the agent must tell the user: each must appear in an assistant message of the "
        "transcript (case and commas aside, as tau2-bench compares them).",
    )
    assertions: list[StateAssertion] = Field(
        default_factory=list,
        description="Facts the final state must show, computed (tau2-bench's env assertions); each is a check.",
    )
    tags: list[str] = Field(default_factory=list)
    split: str = Field(
        default="train",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="The dataset split the task belongs to (`train`, `validation`, `test` or a name of the world's "
        "own); trainer protocols list tasks by split.",
    )

    @field_validator("persona")
    @classmethod
    def _known_persona(cls, name: str | None) -> str | None:
        problem = unknown_persona(name) if name is not None else ""
        if problem:
            raise ValueError(problem)
        return name

    @model_validator(mode="after")
    def _checks(self) -> Task:
        problem = _check_problem(self)
        if problem:
            raise ValueError(f"task {self.id!r}: {problem}")
        return self


_POINTER_HINT = "JSON Pointers start with '/', e.g. '/orders/O1/status'; escape '~' as ~0 and '/' as ~1"


def _not_pointers(keys: dict[str, Any]) -> list[str]:
    bad = []
    for key in keys:
        try:
            jsonpointer.JsonPointer(key)
        except jsonpointer.JsonPointerException:
            bad.append(key)
    return bad


def _check_problem(task: Task) -> str:
    """What is wrong with a task's checks and weights, or ""."""
    bad = _not_pointers(task.forbidden_state)
    if bad:
        return f"forbidden_state key {bad[0]!r} is not a JSON Pointer: {_POINTER_HINT}"
    checks = task.expected_state.keys() | task.forbidden_state.keys()
    for pointer, weight in task.weights.items():
        if pointer not in checks:
            named = ", ".join(sorted(checks)) or "none"
            return f"weights names {pointer!r}, which is not one of its checks (its checks: {named})"
        if not math.isfinite(weight) or weight < 0:
            return f"the weight of {pointer!r} is {weight}: weights are finite numbers, 0 or more"
    counted = task.expected_state or task.forbidden_state
    if counted and sum(task.weights.get(p, 1.0) for p in counted) == 0:
        which = "expected_state" if task.expected_state else "forbidden_state"
        return f"the weights of its {which} checks sum to 0: give at least one a weight above 0 (unnamed ones weigh 1)"
    return ""


class World(_Strict):
    """A loaded, validated world."""

    model_config = ConfigDict(extra="forbid", frozen=True, ignored_types=(cached_property,))

    name: str
    title: str = ""
    description: str = ""
    version: str = "1"
    policy: str = ""
    tools: list[ToolSpec]
    user_tools: list[ToolSpec] = Field(
        default_factory=list,
        description="Tools of the user's own (dual control, as tau2-bench's telecom: the user toggles airplane mode on "
        "their phone): served to the user simulator at the episode's user URL, never listed to the agent.",
    )
    functions: dict[str, str] = Field(
        default_factory=dict,
        description="Named JSONata functions (`function($x){...}`), bound as $name in every expression of the world.",
    )
    triggers: list[Trigger] = Field(default_factory=list, description="State kept after every call that succeeds.")
    state_schema: dict[str, Any] | None = None
    simulator: SimulatorHints = Field(default_factory=SimulatorHints)
    initial_state: dict[str, Any] = Field(default_factory=dict)
    examples: list[Example] = Field(default_factory=list)
    tasks: list[Task] = Field(default_factory=list)
    real_server: RealServer | None = None
    source: str = Field(default="", exclude=True, description="Folder the world was loaded from.")

    @model_validator(mode="after")
    def _sides_apart(self) -> World:
        both = sorted(self.tools_by_name.keys() & {t.name for t in self.user_tools})
        if both:
            raise ValueError(
                f"user tool {both[0]!r} has the name of an agent tool: a call could not say whose it is; rename one"
            )
        for name in self.functions:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"function name {name!r} is not a JSONata variable name (letters, digits and _)")
            if name in RESERVED_NAMES:
                raise ValueError(f"function name {name!r} is one simia binds itself; choose another")
        return self

    @cached_property
    def content_hash(self) -> str:
        """A stable hash of everything that defines the world (not where it was loaded from)."""
        return hashlib.sha256(canonical_json(self.model_dump(mode="json")).encode()).hexdigest()

    @cached_property
    def base_state(self) -> State:
        """The initial state as the base `State` its episodes share (its digest made once, here)."""
        from .state import as_state  # state.py builds on this module

        return as_state(self.initial_state)

    @cached_property
    def tools_by_name(self) -> dict[str, ToolSpec]:
        return {tool.name: tool for tool in self.tools}

    @cached_property
    def user_tools_by_name(self) -> dict[str, ToolSpec]:
        return {tool.name: tool for tool in self.user_tools}

    @cached_property
    def _bound(self) -> dict[str, str]:
        return {}

    def bind(self, text: str) -> str:
        """A JSONata expression of this world with the world's functions it calls bound (`with_functions`), made
        once per expression."""
        bound = self._bound.get(text)
        if bound is None:
            bound = self._bound[text] = with_functions(self.functions, text) if self.functions else text
        return bound

    @cached_property
    def shared_errors(self) -> list[ToolErrorSpec]:
        """The errors every tool of this world may return: the world's own, then the generic ones."""
        return _unique_codes([*self.simulator.errors, *GENERIC_ERRORS])

    def error_codes(self, tool: ToolSpec) -> list[ToolErrorSpec]:
        """The errors `tool` may return: its documented ones first, then the shared ones."""
        return _unique_codes([*tool.errors, *self.shared_errors])

    def code_named(self, text: str, tool: ToolSpec) -> str | None:
        """The first of `tool`'s error codes that an error text (a real server's) is: the one whose `pattern` or exact
        `text` it matches, else the first it names (a server that answers in prose is mapped by its texts)."""
        codes = self.error_codes(tool)
        worded = next((e.code for e in codes if e.matches(text)), None)
        return worded or next((e.code for e in codes if e.code in text), None)

    def tool(self, name: str, side: Side = "agent") -> ToolSpec | None:
        """The agent's tool `name` (`side="user"`: the user's)."""
        return (self.user_tools_by_name if side == "user" else self.tools_by_name).get(name)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> World:
        """A copy with `update` applied, whose derived values (hash, tools by name, ...) are derived again: a
        plain pydantic copy would keep those of the original."""
        copy = super().model_copy(update=update, deep=deep)
        for name in [n for n, v in vars(type(self)).items() if isinstance(v, cached_property)]:
            copy.__dict__.pop(name, None)
        return copy

    @cached_property
    def _tasks_by_id(self) -> dict[str, Task]:
        return {task.id: task for task in self.tasks}

    def task(self, task_id: str) -> Task | None:
        """The task of that id (a dict lookup: a world of seeds has thousands, and each call looks its task up)."""
        return self._tasks_by_id.get(task_id)


def _unique_codes(errors: list[ToolErrorSpec]) -> list[ToolErrorSpec]:
    """Each code once; the first definition wins."""
    seen: dict[str, ToolErrorSpec] = {}
    for error in errors:
        seen.setdefault(error.code, error)
    return list(seen.values())
