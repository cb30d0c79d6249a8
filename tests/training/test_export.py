"""`simia export` on stored episodes: every format round-trips, bad records are rejected with reasons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from simia.cli import main
from simia.server.episodes import EpisodeService
from simia.server.settings import ServerSettings
from simia.sim.backends import FunctionBackend
from simia.sim.engine import Simulator
from simia.sim.judging import Judge
from simia.sim.storage import open_store
from simia.sim.world import openai_tool_call
from simia.testing import mock_world_answer
from simia.training.export import export
from tests_helpers import GOOD, WORLDS, make_db  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[2]


async def test_openai_export_round_trips_and_rejects_bad_records_with_reasons(tmp_path: Path) -> None:
    ids = await make_db(tmp_path / "s.db")
    report = await export(tmp_path / "s.db", "openai", tmp_path / "out.jsonl", WORLDS, include_masked=True)
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert report.written == 1 and rows[0]["messages"] == GOOD
    assert all(t["type"] == "function" for t in rows[0]["tools"]) and len(rows[0]["tools"]) == 3
    no_turns, skipped = sorted(report.skipped, key=lambda s: s["episode"] != ids["fork"])
    assert no_turns == {"episode": ids["fork"], "problems": ["no assistant turn to train on"]}
    assert skipped["episode"] == ids["bad"]
    assert skipped["problems"] == [
        "message 2: calls 'launch_rocket', which is not in tools",
        "message 3: tool result 'call_9' answers no earlier call",
        "tool call call_1 (launch_rocket) has no result",
        "fabricated: the transcript claims call 1 launch_rocket {}, never executed",
        "fabricated: the transcript shows a tool result the server never returned: ?",
    ]


async def test_filters_select_by_reward_and_task(tmp_path: Path) -> None:
    await make_db(tmp_path / "s.db")
    report = await export(tmp_path / "s.db", "openai", tmp_path / "o.jsonl", WORLDS, min_reward=1)
    assert report.written == 1
    none = await export(tmp_path / "s.db", "openai", tmp_path / "n.jsonl", WORLDS, task="no_bananas")
    assert none.written == 0 and none.skipped == []


async def test_hf_export_has_the_columns_trl_takes(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    await make_db(tmp_path / "s.db")
    await export(tmp_path / "s.db", "hf", tmp_path / "ds", WORLDS)
    dataset = datasets.load_from_disk(str(tmp_path / "ds"))
    assert set(dataset.column_names) == {"messages", "tools"} and len(dataset) == 1
    messages = next(r["messages"] for r in dataset if len(r["messages"]) == 5)
    assert messages[2]["tool_calls"][0]["function"]["arguments"] == {"name": "milk", "qty": 4}  # an object
    await export(tmp_path / "s.db", "hf", tmp_path / "ds.parquet", WORLDS)
    assert len(datasets.Dataset.from_parquet(str(tmp_path / "ds.parquet"))) == 1


async def test_sharegpt_and_hermes_formats(tmp_path: Path) -> None:
    await make_db(tmp_path / "s.db")
    await export(tmp_path / "s.db", "sharegpt", tmp_path / "sg.jsonl", WORLDS, min_reward=1)
    await export(tmp_path / "s.db", "hermes", tmp_path / "h.jsonl", WORLDS, min_reward=1)
    sharegpt = json.loads((tmp_path / "sg.jsonl").read_text())
    assert [t["from"] for t in sharegpt["conversations"]] == ["human", "function_call", "observation", "gpt"]
    assert json.loads(sharegpt["conversations"][1]["value"]) == {
        "name": "set_quantity",
        "arguments": {"name": "milk", "qty": 4},
    }
    assert sharegpt["system"] == "You manage a pantry." and json.loads(sharegpt["tools"])[0]["name"] == "list_items"
    hermes = json.loads((tmp_path / "h.jsonl").read_text())["conversations"]
    assert [t["from"] for t in hermes] == ["system", "human", "gpt", "tool", "gpt"]
    assert "<tools>" in hermes[0]["value"] and hermes[2]["value"].startswith("<tool_call>\n{")
    assert hermes[3]["value"] == '<tool_response>\n{"name": "milk", "qty": 4}\n</tool_response>'


async def test_rl_export_groups_forks_and_keeps_rewards_and_tokens(tmp_path: Path) -> None:
    ids = await make_db(tmp_path / "s.db")
    await export(tmp_path / "s.db", "rl", tmp_path / "rl.jsonl", WORLDS, task="restock_milk")
    rows = [json.loads(line) for line in (tmp_path / "rl.jsonl").read_text().splitlines()]
    assert [r["episode_id"] for r in rows] == [ids["good"], ids["fork"]]
    assert {r["group"] for r in rows} == {ids["good"]} and rows[1]["parent_id"] == ids["good"]
    assert [(r["reward"], r["masked"]) for r in rows] == [(1, False), (0, False)]
    assert rows[0]["tokens"] == {
        "prompt_ids": [1, 2],
        "completion_ids": [3, 4, 5],
        "env_mask": [1, 0, 1],
        "logprobs": [-0.1, 0.0, -0.2],
    }
    rebuilt = rows[1]["messages"]
    assert rebuilt[1] == {"role": "user", "content": "Set the milk to 4 litres."}


def test_the_export_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    asyncio.run(make_db(tmp_path / "s.db"))
    assert (
        main(
            [
                "export",
                "--db",
                str(tmp_path / "s.db"),
                "--format",
                "openai",
                "--out",
                str(tmp_path / "x.jsonl"),
                "--worlds-dir",
                str(ROOT / "tool_specs"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith(f"wrote 1 record(s) to {tmp_path / 'x.jsonl'}; skipped 2")
    assert main(["export", "--db", str(tmp_path / "none.db"), "--format", "rl", "--out", str(tmp_path / "y")]) == 2
    assert "error: no database at" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()
    db, out = str(tmp_path / "s.db"), str(tmp_path / "z.jsonl")
    assert main(["export", "--db", db, "--format", "rl", "--out", out, "--world", "mokc"]) == 2
    assert capsys.readouterr().err == f"error: no episode is of world 'mokc'; worlds: mock in {db}: check the name\n"
    assert main(["export", "--db", db, "--format", "rl", "--out", out, "--world", "mock", "--task", "nope"]) == 2
    assert "error: no episode is of task 'nope' of world 'mock'; tasks of world 'mock': " in capsys.readouterr().err
    assert main(["export", "--db", db, "--format", "rl", "--out", out, "--world", "mock", "--status", "abandoned"]) == 0
    assert capsys.readouterr().out.startswith("wrote 0 record(s)")  # the names exist: nothing of that status
    assert not (tmp_path / "y").exists()


async def test_a_masked_episode_is_never_training_data_in_any_format_unless_asked_for(tmp_path: Path) -> None:
    """An episode whose simulator failed (an infrastructure failure: its tool message is the failure notice) has a
    masked verdict: every format leaves it out, saying why, and `include_masked` keeps it, marked."""
    service = EpisodeService(
        WORLDS, Simulator(FunctionBackend(lambda r: {"nonsense": True})), open_store(tmp_path / "s.db"),
        ServerSettings(), judge=Judge(None),
    )  # fmt: skip
    episode = await service.create("mock", task="restock_milk")
    failed = await service.call(episode.id, "", "set_quantity", {"name": "milk", "qty": 4})
    ended = await service.end(episode.id, "")
    await service.store.close()
    assert (failed.error_kind, ended.verdict is not None and ended.verdict.infra_failures) == ("infra", 1)
    why = "masked (infrastructure failure); pass --include-masked to export it"
    for fmt in ("openai", "sharegpt", "hermes", "rl"):
        left_out = await export(tmp_path / "s.db", fmt, tmp_path / f"{fmt}.jsonl", WORLDS)
        assert (left_out.written, left_out.skipped) == (0, [{"episode": episode.id, "problems": [why]}]), fmt
        assert (tmp_path / f"{fmt}.jsonl").read_text() == ""
        kept = await export(tmp_path / "s.db", fmt, tmp_path / f"{fmt}.jsonl", WORLDS, include_masked=True)
        assert (kept.written, kept.skipped) == (1, []), fmt
    [row] = [json.loads(line) for line in (tmp_path / "rl.jsonl").read_text().splitlines()]
    assert (row["reward"], row["masked"], row["outcome"]) == (None, True, "masked (infrastructure failure)")


async def test_an_episode_never_ended_is_never_training_data_and_the_output_says_why(tmp_path: Path) -> None:
    """The recipe's episode, never ended (so never judged), whose one tool result is an infrastructure failure: every
    SFT format wrote it. Without a verdict it is masked (not judged) like a masked verdict: left out of every format,
    counted in the summary line, and kept only with `include_masked`."""
    db = tmp_path / "s.db"
    service = EpisodeService(
        WORLDS, Simulator(FunctionBackend(lambda r: {"nonsense": True})), open_store(db), ServerSettings(),
        judge=Judge(None),
    )  # fmt: skip
    episode = await service.create("mock", task="restock_milk")
    failed = await service.call(episode.id, "", "set_quantity", {"name": "milk", "qty": 4})
    await service.store.close()
    assert failed.error_kind == "infra"
    why = "masked (not judged: the episode is still active: end it to judge it); pass --include-masked to export it"
    for fmt in ("openai", "sharegpt", "hermes", "rl"):
        out = tmp_path / f"{fmt}.jsonl"
        left_out = await export(db, fmt, out, WORLDS)
        assert (left_out.written, left_out.skipped) == (0, [{"episode": episode.id, "problems": [why]}]), fmt
        assert left_out.render().splitlines() == [
            f"wrote 0 record(s) to {out}; skipped 1: masked (not judged) 1",
            f"  skipped {episode.id}: {why}",
        ]
        assert out.read_text() == ""
    kept = await export(db, "rl", tmp_path / "rl.jsonl", WORLDS, include_masked=True)
    [row] = [json.loads(line) for line in (tmp_path / "rl.jsonl").read_text().splitlines()]
    assert (kept.written, row["reward"], row["masked"], row["outcome"], row["status"]) == (
        1,
        None,
        True,
        "masked (not judged)",
        "active",
    )


async def test_episodes_under_min_reward_are_counted_as_skipped_with_why(tmp_path: Path) -> None:
    ids = await make_db(tmp_path / "s.db")
    report = await export(tmp_path / "s.db", "openai", tmp_path / "o.jsonl", WORLDS, min_reward=1)
    assert report.written == 1
    assert report.skipped == [
        {"episode": ids["bad"], "problems": ["masked (fabricated tool calls); pass --include-masked to export it"]},
        {"episode": ids["fork"], "problems": ["training reward 0 is below --min-reward 1"]},
    ]
    assert report.render().splitlines()[0] == (
        f"wrote 1 record(s) to {tmp_path / 'o.jsonl'}; skipped 2: masked (fabricated tool calls) 1, "
        "below --min-reward 1"
    )


async def test_rl_rows_carry_each_assistant_turns_shaped_reward_beside_the_unchanged_outcome(tmp_path: Path) -> None:
    """weekly_restock (apples weigh 2 of 4, milk 1, the rice kept at 2 is 1): a turn that reads earns 0, a turn
    that sets the apples and the milk earns the sum of its two calls (0.5 + 0.25), the answer earns 0; the outcome
    reward is the judge's, and the rewards sum to the progress gained. An episode without checks (no task:
    unjudged, so masked) has none."""
    service = EpisodeService(
        WORLDS, Simulator(FunctionBackend(mock_world_answer)), open_store(tmp_path / "s.db"), ServerSettings(),
        judge=Judge(None),
    )  # fmt: skip
    episode = await service.create("mock", task="weekly_restock")
    calls = [("get_item", {"name": "apple"}), ("set_quantity", {"name": "apple", "qty": 6})]
    calls.append(("set_quantity", {"name": "milk", "qty": 2}))
    events = [await service.call(episode.id, "", tool, arguments) for tool, arguments in calls]

    def assistant(*called: int) -> dict[str, Any]:
        made = [openai_tool_call(f"c{i}", *calls[i]) for i in called]
        return {"role": "assistant", "content": None, "tool_calls": made}

    def result(i: int) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": f"c{i}", "content": events[i].text}

    transcript = [
        {"role": "user", "content": "Weekly restock: set the apples to 6 and the milk to 2."},
        assistant(0), result(0), assistant(1, 2), result(1), result(2),
        {"role": "assistant", "content": "Apples at 6, milk at 2."},
    ]  # fmt: skip
    await service.end(episode.id, "", transcript)
    unchecked = await service.create("mock")
    await service.call(unchecked.id, "", "list_items", {})
    await service.end(unchecked.id, "")
    await service.store.close()
    report = await export(tmp_path / "s.db", "rl", tmp_path / "rl.jsonl", WORLDS, include_masked=True)
    assert (report.written, report.skipped) == (2, [])
    rows = {r["task"]: r for r in map(json.loads, (tmp_path / "rl.jsonl").read_text().splitlines())}
    checked = rows["weekly_restock"]
    assert (checked["reward"], checked["masked"], checked["messages"]) == (1, False, transcript)
    assert checked["step_rewards"] == [0.0, 0.75, 0.0]
    assert checked["progress"] == {"start": 0.25, "end": 1.0, "gamma": 1.0}
    assert sum(checked["step_rewards"]) == checked["progress"]["end"] - checked["progress"]["start"]
    assert (rows[None]["step_rewards"], rows[None]["progress"]) == (None, None)


async def test_rl_keeps_an_agents_bad_calls_that_the_sft_formats_leave_out(tmp_path: Path) -> None:
    """A call with arguments the tool refuses, or to a tool the world lacks, is the agent's mistake: RL data keeps
    it beside its reward; SFT data must not teach it. Arguments the server did not keep (over its limits) are
    named as such, not checked against the schema as if the agent had sent simia's note."""
    db = tmp_path / "s.db"
    service = EpisodeService(
        WORLDS, Simulator(FunctionBackend(mock_world_answer)), open_store(db), ServerSettings(), judge=Judge(None)
    )
    clumsy = await service.create("mock", task="restock_milk")
    await service.call(clumsy.id, "", "get_item", {"name": 5})
    await service.call(clumsy.id, "", "launch_rocket", {})
    await service.call(clumsy.id, "", "set_quantity", {"name": "milk", "qty": 4})
    await service.end(clumsy.id, "")
    huge = await service.create("mock", task="restock_milk")
    await service.call(huge.id, "", "get_item", {"name": "x" * 2_000_000})
    await service.end(huge.id, "")
    await service.store.close()

    sft = await export(db, "openai", tmp_path / "sft.jsonl", WORLDS)
    rl = await export(db, "rl", tmp_path / "rl.jsonl", WORLDS)
    rows = [json.loads(line) for line in (tmp_path / "rl.jsonl").read_text().splitlines()]
    skipped = {s["episode"]: s["problems"] for s in sft.skipped}
    assert sft.written == 0 and skipped[clumsy.id] == [
        'message 2: get_item arguments break its inputSchema: $.name: 5 is not of type "string"',
        "message 4: calls 'launch_rocket', which is not in tools",
    ]
    assert [p.split(" (")[0] for p in skipped[huge.id]] == ["message 2: the server refused the arguments of get_item"]
    assert [r["episode_id"] for r in rows] == [clumsy.id] and rows[0]["reward"] == 1
    calls = [c["function"]["name"] for m in rows[0]["messages"] for c in m.get("tool_calls") or []]
    assert calls == ["get_item", "launch_rocket", "set_quantity"]
    assert rl.skipped == [{"episode": huge.id, "problems": skipped[huge.id]}]
