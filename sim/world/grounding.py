"""A tool's grounding: how its answer follows from the episode's state, declared in world.yaml as data.

A `Grounding` names the tool's preconditions (a JSON Pointer template and the value or JSON Schema it must
satisfy, else a documented error code), its effects (RFC 6902 operations with argument templates) and its
read (a pointer or an RFC 9535 JSONPath query whose value is the output). Pointers are templates: `{name}` is
the tool argument `name`. Where a template cannot say it, a declaration computes, in JSONata
(`simia.sim.world.expressions`): named values (`let`), a precondition (`expr`, with its own error `message`), an
effect that expands into RFC 6902 operations (`expr`), a read whose output is any JSON value (`expr`). A call
whose grounding has a read is answered from the state without a model (`exact`); otherwise the model answers
with the declared parts given as fixed facts (`guided`). These models hold the shape only;
`simia.sim.world.loader` checks a declaration against its world, `simia.sim.engine.grounded` runs it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    model_serializer,
    model_validator,
)
from pydantic_core import to_json

from .expressions import RESERVED_NAMES

__all__ = [
    "UNFILLED",
    "ComputedEffect",
    "Effect",
    "Grounding",
    "GroundingMode",
    "Precondition",
    "Read",
    "fill_jsonpath",
    "fill_pointer",
    "fill_value",
    "template_names",
]

GroundingMode = Literal["exact", "guided"]

_SLOT = re.compile(r"\{\{|\}\}|\{([^{}]+)\}")
"""`{{` and `}}` (literal braces) or `{name}` (the argument `name`)."""


class _Unfilled:
    """A template that names an argument the call did not give."""

    def __repr__(self) -> str:
        return "UNFILLED"


UNFILLED: Any = _Unfilled()
"""What a template gives when it names an absent argument (a pointer then resolves to nothing)."""


def template_names(value: Any) -> Iterator[str]:
    """The argument names a template (a string, or any JSON value holding strings) refers to."""
    if isinstance(value, str):
        yield from (m.group(1) for m in _SLOT.finditer(value) if m.group(1) is not None)
    elif isinstance(value, dict):
        for inner in value.values():
            yield from template_names(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from template_names(inner)


def _text(value: Any) -> str:
    """An argument as text in a pointer or a longer string. A whole number sent as a float (`5.0`, which JSON
    Schema's `integer` accepts) is written `5`, as the state's keys and texts spell it."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return str(int(value))
    return value if isinstance(value, str) else to_json(value).decode()


def _fill(template: str, arguments: Mapping[str, Any], render: Any) -> str | None:
    """`template` with each `{name}` rendered by `render`; None when it names an absent argument."""
    out: list[str] = []
    end = 0
    for m in _SLOT.finditer(template):
        out.append(template[end : m.start()])
        end = m.end()
        name = m.group(1)
        if name is None:
            out.append(m.group(0)[0])
        elif name in arguments:
            out.append(render(arguments[name]))
        else:
            return None
    return "".join(out) + template[end:]


def fill_pointer(template: str, arguments: Mapping[str, Any]) -> str | None:
    """A JSON Pointer template with each `{name}` replaced by the argument's text as one pointer token (`~` and
    `/` escaped); None when it names an absent argument."""
    return _fill(template, arguments, lambda v: _text(v).replace("~", "~0").replace("/", "~1"))


def fill_jsonpath(template: str, arguments: Mapping[str, Any]) -> str | None:
    """A JSONPath template with each `{name}` replaced by the argument as a JSON literal; None when it names an
    absent argument."""
    return _fill(template, arguments, lambda v: to_json(v).decode())


def fill_value(template: Any, arguments: Mapping[str, Any]) -> Any:
    """A value template filled in: a string that is exactly `{name}` becomes the argument's value (any JSON type),
    `{name}` inside a longer string its text. A member or item naming an absent argument is left out; the value
    itself naming one is `UNFILLED`."""
    if isinstance(template, str):
        whole = _SLOT.fullmatch(template)
        if whole is not None and whole.group(1) is not None:
            return arguments.get(whole.group(1), UNFILLED)
        filled = _fill(template, arguments, _text)
        return UNFILLED if filled is None else filled
    if isinstance(template, dict):
        members = {key: fill_value(inner, arguments) for key, inner in template.items()}
        return {key: inner for key, inner in members.items() if inner is not UNFILLED}
    if isinstance(template, list):
        items = [fill_value(inner, arguments) for inner in template]
        return [inner for inner in items if inner is not UNFILLED]
    return template


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, serialize_by_alias=True)


