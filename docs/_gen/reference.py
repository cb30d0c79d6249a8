"""The generated reference pages of the docs site: the CLI (from its argument parsers) and the HTTP API (from
the OpenAPI document the server serves).

`cli_reference()` walks `simia.cli.build_parser()` (every command and sub-command) and the training scripts'
run configs (`SFTRun`, `GRPORun`); `http_reference()` renders `openapi_document(requires_token=True)`: a
section per path and method, then the schemas. Both return Markdown; `main` writes them to
`docs/reference/cli.md` and `docs/reference/http.md`, which are checked in. `tests/docs/test_docs_reference.py`
fails when they drift from the code; the fix is to run this script:

    python docs/_gen/reference.py
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import os
import re
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["CLI_PAGE", "HTTP_PAGE", "cli_reference", "http_reference", "main"]

ROOT = Path(__file__).resolve().parents[2]
CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"
HTTP_PAGE = ROOT / "docs" / "reference" / "http.md"
WIDTH = 100
"""Columns of the usage lines: fixed, so the page does not depend on the terminal that generated it."""

_FIX = "python docs/_gen/reference.py"
_ENVIRONMENT = ("SIMIA_DB_URL", "COLUMNS")
"""Variables that would change the rendered defaults or widths; unset while rendering."""


def _notice(source: str) -> str:
    return (
        f"<!-- Generated from {source} by docs/_gen/reference.py: do not edit by hand. "
        f"After changing the code, run: {_FIX} -->\n"
    )


def _cell(text: str) -> str:
    """Text for one Markdown table cell: one line, with `|`, `*` and `<` escaped outside code spans (Python-Markdown's
    tables never split a cell inside a code span, and a backslash there would show)."""
    parts = " ".join(str(text).split()).split("`")
    for i in range(0, len(parts), 2):  # the even parts are outside code spans
        parts[i] = parts[i].replace("|", "\\|").replace("*", "\\*").replace("<", "&lt;")
    return "`".join(parts)


def _code(text: str) -> str:
    """A code span for a table cell."""
    return "`" + " ".join(str(text).split()) + "`" if text else ""


@contextlib.contextmanager
def _quiet_environment() -> Iterator[None]:
    saved = {name: os.environ.pop(name) for name in _ENVIRONMENT if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(parser.prog, width=WIDTH, max_help_position=40)


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = _formatter(parser)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _argument(formatter: argparse.HelpFormatter, action: argparse.Action) -> str:
    """`--db PATH|URL`, `-h, --help`, `PATH...`: how the argument is written."""
    if not action.option_strings:
        return formatter._format_args(action, action.dest)
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    args = formatter._format_args(action, action.dest.upper())
    return ", ".join(f"{option} {args}" for option in action.option_strings)


def _default(action: argparse.Action) -> str:
    if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
        return ""
    if isinstance(action.default, list | tuple):
        return " ".join(str(v) for v in action.default)
    return str(action.default)


def _help(formatter: argparse.HelpFormatter, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return formatter._expand_help(action)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each sub-command, in the order `--help` lists them."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            found += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return found


def _command(name: str, summary: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    formatter = _formatter(parser)
    lines = [f"{'#' * level} {name}", ""]
    if summary:
        lines += [summary[0].upper() + summary[1:] + ("" if summary.endswith(".") else "."), ""]
    if parser.description:
        lines += [parser.description.strip(), ""]
    lines += ["```text", _usage(parser), "```", ""]
    rows = [
        a
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction) and a.help != argparse.SUPPRESS
    ]
    if rows:
        lines += ["| argument | default | what it does |", "|---|---|---|"]
        lines += [
            f"| {_code(_argument(formatter, a))} | {_code(_default(a))} | {_cell(_help(formatter, a))} |" for a in rows
        ]
        lines.append("")
    subs = _subcommands(parser)
    if subs:
        lines += ["| sub-command | what it does |", "|---|---|"]
        lines += [f"| [{_cell(sub.prog)}](#{_anchor(sub.prog)}) | {_cell(text)} |" for _, text, sub in subs]
        lines.append("")
        for _, text, sub in subs:
            lines += _command(sub.prog, text, sub, level + 1)
    return lines


def _anchor(heading: str) -> str:
    """The id Python-Markdown's toc extension gives a heading (its default slugify)."""
    slug = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", slug)


def _attributes(doc: str) -> dict[str, str]:
    """The `Attributes:` section of a Google-style docstring: name -> text (continuation lines joined)."""
    found: dict[str, str] = {}
    doc = inspect.cleandoc(doc)
    section = doc.split("Attributes:", 1)[1] if "Attributes:" in doc else ""
    current = None
    for line in section.splitlines():
        if match := re.match(r"^\s{4}(\w+): (.*)$", line):
            current = match[1]
            found[current] = match[2].strip()
        elif current and line.startswith(" " * 8):
            found[current] += " " + line.strip()
        elif line.strip():
            current = None
    return found


