"""Fidelity: how closely a world's simulation answers like the real server it stands for.

One call sequence runs against the real MCP server (`real`) and against a fresh simulated episode of
the world (`simulation`: the simulator in process, state carried from call to call). Per call
(`compare`): did both answer or both fail (outcome), is the simulated answer valid against the tool's
output schema, how many key paths they share (structure) and how many JSON leaves are equal (values),
and whether error codes agree; with a grader, a model grades each step (`grading`). Two checks need no
real server (`consistency_checks`): a read-only call repeated with no write between answers the same
(repeated read), and a read-only call repeated after a write that changed the state answers
differently (read after write). `report` aggregates it all and renders it as text or JSON.

The sequence is a calls file (`run_fidelity`) or what the built-in agent does on one of the world's
tasks against the real server (`run_agent_fidelity`: its calls and the real answers are recorded, then
replayed on the simulation).
"""

from __future__ import annotations

from .consistency_checks import consistency
from .real import RecordingClient, tool_drift
from .report import AgentSummary, CallComparison, FidelityReport
from .run import load_calls, run_agent_fidelity, run_fidelity
from .simulation import replay

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
