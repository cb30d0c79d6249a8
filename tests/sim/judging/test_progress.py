"""Progress from the explicit state: scripted policies drive real episodes of the mock and retail worlds through a
server (MCP over HTTP, a flawless simulator, a rules-only judge), and the verdict carries the curve."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client
from simia.sim import load_world
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.errors import BackendRejected, WorldError
from simia.sim.judging import Check, EpisodeView, Judge, progress_curve
from simia.sim.records import EventRecord
from simia.sim.verdict import ProgressCheck, ProgressCurve, ProgressStep, Verdict
from simia.sim.world import ABSENT, apply_patches, is_missing, resolve_pointer
from simia.testing.mock_world import mock_world_answer, parse_simulator_prompt

ROOT = Path(__file__).resolve().parents[3]
Call = tuple[str, dict[str, Any]]


def qty(name: str, value: int) -> Call:
    return ("set_quantity", {"name": name, "qty": value})


async def play(server: Any, world: str, task: str, calls: list[Call]) -> Verdict:
    """One episode: the scripted policy's calls over MCP, then /end; the verdict the server stored."""
    async with httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": world, "task": task})).json()
        async with Client(episode["mcp_url"]) as client:
            for tool, arguments in calls:
                await client.call_tool(tool, arguments)
        ended = (await http.post(f"/v1/episodes/{episode['id']}/end", json={})).json()
    return Verdict.model_validate(ended["verdict"])


# weekly_restock: apples 6 (weight 2), milk 2 (1), rice stays 2 (1, kept: it holds at the start); rice 0 forbidden.
RESTOCK: dict[str, list[Call]] = {
    "nothing": [],
    "half": [qty("apple", 6)],
    "undo": [qty("rice", 3)],
    "full": [qty("apple", 6), qty("milk", 2)],
}


async def test_the_mock_restock_scores_half_a_task_between_0_and_1_and_an_undo_below_doing_nothing(
    make_server: Any,
) -> None:
    async with make_server(judge=Judge(None)) as server:
        verdicts = {name: await play(server, "mock", "weekly_restock", calls) for name, calls in RESTOCK.items()}
    curves = {name: v.progress for name, v in verdicts.items()}
    assert all(curve is not None and curve.start == 0.25 for curve in curves.values())
    ends = {name: curve.end for name, curve in curves.items() if curve}
    assert ends == {"nothing": 0.25, "half": 0.75, "undo": -0.25, "full": 1.0}
    assert 0 < ends["half"] < 1 and ends["undo"] < ends["nothing"]
    assert {name: v.reward for name, v in verdicts.items()} == {"nothing": 0, "half": 0, "undo": 0, "full": 1}
    assert curves["half"] == ProgressCurve(
        start=0.25,
        end=0.75,
        gamma=1.0,
        checks=[
            ProgressCheck(pointer="/items/apple/qty", expected=6, weight=2.0, at_start=False, at_end=True),
            ProgressCheck(pointer="/items/milk/qty", expected=2, weight=1.0, at_start=False, at_end=False),
            ProgressCheck(pointer="/items/rice/qty", expected=2, weight=1.0, at_start=True, at_end=True),
            ProgressCheck(pointer="/items/rice/qty", expected=0, weight=1.0, forbidden=True),
        ],
        steps=[ProgressStep(seq=1, progress=0.75, reward=0.5, achieved=["/items/apple/qty"])],
    )
    undo = curves["undo"]
    assert undo is not None and undo.steps == [
        ProgressStep(seq=1, progress=-0.25, reward=-0.5, broken=["/items/rice/qty"])
    ]


async def test_reaching_a_forbidden_state_fails_the_outcome_and_costs_progress(make_server: Any) -> None:
    async with make_server(judge=Judge(None)) as server:
        verdict = await play(server, "mock", "weekly_restock", [qty("apple", 6), qty("milk", 2), qty("rice", 0)])
    assert verdict.reward == 0 and verdict.checks == ["rules"]
    assert verdict.reasons == [
        "rule /items/rice/qty: expected 2, found 0",
        "forbidden /items/rice/qty: the state it must never reach held after call 3",
    ]
    assert verdict.progress is not None and verdict.progress.steps[-1] == ProgressStep(
        seq=3, progress=0.25, reward=-0.75, broken=["/items/rice/qty"], violated=["/items/rice/qty"]
    )


