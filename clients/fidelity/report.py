"""The fidelity report: each call as the real server and the simulation answered it, their agreement per
tool and overall, the consistency counts and the step grades, as a text table or a JSON object."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from simia.sim.judging import DIMENSIONS

__all__ = ["AgentSummary", "CallComparison", "FidelityReport"]


@dataclass
class CallComparison:
    """One call, answered by the real server and by the simulation."""

    index: int
    tool: str
    arguments: dict[str, Any]
    real_error: bool
    sim_error: bool
    sim_infra: bool
    outcome_agrees: bool
    schema_valid: bool | None  # None: the tool has no output schema, or the simulation failed
    structure: float | None  # key-path Jaccard, when both answered
    values: float | None  # share of equal leaves over all leaf paths, when both answered
    real_code: str | None
    sim_code: str | None
    real: Any = None
    simulated: Any = None
    grade: dict[str, dict[str, Any]] | None = None  # `--grade`: dimension -> {"score", "reason"}
    grade_error: str | None = None  # `--grade`: why this step has no grade

    @property
    def agreement(self) -> float:
        """1 for matching errors, the value agreement for two answers, 0 when one failed and one did not."""
        if not self.outcome_agrees:
            return 0.0
        return 1.0 if self.real_error else float(self.values or 0.0)


@dataclass
class AgentSummary:
    """How the agent's run on the real server went (`--agent`): its calls are the sequence compared."""

    task: str
    stop: str  # as EpisodeRun.stop
    turns: int
    calls: int
    error: str = ""


@dataclass
class FidelityReport:
    world: str
    real: str
    calls: list[CallComparison] = field(default_factory=list)
    repeated_read: tuple[int, int] = (0, 0)  # (consistent, checked)
    read_after_write: tuple[int, int] = (0, 0)
    agent: AgentSummary | None = None
    stopped: str = ""  # the real server failed mid-run: what happened (the report covers the calls before)

    def agreement(self) -> float:
        return sum(c.agreement for c in self.calls) / len(self.calls) if self.calls else 0.0

    @property
    def graded(self) -> bool:
        return any(c.grade is not None or c.grade_error is not None for c in self.calls)

    def grades(self) -> dict[str, float | None]:
        """Each dimension's mean score over the graded steps (None when no step got a grade)."""
        graded = [c.grade for c in self.calls if c.grade is not None]
        return {d: _mean([g[d]["score"] for g in graded]) for d in DIMENSIONS}

    def per_tool(self) -> dict[str, dict[str, Any]]:
        tools: dict[str, dict[str, Any]] = {}
        for tool in sorted({c.tool for c in self.calls}):
            mine = [c for c in self.calls if c.tool == tool]
            valid = [c.schema_valid for c in mine if c.schema_valid is not None]
            tools[tool] = {
                "calls": len(mine),
                "outcome": _share([c.outcome_agrees for c in mine]),
                "schema_valid": _share(valid) if valid else None,
                "structure": _mean([c.structure for c in mine if c.structure is not None]),
                "values": _mean([c.values for c in mine if c.values is not None]),
                "agreement": _mean([c.agreement for c in mine]),
            }
            if self.graded:
                tools[tool]["grade"] = _mean(
                    [sum(c.grade[d]["score"] for d in DIMENSIONS) / 5 for c in mine if c.grade]
                )
        return tools

    def as_dict(self) -> dict[str, Any]:
        return {
            "world": self.world,
            "real": self.real,
            "agreement": self.agreement(),
            "repeated_read": {"consistent": self.repeated_read[0], "checked": self.repeated_read[1]},
            "read_after_write": {"consistent": self.read_after_write[0], "checked": self.read_after_write[1]},
            "agent": asdict(self.agent) if self.agent else None,
            "stopped": self.stopped or None,
            "grades": self.grades() if self.graded else None,
            "tools": self.per_tool(),
            "calls": [{**asdict(c), "agreement": c.agreement} for c in self.calls],
        }

    def render(self) -> str:
        lines = [self.agent_line()] if self.agent else []
        figures = ["outcome", "schema_valid", "structure", "values", "agreement"] + (["grade"] if self.graded else [])
        rows: list[tuple[str, ...]] = [("TOOL", "CALLS", *(f.split("_")[0].upper() for f in figures))]
        for tool, s in self.per_tool().items():
            rows.append((tool, str(s["calls"]), *(_fmt(s[k]) for k in figures)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        lines.append(f"agreement {self.agreement():.2f} over {len(self.calls)} calls")
        for name, (ok, checked) in (("repeated read", self.repeated_read), ("read after write", self.read_after_write)):
            lines.append(f"{name}: {ok}/{checked} consistent" if checked else f"{name}: no such pair in the calls")
        if self.graded:
            means = "  ".join(f"{d} {_fmt(m)}" for d, m in self.grades().items())
            failed = sum(1 for c in self.calls if c.grade_error)
            lines.append(
                f"grades (1-5): {means}" + (f"  ({failed} steps not graded; see the report)" if failed else "")
            )
        if self.stopped:
            lines.append(f"stopped: {self.stopped}")
        return "\n".join(lines)

    def agent_line(self) -> str:
        a = self.agent
        assert a is not None
        why = f" ({a.error})" if a.error else ""
        return f"agent on task {a.task}: {a.calls} calls on the real server in {a.turns} turns, stop: {a.stop}{why}"


def _share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
