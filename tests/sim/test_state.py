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


def _large_base() -> Any:
    from simia.sim.world import as_state

    orders = {f"O{i}": {"status": "pending", "items": [{"id": i, "q": 1}]} for i in range(1500)}
    return as_state({"orders": orders, "users": {f"U{i}": {"name": f"n{i}"} for i in range(50)}, "meta": {"v": 1}})


def _random_history(rng: random.Random) -> list[list[dict[str, Any]]]:
    """Patches into a large collection (its records, nested values, adds, removes, copies, moves, tests) and
    beside it; some of them do not apply."""
    history = []
    for _ in range(rng.randint(1, 4)):
        patch: list[dict[str, Any]] = []
        for _ in range(rng.randint(1, 3)):
            key = f"O{rng.randrange(1500)}" if rng.random() < 0.7 else rng.choice(["N1", "C1", "O1"])
            number = int(key[1:]) if key.startswith("O") else 1
            patch.append(
                rng.choice(
                    [
                        {"op": "replace", "path": f"/orders/{key}/status", "value": rng.choice(["a", "b"])},
                        {"op": "add", "path": f"/orders/N{rng.randrange(3)}", "value": {"status": "new"}},
                        {"op": "remove", "path": f"/orders/{key}"},
                        {"op": "replace", "path": f"/orders/{key}/items/0/q", "value": rng.randrange(9)},
                        {"op": "replace", "path": f"/users/U{rng.randrange(50)}/name", "value": "x"},
                        {"op": "replace", "path": "/meta/v", "value": rng.randrange(9)},
                        {"op": "test", "path": f"/orders/{key}/items/0/id", "value": number},
                        {"op": rng.choice(["copy", "move"]), "from": f"/orders/{key}", "path": "/orders/C1"},
                    ]
                )
            )
        history.append(patch)
    return history


def test_a_history_parked_without_copying_its_large_collections_unparks_to_what_apply_patches_makes() -> None:
    """`parked_patches` (a fork's start: O(the records changed), not O(the collection)) gives the same state,
    digest and touched set as `apply_patches`, fails where it fails, and leaves the base as it was."""
    from simia.sim.world import Parked, apply_patches, park, parked_patches

    base, rng, compared = _large_base(), random.Random(7), 0
    before = copy.deepcopy(dict(base))
    for _ in range(400):
        history = _random_history(rng)
        try:
            whole = apply_patches(base, history)
        except StateError:
            with pytest.raises(StateError):
                parked_patches(base, history)
            continue
        parked = parked_patches(base, history)
        if parked is None:  # nothing changed, or nothing large written: the caller is told to use apply_patches
            assert not isinstance(park(whole), Parked), history
            continue
        again = parked.unpark()
        assert (dict(again), again.digest, again.touched) == (dict(whole), whole.digest, whole.touched), history
        compared += 1
    assert compared > 200
    assert dict(base) == before


def test_parked_patches_declines_what_reads_or_writes_a_large_collection_whole() -> None:
    from simia.sim.world import as_state, parked_patches

    base = _large_base()
    assert parked_patches(base, [[{"op": "replace", "path": "/orders", "value": {}}]]) is None
    assert parked_patches(base, [[{"op": "copy", "from": "/orders", "path": "/backup"}]]) is None
    assert parked_patches(base, [[{"op": "replace", "path": "/meta/v", "value": 2}]]) is None  # nothing large
    assert parked_patches(base, []) is None
    assert parked_patches(base, [[{"op": "copy", "from": "/ord~1ers", "path": "/backup"}]]) is None  # not large
    slashed = as_state({"a/b": {f"K{i}": {"n": i} for i in range(1500)}})
    written = [{"op": "replace", "path": "/a~1b/K1/n", "value": 0}, {"op": "copy", "from": "/a~1b", "path": "/all"}]
    assert parked_patches(slashed, [written]) is None  # an escaped name is still the large collection, read whole
    parked = parked_patches(base, [[{"op": "replace", "path": "/orders/O3/status", "value": "done"}]])
    assert parked is not None and parked.values == {("orders", "O3"): {"status": "done", "items": [{"id": 3, "q": 1}]}}
