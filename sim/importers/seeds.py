"""`simia import seeds`: worlds from public tool-use datasets (APIGen-MT, xLAM, Hermes, ToolACE, glaive, Nemotron,
Toucan, OpenAI chat logs): one world per tool set, its seed conversations as its examples and its tasks.

`import_seeds` streams every file record by record (`seeds_records`), reads each in its format (`seeds_formats`,
its tools through `seeds_tools`) and spools it to disk grouped by its canonical tool set (`seeds_spool`), so memory
stays bounded whatever the size of the files. It then builds one world per group in a staging folder inside the
output folder, each checked by the loader (`write_world`), and moves them into place only once all of them are
whole: nothing is half-written. Per world:

    tools.json      the group's tools in MCP's shape
    policy.md       the group's most common system prompt (the others stay on their tasks' rubric)
    state.json      {} (the datasets carry no database; the simulator hint says the state starts empty)
    examples/       the first `max_examples` seeds whose calls fit the tools' schemas, in OpenAI chat format, each
                    named as its task
    tasks.jsonl     one task per seed: the first user turn as instruction, the later user turns as user_hidden,
                    the seed's calls and final answer as rubric, the seed itself as reference (what the simulator
                    follows in that task's episodes, Simia-RL); tag `single-turn` for a seed with one user turn
    import_report.json   every conversion, each record skipped after its tools were read, the tool names that
                    another world has with another schema

Records that become no seed are counted under their reason, and the whole import's counts are written to
`seeds_report.json` in the output folder.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import to_json

from ..errors import ImportSourceError, WorldExistsError
from ..schema import validate_instance
from ..world import Task, atomic_write_text, check_target, write_world
from .contamination import EvalSet
from .imported import ImportedWorld, ReportEntry, normal_modes, world_name
from .seeds_formats import FAMILIES, FORMATS, Seed, detect, read_seed
from .seeds_records import SkipRecord, read_records
from .seeds_spool import Spool
from .seeds_tools import NormalTools, normal_tools

__all__ = ["REPORT_FILE", "SEED_FORMATS", "SeedFile", "SeedWorld", "SeedsImport", "Skipped", "import_seeds"]

SEED_FORMATS = ("auto", *FORMATS)
REPORT_FILE = "seeds_report.json"
STATE_HINT = (
    "This world's state starts empty: its seed conversations come from a dataset that carries no database. When a "
    "call reads a record the state lacks, answer as the seed conversations suggest (the examples), and keep what "
    "the calls create or change in the state so that later calls agree with earlier ones."
)
MIXED = "mixed formats"
DUPLICATE = "duplicate of an earlier record"
OVERLAPS = "overlaps the evaluation set (--exclude)"
BROKEN_EXAMPLE = "its calls break a tool's inputSchema: kept as a task without a reference, not as an example"
REFERENCE_CHARS = 100_000
"""A seed conversation longer than this (as JSON) is not its task's reference: the simulator is shown 32,000 characters
of a reference (`simia.sim.engine.prompts.REFERENCE_CHARS`), and most of a longer one would be cut."""
LONG_REFERENCE = f"the conversation is over {REFERENCE_CHARS:,} characters: kept as a task without a reference"
_TOOLS_CACHE = 1024
_MAX_CALLS = 40  # calls a rubric lists
_MAX_LINE = 400  # characters of one call or user turn a task shows


@dataclass
class Skipped:
    """Records skipped for one reason: how many, and where the first was (FILE:N: what was found)."""

    reason: str
    count: int = 0
    first: str = ""


@dataclass(frozen=True)
class SeedFile:
    """One file read: its format (as given or as detected), its records and how many became seeds."""

    path: str
    format: str
    records: int
    seeds: int


@dataclass(frozen=True)
class SeedWorld:
    """One world written."""

    name: str
    folder: str
    tools: int
    seeds: int
    examples: int


@dataclass
class SeedsImport:
    """What `import_seeds` read, wrote and skipped (written as `seeds_report.json` when a world was written)."""

    files: list[SeedFile] = field(default_factory=list)
    worlds: list[SeedWorld] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    report: str | None = None

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)

    @property
    def seeds(self) -> int:
        return sum(w.seeds for w in self.worlds)

    def as_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "seeds": self.seeds,
            "files": [asdict(f) for f in self.files],
            "worlds": [asdict(w) for w in self.worlds],
            "skipped": [asdict(s) for s in self.skipped],
        }


def import_seeds(
    paths: Sequence[str | Path],
    out: str | Path,
    *,
    fmt: str = "auto",
    force: bool = False,
    max_examples: int = 3,
    progress: Callable[[str, int], None] | None = None,
    exclude: EvalSet | None = None,
) -> SeedsImport:
    """Import seed datasets as worlds under `out`, one world per tool set.

    Args:
        paths: JSONL, JSON-array or Parquet files (gzipped or not).
        out: the folder of worlds to write into (created when missing); each world is `out/NAME`.
        fmt: one of `SEED_FORMATS`; `auto` tells each file's format from its first record.
        force: replace world folders that already exist (all of each).
        max_examples: the most seeds a world keeps as examples (every seed is a task).
        progress: called with (file, records read so far) every 100,000 records.
        exclude: an evaluation set; a seed whose user turns overlap it (`EvalSet.conversation_overlap`) is skipped
            and counted under `OVERLAPS`.

    Returns:
        What was read, written and skipped; `worlds` is empty (and nothing is written) when no record became a seed.

    Raises:
        ImportSourceError: an unknown format, a missing or unreadable file, a file whose format `auto` cannot tell.
        WorldExistsError: a world folder the import would write exists, and `force` is false (nothing is written).
        WorldError: a world the import built does not validate (a converter bug; nothing is written).
    """
    if fmt not in SEED_FORMATS:
        close = difflib.get_close_matches(fmt, SEED_FORMATS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else "use one of " + ", ".join(SEED_FORMATS)
        raise ImportSourceError(f"unknown seed format {fmt!r}: {hint}")
    files = [Path(p) for p in paths]
    for path in files:
        if not path.is_file():
            raise ImportSourceError(f"no seed file at {str(path)!r}; give JSONL, JSON or Parquet files")
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise WorldExistsError(f"{str(folder)!r} is a file; give --out a folder for the worlds")
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # the folders this import creates, deepest first
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".simia-seeds-", dir=folder))
    result = SeedsImport()
    try:
        spool = Spool(staging / "spool.sqlite")
        try:
            result = _Reader(spool, fmt, max_examples, progress, exclude).read(files)
            if spool.any_seed():
                _write(spool, result, folder, staging, force, max_examples)
        finally:
            spool.close()
        return result
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if not result.worlds:
            with contextlib.suppress(OSError):
                for made_folder in made:
                    made_folder.rmdir()  # only when empty: the folders the import made, and wrote nothing into


class _Reader:
    """Reads every file into the spool, counting what it skips."""

    def __init__(
        self,
        spool: Spool,
        fmt: str,
        max_examples: int,
        progress: Callable[[str, int], None] | None,
        exclude: EvalSet | None = None,
    ) -> None:
        self.spool = spool
        self.exclude = exclude
        self.fmt = fmt
        self.max_examples = max_examples
        self.progress = progress
        self.skipped: dict[str, Skipped] = {}
        self._tools: OrderedDict[bytes, NormalTools | SkipRecord] = OrderedDict()

    def read(self, files: list[Path]) -> SeedsImport:
        result = SeedsImport()
        stems: Counter[str] = Counter()
        for path in files:
            stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.name.split(".")[0]).strip("_.-") or "seed"
            stems[stem] += 1
            prefix = stem if stems[stem] == 1 else f"{stem}_{stems[stem]}"
            result.files.append(self._file(path, prefix))
        result.skipped = sorted(self.skipped.values(), key=lambda s: (-s.count, s.reason))
        return result

    def _file(self, path: Path, prefix: str) -> SeedFile:
        fmt = None if self.fmt == "auto" else self.fmt
        records = seeds = 0
        for located in read_records(path):
            records += 1
            if self.progress is not None and records % 100_000 == 0:
                self.progress(str(path), records)
            where = f"{path}:{located.number}"
            try:
                if located.skip is not None:
                    raise located.skip
                record = located.value or {}
                found = detect(record)
                if fmt is None:
                    if found is None:
                        raise ImportSourceError(_unknown(path, located.number, record))
                    fmt = found
                elif found is not None and FAMILIES.get(found, found) != FAMILIES.get(fmt, fmt):
                    raise SkipRecord(MIXED, f"a record in {found} format in a file of {fmt} records")
                seed = read_seed(fmt, record, self._tools_of)
                if self.exclude is not None:
                    shared = self.exclude.conversation_overlap(seed.messages)
                    if shared:
                        raise SkipRecord(OVERLAPS, f"a user turn shares {shared!r} with {self.exclude.source}")
                seeds += self._spool(seed, f"{prefix}-{located.number}", where, (str(path), fmt))
            except SkipRecord as skip:
                self._skip(skip, where)
        return SeedFile(str(path), fmt or "unknown", records, seeds)

    def _tools_of(self, raw: Any) -> NormalTools:
        """`normal_tools`, remembered for the last 1,024 distinct tool lists (a dataset repeats its tools)."""
        text = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else to_json(raw, fallback=str)
        key = hashlib.sha256(text).digest()
        found = self._tools.get(key)
        if found is None:
            try:
                found = normal_tools(raw)
            except SkipRecord as skip:
                found = skip
            self._tools[key] = found
            if len(self._tools) > _TOOLS_CACHE:
                self._tools.popitem(last=False)
        else:
            self._tools.move_to_end(key)
        if isinstance(found, SkipRecord):
            raise SkipRecord(found.reason, found.detail)
        return found

    def _spool(self, seed: Seed, task_id: str, where: str, source: tuple[str, str]) -> int:
        task = _task(seed, task_id)
        problem = _call_problem(seed)
        conversation = json.dumps(seed.messages, ensure_ascii=False)
        if not problem and len(conversation) <= REFERENCE_CHARS:
            task["reference"] = seed.messages
        try:
            Task.model_validate(task)
        except ValidationError as exc:
            raise SkipRecord("invalid task", str(exc.errors()[0]["msg"])) from None
        group = self.spool.group(seed.tools)
        changes = set(seed.changes)
        if seed.tools.described != group.described:
            changes.add("a tool's description differs from the world's (the first seen is kept)")
        example = None
        if group.examples < self.max_examples and not problem:
            example = json.dumps({"messages": seed.messages}, ensure_ascii=False)
        digest = hashlib.sha256(to_json([seed.tools.key, seed.system, seed.messages])).digest()
        task_text = json.dumps(task, ensure_ascii=False)
        if not self.spool.add(group, digest, task_text, seed.system, example, source):
            raise SkipRecord(DUPLICATE, "the same tools, system prompt and conversation")
        for change in sorted(changes):
            self.spool.count(group.id, "changed", "seeds", change, where)
        if problem:
            self.spool.count(group.id, "changed", "seeds", BROKEN_EXAMPLE, f"{where}: {problem}")
        elif "reference" not in task:
            self.spool.count(group.id, "changed", "seeds", LONG_REFERENCE, f"{where}: {len(conversation):,} characters")
        return 1

    def _skip(self, skip: SkipRecord, where: str) -> None:
        entry = self.skipped.setdefault(skip.reason, Skipped(skip.reason))
        entry.count += 1
        if not entry.first:
            entry.first = f"{where}: {skip.detail}" if skip.detail else where
        tools = skip.tools
        if isinstance(tools, NormalTools):
            group = self.spool.group(tools)
            self.spool.count(group.id, "skipped", "records", skip.reason, where)


def _unknown(path: Path, number: int, record: dict[str, Any]) -> str:
    fields = ", ".join(sorted(map(str, record))[:12]) or "none"
    return (
        f"{path}: cannot tell the format of record {number} (its fields: {fields}); pass --format "
        f"{'|'.join(FORMATS)} (docs/seeds.md says what each format's records hold)"
    )


def _task(seed: Seed, task_id: str) -> dict[str, Any]:
    users = [str(m["content"]).strip() for m in seed.messages if m["role"] == "user"]
    task: dict[str, Any] = {"id": task_id, "instruction": users[0]}
    if len(users) > 1:
        later = "\n".join("- " + _short(text).replace("\n", "\n  ") for text in users[1:] if text)
        task["user_hidden"] = f"What you say later in the conversation, in order:\n{later}"
    task["rubric"] = _rubric(seed.messages)
    if len(users) == 1:
        task["tags"] = ["single-turn"]
    return task


def _rubric(messages: list[dict[str, Any]]) -> str:
    calls = [c["function"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    final = next((m["content"] for m in reversed(messages) if m["role"] == "assistant" and m.get("content")), None)
    lines = ["The agent reaches the outcome the seed conversation reached."]
    if calls:
        lines.append("The seed's calls, in order:")
        lines += [_short(f"- {c['name']} {c['arguments']}") for c in calls[:_MAX_CALLS]]
        if len(calls) > _MAX_CALLS:
            lines.append(f"- ... and {len(calls) - _MAX_CALLS} more")
    if final:
        lines += ["The seed's final answer:", str(final).strip()]
    return "\n".join(lines)


def _short(text: str) -> str:
    return text if len(text) <= _MAX_LINE else text[: _MAX_LINE - 3] + "..."


def _call_problem(seed: Seed) -> str:
    """Why the seed's calls would not load as a world example (an argument against its tool's schema), or ""."""
    for name, arguments in seed.calls:
        problems = validate_instance(seed.tools.schemas[name], arguments)
        if problems:
            return f"{name}: {problems[0]}"
    return ""


_STOP = frozenset(
    {"get", "set", "list", "all", "find", "search", "update", "create", "delete", "add", "remove", "details"}
    | {"detail", "info", "by", "for", "the", "of", "to", "and", "id", "data", "api", "tool", "tools", "query"}
    | {"fetch", "retrieve", "check"}
)


def _base_name(names: list[str]) -> str:
    """A world name from its tools: their two most frequent words (not verbs like get/list), and the count."""
    words: Counter[str] = Counter()
    order: dict[str, int] = {}
    for name in names:
        for word in re.split(r"[^A-Za-z0-9]+|(?<=[a-z])(?=[A-Z])", name):
            word = word.lower()
            if len(word) >= 3 and word not in _STOP and not word.isdigit():
                words[word] += 1
                order.setdefault(word, len(order))
    top = sorted(words, key=lambda w: (-words[w], order[w]))[:2]
    base = "-".join(top) if top else "-".join(names[:2])
    return world_name(f"{base}-{len(names)}-tools" if len(names) > 1 else base, fallback="seeds")[:56].rstrip("-_.")


def _names(spool: Spool) -> dict[int, str]:
    """Each group's world name, unique in the import: `base`, then `base_2`, `base_3`, ... (a counter per base,
    not `unique_name`'s scan of every name taken: a dataset may have tens of thousands of tool sets)."""
    names: dict[int, str] = {}
    taken: set[str] = set()
    last: dict[str, int] = {}
    for group, tools, _ in spool.groups():
        base = name = _base_name([t["name"] for t in tools])
        while name in taken:
            last[base] = last.get(base, 1) + 1
            name = f"{base}_{last[base]}"
        taken.add(name)
        names[group] = name
    return names