def retail_answer(request: CompletionRequest) -> dict[str, Any]:
    """A flawless simulator for the retail calls the scripted policies make (reads answer without a change)."""
    tool, args, _ = parse_simulator_prompt(str(request.messages[1]["content"]))
    order = args.get("order_id", "")
    output: dict[str, Any] = {"found": True}
    patch: list[dict[str, Any]] = []
    if tool == "find_user_by_email":
        output = {"user_id": "mia_lee_1021"}
    elif tool == "cancel_pending_order":
        output = {"order_id": order, "status": "cancelled", "refund_amount": 43.99}
        patch = [{"op": "replace", "path": f"/orders/{order}/status", "value": "cancelled"}]
    elif tool == "modify_pending_order_address":
        address = {k: args.get(k, "") for k in ("address1", "address2", "city", "state", "country", "zip")}
        output = {"order_id": order, "address": address}
        patch = [{"op": "replace", "path": f"/orders/{order}/address", "value": address}]
    return {"is_error": False, "error_code": None, "message": "ok", "output": output, "state_patch": patch}


MIA = ("find_user_by_email", {"email": "mia.lee@example.com"})
CANCEL_1001 = ("cancel_pending_order", {"order_id": "#W1001", "reason": "no longer needed"})
NEW_ADDRESS = {"address1": "401 Congress Ave", "address2": "", "city": "Austin", "state": "TX", "country": "USA"}
READDRESS_1004 = ("modify_pending_order_address", {"order_id": "#W1004", **NEW_ADDRESS, "zip": "78701"})
# cancel_and_readdress: #W1001 cancelled (2), #W1004 address1 (2) and address2 "" (1), #W1004 still pending (1, kept)
RETAIL: dict[str, list[Call]] = {
    "nothing": [MIA],
    "half": [MIA, CANCEL_1001],
    "undo": [MIA, ("cancel_pending_order", {"order_id": "#W1004", "reason": "no longer needed"})],
    "full": [MIA, CANCEL_1001, READDRESS_1004],
}


async def test_the_retail_task_scores_half_undo_and_full_solutions_by_their_weighted_checks(make_server: Any) -> None:
    async with make_server(backend=FunctionBackend(retail_answer), judge=Judge(None)) as server:
        verdicts = {n: await play(server, "retail", "cancel_and_readdress", c) for n, c in RETAIL.items()}
    ends = {name: v.progress.end for name, v in verdicts.items() if v.progress}
    assert ends == pytest.approx({"nothing": 1 / 6, "half": 3 / 6, "undo": -2 / 6, "full": 1.0})
    assert 0 < ends["half"] < 1 and ends["undo"] < ends["nothing"]
    assert {name: v.reward for name, v in verdicts.items()} == {"nothing": 0, "half": 0, "undo": 0, "full": 1}
    undo = verdicts["undo"].progress
    assert undo is not None and [(s.seq, s.broken, s.violated) for s in undo.steps] == [
        (1, [], []),
        (2, ["/orders/#W1004/status"], ["/orders/#W1004/status"]),
    ]
    assert "forbidden /orders/#W1004/status: the state it must never reach held after call 2" in (
        verdicts["undo"].reasons
    )


async def test_with_gamma_1_the_shaped_rewards_sum_to_the_progress_gained(make_server: Any) -> None:
    wandering = [qty("milk", 2), qty("rice", 5), qty("apple", 6), qty("milk", 1), qty("rice", 2), qty("milk", 2)]
    async with make_server(judge=Judge(None)) as server:
        verdict = await play(server, "mock", "weekly_restock", wandering)
    curve = verdict.progress
    assert curve is not None and [s.seq for s in curve.steps] == [1, 2, 3, 4, 5, 6]
    assert [s.progress for s in curve.steps] == [0.5, 0.0, 0.5, 0.25, 0.75, 1.0]
    assert sum(curve.rewards) == pytest.approx(curve.end - curve.start) and curve.end - curve.start == 0.75