def _type_name(hint: Any) -> str:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if args and len(args) < len(typing.get_args(hint)):
        return f"{_type_name(args[0])} or null"
    return getattr(hint, "__name__", str(hint))


def _run_config(module: str, cls: type) -> list[str]:
    """A training script's run config as a section: one `--flag` per field of the dataclass."""
    hints = typing.get_type_hints(cls)
    meaning = _attributes(cls.__doc__ or "")
    command = f"python -m {module}"
    lines = [f"## {command}", "", inspect.cleandoc(cls.__doc__ or "").splitlines()[0], ""]
    lines += [
        "Every field is also a key of the YAML file given to `--config FILE.yaml`; a flag overrides the file, "
        "the file overrides the default. Values are checked against the field's type (a typo is an error "
        "naming the field, exit status 2).",
        "",
        "| flag | type | default | what it sets |",
        "|---|---|---|---|",
        "| `--config FILE.yaml` | path | | YAML file with any of the fields below |",
    ]
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        default = "" if field.default in (dataclasses.MISSING, None) else str(field.default)
        if isinstance(field.default, bool):
            default = default.lower()  # as a flag or YAML value takes it
        flag = "--" + field.name.replace("_", "-")
        lines.append(
            f"| `{flag}` | {_cell(_type_name(hints[field.name]))} | {_code(default)} | "
            f"{_cell(meaning.get(field.name, ''))} |"
        )
    return [*lines, ""]


def cli_reference() -> str:
    """The CLI reference page: every command of `simia` and of the training scripts, as Markdown."""
    with _quiet_environment():
        from simia.cli import build_parser
        from simia.training.grpo import GRPORun
        from simia.training.sft import SFTRun

        parser = build_parser()
        lines = [
            _notice("simia.cli.build_parser() and the training scripts' run configs"),
            "# CLI reference",
            "",
            "Every command of `simia`, with every flag, its default and what it does, as `--help` prints them; "
            "then the two training scripts. The guides show the commands at work: start with "
            "[Getting started](../getting-started.md).",
            "",
            "```text",
            _usage(parser),
            "```",
            "",
            "| command | what it does |",
            "|---|---|",
        ]
        subs = _subcommands(parser)
        lines += [f"| [{_cell(sub.prog)}](#{_anchor(sub.prog)}) | {_cell(text)} |" for _, text, sub in subs]
        lines.append("")
        for _, text, sub in subs:
            lines += _command(sub.prog, text, sub, 2)
        lines += _run_config("simia.training.sft", SFTRun)
        lines += _run_config("simia.training.grpo", GRPORun)
    return "\n".join(lines).rstrip() + "\n"


_METHOD_ORDER = ("get", "post", "put", "patch", "delete")


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[1]


def _schema_link(name: str) -> str:
    return f"[{name}](#{name.lower()})"


def _type(schema: Any) -> str:
    """A JSON Schema as a short phrase: `string`, `array of [Event](#event)`, `integer or null`."""
    if not isinstance(schema, dict) or not schema:
        return "any"
    if "$ref" in schema:
        return _schema_link(_ref_name(schema["$ref"]))
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"]
            nullable = len(options) < len(schema[key])
            return " or ".join(_type(s) for s in options) + (" or null" if nullable else "")
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        return f"array of {_type(schema.get('items'))}" if schema.get("items") else "array"
    if kind == "object":
        return "object"
    return str(kind or "any")


def _limits(schema: dict[str, Any]) -> str:
    """Bounds worth a reader's attention (lengths, ranges) of a schema or of the non-null branch of one."""
    for option in schema.get("anyOf", []):
        if option.get("type") != "null":
            schema = {**option, **schema}
    words = []
    for key, text in (
        ("minLength", "at least {} characters"),
        ("maxLength", "at most {} characters"),
        ("minItems", "at least {} items"),
        ("minimum", ">= {}"),
        ("maximum", "<= {}"),
    ):
        if key in schema and abs(schema[key]) < 2**31:
            words.append(text.format(schema[key]))
    return ", ".join(words)


def _paragraphs(text: str) -> tuple[str, dict[str, str]]:
    """A schema description: its text before any `Attributes:` section, and that section's field texts."""
    head = text.split("Attributes:", 1)[0].strip()
    return " ".join(head.split()), _attributes(text)


