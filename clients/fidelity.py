"""Fidelity: how closely a world's simulation answers like the real server it stands for.

One call sequence runs against the real MCP server and against a fresh simulated episode of
the world (the simulator in process, state carried from call to call). Per call: did both
answer or both fail (outcome), is the simulated answer valid against the tool's output
schema, how many key paths they share (structure) and how many JSON leaves are equal
(values), and whether error codes agree. Two checks need no real server: a read-only call
repeated with no write between answers the same (repeated read), and a read-only call
repeated after a write that changed the state answers differently (read after write).

The sequence is a calls file (`run_fidelity`) or what the built-in agent does on one of the
world's tasks against the real server (`run_agent_fidelity`: its calls and the real answers
are recorded, then replayed on the simulation).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import mcp_types as types
from mcp import Client
from simia.sim.backends import Backend
from simia.sim.engine import Simulator, Step, ToolCall
from simia.sim.judging import DIMENSIONS, GradeError, grade_step
from simia.sim.records import PastCall
from simia.sim.schema import validate_instance
from simia.sim.world import Task, ToolSpec, World, apply_patch

from .agent import Agent, EpisodeRun
from .mcp_import import connect
from .user import UserSimulator

__all__ = [
    "AgentSummary",
    "CallComparison",
    "FidelityReport",
    "RecordingClient",
    "consistency",
    "load_calls",
    "replay",
    "run_agent_fidelity",
    "run_fidelity",
    "tool_drift",
]

T = TypeVar("T")


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


def _overall(grade: dict[str, dict[str, Any]]) -> float:
    """A step's mean score over the five dimensions."""
    return float(sum(grade[d]["score"] for d in DIMENSIONS)) / len(DIMENSIONS)


def _share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def load_calls(path: str | Path, world: World) -> list[ToolCall]:
    """The calls of a JSONL file (`{"tool", "arguments"}` a line), each checked against the world's tools;
    ValueError names every bad line before anything runs."""
    calls: list[ToolCall] = []
    problems: list[str] = []
    file = Path(path)
    if not file.is_file():
        raise ValueError(
            f'no calls file at {str(path)!r}; pass --calls FILE.jsonl (one {{"tool", "arguments"}} a line)'
        )
    for n, line in enumerate(file.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            tool, arguments = str(row["tool"]), row.get("arguments", {})
        except (json.JSONDecodeError, KeyError, TypeError):
            problems.append(f'{path}:{n}: expected a JSON object with "tool" and "arguments"')
            continue
        spec = world.tool(tool)
        if spec is None:
            known = ", ".join(t.name for t in world.tools)
            problems.append(f"{path}:{n}: unknown tool {tool!r} ({world.name!r} has {known})")
        elif not isinstance(arguments, dict):
            problems.append(f"{path}:{n}: {tool} arguments must be a JSON object")
        elif bad := validate_instance(spec.input_schema, arguments):
            problems.append(f"{path}:{n}: {tool} arguments break its inputSchema: {bad[0]}")
        else:
            calls.append(ToolCall(tool, arguments))
    if problems:
        raise ValueError(" | ".join(problems[:10]))
    if not calls:
        raise ValueError(f"{path} holds no calls")
    return calls


def tool_drift(world: World, real_tools: Sequence[types.Tool]) -> list[str]:
    """Where the world's tools and the real server's differ (names, input schemas)."""
    real = {t.name: t for t in real_tools}
    mine = {t.name: t for t in world.tools}
    drift = [f"the real server lacks {name}" for name in sorted(set(mine) - set(real))]
    drift += [f"the world lacks {name}" for name in sorted(set(real) - set(mine))]
    drift += [
        f"{name}: inputSchema differs"
        for name in sorted(set(mine) & set(real))
        if _plain(mine[name].input_schema) != _plain(real[name].input_schema)
    ]
    return drift


def _plain(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k not in {"$schema", "title"}}


def _real_answer(result: types.CallToolResult) -> Any:
    if result.structured_content is not None:
        return result.structured_content
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {"text": text}


def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_leaves(item, f"{path}/{key}"))
        return out or {path: {}}
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            out.update(_leaves(item, f"{path}/{i}"))
        return out or {path: []}
    return {path: value}


