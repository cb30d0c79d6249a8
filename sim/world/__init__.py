"""The world: the data that defines one simulated environment, and the state it is played in.

A world is loaded from a folder (`load_world`), validated on load, and written back safely (`write_world`);
its state is a JSON object passed in and returned (`apply_patch`, `resolve_pointer`); `tool_views` renders
its tools for agents and trainers. Everything here is data and pure functions: no model, no database.
"""

from __future__ import annotations

from .files import atomic_write_text, check_target, write_world
from .grounding import (
    UNFILLED,
    Effect,
    Grounding,
    GroundingMode,
    Precondition,
    Read,
    fill_jsonpath,
    fill_pointer,
    fill_value,
    template_names,
)
from .loader import TOOL_NAME, WORLD_NAME, LoadReport, default_worlds_dir, load_world, load_worlds
from .model import (
    ABSENT,
    GENERIC_ERRORS,
    Example,
    RealServer,
    SimulatorHints,
    Task,
    ToolErrorSpec,
    ToolSpec,
    World,
    canonical_json,
    compact_json,
)
from .personas import PERSONAS, USER_RULES, Persona, mark_persona, persona, transcript_persona, unknown_persona
from .state import (
    Parked,
    State,
    Touched,
    apply_patch,
    apply_patches,
    as_state,
    check_touched,
    is_missing,
    park,
    parked_patches,
    resolve_pointer,
    state_diff,
    state_hash,
)
from .tool_views import (
    ToolLike,
    check_tool_calls,
    openai_tool,
    openai_tool_call,
    schema_signature,
    tool_card,
    world_card,
)
from .validation import grounding_issues

__all__ = [
    "ABSENT",
    "GENERIC_ERRORS",
    "PERSONAS",
    "TOOL_NAME",
    "UNFILLED",
    "USER_RULES",
    "WORLD_NAME",
    "Effect",
    "Example",
    "Grounding",
    "GroundingMode",
    "LoadReport",
    "Parked",
    "Persona",
    "Precondition",
    "Read",
    "RealServer",
    "SimulatorHints",
    "State",
    "Task",
    "ToolErrorSpec",
    "ToolLike",
    "ToolSpec",
    "Touched",
    "World",
    "apply_patch",
    "apply_patches",
    "as_state",
    "atomic_write_text",
    "canonical_json",
    "check_target",
    "check_tool_calls",
    "check_touched",
    "compact_json",
    "default_worlds_dir",
    "fill_jsonpath",
    "fill_pointer",
    "fill_value",
    "grounding_issues",
    "is_missing",
    "load_world",
    "load_worlds",
    "mark_persona",
    "openai_tool",
    "openai_tool_call",
    "park",
    "parked_patches",
    "persona",
    "resolve_pointer",
    "schema_signature",
    "state_diff",
    "state_hash",
    "template_names",
    "tool_card",
    "transcript_persona",
    "unknown_persona",
    "world_card",
    "write_world",
]