class _AsWritten(_Strict):
    """A declaration whose meaning depends on which fields were written (`equals: null` is a test, an absent
    `equals` is none): it serializes the fields that were written, so a dumped world (its content hash, the
    copy the store keeps) loads back to the same declaration."""

    @model_serializer(mode="wrap")
    def _written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        aliases = {name: field.alias or name for name, field in type(self).model_fields.items()}
        return {aliases[name]: data[aliases[name]] for name in type(self).model_fields if name in self.model_fields_set}


class Precondition(_AsWritten):
    """What must hold before the call does anything; `error` is the answer when it does not.

    A precondition tests the value at `pointer` (`exists`, `equals` or `schema`), or computes (`expr`, a JSONata
    expression that must be true; it may span records or say "or").
    """

    pointer: str | None = Field(default=None, description="A JSON Pointer template, e.g. /orders/{order_id}.")
    exists: bool | None = Field(default=None, description="Whether something must (true) or must not be there.")
    equals: Any = Field(default=None, description="The JSON value that must be there (a value template).")
    schema_: dict[str, Any] | None = Field(
        default=None, alias="schema", description="A JSON Schema the value there must satisfy."
    )
    expr: str | None = Field(
        default=None,
        min_length=1,
        description="A JSONata expression that must be true, e.g. $order.status = 'pending'.",
    )
    error: str = Field(description="The error code returned when the precondition fails (one of the tool's codes).")
    effects: list[EffectItem] = Field(
        default_factory=list,
        description="What the call writes although it fails here, as a real API that fails half-way keeps what it "
        "wrote before (tau2's book_reservation debits gift cards, then fails on a certificate used twice): effects as "
        "the grounding's own, evaluated on the state before the call. Without them a refusal changes nothing.",
    )
    message: str | None = Field(
        default=None,
        min_length=1,
        description="A JSONata expression giving the error's text when this precondition fails (default: the "
        "code's text), e.g. \"'Error: Item ' & $missing & ' not found'\".",
    )

    @model_validator(mode="after")
    def _one_test(self) -> Precondition:
        given = [name for name in ("exists", "equals", "schema_", "expr") if name in self.model_fields_set]
        if len(given) != 1:
            raise ValueError("a precondition needs exactly one of exists, equals, schema or expr")
        if self.expr is None and self.pointer is None:
            raise ValueError("an exists, equals or schema precondition needs a pointer")
        if self.expr is not None and self.pointer is not None:
            raise ValueError("an expr precondition takes no pointer (read the state in the expression)")
        return self

    @property
    def test(self) -> Literal["exists", "equals", "schema", "expr"]:
        """Which of the four tests this precondition makes."""
        if "exists" in self.model_fields_set:
            return "exists"
        if "equals" in self.model_fields_set:
            return "equals"
        return "expr" if self.expr is not None else "schema"


class Effect(_AsWritten):
    """One RFC 6902 operation the call applies to the state; `path`, `from` and `value` are templates."""

    op: Literal["add", "remove", "replace", "move", "copy", "test"]
    path: str
    value: Any = None
    from_: str | None = Field(default=None, alias="from")

    @model_validator(mode="after")
    def _rfc6902_shape(self) -> Effect:
        has_value = "value" in self.model_fields_set
        if self.op in ("add", "replace", "test") and not has_value:
            raise ValueError(f"a {self.op!r} effect needs a 'value'")
        if self.op in ("move", "copy") and self.from_ is None:
            raise ValueError(f"a {self.op!r} effect needs a 'from' pointer")
        if self.op in ("remove", "move", "copy") and has_value:
            raise ValueError(f"a {self.op!r} effect takes no 'value'")
        if self.op not in ("move", "copy") and self.from_ is not None:
            raise ValueError(f"a {self.op!r} effect takes no 'from'")
        return self

    def operation(self) -> dict[str, Any]:
        """The operation as RFC 6902 JSON (templates not yet substituted)."""
        out: dict[str, Any] = {"op": self.op, "path": self.path}
        if self.from_ is not None:
            out["from"] = self.from_
        if "value" in self.model_fields_set:
            out["value"] = self.value
        return out


