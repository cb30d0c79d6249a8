"""Seed records as files hold them: one JSON object a line (JSONL), one JSON array, or Parquet rows; any of them
gzipped. `read_records` streams them one by one in bounded memory (a JSON array is decoded element by element,
Parquet in small batches), so a file of millions of records never sits in memory whole.

A record that cannot be used is data, not a crash: `SkipRecord` carries the reason it is counted under (a short,
fixed phrase such as "not JSON") and a detail for the first one seen. A file that cannot be read at all (not
UTF-8 JSON, a broken array, a Parquet file without pyarrow) is an `ImportSourceError`.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from ..errors import ImportSourceError, SimiaError

__all__ = ["Located", "SkipRecord", "loads", "read_records"]

_CHUNK = 1 << 16
_PARQUET_BATCH = 64
_PARQUET_MAGIC = b"PAR1"


class SkipRecord(SimiaError):
    """A record that becomes no seed: `reason` is what it is counted under, `detail` says what was found, and
    `tools` the record's tools when they were read before the problem (its world's report counts it too).

    A signal inside the import, never raised out of `import_seeds`: a bad record is data (a count), not a crash."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
        self.tools: Any = None


@dataclass(frozen=True)
class Located:
    """One record of a file, with where it is (`line` for JSONL, the element or row number otherwise, from 1);
    `skip` is set instead of `value` when the line is no JSON object."""

    number: int
    value: dict[str, Any] | None = None
    skip: SkipRecord | None = None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def loads(text: str | bytes) -> Any:
    """`json.loads` that refuses NaN and the infinities (a world's files are plain JSON: the loader refuses them)."""
    return _DECODER.decode(text.decode("utf-8") if isinstance(text, bytes) else text)


def read_records(path: Path) -> Iterator[Located]:
    """The records of one file, in order.

    JSONL (one object a line; blank lines ignored), a JSON array (`[{...}, ...]`), or Parquet (`.parquet`, read
    with pyarrow); `.gz` files are decompressed on the fly. The kind is told from the content: a file whose first
    character is `[` is an array, any other text is JSONL.

    Raises:
        ImportSourceError: the file is missing, is not UTF-8, is a JSON array that does not parse, or is Parquet
            and pyarrow is not installed.
    """
    if not path.is_file():
        raise ImportSourceError(f"no seed file at {str(path)!r}; give JSONL, JSON or Parquet files")
    with path.open("rb") as raw:
        magic = raw.read(4)
    if magic == _PARQUET_MAGIC:
        yield from _parquet(path)
        return
    gzipped = magic[:2] == b"\x1f\x8b"
    with _open(path, gzipped) as handle:
        first = _first_byte(handle)
    with _open(path, gzipped) as handle:
        if first == b"[":
            yield from _array(handle, path)
        else:
            yield from _lines(handle)


def _open(path: Path, gzipped: bool) -> IO[bytes]:
    return cast(IO[bytes], gzip.open(path, "rb")) if gzipped else path.open("rb")


def _first_byte(handle: IO[bytes]) -> bytes:
    """The first byte that is not whitespace (or a UTF-8 byte order mark), b"" for an empty file."""
    while True:
        block = handle.read(4096)
        if not block:
            return b""
        text = block.lstrip(b" \t\r\n")
        if text.startswith(b"\xef\xbb\xbf"):
            text = text[3:].lstrip(b" \t\r\n")
        if text:
            return text[:1]


def _lines(handle: IO[bytes]) -> Iterator[Located]:
    for number, line in enumerate(handle, start=1):
        if number == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield Located(number, skip=SkipRecord("not UTF-8", f"byte {exc.start}"))
            continue
        try:
            value = loads(text)
        except (json.JSONDecodeError, ValueError, RecursionError) as exc:
            message = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc) or "nested too deeply"
            yield Located(number, skip=SkipRecord("not JSON", message))
            continue
        if isinstance(value, dict):
            yield Located(number, value=value)
        else:
            yield Located(number, skip=SkipRecord("not a JSON object", f"a JSON {type(value).__name__}"))


