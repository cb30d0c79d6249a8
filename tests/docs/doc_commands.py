"""The shell commands the docs show: read from README.md and every page of docs/, as the tests run them.

A page shows a command in a ```bash block (each line, continuations joined, comments dropped, a trailing `&`
noted), as a `$ ` line of a plain block (with the lines under it as its output), or inline, as a code span
of its prose that starts with `simia`, `make`, `python`, `pip` or `bash` and a word. The same command may
appear on several pages: the tests key them by their text (`COVERED` in test_coverage.py).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def doc_pages() -> list[Path]:
    """README.md and every Markdown page of the docs site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def page_name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@dataclass(frozen=True)
class Command:
    """One command of a page: its words (continuations joined, comment dropped), whether it ends in `&`,
    and the output lines the page shows under it (`$ ` blocks)."""

    words: tuple[str, ...]
    background: bool = False
    output: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return shlex.join(self.words)


def block_commands(text: str) -> list[Command]:
    """The shell commands of a page: every line of a ```bash block, and each `$ ` line of a plain block
    with the lines under it as its output."""
    commands: list[Command] = []
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S):
        if lang == "bash":
            pending = ""
            for line in body.splitlines():
                if line.rstrip().endswith("\\"):
                    pending += line.rstrip()[:-1] + " "
                    continue
                words = shlex.split(pending + line, comments=True)
                pending = ""
                if words:
                    background = words[-1] == "&"
                    commands.append(Command(tuple(words[:-1] if background else words), background))
        elif lang == "":
            shown: list[list[str]] = []
            for line in body.splitlines():
                if line.startswith("$ "):
                    shown.append([line[2:]])
                elif shown:
                    shown[-1].append(line)
            commands += [Command(tuple(shlex.split(first)), output=tuple(rest)) for first, *rest in shown]
    return commands


def inline_commands(text: str) -> list[str]:
    """The commands a page names in its prose: code spans outside fenced blocks that start with `simia`,
    `make`, `python`, `pip` or `bash` and a word."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    spans = re.findall(r"`([^`\n]+)`", prose)
    return list(dict.fromkeys(s for s in spans if re.match(r"(simia|make|python|pip|bash) \S", s)))


BLOCKS: list[tuple[str, Command]] = []
"""(page, command) for every command shown in a block, in page order."""
INLINE: list[tuple[str, str]] = []
"""(page, command text) for every command named inline."""
for _page in doc_pages():
    _text = _page.read_text(encoding="utf-8")
    BLOCKS += [(page_name(_page), c) for c in block_commands(_text)]
    INLINE += [(page_name(_page), c) for c in inline_commands(_text)]


def pages_showing(text: str) -> list[str]:
    """The pages that show or name the command `text`."""
    found = [page for page, c in BLOCKS if c.text == text] + [page for page, c in INLINE if c == text]
    return list(dict.fromkeys(found))


def shown(text: str) -> Command:
    """The command whose text is `text`, from a block or inline on any page (it must still be there, word for
    word)."""
    found = [c for _, c in BLOCKS if c.text == text] + [Command(tuple(shlex.split(c))) for _, c in INLINE if c == text]
    assert found, f"no page shows `{text}` any more (README.md, docs/): update COVERED and its test"
    return found[0]


def output_of(text: str) -> tuple[str, ...]:
    """The output the pages show under `$ text` (every page that shows some shows the same)."""
    outputs = {c.output for _, c in BLOCKS if c.text == text and c.output}
    assert outputs, f"no page shows the output of `$ {text}`"
    assert len(outputs) == 1, f"the pages show different outputs for `$ {text}`: {pages_showing(text)}"
    return outputs.pop()


def paragraph(marker: str) -> str:
    """The paragraph of a page that starts with `marker` (a bold lead-in such as `**Limits and budgets**`)."""
    for page in doc_pages():
        text = page.read_text(encoding="utf-8")
        if marker in text:
            return text.split(marker, 1)[1].split("\n\n", 1)[0]
    raise AssertionError(f"no page has a paragraph starting {marker}")


DOC_URL = "http://127.0.0.1:8765"
"""The server URL the pages' commands use; a test's own server replaces it."""

SERVE_RUNS_DB = "simia serve --backend openai:gpt-5.4-mini --db runs.db"
ROLLOUT_AGENTS = (
    "simia rollout --server http://127.0.0.1:8765 --world retail --tasks all --agent openai:gpt-5.4-mini "
    "--user openai:gpt-5.4-mini --n 8 --concurrency 16 --max-turns 12 --out runs/"
)
VALIDATE = "simia validate tests/fixtures/broken_worlds/unknown_field"
PYDANTIC_AI = "python examples/pydantic_ai_agent.py http://127.0.0.1:8765 openai:gpt-5.4-mini"
ROLLOUT_TRAINING = (
    "simia rollout --server http://127.0.0.1:8765 --world retail --tasks all --agent openai:gpt-5.4-mini "
    "--user openai:gpt-5.4-mini --n 8 --out runs/"
)
VIEW = "simia view --db runs.db"
SYNTH = "simia synth --world retail --backend openai:gpt-5.4-mini --n 50 --out synth/"
EXPORT = "simia export --db runs.db --format hf --min-reward 1 --out sft-data/"
SFT = "python -m simia.training.sft --dataset sft-data/ --model embedded --max-steps 200 --output-dir ckpt/sft"
GRPO = (
    "python -m simia.training.grpo --server http://127.0.0.1:8765 --world retail --model ckpt/sft "
    "--max-steps 100 --num-generations 4 --output-dir ckpt/grpo"
)
GRPO_USER = (
    "python -m simia.training.grpo --server http://127.0.0.1:8765 --world retail --model ckpt/sft "
    "--user openai:gpt-5.4-mini"
)
PG = "postgresql://simia@127.0.0.1:5432/simia"
PG_COPY_IN = f"simia db copy --from runs.db --to {PG}"
PG_SERVE = f"simia serve --backend openai:gpt-5.4-mini --db {PG} --port 8765"
PG_SERVE_2 = f"simia serve --backend openai:gpt-5.4-mini --db {PG} --port 8766"
PG_MIGRATE = f"simia db migrate --db {PG}"
PG_COPY_OUT = f"simia db copy --from {PG} --to backup.db"
SERVE_HELP = "simia serve --help"
STDIO = "simia serve --transport stdio --world retail"
REJUDGE = "simia judge EPISODE_ID... --db simia.db --backend SPEC"
MALFORMED_CALL = (
    "curl -s localhost:8765/episodes/EPISODE_ID/mcp -H 'content-type: application/json' "
    "-H 'accept: application/json, text/event-stream' -H 'mcp-protocol-version: 2026-07-28' "
    """-d '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": """
    """{"name": "get_item", "arguments": ["milk"]}}'"""
)
ADVERSARIAL = "simia judge --adversarial --backend SPEC"
MAKE_HELP = "make help"
REFERENCE = "python docs/_gen/reference.py"
SITE = "python -m mkdocs build --strict -d site"