async def test_a_discounted_reward_is_gamma_times_the_next_potential_minus_this_one() -> None:
    mock = load_world(ROOT / "tool_specs" / "mock")
    task = mock.task("weekly_restock")
    assert task is not None
    events = [
        EventRecord("set_quantity", {}, {}, "", False, state_patch=patch, seq=seq)
        for seq, patch in enumerate([[_set("apple", 6)], [], [_set("milk", 2)]], start=1)
    ]
    view = EpisodeView(mock.initial_state, mock.initial_state, events=events)
    curve = (await Judge(None, gamma=0.5).judge(mock, task, view)).progress
    assert curve is not None and curve.gamma == 0.5
    assert [(s.progress, s.reward) for s in curve.steps] == [(0.75, 0.5 * 0.75 - 0.25), (0.75, -0.375), (1.0, -0.25)]


async def test_an_infra_failed_call_changes_nothing_and_earns_0(make_server: Any) -> None:
    def flaky(request: CompletionRequest) -> dict[str, Any]:
        if '"milk"' in str(request.messages[1]["content"]).split("Arguments: ", 1)[1].split("\n", 1)[0]:
            raise BackendRejected("HTTP 400: injected failure")
        return mock_world_answer(request)

    async with make_server(backend=FunctionBackend(flaky), judge=Judge(None, gamma=0.9)) as server:
        verdict = await play(server, "mock", "weekly_restock", [qty("apple", 6), qty("milk", 2)])
    assert verdict.progress is not None and verdict.progress.steps == [
        ProgressStep(seq=1, progress=0.75, reward=0.9 * 0.75 - 0.25, achieved=["/items/apple/qty"]),
        ProgressStep(seq=2, progress=0.75, reward=0.0, infra=True),
    ]
    assert verdict.infra_failures == 1 and verdict.training_reward() is None


async def test_an_episode_without_checks_has_no_progress_not_zero(make_server: Any) -> None:
    async with make_server(judge=Judge(None)) as server, httpx.AsyncClient(base_url=server.url) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock"})).json()
        ended = (await http.post(f"/v1/episodes/{episode['id']}/end", json={})).json()
    assert ended["verdict"]["progress"] is None and ended["verdict"]["status"] == "unjudged"


async def test_a_check_whose_pointer_resolves_to_nothing_does_not_hold_and_the_verdict_says_which() -> None:
    mock = load_world(ROOT / "tool_specs" / "mock")
    task = mock.tasks[0].model_copy(update={"expected_state": {"/items/banana/qty": 6, "/items/milk/qty": 0}})
    verdict = await Judge(None).judge(mock, task, EpisodeView(mock.initial_state, mock.initial_state, events=[]))
    assert verdict.reasons == ["rule /items/banana/qty: expected 6, but nothing is at this pointer"]
    assert verdict.progress == ProgressCurve(
        start=0.5,
        end=0.5,
        checks=[
            ProgressCheck(pointer="/items/banana/qty", expected=6, missing=True),
            ProgressCheck(pointer="/items/milk/qty", expected=0, at_start=True, at_end=True),
        ],
    )


async def test_a_world_marks_forbidden_states_for_all_its_tasks(tmp_path: Path) -> None:
    folder = tmp_path / "mock"
    shutil.copytree(ROOT / "tool_specs" / "mock", folder)
    world_yaml = folder / "world.yaml"
    world_yaml.write_text(
        world_yaml.read_text().replace("  window: 4\n", '  window: 4\n  forbidden_state: {"/items/apple/qty": 0}\n')
    )
    mock = load_world(folder)
    task = mock.task("restock_milk")
    assert task is not None
    events = [EventRecord("set_quantity", {}, {}, "", False, state_patch=[_set("apple", 0)], seq=1)]
    verdict = await Judge(None).judge(mock, task, EpisodeView(mock.initial_state, mock.initial_state, events=events))
    assert verdict.reward == 0 and verdict.reasons[-1] == (
        "forbidden /items/apple/qty: the state it must never reach held after call 1"
    )
    assert verdict.progress is not None and verdict.progress.end == -1.0
    assert [c.pointer for c in verdict.progress.checks if c.forbidden] == ["/items/apple/qty"]


