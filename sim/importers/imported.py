"""An imported world before it is written: tools from a real MCP server, an API description or a benchmark's
package, plus a report.

The importers (`simia import mcp`, `simia import openapi`, `simia import tau2`) build an `ImportedWorld`: the
world's header, its tools in MCP wire shape (plus simia's `errors`), optional reference
examples, and a `report` that says what was skipped or changed and why. `files()` renders
the world folder (world.yaml, tools.json, policy.md, examples/, a state.json skeleton or the source's own state,
tasks.jsonl, files the importer attaches, import_report.json) for `simia.sim.world.files.write_world`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jsonschema_rs
import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from ..world import TOOL_NAME, WORLD_NAME

__all__ = [
    "ImportedWorld",
    "ReportEntry",
    "mcp_tool_name",
    "normal_modes",
    "tool_schema_problem",
    "unique_name",
    "world_name",
]

REPORT_FILE = "import_report.json"
SKELETON_KEY = "state_skeleton"
"""Where import_report.json records the state.json the import wrote (so bootstrap can tell it from a person's)."""


@dataclass(frozen=True)
class ReportEntry:
    """One line of an import report.

    `skipped`: the item is not in the world; `changed`: it is, but not exactly as the source
    has it; `note`: something the user should know (the source's own validation problems).
    """

    kind: Literal["skipped", "changed", "note"]
    item: str
    reason: str

    def __str__(self) -> str:
        return f"{self.kind:<8} {self.item}: {self.reason}"


@dataclass
class ImportedWorld:
    """A world built from a real source, with the report of what did not come across as it was."""

    name: str
    title: str
    description: str = ""
    version: str = "1"
    policy: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    user_tools: list[dict[str, Any]] = field(default_factory=list)  # the user's own (dual control: tau2's telecom)
    functions: dict[str, str] = field(default_factory=dict)  # world.yaml's named JSONata functions
    triggers: list[dict[str, Any]] = field(default_factory=list)  # world.yaml's triggers
    examples: dict[str, dict[str, Any]] = field(default_factory=dict)
    report: list[ReportEntry] = field(default_factory=list)
    source: str = ""
    real_server: dict[str, Any] | None = None  # where tools routed `real` go (an MCP import records its server)
    state: dict[str, Any] | None = None  # an initial state skeleton (REST collections keyed by id, still empty)
    skeleton: bool = True  # false: `state` is the source's real data (tau2-bench's database), not drafted over
    state_schema: dict[str, Any] | None = None
    simulator: dict[str, Any] | None = None  # world.yaml's simulator hints
    tasks: list[dict[str, Any]] = field(default_factory=list)  # tasks.jsonl, one task a line
    attachments: dict[str, str] = field(default_factory=dict)  # more files beside the world (relative path -> text)

    def skipped(self) -> list[ReportEntry]:
        return [entry for entry in self.report if entry.kind == "skipped"]

    def files(self) -> dict[str, str]:
        """The world folder as relative path -> text."""
        header: dict[str, Any] = {"name": self.name, "title": self.title}
        if self.description.strip():
            header["description"] = "\n".join(line.rstrip() for line in self.description.strip().splitlines())
        header["version"] = self.version
        if self.real_server is not None:
            header["real_server"] = self.real_server
        if self.simulator:
            header["simulator"] = self.simulator
        if self.functions:
            header["functions"] = self.functions
        if self.triggers:
            header["triggers"] = self.triggers
        if self.state_schema is not None:
            header["state_schema"] = self.state_schema
        files = {
            "world.yaml": yaml.dump(header, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100),
            "tools.json": json.dumps(self.tools, indent=1, ensure_ascii=False) + "\n",
        }
        if self.user_tools:
            files["user_tools.json"] = json.dumps(self.user_tools, indent=1, ensure_ascii=False) + "\n"
        if self.policy.strip():
            files["policy.md"] = self.policy.strip() + "\n"
        for name, example in self.examples.items():
            files[f"examples/{name}.json"] = json.dumps(example, indent=1, ensure_ascii=False) + "\n"
        report: dict[str, Any] = {"source": self.source, "report": [vars(entry) for entry in self.report]}
        if self.state is not None:
            files["state.json"] = json.dumps(self.state, indent=1, ensure_ascii=False) + "\n"
            if self.skeleton:
                report[SKELETON_KEY] = self.state  # `simia bootstrap` drafts over it: it is not hand-written
        if self.tasks:
            files["tasks.jsonl"] = "".join(json.dumps(task, ensure_ascii=False) + "\n" for task in self.tasks)
        files.update(self.attachments)
        files[REPORT_FILE] = json.dumps(report, indent=1, ensure_ascii=False) + "\n"
        return files


class _Dumper(yaml.SafeDumper):
    """YAML with multi-line strings as literal blocks (`|`), as a person would write them."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


def world_name(text: str | None, fallback: str = "imported") -> str:
    """A valid world name (1-64 of letters, digits, `_`, `.`, `-`, starting alphanumeric) from a title."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", (text or "").strip().lower())
    slug = re.sub(r"-{2,}", "-", slug).strip("-_.")[:64].rstrip("-_.")
    return slug if slug and WORLD_NAME.fullmatch(slug) else fallback


def mcp_tool_name(text: str) -> str:
    """An MCP-valid tool name (`^[A-Za-z0-9_.-]{1,128}$`) from any text: other characters become `_`."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")
    name = re.sub(r"_{2,}", "_", name)[:128]
    return name if TOOL_NAME.fullmatch(name) else "tool"


def unique_name(name: str, taken: Iterable[str]) -> str:
    """`name`, or `name_2`, `name_3`, ... : the first not in `taken` (kept within 128 characters)."""
    used = set(taken)
    if name not in used:
        return name
    n = 2
    while True:
        suffix = f"_{n}"
        candidate = name[: 128 - len(suffix)] + suffix
        if candidate not in used:
            return candidate
        n += 1


def tool_schema_problem(schema: dict[str, Any]) -> str | None:
    """Why the loader would refuse this as a tool's inputSchema/outputSchema (None when it is fine).

    The Rust metaschema check answers first (thousands of tools in a large API description);
    the reference `jsonschema` explains a failure.
    """
    if not jsonschema_rs.meta.is_valid(schema):
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            return f"not a valid JSON Schema 2020-12: {exc.message}"
        return "not a valid JSON Schema 2020-12"
    if schema.get("type") != "object":
        return f"the root must be 'type: object' (MCP requires it), got {schema.get('type')!r}"
    return None


def normal_modes(folder: str | Path, paths: Iterable[str | Path] | None = None) -> None:
    """Give `folder` and the files in it (or only `paths`, relative to it) the modes a new folder and file get
    under the process's umask (0755 and 0644 under 022): the safe writers stage in private temporary files
    (modes 0700 and 0600), which would otherwise stay on a world meant to be shared and served.
    """
    folder = Path(folder)
    mask = os.umask(0)
    os.umask(mask)
    targets = [folder / p for p in paths] if paths is not None else [folder, *folder.rglob("*")]
    for path in targets:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o777 & ~mask)
        elif path.is_file() and not path.is_symlink():
            path.chmod(0o666 & ~mask)
