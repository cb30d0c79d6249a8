"""World state helpers: the copy-on-write RFC 6902 patch agrees with the reference implementation."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import jsonpatch
import jsonpointer
import pytest
from simia.sim.errors import StateError
from simia.sim.world import apply_patch

STATE: dict[str, Any] = {
    "orders": {"o1": {"status": "pending", "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]}},
    "users": [{"id": "u1", "tags": ["x"]}, {"id": "u2", "tags": []}],
    "odd/key": {"~tilde": 1},
    "count": 3,
}

PATHS = [
    "", "/orders", "/orders/o1", "/orders/o1/status", "/orders/o1/items", "/orders/o1/items/0",
    "/orders/o1/items/1/qty", "/orders/o1/items/2", "/orders/o1/items/-", "/orders/o2", "/orders/o1/items/01",
    "/users/0/tags/-", "/users/1", "/users/5", "/odd~1key/~0tilde", "/odd~1key", "/count", "/count/x", "/nope/deep",
    "/users/x", "orders",
]  # fmt: skip
VALUES: list[Any] = [0, "s", None, {"n": [1, 2]}, [1, {"a": 1}], True]


def reference(state: dict[str, Any], patch: list[dict[str, Any]]) -> Any:
    """jsonpatch's answer, or the exception type it raised."""
    try:
        return jsonpatch.apply_patch(state, patch, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError, KeyError, IndexError):
        return StateError


def ours(state: dict[str, Any], patch: list[dict[str, Any]]) -> Any:
    try:
        return apply_patch(state, patch, None)
    except StateError as exc:
        if "non-object" in str(exc):  # a valid patch that made the state a non-object: compare the value
            return "non-object"
        return StateError


def random_op(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["add", "remove", "replace", "move", "copy", "test"])
    op: dict[str, Any] = {"op": kind, "path": rng.choice(PATHS)}
    if kind in ("add", "replace", "test"):
        op["value"] = copy.deepcopy(rng.choice([*VALUES, STATE["count"], "pending"]))
    if kind in ("move", "copy"):
        op["from"] = rng.choice(PATHS)
    return op


@pytest.mark.parametrize("seed", range(8))
def test_agrees_with_jsonpatch_and_never_modifies_the_input(seed: int) -> None:
    rng = random.Random(seed)
    before = json.dumps(STATE, sort_keys=True)
    agreed = applied = 0
    for _ in range(1500):
        patch = [random_op(rng) for _ in range(rng.randint(1, 3))]
        expected, got = reference(STATE, patch), ours(STATE, patch)
        if got == "non-object":
            assert not isinstance(expected, dict) and expected is not StateError, patch
        else:
            assert got == expected, patch
        agreed += 1
        applied += isinstance(got, dict)
        assert json.dumps(STATE, sort_keys=True) == before, f"the input was modified by {patch}"
    assert applied > 100 and agreed == 1500  # a mix of patches that apply and that fail


def test_unchanged_parts_are_shared_and_a_later_patch_leaves_earlier_states_alone() -> None:
    first = apply_patch(STATE, [{"op": "replace", "path": "/orders/o1/status", "value": "shipped"}], None)
    assert first["users"] is STATE["users"]  # untouched subtree shared
    assert first["orders"] is not STATE["orders"] and STATE["orders"]["o1"]["status"] == "pending"
    second = apply_patch(first, [{"op": "add", "path": "/users/0/tags/-", "value": "y"}], None)
    assert first["users"][0]["tags"] == ["x"] and second["users"][0]["tags"] == ["x", "y"]
    value = {"nested": [1]}
    third = apply_patch(second, [{"op": "add", "path": "/extra", "value": value}], None)
    value["nested"].append(2)  # the caller's patch value is copied, not shared
    assert third["extra"] == {"nested": [1]}


def test_errors_name_the_operation_and_the_path() -> None:
    with pytest.raises(StateError, match=r"operation 1 \(remove /orders/o9\): nothing at /orders/o9"):
        apply_patch(STATE, [{"op": "test", "path": "/count", "value": 3}, {"op": "remove", "path": "/orders/o9"}], None)
    with pytest.raises(StateError, match="index 7 is out of range"):
        apply_patch(STATE, [{"op": "add", "path": "/users/7", "value": {}}], None)
    with pytest.raises(StateError, match="unknown op 'merge'"):
        apply_patch(STATE, [{"op": "merge", "path": "/count"}], None)
    with pytest.raises(StateError, match="breaks state_schema"):
        schema = {"type": "object", "properties": {"count": {"type": "integer"}}}
        apply_patch(STATE, [{"op": "replace", "path": "/count", "value": "three"}], schema)


def test_a_history_applied_at_once_equals_its_patches_one_by_one_and_copies_each_container_once() -> None:
    from simia.sim.world import apply_patch, apply_patches, as_state

    base = as_state({"orders": {f"o{i}": {"status": "pending", "n": i} for i in range(1000)}, "meta": {"v": 1}})
    patches = [[{"op": "replace", "path": f"/orders/o{i}/status", "value": "done"}] for i in range(0, 50, 5)]
    patches += [
        [],
        [{"op": "add", "path": "/orders/new", "value": {"status": "new"}}],
        [{"op": "remove", "path": "/orders/o1"}],
    ]
    one_by_one = base
    for patch in patches:
        one_by_one = apply_patch(one_by_one, patch, None)
    folded = apply_patches(base, patches)
    assert folded == one_by_one and folded.digest == one_by_one.digest and folded.touched == one_by_one.touched
    assert folded.base is base and folded["meta"] is base["meta"] and folded["orders"]["o2"] is base["orders"]["o2"]
    assert base["orders"]["o0"]["status"] == "pending" and "new" not in base["orders"]  # the base is never written
    assert apply_patches(base, [[], []]) is base
