"""simia's simulation core: worlds, state, the LLM simulator, backends, judge and store.

Nothing here imports `mcp`: the server translates between MCP and these types.
"""

from .errors import SimiaError, WorldError, WorldIssue
from .loader import LoadReport, default_worlds_dir, load_world, load_worlds
from .world import Task, ToolSpec, World

__all__ = [
    "LoadReport",
    "SimiaError",
    "Task",
    "ToolSpec",
    "World",
    "WorldError",
    "WorldIssue",
    "default_worlds_dir",
    "load_world",
    "load_worlds",
]
