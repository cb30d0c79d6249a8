"""Bring JSON Schemas written for older drafts (04, 06, 07, 2019-09) to 2020-12, the dialect simia checks.

MCP's default dialect is JSON Schema 2020-12, and the loader checks tool schemas against its
metaschema. A few draft-04/07 keywords break that check or change meaning there; this module
rewrites exactly those, keeps everything else as written, and says what it changed:

    exclusiveMinimum: true, minimum: 5     ->  exclusiveMinimum: 5    (draft-04 boolean form)
    items: [A, B], additionalItems: C      ->  prefixItems: [A, B], items: C
    dependencies: {a: [b], c: {...}}       ->  dependentRequired / dependentSchemas
    $schema: <an older draft>              ->  removed (the schema now is 2020-12, MCP's default)
    pattern: a regex Python cannot compile ->  removed (the metaschema check compiles every pattern;
                                              e.g. ECMAScript Unicode property classes)

`definitions` and `$ref`s into it stay: a JSON Pointer resolves the same way in 2020-12.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["SUBSCHEMA_LISTS", "SUBSCHEMA_MAPS", "SUBSCHEMA_SINGLE", "upgrade_schema"]

SUBSCHEMA_MAPS = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas")
"""Keywords whose value maps names to subschemas."""
SUBSCHEMA_SINGLE = (
    "additionalProperties",
    "additionalItems",
    "items",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
"""Keywords whose value is one subschema (`items` may also be a list in older drafts)."""
SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
"""Keywords whose value is a list of subschemas."""

_OLD_DRAFT = re.compile(r"json-schema\.org/(draft-0[3-7]|draft/2019-09)/")


def upgrade_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A 2020-12 copy of `schema` and what was changed (empty when it already was 2020-12).

    Args:
        schema: a JSON Schema object (not modified).

    Returns:
        The upgraded copy and one line per kind of change, e.g. "draft-07 $schema removed".
    """
    changes: list[str] = []
    upgraded = _upgrade(schema, changes)
    assert isinstance(upgraded, dict)
    return upgraded, sorted(set(changes))


def _upgrade(node: Any, changes: list[str]) -> Any:
    if not isinstance(node, dict):
        return node
    out = dict(node)
    if isinstance(out.get("patternProperties"), dict):
        out["patternProperties"] = dict(out["patternProperties"])
    dialect = out.get("$schema")
    if isinstance(dialect, str) and (match := _OLD_DRAFT.search(dialect)):
        del out["$schema"]
        changes.append(f"{match.group(1).replace('draft/', '')} $schema removed (upgraded to 2020-12)")
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        flag = out.get(bound)
        if isinstance(flag, bool):
            del out[bound]
            if flag and limit in out:
                out[bound] = out.pop(limit)
            changes.append(f"boolean {bound} turned into the 2020-12 number form")
    pattern = out.get("pattern")
    if isinstance(pattern, str) and not _compiles(pattern):
        del out["pattern"]
        changes.append(f"pattern {pattern[:60]!r} removed (not a regular expression Python can compile)")
    if isinstance(out.get("patternProperties"), dict):
        bad = [key for key in out["patternProperties"] if not _compiles(str(key))]
        for key in bad:
            del out["patternProperties"][key]
            changes.append(f"patternProperties {key[:60]!r} removed (not a regular expression Python can compile)")
    items = out.get("items")
    if isinstance(items, list):
        out["prefixItems"] = items
        del out["items"]
        if "additionalItems" in out:
            out["items"] = out.pop("additionalItems")
        changes.append("array-form items turned into prefixItems")
    elif "additionalItems" in out:
        del out["additionalItems"]  # ignored next to a single `items` in every draft
        changes.append("additionalItems without array-form items removed (it had no effect)")
    dependencies = out.pop("dependencies", None)
    if isinstance(dependencies, dict):
        required = {k: v for k, v in dependencies.items() if isinstance(v, list)}
        schemas = {k: v for k, v in dependencies.items() if not isinstance(v, list)}
        if required:
            out["dependentRequired"] = {**required, **out.get("dependentRequired", {})}
        if schemas:
            out["dependentSchemas"] = {**schemas, **out.get("dependentSchemas", {})}
        changes.append("dependencies split into dependentRequired and dependentSchemas")
    for key in SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: _upgrade(sub, changes) for name, sub in out[key].items()}
    for key in SUBSCHEMA_SINGLE:
        if key in out:
            out[key] = _upgrade(out[key], changes)
    for key in SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_upgrade(sub, changes) for sub in out[key]]
    return out


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True
