"""OpenAPI Schema Objects (Swagger 2.0, OpenAPI 3.0 and 3.1) as self-contained JSON Schema 2020-12.

`SchemaConverter.convert` walks a schema whose `$ref`s are jsonref proxies (resolved lazily by
the maintained `jsonref` library, see `simia.sim.importers.openapi`) and returns a plain schema
with every reference inlined: tool schemas must stand alone, because simia embeds them in
larger schemas (the structured action, the simulator's answer) where a `#/...` pointer would
point somewhere else. On the way it converts what is OpenAPI rather than JSON Schema:

    nullable: true / x-nullable: true     ->  type: [T, "null"] (or anyOf with null)
    allOf: [objects]                      ->  one object, where the merge keeps the meaning (`object_root`)
    example: X                            ->  examples: [X]
    exclusiveMinimum: true (2.0, 3.0)     ->  the 2020-12 number form (simia.sim.importers.dialects)
    readOnly properties in a request, writeOnly ones in a response   ->  left out
    discriminator, xml, externalDocs, x-* extensions                 ->  dropped (no validation meaning)

`object_root` gives a response schema composed with `allOf` (or `anyOf`/`oneOf` of objects) the object root
MCP's outputSchema needs: `allOf` parts are merged into one object where that keeps the meaning (no keyword
set twice with different values, no `additionalProperties` beside another part's properties), and otherwise
the composition is kept under `type: object`.

A reference that recurses is cut where it comes back, as an empty schema of the referent's
type (`{"type": "object"}` for the usual tree of objects), and so is nesting deeper than
`max_depth`; each cut is recorded in `cuts`. A broken reference raises `jsonref.JsonRefError`.
"""

from __future__ import annotations

from typing import Any, Literal

from jsonref import JsonRef

from ..errors import SchemaTooLarge, UnsupportedSchema
from .dialects import SUBSCHEMA_LISTS, SUBSCHEMA_MAPS, SUBSCHEMA_SINGLE, upgrade_schema

__all__ = ["Direction", "SchemaConverter", "SchemaTooLarge", "UnsupportedSchema", "object_root", "plain", "ref_uri"]

Direction = Literal["request", "response"]

_DROPPED = {"discriminator", "xml", "externalDocs", "nullable", "x-nullable", "$schema", "$id", "$anchor"}
_DROPPED |= {"$dynamicAnchor", "$defs", "definitions", "id"}


def ref_uri(ref: JsonRef) -> str:
    """The absolute URI a jsonref proxy points to (the proxy forwards attribute access to its target)."""
    return str(JsonRef.full_uri.fget(ref))  # type: ignore[attr-defined]


def plain(value: Any) -> Any:
    """A deep copy without jsonref proxies (for data keywords: enum, default, examples, const)."""
    if isinstance(value, JsonRef):
        value = value.__subject__
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


class SchemaConverter:
    """Converts the schemas of one operation; `cuts` names the references cut (recursion or depth).

    Args:
        max_depth: nesting levels kept before a subschema is cut.
        max_nodes: schema objects one operation may produce (a guard against exponential inlining).
    """

    def __init__(self, *, max_depth: int = 24, max_nodes: int = 20_000) -> None:
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.nodes = 0
        self.cuts: dict[str, str] = {}
        self.loosened = 0
        """Response `oneOf`s read as `anyOf`: an answer that fits two overlapping branches (common in real
        descriptions) would fail `oneOf`, so no simulator could answer such a tool."""

    def convert(self, schema: Any, direction: Direction) -> dict[str, Any]:
        """The JSON Schema 2020-12 form of one OpenAPI Schema Object (a bare `true`/missing schema is `{}`)."""
        converted = self._node(schema, direction, (), 0)
        if isinstance(converted, bool):
            return {} if converted else {"not": {}}
        upgraded, _ = upgrade_schema(converted)  # 2.0/3.0 boolean exclusiveMinimum/Maximum
        return upgraded

    def _node(self, node: Any, direction: Direction, stack: tuple[str, ...], depth: int) -> Any:
        if isinstance(node, JsonRef):
            uri = ref_uri(node)
            target = node.__subject__  # raises JsonRefError on a broken reference
            if uri in stack:
                return self._cut(uri, target, "recursive reference, not expanded again")
            return self._node(target, direction, (*stack, uri), depth)
        if isinstance(node, bool):
            return node
        if not isinstance(node, dict):
            raise UnsupportedSchema(f"a schema must be an object, got {type(node).__name__}")
        if depth > self.max_depth:
            return self._cut(stack[-1] if stack else "(inline schema)", node, f"nested deeper than {self.max_depth}")
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise SchemaTooLarge(f"more than {self.max_nodes} schema objects after inlining every $ref")
        if node.get("type") == "file":
            raise UnsupportedSchema("file uploads (type: file) are not JSON")
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROPPED or key.startswith("x-"):
                continue
            if key == "example":
                out.setdefault("examples", [plain(value)])
            elif key in SUBSCHEMA_MAPS and isinstance(value, dict):
                out[key] = self._properties(key, value, direction, stack, depth)
            elif key in SUBSCHEMA_SINGLE:
                if isinstance(value, list):  # array-form items of an older draft
                    out[key] = [self._node(v, direction, stack, depth + 1) for v in value]
                else:
                    out[key] = self._node(value, direction, stack, depth + 1)
            elif key in SUBSCHEMA_LISTS and isinstance(value, list):
                out[key] = [self._node(v, direction, stack, depth + 1) for v in value]
            else:
                out[key] = plain(value)
        if "required" in out and "properties" in out and isinstance(out["required"], list):
            hidden = set(_property_names(node.get("properties"))) - set(out["properties"])
            out["required"] = [name for name in out["required"] if name not in hidden]
            if not out["required"]:
                del out["required"]
        if isinstance(out.get("allOf"), list) and out["allOf"]:
            out = _merge_all_of(out, out["allOf"]) or out
        if direction == "response" and isinstance(out.get("oneOf"), list) and "anyOf" not in out:
            out["anyOf"] = out.pop("oneOf")
            self.loosened += 1
        if node.get("nullable") is True or node.get("x-nullable") is True:
            out = _nullable(out)
        return out

    def _properties(
        self, key: str, value: dict[str, Any], direction: Direction, stack: tuple[str, ...], depth: int
    ) -> dict[str, Any]:
        hide = "readOnly" if direction == "request" else "writeOnly"
        out: dict[str, Any] = {}
        for name, sub in value.items():
            if key == "properties" and _flag(sub, hide):
                continue  # the client never sends readOnly properties, nor receives writeOnly ones
            out[str(name)] = self._node(sub, direction, stack, depth + 1)
        return out

    def _cut(self, uri: str, target: Any, why: str) -> dict[str, Any]:
        name = uri.rsplit("/", 1)[-1] or uri
        self.cuts.setdefault(name, why)
        kind = target.get("type") if isinstance(target, dict) else None
        cut: dict[str, Any] = {"type": kind} if isinstance(kind, str) and kind != "null" else {}
        cut["description"] = f"A {name} ({why}; its fields are not listed)."
        return cut


