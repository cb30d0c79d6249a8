"""Bad input on the command line: exit code 2, one line on stderr saying what is wrong and how to fix it, and
nothing written (no database, no output folder, no file touched). Each command runs in process in a folder
of junk files; the folder is compared byte for byte before and after."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from simia.cli import main
from simia.sim.storage import open_store

ROOT = Path(__file__).resolve().parents[2]
MOCK = ROOT / "tool_specs" / "mock"
HUGE = str(10**30)
OK = "scripted:ok.json"
MODELS = ["--agent", OK, "--user", OK]


@pytest.fixture
def junk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current folder, holding the files the cases point at."""
    files = {
        "ok.json": b'[{"is_error": false, "message": "ok", "output": {}, "state_patch": []}]',
        "empty.txt": b"",
        "junk.txt": b"this is not json\n{{{",
        "latin1.txt": b"caf\xe9\n",
        "deep.json": b"[" * 100_000 + b"]" * 100_000,
        "notes.txt": b"x",  # SQLite takes a file this short for an empty database, and overwrites it
        "notadb.db": b"not a database at all, and long enough for SQLite to notice that it is not one" * 2,
        "list.jsonl": b"[]\n",
        "seeds.jsonl": b'{"messages": [{"role": "user", "content": "hi"}]}\n',
        "seeds_scalars.jsonl": b'1\n"x"\n',
        "seeds_messages_not_list.jsonl": b'{"messages": "hi"}\n',
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    (tmp_path / "adir").mkdir()
    (tmp_path / "emptydir").mkdir()
    with sqlite3.connect(tmp_path / "other.db") as conn:  # another program's database
        conn.execute("CREATE TABLE bookmarks (url TEXT)")
    conn.close()

    async def create() -> None:
        await (open_store(tmp_path / "simia.db")).close()

    asyncio.run(create())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def snapshot(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in folder.rglob("*")}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


# (argv, what the one line on stderr says)
BAD = [
    # backend SPECs: refused at start, not at the first call
    (["serve", "--backend", "nope"], "error: unknown backend 'nope'. Did you mean 'openai'?"),
    (["serve", "--backend", "scripted:missing.json"], "error: scripted: no such file 'missing.json'"),
    (["serve", "--backend", "scripted:adir"], "error: scripted: no such file 'adir'"),
    (["serve", "--backend", "scripted:junk.txt"], "error: scripted: junk.txt is neither JSON nor JSONL"),
    (["serve", "--backend", "scripted:latin1.txt"], "error: scripted:latin1.txt: the file is not UTF-8 text (byte 3)"),
    (["serve", "--backend", "scripted:deep.json"], "error: scripted:deep.json: the file's JSON is nested too deeply"),
    (["serve", "--backend", "scripted:empty.txt"], "error: scripted:empty.txt: the script has no entries"),
    (["serve", "--backend", "scripted:list.jsonl"], "error: scripted:list.jsonl: the script has no entries"),
    (["serve", "--backend", "replay:missing.db"], "error: replay: no database at 'missing.db'"),
    (["serve", "--backend", "replay:notadb.db"], "error: replay:notadb.db: not a simia database; pass replay:PATH"),
    (["serve", "--backend", "replay:empty.txt"], "error: replay:empty.txt: not a simia database"),
    (["serve", "--backend", "replay:other.db"], "error: replay:other.db: not a simia database"),
    (["serve", "--backend", "local:missing.gguf"], "error: local:missing.gguf: 'missing.gguf' is not a GGUF model"),
    (["serve", "--backend", "local:junk.txt"], "error: local:junk.txt: 'junk.txt' is not a GGUF model file"),
    (["serve", "--backend", OK, "--judge-backend", "replay:notadb.db"], "error: replay:notadb.db: not a simia"),
    (["judge", "--adversarial", "--backend", "scripted:latin1.txt"], "error: scripted:latin1.txt: the file is not"),
    (["judge", "--adversarial", "--backend", "replay:notadb.db"], "error: replay:notadb.db: not a simia database"),
    (["serve", "--backend", "openai-compatible:m", "--base-url", "notaurl"], "--base-url: expected an http(s) URL"),
    (["serve", "--price", "m=nan,1"], "--price: prices must be finite numbers of USD"),
    (["serve", "--price", "m=1,inf"], "--price: prices must be finite numbers of USD"),
    # numbers out of their range
    (["import", "openapi", "x.yaml", "--max-size-mb", "0"], "--max-size-mb: must be megabytes more than 0, got 0"),
    (
        ["import", "openapi", "https://example.com/v1/api.json"],
        "error: `simia import openapi` reads a local file, not a URL: download it first (curl -fL -o api.json "
        "'https://example.com/v1/api.json'), then run `simia import openapi api.json`",
    ),
    (["import", "openapi", "x.yaml", "--max-size-mb", "nan"], "--max-size-mb: expected a finite number"),
    (["import", "mcp", "--timeout", "-1", "x"], "--timeout: must be seconds more than 0, got -1"),
    (["fidelity", "retail", "--min-agreement", "-1"], "--min-agreement: must be a share at least 0 and at most 1"),
    # --db: never overwrite what is not a simia database
    (["serve", "--backend", OK, "--db", "notes.txt"], "error: --db 'notes.txt' is not a SQLite database"),
    (["serve", "--backend", OK, "--db", "notadb.db"], "error: --db 'notadb.db' is not a SQLite database"),
    (["serve", "--backend", OK, "--db", "other.db"], "error: --db 'other.db' is another program's SQLite database"),
    (
        ["serve", "--backend", OK, "--db", "postgres://u:pw@127.0.0.1:1/x"],
        "error: --db: cannot connect to Postgres at postgres://u:***@127.0.0.1:1/x: ",
    ),
    (["serve", "--backend", OK, "--db", "adir"], "error: --db 'adir' is a folder"),
    (["serve", "--backend", OK, "--db", "/missing/dir/x.db"], "error: --db '/missing/dir/x.db': folder '/missing/dir'"),
    (["serve", "--backend", OK, "--db", "notes.txt/x.db"], "error: --db 'notes.txt/x.db': folder 'notes.txt'"),
    # view: an existing simia database, opened read-only
    (["view", "--db", "missing.db"], "error: no database at 'missing.db'; pass --db PATH"),
    (["view", "--db", "adir"], "error: no database at 'adir'"),
    (
        ["view", "--db", "notadb.db"],
        "error: --db 'notadb.db': 'notadb.db' is not a SQLite database (file is not a database)",
    ),
    (["view", "--db", "empty.txt"], "error: --db 'empty.txt': 'empty.txt' is not a simia database; pass --db PATH"),
    (
        ["view", "--db", "other.db"],
        "error: --db 'other.db': 'other.db' is not a simia database (it has other tables: bookmarks)",
    ),
    (
        ["view", "--db", "postgres://x"],
        "error: --db 'postgres://x': cannot connect to Postgres at postgres://x: failed to resolve host 'x'",
    ),
    (["view", "--db", "simia.db", "--port", "0"], "--port: must be at least 1, got 0"),
    (["judge", "ep_x", "--backend", "none", "--db", "missing.db"], "error: no database at 'missing.db'"),
    (["judge", "ep_x", "--backend", "none", "--db", "notadb.db"], "error: --db 'notadb.db' is not a simia database"),
    (["judge", "ep_x", "--backend", "none", "--db", "empty.txt"], "error: --db 'empty.txt' is not a simia database"),
    (
        ["judge", "ep_x", "--backend", "none", "--db", "postgres://127.0.0.1:1/x"],
        "error: --db: cannot connect to Postgres",
    ),
    (["export", "--format", "rl", "--out", "o.jsonl", "--db", "notadb.db"], "error: --db 'notadb.db' is not a simia"),
    (["export", "--format", "rl", "--out", "o.jsonl", "--db", "notes.txt"], "error: --db 'notes.txt' is not a simia"),
    # serve: numbers and addresses
    (["serve", "--port", "65536"], "--port: a port is 1-65535, got 65536"),
    (["serve", "--port", "nan"], "--port: expected a whole number, got 'nan'"),
    (["serve", "--idle-timeout", "inf"], "--idle-timeout: must be a positive number of seconds, got inf"),
    (["serve", "--max-calls", "-1"], "--max-calls: must be at least 1, got -1"),
    (["serve", "--seed", HUGE], f"--seed: must be from -4611686018427387904 to 4611686018427387904, got {HUGE}"),
    (["serve", "--backend", OK, "--host", "nosuchhost.invalid"], "error: --host 'nosuchhost.invalid': "),
    (["serve", "--backend", OK, "--host", "192.0.2.1"], "error: cannot listen on 192.0.2.1:8765: "),
    (["serve", "--public-url", "notaurl"], "--public-url: expected an http(s) URL such as http://127.0.0.1:8765"),
    (["serve", "--allowed-host", ""], "--allowed-host: cannot be empty (an unset shell variable?)"),
    (["serve", "--allowed-origin", " "], "--allowed-origin: cannot be empty"),
    (["serve", "--token", ""], "error: a bearer token cannot be empty"),
    (["serve", "--transport", "stdio", "--world", "mock", "--task", "nope"], "error: unknown task 'nope' in world"),
    (["serve", "--world", "nope"], "error: unknown world 'nope'; loaded: mock, retail"),
    (["serve", "--world", "retial"], "error: unknown world 'retial' (did you mean 'retail'?); loaded: mock, retail"),
    (
        ["serve", "--backend", "ollama:llama3"],
        "error: unknown backend 'ollama': Ollama speaks the OpenAI API, so use openai-compatible:llama3 --base-url "
        "http://127.0.0.1:11434/v1 (its default address)",
    ),
    # --worlds-dir
    (["serve", "--worlds-dir", "notes.txt"], "--worlds-dir: 'notes.txt' is a file; give a folder of world folders"),
    (["worlds", "--worlds-dir", "missing"], "--worlds-dir: 'missing' does not exist; give a folder of world folders"),
    (["worlds", "--worlds-dir", "emptydir"], "error: no worlds in 'emptydir': a world is a folder with world.yaml"),
    (["serve", "--worlds-dir", "emptydir"], "error: no worlds in 'emptydir'"),
    (["export", "--format", "rl", "--out", "o.jsonl", "--worlds-dir", "emptydir"], "error: no worlds in 'emptydir'"),
    # export
    (["export", "--format", "rl", "--out", "o.jsonl", "--since", "yesterday"], "error: --since 'yesterday' is not"),
    (["export", "--format", "rl", "--out", "o.jsonl", "--since", "nan"], "error: --since 'nan' is not a date"),
    (["export", "--format", "rl", "--out", "o.jsonl", "--min-reward", "nan"], "--min-reward: expected a finite"),
    (
        ["export", "--format", "rl", "--out", "notes.txt/o.jsonl"],
        "error: --out 'notes.txt/o.jsonl': folder 'notes.txt'",
    ),
    (["export", "--format", "rl", "--out", "missing/o.jsonl"], "error: --out 'missing/o.jsonl': folder 'missing' does"),
    (["export", "--format", "rl", "--out", "adir"], "error: --out 'adir' is a folder; give a file path"),
    (["export", "--format", "rl", "--out", "/proc/o.jsonl"], "error: /proc/o.jsonl: No such file or directory; check"),
    (["export", "--format", "hf", "--out", "notes.txt"], "error: --out 'notes.txt' is a file; give a folder"),
    # rollout
    (["rollout", "--world", "mock", "--server", "http://127.0.0.1:1", *MODELS], "error: simia server at http://127"),
    (["rollout", "--world", "mock", "--server", "", *MODELS], "--server: expected an http(s) URL"),
    (["rollout", "--world", "mock", "--server", "ftp://x", *MODELS], "--server: expected an http(s) URL"),
    (["rollout", "--world", "mock", "--token", "caf\u00e9", *MODELS], "--token: a bearer token is printable ASCII"),
    (["rollout", "--world", "mock", "--agent", "scripted:latin1.txt"], "error: scripted:latin1.txt: the file is not"),
    (["rollout", "--world", "mock", *MODELS, "--sim-backend", "replay:notadb.db"], "error: replay:notadb.db: not a"),
    (["rollout", "--world", "mock", *MODELS, "--sim-backend", OK, "--tasks", "nope"], "error: --tasks 'nope' is"),
    (
        ["rollout", "--world", "mock", *MODELS, "--sim-backend", OK, "--tasks", "junk.txt"],
        "error: junk.txt:2: expected",
    ),
    (["rollout", "--world", "mock", *MODELS, "--sim-backend", OK, "--tasks", "empty.txt"], "error: empty.txt lists"),
    (["rollout", "--world", "mock", *MODELS, "--sim-backend", OK, "--n", HUGE], "is 4000000000000000000000000000000"),
    (
        ["rollout", "--world", "mock", *MODELS, "--sim-backend", OK, "--seed", str(2**62), "--tasks", "restock_milk"],
        "error: --seed 4611686018427387904 is too large: run i uses seed + 1000 x i",
    ),
    (["rollout", "--world", "mock", *MODELS, "--seed", HUGE], "--seed: must be from -4611686018427387904"),
    (["rollout", "--world", "mock", *MODELS, "--retries", "-1"], "--retries: must be from 0 to 100, got -1"),
    (
        ["rollout", "--world", "mock", *MODELS, "--out", "notes.txt"],
        "error: --out 'notes.txt' is a file; give a folder",
    ),
    (
        ["rollout", "--world", "mock", *MODELS, "--out", "notes.txt/x"],
        "error: cannot create --out folder 'notes.txt/x'",
    ),
    (["rollout", "--world", "nope", *MODELS, "--sim-backend", OK], "error: unknown world 'nope'"),
    # synth
    (["synth", "--world", "mock", "--backend", OK, "--seeds", "missing.jsonl"], "error: no seeds file at 'missing"),
    (["synth", "--world", "mock", "--backend", OK, "--seeds", "adir"], "error: no seeds file at 'adir'"),
    (["synth", "--world", "mock", "--backend", OK, "--seeds", "empty.txt"], "error: --seeds 'empty.txt' holds no"),
    (["synth", "--world", "mock", "--backend", OK, "--seeds", "junk.txt"], "error: junk.txt:1: expected a JSON obj"),
    (["synth", "--world", "mock", "--backend", OK, "--seeds", "latin1.txt"], "error: latin1.txt:1: expected a JSON"),
    (["synth", "--world", "mock", "--backend", OK, "--seeds", "deep.json"], "error: --seeds 'deep.json': a line's"),
    (["synth", "--world", "mock", "--backend", OK, "--seeds", "seeds_scalars.jsonl"], "seeds_scalars.jsonl:1: exp"),
    (
        ["synth", "--world", "mock", "--backend", OK, "--seeds", "seeds_messages_not_list.jsonl"],
        'error: seeds_messages_not_list.jsonl:1: "messages" must be a list',
    ),
    (["synth", "--world", "mock", "--backend", OK, "--seeds", "seeds.jsonl", "--n", HUGE], f"error: --n {HUGE} plans"),
    (["synth", "--world", "mock", "--backend", OK, "--temperature", "nan"], "--temperature: expected a finite number"),
    (["synth", "--world", "mock", "--backend", OK, "--temperature", "-1"], "--temperature: a sampling temperature"),
    (["synth", "--world", "mock", "--backend", OK, "--min-reward", "inf"], "--min-reward: expected a finite number"),
    (["synth", "--world", "mock", "--backend", OK, "--min-reward", "2"], "--min-reward: must be a reward at least 0"),
    (["export", "--format", "rl", "--out", "o.jsonl", "--min-reward", "-1"], "--min-reward: must be a reward at"),
    (["synth", "--world", "mock", "--backend", OK, "--dedup-threshold", "nan"], "error: --dedup-threshold is a Jacc"),
    (["synth", "--world", "mock", "--backend", OK, "--via-server", ""], "--via-server: expected an http(s) URL"),
    (["synth", "--world", "mock", "--backend", OK, "--via-server", "http://127.0.0.1:1"], "error: simia server at"),
    (["synth", "--world", "mock", "--backend", OK, "--via-server", "http://x", "--token", " t"], "--token: a bearer"),
    (["synth", "--world", "mock", "--backend", "replay:notadb.db"], "error: replay:notadb.db: not a simia database"),
    (
        ["synth", "--world", "mock", "--backend", "replay:postgresql://u:pw@127.0.0.1:1/x"],
        "error: replay: cannot connect to Postgres at postgresql://u:***@127.0.0.1:1/x: ",
    ),
    (["synth", "--world", "mock", "--backend", OK, "--seeds", "seeds.jsonl", "--out", "notes.txt"], "is a file"),
    # db copy: the messages name the option that gave the database
    (["db", "copy", "--from", "notes.txt", "--to", "x.db"], "error: --from 'notes.txt' is not a simia database"),
    (["db", "copy", "--from", "simia.db", "--to", "notadb.db"], "error: --to 'notadb.db' is not a SQLite database"),
    (["db", "copy", "--from", "missing.db", "--to", "x.db"], "error: no database at 'missing.db'; pass --from PATH"),
    (["db", "copy", "--from", "other.db", "--to", "x.db"], "error: --from 'other.db' is not a simia database"),
    # export --format hf writes a folder
    (
        ["export", "--format", "hf", "--out", "x.jsonl", "--db", "simia.db"],
        "error: --out 'x.jsonl' names a .jsonl file, but --format hf writes a dataset folder",
    ),
    # demo
    (["demo", "--task", "nope"], "error: unknown task 'nope'; tasks: cancel_by_mistake"),
    (["demo", "--max-turns", "0"], "--max-turns: must be at least 1, got 0"),
    (["demo", "--out", "notes.txt"], "error: --out 'notes.txt' is a file; give a folder"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("argv", "says"), BAD)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    junk: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    before = snapshot(junk)
    code, err = run(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and says in lines[-1], err
    if not re.match(r"simia [a-z ]+: error: argument", lines[-1]):  # argparse prints its usage first
        assert lines == [lines[-1]] and lines[-1].startswith("error: "), err
    assert snapshot(junk) == before


def test_view_names_a_bad_database_even_while_its_default_port_is_held(
    junk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`simia view`'s default port (8766) held by another process does not hide what is wrong with --db."""
    with socket.socket() as holder:
        with contextlib.suppress(OSError):  # already held by someone else: held all the same
            holder.bind(("127.0.0.1", 8766))
            holder.listen()
        code, err = run(["view", "--db", "empty.txt"], capsys)
    assert code == 2 and "'empty.txt' is not a simia database" in err, err


@pytest.mark.timeout(60)
def test_serve_on_a_busy_port_exits_2_before_opening_the_database(
    junk: Path, capsys: pytest.CaptureFixture[str], busy_port: int
) -> None:
    before = snapshot(junk)
    code, err = run(["serve", "--backend", OK, "--port", str(busy_port), "--db", "new.db"], capsys)
    assert (code, err) == (
        2,
        f"error: cannot listen on 127.0.0.1:{busy_port}: Address already in use; pick another --port or --host\n",
    )
    assert snapshot(junk) == before


def test_a_world_whose_files_are_not_utf8_is_skipped_and_named(junk: Path, capsys: pytest.CaptureFixture[str]) -> None:
    worlds = junk / "worlds"
    shutil.copytree(MOCK, worlds / "mock")
    (worlds / "mock" / "tasks.jsonl").write_bytes(b"\xff\n")
    before = snapshot(junk)
    code, err = run(["serve", "--backend", OK, "--worlds-dir", "worlds"], capsys)
    assert code == 2
    assert err.splitlines() == [
        "warning: skipped invalid world 'mock' (worlds/mock): not UTF-8 text (byte 0); "
        "run `simia validate` for details",
        "error: no valid worlds to serve in worlds: fix them (see `simia validate worlds`)",
    ]
    assert snapshot(junk) == before


def test_a_world_whose_name_another_took_is_skipped_and_named_by_its_folder(
    junk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    worlds = junk / "worlds"
    shutil.copytree(MOCK, worlds / "a_mock")
    shutil.copytree(MOCK, worlds / "b_copy")
    code, err = run(["worlds", "--worlds-dir", "worlds"], capsys)
    assert code == 0
    assert err.splitlines() == [
        "warning: skipped invalid world 'mock' (worlds/b_copy): world name 'mock' is already used by worlds/a_mock; "
        "run `simia validate` for details"
    ]
