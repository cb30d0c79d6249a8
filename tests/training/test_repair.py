"""`repair_json`: model-written tool arguments are repaired outside strings and never inside them."""

from __future__ import annotations

from typing import Any

import pytest
from simia.training.synth import repair_json


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"note": "None left", "qty": None}', {"note": "None left", "qty": None}),
        ("{'note': 'True story, False alarm',}", {"note": "True story, False alarm"}),
        ('{"sql": "a, ]", "ok": True,}', {"sql": "a, ]", "ok": True}),
        ('{"quote": "it\'s", "n": 1,}', {"quote": "it's", "n": 1}),
    ],
)
def test_the_text_inside_strings_is_never_rewritten(text: str, value: Any) -> None:
    assert repair_json(text) == (value, True)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"name": "rice", "qty": 2,}', {"name": "rice", "qty": 2}),
        ('{"items": [1, 2, 3,],}', {"items": [1, 2, 3]}),
        ("{'name': 'rice'}", {"name": "rice"}),
        ('{"gift": True, "wrap": False, "note": None}', {"gift": True, "wrap": False, "note": None}),
        ('```json\n{"name": "rice"}\n```', {"name": "rice"}),
    ],
)
def test_broken_json_is_repaired_and_flagged(text: str, value: Any) -> None:
    assert repair_json(text) == (value, True)


def test_valid_json_is_parsed_as_is_and_not_flagged() -> None:
    assert repair_json('{"note": "None left", "ok": true}') == ({"note": "None left", "ok": True}, False)


@pytest.mark.parametrize("text", ["", "not json at all", "call get_item with rice"])
def test_text_with_no_json_in_it_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="not JSON even after repair"):
        repair_json(text)