_COMPOSED = ("allOf", "anyOf", "oneOf")
_OBJECT_KEYWORDS = ("properties", "additionalProperties", "patternProperties", "required", "minProperties")
_CLOSED = ("additionalProperties", "patternProperties", "unevaluatedProperties")
_FIRST_WINS = ("title", "description")


def object_root(schema: dict[str, Any]) -> dict[str, Any] | None:
    """`schema` with `type: object` at its root when every instance it accepts is an object (None otherwise);
    a root `allOf` is merged into one object schema where the merge keeps the meaning.

    Args:
        schema: a converted (plain, reference-free) JSON Schema; not modified.
    """
    kind = schema.get("type")
    if kind not in (None, "object"):
        return None
    parts = schema.get("allOf")
    if isinstance(parts, list) and parts:
        merged = _merge_all_of(schema, parts)
        if merged is not None:
            return merged
    own = kind == "object" or any(key in schema for key in _OBJECT_KEYWORDS)
    branches = [b for key in ("anyOf", "oneOf") if isinstance(schema.get(key), list) for b in schema[key]]
    composed_objects = bool(branches) and all(isinstance(b, dict) and object_root(b) is not None for b in branches)
    all_of_object = isinstance(parts, list) and any(isinstance(p, dict) and object_root(p) for p in parts)
    if own or composed_objects or all_of_object:
        return {"type": "object", **{k: v for k, v in schema.items() if k != "type"}}
    return None


def _merge_all_of(schema: dict[str, Any], parts: list[Any]) -> dict[str, Any] | None:
    """The object schema equal to `schema`'s own keywords and its `allOf` parts together (None when no
    such merge keeps the meaning: a part that is not an object, a keyword two parts set differently)."""
    own = {k: v for k, v in schema.items() if k != "allOf"}
    pieces = [own]
    for part in parts:
        root = object_root(part) if isinstance(part, dict) else None
        if root is None:
            return None
        pieces.append({k: v for k, v in root.items() if k != "examples"})  # a part's example is of the part only
    with_properties = [p for p in pieces if p.get("properties")]
    if len(with_properties) > 1 and any(key in p for p in pieces for key in _CLOSED):
        return None  # `additionalProperties: false` in one part refuses the other parts' properties
    out: dict[str, Any] = {"type": "object"}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for piece in pieces:
        for key, value in piece.items():
            if key == "type":
                continue
            if key == "properties" and isinstance(value, dict):
                for name, sub in value.items():
                    properties[name] = sub if properties.get(name, sub) == sub else {"allOf": [properties[name], sub]}
            elif key == "required" and isinstance(value, list):
                required += [name for name in value if name not in required]
            elif key in _FIRST_WINS:
                out.setdefault(key, value)
            elif key in out and out[key] != value:
                return None
            else:
                out[key] = value
    if properties:
        out["properties"] = properties
    if required:
        out["required"] = required
    return out


def _property_names(properties: Any) -> list[str]:
    return [str(k) for k in properties] if isinstance(properties, dict) else []


def _flag(schema: Any, key: str) -> bool:
    """Whether `schema` (possibly a proxy; a broken one counts as unset here) has `key: true`."""
    try:
        return isinstance(schema, dict) and schema.get(key) is True
    except Exception:  # a broken $ref: reported when the property itself is converted
        return False


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0 `nullable` / Swagger `x-nullable`: null is allowed too."""
    kind = schema.get("type")
    if isinstance(kind, str):
        schema["type"] = [kind, "null"]
    elif isinstance(kind, list):
        if "null" not in kind:
            schema["type"] = [*kind, "null"]
    else:
        return {"anyOf": [schema, {"type": "null"}]}
    if isinstance(schema.get("enum"), list) and None not in schema["enum"]:
        schema["enum"] = [*schema["enum"], None]
    return schema
