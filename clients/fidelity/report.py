"""The fidelity report: each call as the real server and the simulation answered it, their agreement per
tool, per source (model-answered or answered from the state) and overall, each beside what the null and the
constant simulator score on the same calls, the consistency pairs and the step grades, as a text table or a
JSON object. Against the world's declarations (`declared`) the real side is the exact answer and its state: the
report adds the state agreement per tool and overall, and splits the calls by the state fields the exact call
changes (`by_change`) instead of by source."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from simia.sim.judging import DIMENSIONS

from .compare import CallComparison, change_bucket
from .consistency_checks import Check, Pair, summary

__all__ = ["BUCKETS", "AgentSummary", "FidelityReport"]

BUCKETS = ("0", "1", "2-3", "4+")
"""The state fields an exact call changes, as `by_change` groups the calls (`compare.change_bucket`)."""


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
    pairs: list[Pair] = field(default_factory=list)  # the consistency checks' pairs of calls
    constant_code: str | None = None  # the constant simulator's one error code (`baselines`)
    agent: AgentSummary | None = None
    stopped: str = ""  # the real server failed mid-run: what happened (the report covers the calls before)
    declared: bool = False  # the real side is the world's declarations (no server): state changes are scored too
    skipped: list[str] = field(default_factory=list)  # against the declarations: the calls not scored, and why

    def agreement(self) -> float:
        return _mean([c.agreement for c in self.calls]) or 0.0

    def baselines(self) -> tuple[float, float]:
        """(null, constant): what those simulators score over the same calls."""
        return _mean([c.null for c in self.calls]) or 0.0, _mean([c.constant for c in self.calls]) or 0.0

    def state_agreement(self) -> float | None:
        """The mean share of changed state fields that agree, over the calls that changed any (None: no such
        call, or not against the declarations)."""
        return _mean([c.state for c in self.calls if c.state is not None])

    def by_change(self) -> dict[str, dict[str, Any]]:
        """The calls grouped by the state fields their exact call changes (`BUCKETS`), each group's figures."""
        groups = {bucket: [c for c in self.calls if change_bucket(c.changed or 0) == bucket] for bucket in BUCKETS}
        return {bucket: {**_figures(calls), "state": _state(calls)} for bucket, calls in groups.items()}

    @property
    def repeated_read(self) -> Check:
        return summary(self.pairs).repeated_read

    @property
    def read_after_write(self) -> Check:
        return summary(self.pairs).read_after_write

    def by_source(self) -> dict[str, dict[str, Any]]:
        """Model-answered (`simulated`) and answered-from-the-state (`state`) calls apart."""
        return {source: _figures([c for c in self.calls if c.source == source]) for source in ("simulated", "state")}

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
                **{k: v for k, v in _figures(mine).items() if k != "calls"},
            }
            if self.declared:
                tools[tool]["state"] = _state(mine)
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
            "null_agreement": self.baselines()[0],
            "constant_agreement": self.baselines()[1],
            "constant_code": self.constant_code,
            "by_source": self.by_source(),
            "repeated_read": self.repeated_read._asdict(),
            "read_after_write": self.read_after_write._asdict(),
            "pairs": [asdict(p) for p in self.pairs],
            "agent": asdict(self.agent) if self.agent else None,
            "stopped": self.stopped or None,
            "grades": self.grades() if self.graded else None,
            "tools": self.per_tool(),
            "calls": [{**asdict(c), "agreement": c.agreement} for c in self.calls],
        } | (
            {"state_agreement": self.state_agreement(), "by_change": self.by_change(), "skipped": self.skipped}
            if self.declared
            else {}
        )

    def render(self) -> str:
        lines = [self.agent_line()] if self.agent else []
        figures = ["outcome", "schema_valid", "structure", "values", "agreement"]
        figures += ["state"] if self.declared else []
        figures += ["null", "constant"] + (["grade"] if self.graded else [])
        rows: list[tuple[str, ...]] = [("TOOL", "CALLS", *(f.split("_")[0].upper() for f in figures))]
        for tool, s in self.per_tool().items():
            rows.append((tool, str(s["calls"]), *(_fmt(s[k]) for k in figures)))
        lines += _table(rows)
        null, constant = self.baselines()
        always = f" (always {self.constant_code})" if self.constant_code else ""
        lines.append(
            f"agreement {self.agreement():.2f} over {len(self.calls)} calls;"
            f" null simulator {null:.2f}, constant simulator {constant:.2f}{always}"
        )
        if self.declared:
            lines += self._state_lines()
        else:
            lines.append("by source: " + "; ".join(_source_line(k, s) for k, s in self.by_source().items()))
        for name, check in (("repeated read", self.repeated_read), ("read after write", self.read_after_write)):
            lines.append(f"{name}: {_check_line(check)}")
        if self.graded:
            means = "  ".join(f"{d} {_fmt(m)}" for d, m in self.grades().items())
            failed = sum(1 for c in self.calls if c.grade_error)
            lines.append(
                f"grades (1-5): {means}" + (f"  ({failed} steps not graded; see the report)" if failed else "")
            )
        lines += [f"skipped: {note}" for note in self.skipped]
        if self.stopped:
            lines.append(f"stopped: {self.stopped}")
        return "\n".join(lines)

    def _state_lines(self) -> list[str]:
        """The state agreement, then the calls by the state fields their exact call changes."""
        writes = sum(1 for c in self.calls if c.state is not None)
        lines = [
            f"state {_fmt(self.state_agreement())} over {writes} call{'s' * (writes != 1)} changing the state"
            " (null and constant simulators change nothing: 0.00)"
        ]
        rows: list[tuple[str, ...]] = [("CHANGED", "CALLS", "AGREEMENT", "STATE", "NULL", "CONSTANT")]
        for bucket, s in self.by_change().items():
            rows.append((bucket, str(s["calls"]), *(_fmt(s[k]) for k in ("agreement", "state", "null", "constant"))))
        return lines + _table(rows)

    def agent_line(self) -> str:
        a = self.agent
        assert a is not None
        why = f" ({a.error})" if a.error else ""
        return f"agent on task {a.task}: {a.calls} calls on the real server in {a.turns} turns, stop: {a.stop}{why}"


def _figures(calls: Sequence[CallComparison]) -> dict[str, Any]:
    """The agreement of `calls` beside the null and constant simulators' on them (None without calls)."""
    return {
        "calls": len(calls),
        "agreement": _mean([c.agreement for c in calls]),
        "null": _mean([c.null for c in calls]),
        "constant": _mean([c.constant for c in calls]),
    }


def _state(calls: Sequence[CallComparison]) -> float | None:
    """The mean state agreement of the calls that changed the state (None: none did)."""
    return _mean([c.state for c in calls if c.state is not None])


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows as left-aligned columns, two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _source_line(source: str, figures: dict[str, Any]) -> str:
    label = {"simulated": "model", "state": "state"}[source]
    if not figures["calls"]:
        return f"{label} 0 calls"
    return (
        f"{label} {figures['calls']} calls agreement {figures['agreement']:.2f}"
        f" (null {figures['null']:.2f}, constant {figures['constant']:.2f})"
    )


def _check_line(check: Check) -> str:
    found = f"{check.found} pair{'s' * (check.found != 1)} found"
    if not check.found:
        return "no such pair in the calls"
    if not check.checked:
        return f"{found}, none could be checked (see the report's pairs)"
    return f"{check.consistent}/{check.checked} consistent ({found}, {check.checked} checked)"


def _share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
