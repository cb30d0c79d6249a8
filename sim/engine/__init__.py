"""The simulation engine: one tool call in, a validated result and a new state out.

`Simulator.step` answers what a tool's grounding decides from the state alone (`grounded`), and builds
one structured model request for the rest from the world, the state and a window of recent calls
(`prompts`), and checks the answer against the tool's output schema and the state's schema before
it is returned; `slicing` shows a large state as the records a call names, found through `index`; `faults`
draws and applies the realistic faults of a perturbed episode.
"""

from __future__ import annotations

from .faults import Fault, applicable, choose_fault, injected_error, perturb_output
from .grounded import Broken, Plan, Refused, plan_call, undeclared
from .index import IndexedState, StateIndex, StateIndexes
from .prompts import PROMPT_VERSION, UserMessage, answer_schema, system_prompt, user_prompt
from .simulator import INTERNAL_TEXT, ErrorKind, Simulator, Step, ToolCall, check_call, shown_name
from .slicing import NamedRecord, StateView, needles_of, slice_state, state_text, state_view

__all__ = [
    "INTERNAL_TEXT",
    "PROMPT_VERSION",
    "Broken",
    "ErrorKind",
    "Fault",
    "IndexedState",
    "NamedRecord",
    "Plan",
    "Refused",
    "Simulator",
    "StateIndex",
    "StateIndexes",
    "StateView",
    "Step",
    "ToolCall",
    "UserMessage",
    "answer_schema",
    "applicable",
    "check_call",
    "choose_fault",
    "injected_error",
    "needles_of",
    "perturb_output",
    "plan_call",
    "shown_name",
    "slice_state",
    "state_text",
    "state_view",
    "system_prompt",
    "undeclared",
    "user_prompt",
]
