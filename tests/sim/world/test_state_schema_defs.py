"""A state schema that keeps its record schemas in `$defs` (a pydantic model's JSON Schema, as `simia import tau2`
writes it) is checked on the records a patch touches, with those definitions resolving as they do in the root:
a write that breaks a record is refused with the record named, and the cost follows the write, not the state."""

from __future__ import annotations

import pytest
from simia.sim.errors import StateError
from simia.sim.world import apply_patch, as_state
from simia.sim.world import state as state_module

SCHEMA = {
    "$defs": {
        "Order": {
            "type": "object",
            "properties": {"status": {"enum": ["pending", "cancelled"]}, "items": {"$ref": "#/$defs/Items"}},
            "required": ["status", "items"],
        },
        "Items": {"type": "array", "items": {"type": "string"}},
    },
    "title": "RetailDB",
    "type": "object",
    "properties": {
        "orders": {"type": "object", "title": "Orders", "additionalProperties": {"$ref": "#/$defs/Order"}},
    },
    "required": ["orders"],
}
STATE = as_state({"orders": {f"#W{i}": {"status": "pending", "items": ["a"]} for i in range(1000)}})


def test_a_write_that_breaks_a_record_defined_in_defs_is_refused_naming_it() -> None:
    ok = apply_patch(STATE, [{"op": "replace", "path": "/orders/#W1/status", "value": "cancelled"}], SCHEMA)
    assert ok["orders"]["#W1"]["status"] == "cancelled"
    with pytest.raises(StateError, match=r"\$\.orders\.#W2\.items"):
        apply_patch(STATE, [{"op": "replace", "path": "/orders/#W2/items", "value": [1]}], SCHEMA)


def test_only_the_touched_record_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []
    real = state_module.validate_instance

    def counting(schema: dict[str, object], instance: object, **kw: object) -> list[str]:
        seen.append(instance)
        return real(schema, instance)

    monkeypatch.setattr(state_module, "validate_instance", counting)
    apply_patch(STATE, [{"op": "replace", "path": "/orders/#W7/status", "value": "cancelled"}], SCHEMA)
    assert seen == [{"status": "cancelled", "items": ["a"]}]
