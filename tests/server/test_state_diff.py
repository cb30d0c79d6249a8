"""The viewer's state diff: added, removed and changed JSON paths between two states."""

from __future__ import annotations

from simia.server.ui.diff import Change, state_diff


def test_a_diff_names_each_added_removed_and_changed_path_in_document_order() -> None:
    before = {"items": {"milk": {"qty": 0}, "eggs": {"qty": 6}}, "log": ["a", "b"], "open": True}
    after = {"items": {"milk": {"qty": 4}, "tea/green": {"qty": 1}}, "log": ["a"], "open": "yes"}
    assert state_diff(before, after) == [
        Change("changed", "/items/milk/qty", 0, 4),
        Change("removed", "/items/eggs", before={"qty": 6}),
        Change("added", "/items/tea~1green", after={"qty": 1}),
        Change("removed", "/log/1", before="b"),
        Change("changed", "/open", True, "yes"),
    ]


def test_equal_states_have_no_diff_and_a_type_change_is_a_change() -> None:
    assert state_diff({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}) == []
    assert state_diff({"n": 1}, {"n": 1.0}) == [Change("changed", "/n", 1, 1.0)]
    assert state_diff([], [1]) == [Change("added", "/0", after=1)]
    assert state_diff(1, 2) == [Change("changed", "/", 1, 2)]