def _operation(path: str, method: str, op: dict[str, Any], schemas: dict[str, Any]) -> list[str]:
    lines = [f"### {method.upper()} {path}", "", op.get("summary", "") + ".", ""]
    if op.get("description"):
        lines += [op["description"], ""]
    facts = [f"- Operation id: `{op['operationId']}`."]
    if op.get("security") == []:
        facts.append("- No token needed.")
    elif op.get("security"):
        facts.append("- Needs `Authorization: Bearer TOKEN` when the server was given `--token`.")
    lines += [*facts, ""]
    params = op.get("parameters", [])
    if params:
        lines += ["| parameter | in | type | what it is |", "|---|---|---|---|"]
        for p in params:
            lines.append(
                f"| `{p['name']}`{'' if p.get('required') else ' (optional)'} | {p['in']} | "
                f"{_cell(_type(p.get('schema')))} | {_cell(p.get('description', ''))} |"
            )
        lines.append("")
    body = op.get("requestBody")
    if body:
        for media, content in body["content"].items():
            optional = "" if body.get("required") else " (the body may be left out)"
            lines += [f"Request body: {_type(content.get('schema'))} as `{media}`{optional}.", ""]
    lines += ["| status | answer | when |", "|---|---|---|"]
    for status, answer in sorted(op["responses"].items(), key=lambda item: int(item[0])):
        media = answer.get("content") or {}
        shapes = [
            f"{_type(content.get('schema')) if content.get('schema') else 'a stream'} (`{kind}`)"
            for kind, content in media.items()
        ]
        lines.append(
            f"| {status} | {_cell(', '.join(shapes) or '(no body)')} | {_cell(answer.get('description', ''))} |"
        )
    return [*lines, ""]


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    text, fields = _paragraphs(schema.get("description", ""))
    lines = [f"### {name}", ""]
    if text:
        lines += [text, ""]
    properties = schema.get("properties", {})
    if properties:
        required = set(schema.get("required", []))
        lines += ["| field | type | required | what it is |", "|---|---|---|---|"]
        for field, spec in properties.items():
            what = spec.get("description") or fields.get(field, "")
            limits = _limits(spec)
            if limits:
                what = f"{what} ({limits})" if what else limits
            if "default" in spec and field not in required and spec["default"] not in (None, "", [], {}):
                what = f"{what} Default: `{json.dumps(spec['default'])}`.".strip()
            lines.append(f"| `{field}` | {_cell(_type(spec))} | {'yes' if field in required else ''} | {_cell(what)} |")
        lines.append("")
        if schema.get("additionalProperties") is False:
            lines += ["Unknown fields are refused (400, naming the field).", ""]
    return lines


def http_reference() -> str:
    """The HTTP API reference page, from the OpenAPI document of a server given tokens, as Markdown."""
    from simia.server.openapi import openapi_document

    document = openapi_document(requires_token=True)
    schemas: dict[str, Any] = document["components"]["schemas"]
    lines = [
        _notice("simia.server.openapi.openapi_document(requires_token=True)"),
        "# HTTP API reference",
        "",
        "Every route of `simia serve`, from the OpenAPI "
        f"{document['openapi']} document a running server serves at `GET /openapi.json` (the same wire models "
        "the server parses and the typed client returns). "
        + " ".join(document["info"]["description"].split())
        + " The guide to the API is [Serving worlds](../serving.md).",
        "",
        "## Routes",
        "",
        "| method and path | what it does |",
        "|---|---|",
    ]
    operations = []
    for path, methods in document["paths"].items():
        for method in sorted(methods, key=_METHOD_ORDER.index):
            operations.append((path, method, methods[method]))
    for path, method, op in operations:
        heading = f"{method.upper()} {path}"
        lines.append(f"| [`{heading}`](#{_anchor(heading)}) | {_cell(op.get('summary', ''))} |")
    lines.append("")
    for tag, title in (("api", "The JSON API"), ("mcp", "MCP endpoints")):
        lines += [f"## {title}", ""]
        for path, method, op in operations:
            if tag in op.get("tags", []):
                lines += _operation(path, method, op, schemas)
    lines += ["## Schemas", ""]
    for name in sorted(schemas):
        lines += _schema(name, schemas[name])
    if "securitySchemes" in document["components"]:
        lines += ["## Authentication", ""]
        for name, scheme in document["components"]["securitySchemes"].items():
            lines += [f"`{name}`: HTTP `{scheme['scheme']}` authentication. {scheme.get('description', '')}.", ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write both reference pages; say which changed."""
    del argv
    for page, text in ((CLI_PAGE, cli_reference()), (HTTP_PAGE, http_reference())):
        page.parent.mkdir(parents=True, exist_ok=True)
        old = page.read_text(encoding="utf-8") if page.exists() else None
        page.write_text(text, encoding="utf-8")
        print(f"{'unchanged' if old == text else 'wrote'} {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
