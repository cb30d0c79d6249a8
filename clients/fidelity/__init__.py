"""Fidelity: how closely a world's simulation answers like the real server it stands for.

One call sequence runs against the real MCP server (`real`) and against a fresh simulated episode of
the world (`simulation`: the simulator in process, state carried from call to call). Per call
(`compare`): did both answer or both fail (outcome), is the simulated answer valid against the tool's
output schema, how many key paths they share (structure) and how many JSON leaves are equal (values),
and, for a real error, whether the simulation erred with the same code (a simulator failure never agrees);
each figure stands beside what a null and a constant simulator score on the same calls (`baselines`).
With a grader, a model grades each step (`grading`). `consistency_checks` finds pairs of calls: a read
repeated with no write between must answer as before, and a read of what a write named must show what
the write set. `report` aggregates it all, model-answered and state-answered calls apart, as text or JSON.
Writes (tools not annotated `readOnlyHint`) run on the real server only when allowed (`allow_writes`).

The sequence is a calls file (`run_fidelity`) or what the built-in agent does on one of the world's
tasks against the real server (`run_agent_fidelity`: its calls and the real answers are recorded, then
replayed on the simulation).

With no real server, a world whose tools are declared exactly is its own reference (`declared`,
`run_declared_fidelity`): the declarations answer each call exactly, a model simulates the same world without
them on the same state, and the state each side left is scored too, split by how many fields the call changes.
"""

from __future__ import annotations

from .compare import CallComparison
from .consistency_checks import Check, Consistency, Pair, consistency, pairs, summary
from .declared import CallSequence, exact_tools, example_sequences, run_declared_fidelity, task_sequences
from .real import RecordingClient, tool_drift
from .report import AgentSummary, FidelityReport
from .run import load_calls, run_agent_fidelity, run_fidelity
from .simulation import replay

__all__ = [
    "AgentSummary",
    "CallComparison",
    "CallSequence",
    "Check",
    "Consistency",
    "FidelityReport",
    "Pair",
    "RecordingClient",
    "consistency",
    "exact_tools",
    "example_sequences",
    "load_calls",
    "pairs",
    "replay",
    "run_agent_fidelity",
    "run_declared_fidelity",
    "run_fidelity",
    "summary",
    "task_sequences",
    "tool_drift",
]
