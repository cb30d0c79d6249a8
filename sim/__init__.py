"""simia's simulation core: worlds, state, the LLM simulator, backends, judge and store.

Nothing here imports `mcp`: the server translates between MCP and these types.
"""

from importlib.metadata import PackageNotFoundError, version

from .errors import SimiaError, WorldError, WorldIssue
from .world.loader import LoadReport, default_worlds_dir, load_world, load_worlds
from .world.model import Task, ToolSpec, World

try:
    __version__ = version("simia")  # pyproject.toml is the one place the version is written
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "dev"

__all__ = [
    "LoadReport",
    "SimiaError",
    "Task",
    "ToolSpec",
    "World",
    "WorldError",
    "WorldIssue",
    "__version__",
    "default_worlds_dir",
    "load_world",
    "load_worlds",
]
