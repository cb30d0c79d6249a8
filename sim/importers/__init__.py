"""Importers: a world's tools from a real MCP server's listing or an API description, and a model's draft of the
state and tasks such a world lacks (`bootstrap`). Each builds an `ImportedWorld` and reports what it skipped
or changed, and why; nothing here speaks MCP or HTTP (the clients layer reads the listing).
"""

from __future__ import annotations

from .bootstrap import BootstrapConfig, BootstrapReport, bootstrap, check_task
from .dialects import upgrade_schema
from .documents import MAX_SPEC_BYTES, load_spec
from .imported import ImportedWorld, ReportEntry, normal_modes
from .mcp import (
    ProbeCall,
    ProbeResult,
    ServerListing,
    check_probe_calls,
    is_read_only,
    parse_probe_calls,
    real_server_record,
    world_from_listing,
)
from .openapi import OperationFilter, import_openapi

__all__ = [
    "MAX_SPEC_BYTES",
    "BootstrapConfig",
    "BootstrapReport",
    "ImportedWorld",
    "OperationFilter",
    "ProbeCall",
    "ProbeResult",
    "ReportEntry",
    "ServerListing",
    "bootstrap",
    "check_probe_calls",
    "check_task",
    "import_openapi",
    "is_read_only",
    "load_spec",
    "normal_modes",
    "parse_probe_calls",
    "real_server_record",
    "upgrade_schema",
    "world_from_listing",
]