def _array(handle: IO[bytes], path: Path) -> Iterator[Located]:
    """The elements of a JSON array, decoded one at a time from a buffer that holds about one element."""
    decoder = json.JSONDecoder(parse_constant=_no_constant)
    reader = _Buffer(handle, path)
    reader.skip_space()
    if reader.peek() != "[":
        raise ImportSourceError(f"{path}: expected a JSON array")
    reader.pos += 1
    number = 0
    reader.skip_space()
    if reader.peek() == "]":
        return
    while True:
        number += 1
        value = reader.decode(decoder, number)
        if isinstance(value, dict):
            yield Located(number, value=value)
        else:
            yield Located(number, skip=SkipRecord("not a JSON object", f"a JSON {type(value).__name__}"))
        reader.skip_space()
        mark = reader.peek()
        reader.pos += 1
        if mark == "]":
            reader.skip_space()
            if reader.peek() != "":
                raise ImportSourceError(f"{path}: text after the JSON array's closing bracket")
            return
        if mark != ",":
            found = repr(mark) if mark else "the end of the file"
            raise ImportSourceError(f"{path}: element {number} of the JSON array is followed by {found}, not ','")
        reader.skip_space()


class _Buffer:
    """UTF-8 text read in chunks; `decode` reads more until one JSON value is whole, then drops what it read."""

    def __init__(self, handle: IO[bytes], path: Path) -> None:
        self.handle = handle
        self.path = path
        self.text = ""
        self.pos = 0
        self.eof = False
        self._pending = b""  # the bytes of a UTF-8 character cut at a chunk's end

    def _more(self, at_least: int = _CHUNK) -> bool:
        if self.eof:
            return False
        chunk = self.handle.read(max(at_least, _CHUNK))
        if not chunk:
            self.eof = True
            if self._pending:
                raise ImportSourceError(f"{self.path}: not UTF-8 text (it ends inside a character)")
            return False
        data = self._pending + chunk
        try:
            text = data.decode("utf-8")
            self._pending = b""
        except UnicodeDecodeError as exc:
            if exc.start < len(data) - 3:
                raise ImportSourceError(f"{self.path}: not UTF-8 text") from None
            text, self._pending = data[: exc.start].decode("utf-8"), data[exc.start :]
        self.text = self.text[self.pos :] + text
        self.pos = 0
        return True

    def peek(self) -> str:
        while self.pos >= len(self.text):
            if not self._more():
                return ""
        return self.text[self.pos]

    def skip_space(self) -> None:
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n\ufeff":
                self.pos += 1
            if self.pos < len(self.text) or not self._more():
                return

    def decode(self, decoder: json.JSONDecoder, number: int) -> Any:
        while True:
            try:
                value, end = decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                if self._more(len(self.text) - self.pos):  # the element may be cut: read as much again
                    continue
                raise ImportSourceError(f"{self.path}: element {number} of the JSON array: {exc.msg}") from None
            except (ValueError, RecursionError) as exc:
                raise ImportSourceError(f"{self.path}: element {number} of the JSON array: {exc}") from None
            if end == len(self.text) and self._more():  # a number cut at the chunk's end: read on, decode again
                continue
            self.pos = end
            return value


def _parquet(path: Path) -> Iterator[Located]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]  # optional: only Parquet needs it (simia[train])
    except ImportError:
        raise ImportSourceError(
            f"{path} is Parquet, which needs pyarrow: pip install pyarrow (or convert it to JSONL first)"
        ) from None
    try:
        table = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow's own error types
        raise ImportSourceError(f"{path}: not a Parquet file pyarrow can read: {exc}") from None
    number = 0
    with table:
        for batch in table.iter_batches(batch_size=_PARQUET_BATCH):
            for row in batch.to_pylist():
                number += 1
                bad = _non_finite(row)
                if bad:
                    yield Located(number, skip=SkipRecord("not JSON", f"{bad} holds NaN or an infinity"))
                else:
                    yield Located(number, value=row)


def _non_finite(row: dict[str, Any]) -> str | None:
    """The first column of a Parquet row holding a float JSON cannot write (NaN, an infinity), or None."""
    for key, value in row.items():
        if isinstance(value, float) and not math.isfinite(value):
            return str(key)
    return None
