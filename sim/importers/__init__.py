"""Importers: a world's tools from a real MCP server's listing, an API description or tau2-bench's package (read
in tau2's own venv by a probe script), and a model's draft of the state and tasks such a world lacks
(`bootstrap`). Each builds an `ImportedWorld` and reports what it skipped or changed, and why; nothing here speaks
MCP or HTTP (the clients layer reads the listing).
"""

from __future__ import annotations

from .bootstrap import BootstrapConfig, BootstrapReport, bootstrap, check_task
from .contamination import NGRAM, EvalSet, drop_overlapping
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
from .seeds import SEED_FORMATS, SeedFile, SeedsImport, SeedWorld, Skipped, import_seeds
from .tau2 import INSTALL_HINT as TAU2_INSTALL_HINT
from .tau2 import TAU2_FILE, domain_declarations, run_probe, tau2_hash, world_from_tau2

__all__ = [
    "MAX_SPEC_BYTES",
    "NGRAM",
    "SEED_FORMATS",
    "TAU2_FILE",
    "TAU2_INSTALL_HINT",
    "BootstrapConfig",
    "BootstrapReport",
    "EvalSet",
    "ImportedWorld",
    "OperationFilter",
    "ProbeCall",
    "ProbeResult",
    "ReportEntry",
    "SeedFile",
    "SeedWorld",
    "SeedsImport",
    "ServerListing",
    "Skipped",
    "bootstrap",
    "check_probe_calls",
    "check_task",
    "domain_declarations",
    "drop_overlapping",
    "import_openapi",
    "import_seeds",
    "is_read_only",
    "load_spec",
    "normal_modes",
    "parse_probe_calls",
    "real_server_record",
    "run_probe",
    "tau2_hash",
    "upgrade_schema",
    "world_from_listing",
    "world_from_tau2",
]
