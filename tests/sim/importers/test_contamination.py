"""Decontamination: an evaluation set read from the files benchmarks ship, the 13-word overlap rule (and whole
short texts of 8 words or more), and `import_seeds(exclude=...)` skipping and counting the seeds that overlap."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from simia.sim.errors import ImportSourceError
from simia.sim.importers import EvalSet, drop_overlapping
from simia.sim.importers.seeds import OVERLAPS, Skipped, import_seeds

SEEDS = Path(__file__).resolve().parents[2] / "fixtures" / "seeds"
LEAKED = "I'd like to renew the loan of 'The Left Hand of Darkness'. My member id is M-204."  # apigen.json's first


def test_a_shared_run_of_13_words_overlaps_and_12_do_not() -> None:
    evals = EvalSet(["You are Ines. Ask the desk to renew The Left Hand of Darkness, member id M-204, two weeks."])
    assert evals.overlap("Hello! ask the desk to RENEW the left hand of darkness; member id m 204 two") == (
        "ask the desk to renew the left hand of darkness member id m"
    )
    assert evals.overlap("ask the desk to renew the left hand of darkness member id") == ""  # 12 words
    assert evals.overlap("Please renew a different book for member M-204 next week") == ""


def test_a_short_evaluation_text_is_matched_whole_and_a_very_short_one_never() -> None:
    evals = EvalSet(["What is the air quality in Lisbon today?", "Cancel my order."])  # 8 words; 3 words
    assert evals.overlap("Hi there. What is the air quality in Lisbon today? Thanks") == (
        "what is the air quality in lisbon today"
    )
    assert evals.overlap("What is the air quality in Porto today?") == ""
    assert evals.overlap("Cancel my order.") == ""
    assert evals.texts == 1


def test_only_the_user_turns_of_a_conversation_are_checked() -> None:
    evals = EvalSet([LEAKED])
    agent_says_it = [
        {"role": "user", "content": "Renew my book please."},
        {"role": "assistant", "content": LEAKED},
        {"role": "tool", "content": LEAKED},
    ]
    assert evals.conversation_overlap(agent_says_it) == ""
    assert evals.conversation_overlap([{"from": "human", "value": "Hi, " + LEAKED}]) != ""  # ShareGPT turns
    parts = [{"role": "user", "content": [{"type": "text", "text": LEAKED}]}]
    assert evals.conversation_overlap(parts) != ""


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("instructions.jsonl", json.dumps(LEAKED) + "\n"),
        ("test.json", json.dumps([{"id": 1, "messages": [{"role": "user", "content": LEAKED}]}])),
        ("tau2_tasks.json", json.dumps([{"id": "7", "user_scenario": {"instructions": {"task": LEAKED}}}])),
        ("questions.txt", "Not JSON at all, just one benchmark question a line:\n" + LEAKED + "\n"),
        ("sharegpt.jsonl", json.dumps({"conversations": [{"from": "human", "value": LEAKED}]}) + "\n"),
    ],
)
def test_an_evaluation_set_reads_the_shapes_benchmarks_ship(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert EvalSet.load(path).overlap(LEAKED) != ""
    zipped = tmp_path / f"{name}.gz"
    zipped.write_bytes(gzip.compress(text.encode()))
    assert EvalSet.load(zipped).overlap(LEAKED) != ""


def test_an_evaluation_set_without_usable_text_or_file_is_refused(tmp_path: Path) -> None:
    short = tmp_path / "short.jsonl"
    short.write_text('"Cancel my order."\n')
    with pytest.raises(ImportSourceError, match="holds no text of 8 words or more"):
        EvalSet.load(short)
    with pytest.raises(ImportSourceError, match="no evaluation set at"):
        EvalSet.load(tmp_path / "missing.jsonl")


def test_import_seeds_skips_and_counts_the_seeds_that_overlap_the_evaluation_set(tmp_path: Path) -> None:
    evals = EvalSet([f"Customer: {LEAKED} They want two more weeks."], source="tau2_test.json")

    result = import_seeds([SEEDS / "apigen.json"], tmp_path / "worlds", exclude=evals)

    assert [(w.name, w.seeds) for w in result.worlds] == [("member-renew-2-tools", 2)]
    assert result.skipped == [
        Skipped(
            OVERLAPS,
            1,
            f"{SEEDS / 'apigen.json'}:1: a user turn shares 'i d like to renew the loan of the left hand of darkness' "
            "with tau2_test.json",
        )
    ]
    tasks = (tmp_path / "worlds" / "member-renew-2-tools" / "tasks.jsonl").read_text()
    assert "Left Hand of Darkness" not in tasks
    summary = json.loads((tmp_path / "worlds" / "seeds_report.json").read_text())
    assert summary["skipped"][0]["reason"] == "overlaps the evaluation set (--exclude)"


def test_drop_overlapping_rewrites_a_records_file_without_the_leaked_records(tmp_path: Path) -> None:
    records = tmp_path / "synth.jsonl"
    clean = {"messages": [{"role": "user", "content": "How much rice is left in the pantry for dinner?"}]}
    leaked = {"messages": [{"role": "user", "content": LEAKED}]}
    records.write_text("".join(json.dumps(r) + "\n" for r in (clean, leaked, clean)))

    assert drop_overlapping(records, EvalSet([LEAKED])) == 1
    assert [json.loads(line) for line in records.read_text().splitlines()] == [clean, clean]
    assert drop_overlapping(records, EvalSet([LEAKED])) == 0
