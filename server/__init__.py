"""simia's MCP server: worlds as MCP endpoints and the HTTP API.

`build_server` assembles a ready app; `serving` runs one inside an event loop.
"""

from .app import SimiaApp
from .build import build_server
from .inprocess import free_port, serving
from .settings import ServerSettings

__all__ = ["ServerSettings", "SimiaApp", "build_server", "free_port", "serving"]
