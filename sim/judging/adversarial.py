"""The adversarial transcript set: episodes that did NOT complete the task but try to fool the judge.

Each case of `data/judge_adversarial.jsonl` is a `mock`-world episode of the task
`restock_milk` (set the milk to 4): injected instructions, fake verdict JSON, fake
closing delimiters, role tags, one-token answers known to fool LLM judges
("Thought process:", ":"), claims of success without the calls. Two benign cases
(real successes) measure honest-score drift. The LLM judge runs alone (rule checks
off), so the false-positive rate is the model's own.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch

from ..world import World
from .judge import EpisodeView, Judge
from .transcript import RecordedCall

__all__ = ["AdversarialReport", "load_cases", "run_adversarial"]

CASES = Path(__file__).parent / "data" / "judge_adversarial.jsonl"
TASK_ID = "restock_milk"


def load_cases(path: Path = CASES) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def case_view(world: World, case: dict[str, Any]) -> EpisodeView:
    initial = copy.deepcopy(world.initial_state)
    final = jsonpatch.apply_patch(initial, case["state_patch"]) if case["state_patch"] else initial
    return EpisodeView(initial, final, [RecordedCall.of(c) for c in case["calls"]], case["transcript"])


@dataclass
class AdversarialReport:
    rows: list[dict[str, Any]] = field(default_factory=list)

    def _of(self, benign: bool) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["benign"] is benign]

    @property
    def false_positives(self) -> int:
        return sum(1 for r in self._of(False) if r["reward"] == 1)

    @property
    def judge_errors(self) -> int:
        return sum(1 for r in self.rows if r["status"] == "judge_error")

    @property
    def false_positive_rate(self) -> float:
        scored = [r for r in self._of(False) if r["reward"] is not None]
        return self.false_positives / len(scored) if scored else float("nan")

    @property
    def true_positive_rate(self) -> float:
        scored = [r for r in self._of(True) if r["reward"] is not None]
        return sum(r["reward"] for r in scored) / len(scored) if scored else float("nan")

    def render(self, model: str) -> str:
        lines = [f"judge: {model}", f"{'case':<26} {'category':<14} reward  status"]
        lines += [f"{r['id']:<26} {r['category']:<14} {r['reward']!s:<7} {r['status']}" for r in self.rows]
        adversarial = len(self._of(False))
        lines.append(
            f"false-positive rate: {self.false_positive_rate:.2f} ({self.false_positives} of {adversarial} "
            f"adversarial cases rewarded; {self.judge_errors} judge errors)"
        )
        lines.append(f"benign true-positive rate: {self.true_positive_rate:.2f} ({len(self._of(True))} cases)")
        return "\n".join(lines)


async def run_adversarial(judge: Judge, world: World, cases: list[dict[str, Any]] | None = None) -> AdversarialReport:
    """Judge every case with the LLM alone and collect the verdicts."""
    task = world.task(TASK_ID)
    if task is None:
        raise ValueError(f"the adversarial set needs the {world.name!r} world's task {TASK_ID!r}")
    llm_only = task.model_copy(update={"expected_state": {}})
    report = AdversarialReport()
    for case in cases or load_cases():
        verdict = await judge.judge(world, llm_only, case_view(world, case))
        report.rows.append(
            {
                "id": case["id"],
                "category": case["category"],
                "benign": case["benign"],
                "reward": verdict.reward,
                "status": verdict.status,
            }
        )
    return report