def _write(spool: Spool, result: SeedsImport, out: Path, staging: Path, force: bool, max_examples: int) -> None:
    names = _names(spool)
    for name in names.values():
        check_target(out / name, force=force)
    staged: list[tuple[Path, Path]] = []
    written: list[SeedWorld] = []
    for group, tools, seeds in spool.groups():
        name = names[group]
        target = staging / "worlds" / name
        world = _world(spool, group, name, tools, seeds, names, max_examples)
        write_world(target, world.files())
        _write_tasks(spool, group, target / "tasks.jsonl")
        normal_modes(target)
        staged.append((target, out / name))
        written.append(SeedWorld(name, str(out / name), len(tools), seeds, len(world.examples)))
    for source, target in staged:
        _place(source, target, staging)
    result.worlds = written
    result.report = str(out / REPORT_FILE)
    atomic_write_text(out / REPORT_FILE, json.dumps(result.as_json(), indent=1, ensure_ascii=False) + "\n")
    normal_modes(out, [REPORT_FILE])


def _world(
    spool: Spool,
    group: int,
    name: str,
    tools: list[dict[str, Any]],
    seeds: int,
    names: dict[int, str],
    max_examples: int,
) -> ImportedWorld:
    _, policy, others = spool.policy(group)
    sources = spool.sources(group)
    files = list(dict.fromkeys(source for source, _, _ in sources))
    formats = list(dict.fromkeys(fmt for _, fmt, _ in sources))
    shown = ", ".join(t["name"] for t in tools[:3]) + (", ..." if len(tools) > 3 else "")
    origin = f"{', '.join(files)} ({', '.join(formats)})"
    report = [ReportEntry("note", "seeds", f"{seeds} seed conversation(s) from {origin}")]
    for kind, item, reason, count, first in spool.entries(group):
        if kind == "skipped":
            report.append(ReportEntry("skipped", f"{count} record(s), the first at {first}", reason))
        else:
            seeds_item = f"{count} seed(s), the first at {first}" if first else f"{count} seed(s)"
            report.append(ReportEntry("changed", seeds_item if item == "seeds" else item, reason))
    for tool, other, count in spool.variants(group):
        more = f" and {count - 1} more" if count > 1 else ""
        report.append(ReportEntry("note", tool, f"another inputSchema of this tool made world {names[other]!r}{more}"))
    if others:
        report.append(
            ReportEntry("note", "policy", f"{others} seed(s) had another system prompt: it is on their task's rubric")
        )
    empty = "empty: the seeds carry no database (`simia bootstrap WORLD` drafts one)"
    report.append(ReportEntry("note", "state.json", empty))
    report.append(ReportEntry("note", "records", f"what became no world is in ../{REPORT_FILE}"))
    examples: dict[str, dict[str, Any]] = {}
    for task, example in spool.examples(group):
        if len(examples) >= max_examples:
            break
        examples[json.loads(task)["id"]] = json.loads(example)  # named as its task: FILE-N, the source's record
    return ImportedWorld(
        name=name,
        title=f"Seeds: {shown}",
        description=f"{seeds} seed conversation(s) over {len(tools)} tool(s), imported from {', '.join(files)} "
        f"({', '.join(formats)}) by simia import seeds. The state starts empty: the dataset has no database.",
        policy=policy,
        tools=tools,
        examples=examples,
        report=report,
        source=", ".join(files),
        state={},
        simulator={"instructions": STATE_HINT},
    )


def _write_tasks(spool: Spool, group: int, path: Path) -> None:
    """tasks.jsonl, streamed from the spool; a seed whose system prompt is not the policy keeps it on its rubric."""
    policy, _, _ = spool.policy(group)
    with open(path, "w", encoding="utf-8", newline="") as handle:
        for task, system in spool.tasks(group):
            if system and system != policy:
                data = json.loads(task)
                data["rubric"] += (
                    "\n\nThe seed ran under a system prompt other than the world's policy; judge the agent by it:\n"
                    + spool.system(system)
                )
                task = json.dumps(data, ensure_ascii=False)
            handle.write(task + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _place(source: Path, target: Path, staging: Path) -> None:
    """Move a staged world to `target`; a world already there (`force`) is set aside first and dropped after."""
    if not target.exists():
        os.rename(source, target)
        return
    aside = staging / "replaced"
    aside.mkdir(exist_ok=True)
    os.rename(target, aside / target.name)
    try:
        os.rename(source, target)
    except BaseException:
        os.rename(aside / target.name, target)
        raise