async def test_a_view_of_two_states_has_no_curve_but_still_fails_a_forbidden_state_reached() -> None:
    mock = load_world(ROOT / "tool_specs" / "mock")
    task = mock.task("weekly_restock")
    assert task is not None
    final = json.loads(json.dumps(mock.initial_state))
    final["items"]["rice"]["qty"] = 0
    verdict = await Judge(None).judge(mock, task, EpisodeView(mock.initial_state, final))
    assert (verdict.progress, verdict.reward) == (None, 0)
    assert verdict.reasons[-1] == "forbidden /items/rice/qty: the state it must never reach holds at the end"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"weights": {"/items/milk/qty": -1}}, "task 'bad': the weight of '/items/milk/qty' is -1.0"),
        ({"weights": {"/items/milk/qty": 0}}, "task 'bad': the weights of its expected_state checks sum to 0"),
        ({"weights": {"/items/rice/qty": 2}}, "task 'bad': weights names '/items/rice/qty', which is not one of"),
        ({"forbidden_state": {"items": 1}}, "task 'bad': forbidden_state key 'items' is not a JSON Pointer"),
    ],
)
def test_bad_weights_are_refused_at_load_naming_the_task(tmp_path: Path, line: dict[str, Any], message: str) -> None:
    folder = tmp_path / "mock"
    shutil.copytree(ROOT / "tool_specs" / "mock", folder)
    task = {"id": "bad", "instruction": "Set the milk to 4.", "expected_state": {"/items/milk/qty": 4}, **line}
    with (folder / "tasks.jsonl").open("a") as tasks:
        tasks.write(json.dumps(task) + "\n")
    with pytest.raises(WorldError) as info:
        load_world(folder)
    [issue] = info.value.issues
    assert str(issue).startswith(f"{folder / 'tasks.jsonl'}:5: $: Value error, {message}")


def _set(name: str, value: int) -> dict[str, Any]:
    return {"op": "replace", "path": f"/items/{name}/qty", "value": value}


def test_the_judge_pages_progress_example_prints_what_the_page_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    section = (ROOT / "docs" / "judge.md").read_text(encoding="utf-8").split("## Progress: a dense reward", 1)[1]
    [(code, shown)] = re.findall(r"```python\n(.*?)```\n\nprints\n\n```text\n(.*?)```", section, flags=re.S)
    monkeypatch.chdir(ROOT)  # the page runs it from the repository's root
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "docs/judge.md", "exec"), {})
    assert printed.getvalue() == shown


def test_the_fold_agrees_with_the_whole_state_after_every_kind_of_patch() -> None:
    """Record patches are folded per record; collection, array and cross-record patches patch the whole state.
    After each event, every check holds exactly when it holds on the state the patches make."""
    start = {"orders": {"a": {"status": "new", "tags": ["x"]}, "b": {"status": "new"}}, "queue": [1, 2], "n": 0}
    patches: list[list[dict[str, Any]]] = [
        [{"op": "replace", "path": "/orders/a/status", "value": "paid"}],
        [{"op": "add", "path": "/orders/c", "value": {"status": "new"}}, {"op": "remove", "path": "/orders/b"}],
        [{"op": "move", "from": "/orders/a/tags", "path": "/orders/a/labels"}],
        [{"op": "copy", "from": "/orders/a/labels", "path": "/orders/c/labels"}],  # across records
        [{"op": "add", "path": "/queue/0", "value": 0}],  # an array insert moves the items after it
        [{"op": "replace", "path": "/orders/c/status", "value": "paid"}, {"op": "replace", "path": "/n", "value": 1}],
        [{"op": "replace", "path": "/orders", "value": {"d": {"status": "paid"}}}],  # a whole collection
        [{"op": "test", "path": "/orders/d/status", "value": "paid"}, {"op": "remove", "path": "/orders/d"}],
    ]
    checks = [
        Check("/orders/a/status", "paid"),
        Check("/orders/b", ABSENT),
        Check("/orders/a/labels/0", "x"),
        Check("/orders/c/labels", ["x"]),
        Check("/queue/1", 1),
        Check("/orders/c/status", "paid"),
        Check("/n", 1),
        Check("/orders/d/status", "paid", forbidden=True),
    ]
    events = [EventRecord("t", {}, {}, "", False, state_patch=p, seq=i) for i, p in enumerate(patches, start=1)]
    for k in range(len(patches) + 1):
        whole = apply_patches(start, patches[:k])
        curve = progress_curve(checks, start, events[:k])
        assert curve is not None
        found = [(c.at_end, c.missing) for c in curve.checks]
        assert found == [(c.holds(whole), is_missing(resolve_pointer(whole, c.pointer))) for c in checks], k
