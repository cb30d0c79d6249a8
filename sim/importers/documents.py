"""Reading an API description's documents: the description itself, and where its `$ref`s may lead.

`load_spec` reads a local YAML or JSON file into plain JSON data. `RefLoader` is the one door every
`$ref` to another document goes through (jsonref's and openapi-spec-validator's): a file is read only
when it lies inside the description's own folder (after following symlinks, so `../elsewhere/x.json`,
an absolute path, a `file://` URI or a symlink leading out are refused), and a remote (`http`, `https`)
document only when the caller passes a `fetch` function (`simia import openapi --allow-remote-refs`);
everything else is refused with the reference named, never read.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import jsonref
import yaml

from ..errors import ImportSourceError

__all__ = [
    "MAX_NODES",
    "MAX_SPEC_BYTES",
    "Fetch",
    "RefLoader",
    "RefusedReference",
    "load_spec",
    "parse_document",
    "refusal",
]

MAX_SPEC_BYTES = 16 * 1024 * 1024
"""The largest description `load_spec` reads unless told otherwise (GitHub's REST description is ~11 MB)."""
MAX_NODES = 5_000_000
MAX_DEPTH = 128
"""The deepest nesting of objects and arrays a description may have (real ones stay under 30; the importer's walks
and `jsonref` recurse, so a deeper one is refused, naming where it goes deep, before they start)."""
"""Values a parsed description may hold (YAML aliases can make a small file expand without bound)."""
_MB = 1024 * 1024

Fetch = Callable[[str], bytes]
"""Reads a remote document (an `http`/`https` URI) into bytes; given only when remote references are allowed."""


class RefusedReference(ImportSourceError):
    """A `$ref` that leads outside the description's folder, or to the network when that is not allowed."""


def load_spec(path: str | Path, *, max_bytes: int = MAX_SPEC_BYTES) -> dict[str, Any]:
    """Read a YAML or JSON description into plain JSON data (string keys, dates as ISO strings).

    Raises:
        ImportSourceError: missing, too large, not YAML/JSON, or not a mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise ImportSourceError(f"no file at {str(path)!r}; give the path of an OpenAPI YAML or JSON file")
    size = path.stat().st_size
    if size > max_bytes:
        raise ImportSourceError(
            f"{path} is {size / _MB:.1f} MB, over the {max_bytes / _MB:g} MB limit; "
            f"pass --max-size-mb {int(size / _MB) + 1} to read it anyway"
        )
    data = parse_document(path.read_bytes(), str(path))
    if not isinstance(data, dict):
        raise ImportSourceError(f"{path} holds a {type(data).__name__}, not an OpenAPI description (a mapping)")
    return data


_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # a safe loader (C when built, else Python)
_SCALARS = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


class _Yaml12Loader(_BASE_LOADER):  # type: ignore[misc]
    """The safe loader with YAML 1.2's core schema for plain scalars, as OpenAPI 3 documents are written: only
    `true`/`false` are booleans and numbers are decimal, `0o` octal or `0x` hex. PyYAML reads YAML 1.1, where
    `NO` (Norway), `on`, `yes` and `off` are booleans and `012` is octal: an `enum: [NO, SE]` became `[false, "SE"]`
    and a parameter named `on` a boolean."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _SCALARS]
    for first, resolvers in _BASE_LOADER.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(_SCALARS[0], re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Yaml12Loader.add_implicit_resolver(
    _SCALARS[1], re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_Yaml12Loader.add_implicit_resolver(
    _SCALARS[2],
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def _int12(loader: Any, node: Any) -> int:
    """A YAML 1.2 integer: decimal (`012` is twelve), `0o` octal or `0x` hex."""
    text = str(loader.construct_scalar(node))
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


_Yaml12Loader.add_constructor(_SCALARS[1], _int12)


def parse_document(raw: bytes, where: str) -> Any:
    """YAML or JSON bytes as JSON data (YAML read by its 1.2 core schema, as OpenAPI 3 requires).

    Raises:
        ImportSourceError: not UTF-8, not YAML or JSON, or expanding past `MAX_NODES` values.
    """
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportSourceError(f"{where} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    if text.lstrip().startswith(("{", "[")):
        try:
            return _shallow(json.loads(text), where)
        except json.JSONDecodeError:
            pass  # YAML flow style also starts with a brace
        except RecursionError:
            raise ImportSourceError(
                f"{where} is nested deeper than {MAX_DEPTH} levels; no API description is"
            ) from None
    try:
        data = yaml.load(text, Loader=_Yaml12Loader)  # a safe loader, with YAML 1.2 scalars
    except yaml.MarkedYAMLError as exc:
        line = f" (line {exc.problem_mark.line + 1})" if exc.problem_mark else ""
        raise ImportSourceError(f"{where} is not YAML or JSON: {exc.problem}{line}") from None
    except yaml.YAMLError as exc:
        raise ImportSourceError(f"{where} is not YAML or JSON: {exc}") from None
    return _jsonable(data, [0])


def _shallow(data: Any, where: str) -> Any:
    """`data` when it nests at most `MAX_DEPTH` levels (checked without recursion)."""
    stack: list[tuple[Any, int, str]] = [(data, 1, "$")]
    while stack:
        value, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            raise ImportSourceError(
                f"{where} is nested deeper than {MAX_DEPTH} levels (at {path[:200]}); no API description is"
            )
        if isinstance(value, dict):
            stack.extend((v, depth + 1, f"{path}.{k}") for k, v in value.items() if isinstance(v, dict | list))
        elif isinstance(value, list):
            stack.extend((v, depth + 1, f"{path}[{i}]") for i, v in enumerate(value) if isinstance(v, dict | list))
    return data


def _jsonable(value: Any, count: list[int]) -> Any:
    """YAML data as JSON data: string keys (`200:` is an int in YAML), dates as ISO strings, aliases bounded."""
    count[0] += 1
    if count[0] > MAX_NODES:
        raise ImportSourceError(f"the description expands to more than {MAX_NODES} values (YAML aliases?)")
    if isinstance(value, dict):
        return {str(k): _jsonable(v, count) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v, count) for v in value]
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


class RefLoader:
    """Loads the document a `$ref` names, if it may be read (see the module docstring); each document once.

    Args:
        base_uri: the description's own `file://` URI (its folder is the one references may read);
            "" when it has none, and then no other file is read.
        fetch: reads remote documents; None refuses them.
    """

    def __init__(self, base_uri: str = "", fetch: Fetch | None = None) -> None:
        parts = urlsplit(base_uri)
        self.root = Path(unquote(parts.path)).resolve().parent if parts.scheme == "file" else None
        self.fetch = fetch
        self._documents: dict[str, Any] = {}

    def __call__(self, uri: str) -> Any:
        if uri not in self._documents:
            self._documents[uri] = self._load(uri)
        return self._documents[uri]

    def _load(self, uri: str) -> Any:
        parts = urlsplit(uri)
        if parts.scheme in {"http", "https"}:
            if self.fetch is None:
                raise RefusedReference(f"{uri} is remote; pass --allow-remote-refs to fetch it")
            raw = self.fetch(uri)
            if len(raw) > MAX_SPEC_BYTES:
                raise ImportSourceError(f"{uri} is over {MAX_SPEC_BYTES // _MB} MB")
            return parse_document(raw, uri)
        if parts.scheme != "file" or parts.netloc not in {"", "localhost"}:
            raise RefusedReference(f"{uri}: only files in the description's folder and http(s) URLs are read")
        if self.root is None:
            raise RefusedReference(f"{uri}: the description was given without its folder, so no file is read")
        path = Path(unquote(parts.path))
        if not path.resolve().is_relative_to(self.root):
            raise RefusedReference(
                f"{path} is outside the description's folder {self.root} (symlinks count where they lead); "
                "copy what it needs into that folder"
            )
        if not path.is_file() or path.stat().st_size > MAX_SPEC_BYTES:
            raise ImportSourceError(f"no readable file {path}")
        return parse_document(path.read_bytes(), str(path))


def refusal(exc: jsonref.JsonRefError, where: str) -> ImportSourceError | None:
    """The error to stop the import with when `exc` is a refused reference (None for a merely broken one)."""
    if not isinstance(exc.cause, RefusedReference):
        return None
    reference = exc.reference.get("$ref") if isinstance(exc.reference, dict) else exc.reference
    return ImportSourceError(f"refused $ref {reference!r} in {where}: {exc.cause}")
