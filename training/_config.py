"""The shape every training script shares (as TRL's do): a dataclass config, `--config FILE.yaml`, CLI overrides."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

__all__ = ["parse_config"]

C = TypeVar("C")


def _kind(hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def parse_config(cls: type[C], argv: Sequence[str] | None = None, *, description: str = "") -> C:
    """Build `cls` from its defaults, then a YAML `--config`, then `--field value` overrides (highest wins).

    Raises:
        SystemExit: an unknown field in the YAML file or on the command line (argparse's message).
    """
    assert dataclasses.is_dataclass(cls)
    hints = typing.get_type_hints(cls)
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", type=Path, help="YAML file with any of the fields below")
    for f in dataclasses.fields(cls):
        kind = _kind(hints[f.name])
        flag = "--" + f.name.replace("_", "-")
        if kind is bool:
            parser.add_argument(flag, type=lambda v: v.lower() in {"1", "true", "yes"}, metavar="BOOL")
        else:
            parser.add_argument(flag, type=kind if kind in (int, float, str) else str)
    args = parser.parse_args(argv)
    values: dict[str, Any] = {}
    if args.config:
        loaded = yaml.safe_load(args.config.read_text()) or {}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(loaded) - known)
        if unknown:
            parser.error(f"{args.config}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        values.update(loaded)
    values.update({k: v for k, v in vars(args).items() if k != "config" and v is not None})
    return cls(**values)