def _compare(
    index: int, call: ToolCall, tool: ToolSpec | None, world: World, real: types.CallToolResult, step: Step
) -> CallComparison:
    """One call compared (`tool` is None for a name the world lacks: an agent's call may name one)."""
    real_error, sim_error = bool(real.is_error), bool(step.is_error)
    real_answer, sim_answer = (_real_answer(real) if not real_error else None), step.output
    structure = values = None
    if not real_error and not sim_error:
        a, b = _leaves(real_answer), _leaves(sim_answer)
        union = set(a) | set(b)
        structure = len(set(a) & set(b)) / len(union) if union else 1.0
        values = sum(1 for p in union if p in a and p in b and a[p] == b[p]) / len(union) if union else 1.0
    schema_valid = None
    if tool and tool.output_schema and not sim_error:
        schema_valid = not validate_instance(tool.output_schema, sim_answer)
    real_text = "\n".join(c.text for c in real.content if isinstance(c, types.TextContent))
    return CallComparison(
        index=index,
        tool=call.tool,
        arguments=call.arguments,
        real_error=real_error,
        sim_error=sim_error,
        sim_infra=step.error_kind == "infra",
        outcome_agrees=real_error == sim_error,
        schema_valid=schema_valid,
        structure=structure,
        values=values,
        real_code=world.code_named(real_text, tool) if real_error and tool else None,
        sim_code=step.error_code if sim_error else None,
        real=real_answer if not real_error else real_text,
        simulated=sim_answer if not sim_error else step.text,
    )


async def _grade(
    grader: Backend, compared: CallComparison, tool: ToolSpec | None, seen: Sequence[PastCall], *, seed: int
) -> None:
    """Grade one compared step in place: its grade, or why it has none (a bad grade is data, not a crash)."""
    try:
        grade = await grade_step(
            grader,
            tool,
            compared.arguments,
            seen,
            compared.real,
            compared.simulated,
            real_error=compared.real_error,
            simulated_error=compared.sim_error,
            seed=seed,
        )
    except GradeError as exc:
        compared.grade_error = str(exc)
    else:
        compared.grade = grade.model_dump()


def consistency(
    world: World, calls: Sequence[ToolCall], steps: Sequence[Step]
) -> tuple[tuple[int, int], tuple[int, int]]:
    """(repeated read, read after write) as (consistent, checked) over a simulated sequence: a read-only
    call repeated with no state change between must answer the same (an error counts as its code);
    repeated after a call that changed the state, differently (a check that presumes the write touched
    what the read reads, made on two real answers only). Infrastructure failures are no answers."""
    repeated = [0, 0]
    after_write = [0, 0]
    last_read: dict[str, tuple[int, Any, bool]] = {}  # call key -> (index, answer, was an error)
    writes: list[int] = []  # indices of calls that changed the state
    for i, (call, step) in enumerate(zip(calls, steps, strict=True)):
        tool = world.tool(call.tool)
        read_only = bool(tool and tool.annotations and tool.annotations.get("readOnlyHint") is True)
        if not read_only:
            if step.state_patch:
                writes.append(i)
            continue
        if step.error_kind == "infra":
            continue
        key = json.dumps([call.tool, call.arguments], sort_keys=True)
        answer = ("error", step.error_code) if step.is_error else step.output
        if key in last_read:
            before, earlier, was_error = last_read[key]
            if not any(before < w < i for w in writes):
                repeated[1] += 1
                repeated[0] += earlier == answer
            elif not (was_error or step.is_error):
                after_write[1] += 1
                after_write[0] += earlier != answer
        last_read[key] = (i, answer, step.is_error)
    return (repeated[0], repeated[1]), (after_write[0], after_write[1])


async def run_fidelity(
    world: World,
    real: str | Sequence[str],
    calls: Sequence[ToolCall],
    backend: Backend,
    *,
    headers: dict[str, str] | None = None,
    allow_drift: bool = False,
    grader: Backend | None = None,
) -> FidelityReport:
    """Run `calls` on the real server (a URL or a stdio command) and on a fresh simulation of `world`;
    with `grader`, a model grades each simulated step (`simia.sim.judging.step_grade`).

    A real server that dies after answering some calls gives the report of those, with `stopped` saying
    what happened.

    Raises:
        ValueError: the world's tools differ from the real server's (unless `allow_drift`).
        Exception: the real server could not be reached, or failed before answering anything.
    """
    answers: list[types.CallToolResult] = []

    async def play(client: Client) -> None:
        for call in calls:
            answers.append(await client.call_tool(call.tool, call.arguments))

    stopped = await _until_failure(_on_real_server(world, real, headers, allow_drift, play, Client), answers)
    report = await _simulate(world, _where(real), calls[: len(answers)], answers, backend, grader)
    report.stopped = stopped and f"{stopped} after {len(answers)} of {len(calls)} calls"
    return report


async def _until_failure(work: Awaitable[None], done: Sequence[Any]) -> str:
    """Await `work`; a failure once something is `done` is returned as one line (none: raised as it is)."""
    try:
        await work
    except ValueError:
        raise
    except Exception as exc:  # the SDK and its transports raise many kinds, often grouped
        if not done:
            raise
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions and isinstance(exc.exceptions[0], Exception):
            exc = exc.exceptions[0]
        return f"the real server failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return ""


