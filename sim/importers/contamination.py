"""Decontamination: an evaluation set (a benchmark's test split, its instructions) and the check that a
conversation's user turns overlap it, so that seeds and generated trajectories that would leak it into training
are dropped (`simia import seeds --exclude`, `simia synth --exclude`).

The rule is word n-gram overlap, as GPT-3 and Llama decontaminated their training data: texts are lowercased and
split into words (runs of letters and digits, punctuation ignored); a user turn overlaps the set when one of its
`NGRAM` (13) consecutive words is also a run of 13 words of an evaluation text. An evaluation text shorter than
13 words, but at least `MIN_WORDS` (8), overlaps a user turn that holds it whole; shorter ones are not matched (a
few common words are no evidence of a leak). The set keeps a hash per n-gram, not the texts.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..errors import ImportSourceError
from .seeds_records import read_records

__all__ = ["MIN_WORDS", "NGRAM", "EvalSet", "drop_overlapping", "record_texts", "user_texts"]

NGRAM = 13
"""Words in an n-gram: two texts overlap when they share a run of this many words."""
MIN_WORDS = 8
"""An evaluation text shorter than `NGRAM` words is matched whole when it has at least this many."""
_WORD = re.compile(r"\w+")
_CHATS = ("messages", "conversations", "conversation", "chat", "turns")
_USER_ROLES = {"user", "human"}
_MAX_DEPTH = 64


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class EvalSet:
    """The n-grams of an evaluation set's texts.

    Args:
        texts: the evaluation texts (instructions, user turns).
        n: words in an n-gram (`NGRAM`).
        source: where the texts came from, for messages.
    """

    def __init__(self, texts: Iterable[str] = (), *, n: int = NGRAM, source: str = "") -> None:
        self.n = n
        self.source = source
        self.texts = 0
        self._grams: set[int] = set()
        self._short: dict[int, set[int]] = {}  # word count -> hashes of the evaluation texts that short
        for text in texts:
            self.add(text)

    def add(self, text: str) -> None:
        """Add one evaluation text's n-grams (a text under `MIN_WORDS` words adds nothing)."""
        words = _words(text)
        if len(words) >= self.n:
            self._grams.update(hash(tuple(words[i : i + self.n])) for i in range(len(words) - self.n + 1))
        elif len(words) >= min(MIN_WORDS, self.n):
            self._short.setdefault(len(words), set()).add(hash(tuple(words)))
        else:
            return
        self.texts += 1

    def overlap(self, text: str) -> str:
        """The first run of words `text` shares with the set ("" when none)."""
        words = _words(text)
        for size, grams in [(self.n, self._grams), *self._short.items()]:
            for i in range(len(words) - size + 1):
                if hash(tuple(words[i : i + size])) in grams:
                    return " ".join(words[i : i + size])
        return ""

    def conversation_overlap(self, messages: Iterable[Any]) -> str:
        """The first run of words a user turn of `messages` (OpenAI chat or ShareGPT turns) shares with the set."""
        for text in user_texts(messages):
            found = self.overlap(text)
            if found:
                return found
        return ""

    @classmethod
    def load(cls, path: str | Path, *, n: int = NGRAM) -> EvalSet:
        """An evaluation set from a file: JSONL, one JSON array or object, Parquet (gzipped or not), or plain text
        (one instruction a line). A record that is a string is a text; one with a conversation (`messages`,
        `conversations`, ...) gives its user turns; any other record gives every string it holds (a benchmark
        task's instructions wherever its format keeps them).

        Raises:
            ImportSourceError: the file is missing or unreadable, or holds no text of `MIN_WORDS` words or more.
        """
        file = Path(path)
        if not file.is_file():
            raise ImportSourceError(
                f"no evaluation set at {str(path)!r}; --exclude takes a JSONL, JSON or Parquet file of the "
                "benchmark's instructions or conversations"
            )
        found = cls(n=n, source=str(file))
        try:
            for record in _records(file):
                for text in record_texts(record):
                    found.add(text)
        except (OSError, UnicodeDecodeError, EOFError) as exc:
            raise ImportSourceError(f"cannot read the evaluation set {str(path)!r}: {exc}") from None
        if not found.texts:
            raise ImportSourceError(
                f"the evaluation set {str(path)!r} holds no text of {MIN_WORDS} words or more: give its "
                "instructions or conversations (docs/seeds.md#decontamination)"
            )
        return found


def user_texts(messages: Iterable[Any]) -> Iterator[str]:
    """The text of each user turn of a conversation: OpenAI chat (`role: user`, content text or parts) or ShareGPT
    (`from: human`, `value`)."""
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role", message.get("from"))
        if role not in _USER_ROLES:
            continue
        content = message.get("content", message.get("value"))
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if isinstance(content, str):
            yield content


def record_texts(record: Any) -> Iterator[str]:
    """The evaluation texts of one record (`EvalSet.load` says which)."""
    if isinstance(record, str):
        yield record
        return
    if isinstance(record, dict):
        for key in _CHATS:
            chat = record.get(key)
            if isinstance(chat, str):
                try:
                    chat = json.loads(chat)
                except json.JSONDecodeError:
                    continue
            if isinstance(chat, list):
                yield from user_texts(chat)
                return
    stack: list[tuple[Any, int]] = [(record, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            yield value
        elif depth < _MAX_DEPTH and isinstance(value, dict):
            stack.extend((v, depth + 1) for v in reversed(list(value.values())))
        elif depth < _MAX_DEPTH and isinstance(value, list):
            stack.extend((v, depth + 1) for v in reversed(value))


def _records(file: Path) -> Iterator[Any]:
    with file.open("rb") as raw:
        magic = raw.read(4)
    if magic == b"PAR1":
        yield from (r.value for r in read_records(file) if r.value is not None)
        return
    data = gzip.decompress(file.read_bytes()) if magic[:2] == b"\x1f\x8b" else file.read_bytes()
    text = data.decode("utf-8-sig")
    if text.lstrip()[:1] in ("[", "{"):
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            pass  # JSONL
        else:
            yield from whole if isinstance(whole, list) else [whole]
            return
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            yield line  # plain text: one instruction a line


def drop_overlapping(path: Path, evals: EvalSet) -> int:
    """Rewrite a JSONL file of records with `messages` (a synth run's `synth.jsonl`) without those whose user turns
    overlap `evals`; returns how many were dropped. The file is replaced whole (a crash leaves the old one)."""
    if not path.is_file():
        return 0
    kept: list[str] = []
    dropped = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        messages = record.get("messages") if isinstance(record, dict) else None
        if isinstance(messages, list) and evals.conversation_overlap(messages):
            dropped += 1
        else:
            kept.append(line)
    if dropped:
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{line}\n" for line in kept))
        os.replace(temp, path)
    return dropped
