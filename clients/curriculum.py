"""A curriculum: which tasks to roll out next, chosen by their recorded pass rates.

GRPO learns only from a group whose rewards vary: a task the agent always or never passes wastes its group. So
a task's weight is the most signal its pass rate could give, 4 p (1 - p) at the point p of the rate's Wilson 95%
interval nearest one half: a task seen twice keeps a wide interval and is weighed as if it could be near one half
(two passes are no proof it is easy), an untried task has the interval [0, 1] and weight 1 (explored first), and
only a task seen often enough to be confidently easy or hard loses weight. The rollout's groups are shared out in
proportion to the weights (largest remainders; ties go to the task listed first).

From the same store, it reports for each task the recorded GRPO groups (the judged episodes forked from one
snapshot: one `group_id`) whose rewards varied; the others were wasted compute.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from simia.sim.storage import PAGE_LIMIT, EpisodeQuery, Store, TaskStats

__all__ = ["Curriculum", "CurriculumTask", "TaskHistory", "plan", "read_history"]


@dataclass
class TaskHistory:
    """What a store recorded about one task: its judged episodes and its GRPO groups.

    Attributes:
        judged, passed: judged episodes, and those with reward 1.
        groups: fork groups with two or more judged episodes.
        varied: those whose rewards were not all equal (a learning signal).
        wasted: judged episodes in the other groups.
    """

    task: str
    judged: int = 0
    passed: int = 0
    groups: int = 0
    varied: int = 0
    wasted: int = 0

    @property
    def interval(self) -> tuple[float, float]:
        """The Wilson 95% interval of the pass rate; [0, 1] for an untried task."""
        return TaskStats("", self.task, self.judged, self.judged, self.passed).interval() or (0.0, 1.0)

    @property
    def weight(self) -> float:
        """4 p (1 - p) at the point p of `interval` nearest one half: 1 when one half is in it."""
        low, high = self.interval
        p = min(max(0.5, low), high)
        return 4 * p * (1 - p)


async def read_history(store: Store, world: str) -> dict[str, TaskHistory]:
    """Every task of `world` the store has episodes of: pass counts, and groups with and without a signal."""
    history = {
        s.task: TaskHistory(s.task, judged=s.judged, passed=s.passed)
        for s in await store.task_stats(world=world)
        if s.task is not None
    }
    rewards: dict[tuple[str, str], list[int]] = defaultdict(list)
    offset = 0
    while True:
        page = await store.query_episodes(EpisodeQuery(world=world, offset=offset, limit=PAGE_LIMIT))
        for row in page.rows:
            root = row.group_id or (row.id if row.forks else None)
            if row.task is not None and root is not None and row.reward is not None:
                rewards[(row.task, root)].append(row.reward)
        offset += len(page.rows)
        if not page.rows or offset >= page.total:
            break
    for (task, _), group in rewards.items():
        if len(group) < 2:
            continue
        record = history.setdefault(task, TaskHistory(task))
        record.groups += 1
        if len(set(group)) > 1:
            record.varied += 1
        else:
            record.wasted += len(group)
    return history


@dataclass
class CurriculumTask:
    """One task in a plan: its history, its weight and the groups planned for it."""

    history: TaskHistory
    groups: int


@dataclass
class Curriculum:
    """The planned groups per task, with the history they were planned from."""

    tasks: list[CurriculumTask] = field(default_factory=list)

    def attempts(self, group_size: int) -> dict[str, int]:
        """Episodes per task id: `group_size` for each planned group."""
        return {t.history.task: t.groups * group_size for t in self.tasks}

    def table(self) -> str:
        rows = [("TASK", "JUDGED", "PASS RATE [95%]", "WEIGHT", "GROUPS", "VARIED", "WASTED EPISODES", "PLANNED")]
        for t in self.tasks:
            h = t.history
            low, high = h.interval
            rate = f"{h.passed / h.judged:.2f} [{low:.2f}, {high:.2f}]" if h.judged else "untried"
            varied = f"{h.varied}/{h.groups} ({h.varied / h.groups:.0%})" if h.groups else "-"
            rows.append(
                (h.task, str(h.judged), rate, f"{h.weight:.2f}", str(h.groups), varied, str(h.wasted), str(t.groups))
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        groups = sum(t.history.groups for t in self.tasks)
        wasted = sum(t.history.groups - t.history.varied for t in self.tasks)
        if groups:
            lines.append(f"recorded groups without a signal (wasted compute): {wasted} of {groups}")
        return "\n".join(lines)

    def as_json(self) -> list[dict[str, Any]]:
        return [
            {**vars(t.history), "interval": list(t.history.interval), "weight": t.history.weight, "planned": t.groups}
            for t in self.tasks
        ]


def plan(tasks: Sequence[str], history: dict[str, TaskHistory], groups: int) -> Curriculum:
    """Share `groups` among `tasks` in proportion to their weights (largest remainders, ties to the first listed).

    Args:
        tasks: task ids, in the order the rollout lists them.
        history: what the store recorded (`read_history`); a task it lacks is untried.
        groups: how many groups to plan.
    """
    records = [history.get(task) or TaskHistory(task) for task in tasks]
    total = sum(r.weight for r in records)
    quotas = [groups * r.weight / total for r in records]  # every weight is above 0 (see `TaskHistory.weight`)
    counts = [math.floor(q) for q in quotas]
    by_remainder = sorted(range(len(records)), key=lambda i: (counts[i] - quotas[i], i))
    for i in by_remainder[: groups - sum(counts)]:
        counts[i] += 1
    return Curriculum([CurriculumTask(r, n) for r, n in zip(records, counts, strict=True)])