class ComputedEffect(_Strict):
    """Operations an expression computes: `expr` gives one RFC 6902 operation or a list of them (none when it gives
    nothing), e.g. one refund per payment of the order."""

    expr: str = Field(min_length=1, description="A JSONata expression giving an RFC 6902 operation or a list of them.")


def _effect_kind(value: Any) -> str:
    written: Any = value if isinstance(value, dict) else getattr(value, "model_fields_set", None) or ()
    return "union-computed" if "expr" in written else "union-operation"


EffectItem = Annotated[
    Annotated[Effect, Tag("union-operation")] | Annotated[ComputedEffect, Tag("union-computed")],
    Discriminator(_effect_kind),
]
"""An effect: an operation written out (`op`, `path`...), or one an expression computes (`expr`). (The tags are
left out of the paths a bad world's issues name.)"""

Precondition.model_rebuild()  # its `effects` are `EffectItem`s, defined after it


class Read(_Strict):
    """Where the output comes from: a pointer's value, or the list of a JSONPath query's matches."""

    pointer: str | None = Field(default=None, description="A JSON Pointer template, e.g. /orders/{order_id}.")
    jsonpath: str | None = Field(
        default=None, description='An RFC 9535 query, e.g. "$.products[?@.category == {category}]" (a list).'
    )
    expr: str | None = Field(
        default=None,
        min_length=1,
        description="A JSONata expression giving the output, any JSON value ($state is the state after the effects, "
        "$before the state before).",
    )
    key: str | None = Field(default=None, min_length=1, description="The output is {key: value} when given.")
    fields: list[str] | None = Field(
        default=None,
        min_length=1,
        description="Keep only these members of the value (of each match, for a list): the API's own view of a "
        "record, e.g. [product_id, name] of products that hold more.",
    )
    missing: str | None = Field(
        default=None, description="The error code when nothing is there (a jsonpath: when nothing matches)."
    )

    @model_validator(mode="after")
    def _one_source(self) -> Read:
        if [self.pointer, self.jsonpath, self.expr].count(None) != 2:
            raise ValueError("a read needs exactly one of pointer, jsonpath or expr")
        if self.fields is not None and len(set(self.fields)) != len(self.fields):
            raise ValueError("read.fields names a member twice; name each once")
        return self


class Grounding(_Strict):
    """How a tool's answer follows from the state (see the module docstring)."""

    let: dict[str, str] = Field(
        default_factory=dict,
        description="Named JSONata expressions, evaluated in order on the state before the call; each is $name in "
        "the expressions after it, e.g. {order: $lookup($state.orders, $args.order_id)}.",
    )
    preconditions: list[Precondition] = Field(default_factory=list, description="Checked in order, first.")
    effects: list[EffectItem] = Field(
        default_factory=list, description="Applied when the preconditions hold, all or none."
    )
    read: Read | None = Field(default=None, description="How the output follows from the state after the effects.")
    mode: GroundingMode | None = Field(
        default=None, description="exact (the default with a read): no model; guided: the model answers."
    )

    @model_validator(mode="after")
    def _exact_needs_read(self) -> Grounding:
        for name in self.let:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"let name {name!r} is not a JSONata variable name (letters, digits and _)")
            if name in RESERVED_NAMES:
                raise ValueError(f"let name {name!r} is one simia binds itself; choose another")
        if self.mode == "exact" and self.read is None:
            raise ValueError("mode exact needs a read (a tool with effects only is always guided)")
        return self

    @property
    def exact(self) -> bool:
        """Whether a call is answered without a model."""
        return self.read is not None and self.mode != "guided"
