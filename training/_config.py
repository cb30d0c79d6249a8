"""The shape every training script shares (as TRL's do): a dataclass config, `--config FILE.yaml`, CLI overrides.

Every value is checked against its field's type with pydantic: YAML values strictly (a YAML `true`
is not an int, a quoted `"10"` is not an int), command-line text by the field's type (`--save ture`
and `--max-steps abc` are errors, `--save false` and `--learning-rate 1e-4` are fine). Any mistake
(an unknown field or flag, a mistyped value, a missing or malformed file) ends the program as
argparse does: the usage, one error line naming the field, exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import TypeAdapter, ValidationError

__all__ = ["parse_config"]

C = TypeVar("C")

_EXPECTED = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
_METAVAR = {bool: "BOOL", int: "INT", float: "FLOAT", str: "TEXT"}


class _Loader(yaml.SafeLoader):
    """PyYAML reads YAML 1.1, where `1e-4` is a string; this loader reads it as YAML 1.2 does, as a float."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


class _Invalid(Exception):
    """A value that does not fit its field (the message names neither: the caller says where it came from)."""


def _kind(hint: Any) -> Any:
    """The type a value must have: `X` for `X | None`."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def _check(adapter: TypeAdapter[Any], hint: Any, value: Any, *, from_text: bool) -> Any:
    """`value` as the field's type; text from the command line is parsed by that type, YAML values must be it."""
    kind = _kind(hint)
    try:
        if from_text and kind not in _EXPECTED:
            return adapter.validate_json(value)  # lists, dicts: JSON on the command line
        return adapter.validate_python(value, strict=not from_text)
    except ValidationError as exc:
        expected = _EXPECTED.get(kind) or exc.errors()[0]["msg"].lower()
        if kind is not hint:
            expected += " or null" if not from_text else ""
        raise _Invalid(f"invalid value {value!r}: expected {expected}") from None


def _read_yaml(parser: argparse.ArgumentParser, path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        parser.error(f"--config {path}: no such file")
    except OSError as exc:
        parser.error(f"--config {path}: cannot read it ({exc.strerror})")
    try:
        loaded = yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: safe
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        parser.error(f"--config {path}: not valid YAML ({getattr(exc, 'problem', None) or exc}{where})")
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        parser.error(f"--config {path}: expected a mapping of field: value, got {type(loaded).__name__}")
    return {str(k): v for k, v in loaded.items()}


def parse_config(cls: type[C], argv: Sequence[str] | None = None, *, description: str = "") -> C:
    """Build `cls` from its defaults, then a YAML `--config`, then `--field value` overrides (highest wins).

    Args:
        cls: a dataclass whose fields are the options; `snake_case` fields are `--kebab-case` flags.
        argv: the arguments (default: `sys.argv[1:]`).
        description: the `--help` text.

    Returns:
        The config, every value of its field's type.

    Raises:
        SystemExit: exit status 2 with argparse's one-line message naming the field, for an unknown
            flag or YAML field, a value of the wrong type, or a config file that is missing, not
            YAML or not a mapping.
    """
    assert dataclasses.is_dataclass(cls), f"{cls!r} is not a dataclass"
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    adapters = {name: TypeAdapter[Any](hints[name]) for name in fields}
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False)
    parser.add_argument("--config", type=Path, metavar="FILE.yaml", help="YAML file with any of the fields below")
    for name, f in fields.items():
        default = f.default if f.default is not dataclasses.MISSING else None
        parser.add_argument(
            "--" + name.replace("_", "-"),
            metavar=_METAVAR.get(_kind(hints[name]), "JSON"),
            help=None if default is None else f"default: {default}",
        )
    args = parser.parse_args(argv)
    values: dict[str, Any] = {}
    if args.config is not None:
        loaded = _read_yaml(parser, args.config)
        for key, value in loaded.items():
            if key not in fields:
                close = difflib.get_close_matches(key, fields, n=1)
                hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(fields)}"
                parser.error(f"--config {args.config}: unknown field {key!r} ({hint})")
            try:
                values[key] = _check(adapters[key], hints[key], value, from_text=False)
            except _Invalid as exc:
                parser.error(f"--config {args.config}: {key}: {exc}")
    for name in fields:
        text = getattr(args, name)
        if text is not None:
            try:
                values[name] = _check(adapters[name], hints[name], text, from_text=True)
            except _Invalid as exc:
                parser.error(f"argument --{name.replace('_', '-')}: {exc}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:  # the dataclass's own checks (__post_init__)
        parser.error(str(exc))