@dataclass
class RecordingClient(Client):
    """An MCP SDK client that keeps every `call_tool` it makes with the real answer: the agent's calls."""

    recorded: list[tuple[ToolCall, types.CallToolResult]] = field(default_factory=list)

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        result = await super().call_tool(name, arguments, *args, **kwargs)
        self.recorded.append((ToolCall(name, dict(arguments or {})), result))
        return result


async def run_agent_fidelity(
    world: World,
    real: str | Sequence[str],
    agent: Agent,
    task: Task,
    backend: Backend,
    *,
    user: UserSimulator | None = None,
    headers: dict[str, str] | None = None,
    allow_drift: bool = False,
    seed: int | None = None,
    grader: Backend | None = None,
) -> FidelityReport:
    """Run `agent` on `task` against the real server, record its calls with the real answers, then replay
    those calls on a fresh simulation of `world` (from the task's starting state) and compare (and grade,
    with `grader`).

    Raises:
        ValueError: the world's tools differ from the real server's (unless `allow_drift`).
        Exception: the real server could not be reached or died (its error, for the caller to report).
    """

    recorded: list[tuple[ToolCall, types.CallToolResult]] = []
    runs: list[EpisodeRun] = []

    async def play(client: Client) -> None:
        assert isinstance(client, RecordingClient)  # _on_real_server made it one
        client.recorded = recorded
        runs.append(await agent.run(client, instruction=task.instruction, policy=world.policy, user=user, seed=seed))

    stopped = await _until_failure(_on_real_server(world, real, headers, allow_drift, play, RecordingClient), recorded)
    start = apply_patch(world.initial_state, task.initial_state_patch, world.state_schema)
    calls, answers = [call for call, _ in recorded], [answer for _, answer in recorded]
    report = await _simulate(world, _where(real), calls, answers, backend, grader, start)
    run = runs[0] if runs else EpisodeRun(transcript=[], stop="real_server_failed")
    report.agent = AgentSummary(task.id, run.stop, run.turns, len(calls), run.agent_error or run.infra_error)
    report.stopped = stopped and f"{stopped} after {len(calls)} calls"
    return report


def _where(real: str | Sequence[str]) -> str:
    return real if isinstance(real, str) else " ".join(real)


async def _on_real_server(
    world: World,
    real: str | Sequence[str],
    headers: dict[str, str] | None,
    allow_drift: bool,
    play: Callable[[Client], Awaitable[T]],
    client_type: type[Client],
) -> T:
    """Connect to the real server, refuse a tool drift (after the connection is closed, so the error is
    plain), and `play` on it."""
    drift: list[str] = []
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        async with connect(real, headers or {}, {}, errlog, 120.0, [], client_type) as client:
            drift = tool_drift(world, (await client.list_tools()).tools)
            if not drift or allow_drift:
                return await play(client)
    raise ValueError(
        "the world's tools differ from the real server's: " + "; ".join(drift) + " (--allow-drift to go on)"
    )


async def _simulate(
    world: World,
    where: str,
    calls: Sequence[ToolCall],
    answers: Sequence[types.CallToolResult],
    backend: Backend,
    grader: Backend | None,
    start: dict[str, Any] | None = None,
) -> FidelityReport:
    """Replay `calls` on a fresh simulated episode (from `start`, or the world's state) and compare each
    simulated step with the real answer (and have `grader` grade it, given the simulator's window)."""
    report = FidelityReport(world=world.name, real=where)
    replayed = await replay(world, calls, backend, start)
    for i, (call, answer, (step, seen)) in enumerate(zip(calls, answers, replayed, strict=True)):
        compared = _compare(i, call, world.tool(call.tool), world, answer, step)
        if grader is not None:
            await _grade(grader, compared, world.tool(call.tool), seen, seed=i)
        report.calls.append(compared)
    report.repeated_read, report.read_after_write = consistency(world, calls, [step for step, _ in replayed])
    return report


async def replay(
    world: World, calls: Sequence[ToolCall], backend: Backend, start: dict[str, Any] | None = None
) -> list[tuple[Step, list[PastCall]]]:
    """Run `calls` on a fresh simulated episode of `world` (from `start`, or the world's state; call i with
    seed i): each step with the window the simulator saw. Infrastructure failures change nothing and never
    enter the window, as in a served episode."""
    simulator = Simulator(backend)
    state = world.initial_state if start is None else start
    window: list[PastCall] = []
    out: list[tuple[Step, list[PastCall]]] = []
    for i, call in enumerate(calls):
        seen = window[-world.simulator.window :] if world.simulator.window else []
        step = await simulator.step(world, state, seen, call, seed=i)
        out.append((step, seen))
        if step.error_kind != "infra":
            state = step.state
            window.append(
                PastCall(call.tool, call.arguments, step.text if step.is_error else step.output, step.is_error)
            )
    return out
