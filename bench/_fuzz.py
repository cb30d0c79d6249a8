"""Shared by the fuzzers: a simia server run in a background thread (in process, so its simulator prompts and
error logs are visible), the worlds with canary strings in every hidden task fact, and the answer predicates."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simia.server import ServerSettings, build_server, free_port, serving
from simia.sim import load_worlds
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.storage import open_store
from simia.testing import mock_world_answer

ROOT = Path(__file__).resolve().parent.parent
CANARIES = {
    "user_hidden": "CANARY-USER-HIDDEN-7f3a9c",
    "rubric": "CANARY-RUBRIC-91bc04",
    "expected_state": "CANARY-EXPECTED-42de17",
}
"""Planted in every task: `user_hidden` may reach the harness (`GET /v1/worlds`) but never the simulator or the
agent; `rubric` and `expected_state` never leave the server."""


def is_error_body(body: Any) -> bool:
    """Exactly `{"error": {"code", "message"}}` with two non-empty strings."""
    return (
        isinstance(body, dict)
        and set(body) == {"error"}
        and isinstance(body["error"], dict)
        and set(body["error"]) == {"code", "message"}
        and all(isinstance(body["error"][k], str) and body["error"][k] for k in ("code", "message"))
    )


def is_jsonrpc_error(body: Any) -> bool:
    return isinstance(body, dict) and body.get("jsonrpc") == "2.0" and isinstance(body.get("error"), dict)


def canary_worlds(folder: Path) -> Path:
    """A copy of the bundled worlds whose every task carries the canaries in its hidden facts."""
    target = folder / "worlds"
    shutil.copytree(ROOT / "tool_specs", target, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    for tasks in target.glob("*/tasks.jsonl"):
        lines = []
        for line in tasks.read_text().splitlines():
            if not line.strip():
                continue
            task = json.loads(line)
            task["user_hidden"] = f"{task.get('user_hidden') or 'You are a customer.'} {CANARIES['user_hidden']}"
            task["rubric"] = f"{task.get('rubric') or 'Anything goes.'} {CANARIES['rubric']}"
            task["expected_state"] = {**task.get("expected_state", {}), "/canary": CANARIES["expected_state"]}
            lines.append(json.dumps(task))
        tasks.write_text("\n".join(lines) + "\n")
    return target


def leaked(text: str, *, harness: bool = False) -> list[str]:
    """The canaries in `text` (a prompt or an answer); `harness`: `user_hidden` is allowed there."""
    return [name for name, canary in CANARIES.items() if canary in text and not (harness and name == "user_hidden")]


class _Errors(logging.Handler):
    """Collects every ERROR record (a traceback the server caught and logged is a bug the fuzzer found)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record)[:3000])


@dataclass
class ThreadServer:
    """A simia server on the mock and retail worlds (with canaries), in a background thread with its own loop.

    The simulator answers the mock world flawlessly (`mock_world_answer`) and any other call with a clean
    `not_found`; every prompt it is sent is checked for canaries (`prompt_leaks`).
    """

    folder: Path
    settings: ServerSettings = field(default_factory=ServerSettings)
    answer: Callable[[CompletionRequest], dict[str, Any]] | None = None
    url: str = ""
    prompts: int = 0
    prompt_leaks: list[str] = field(default_factory=list)
    errors: _Errors = field(default_factory=_Errors)
    crashed: list[BaseException] = field(default_factory=list)
    app: Any = None

    def _answer(self, request: CompletionRequest) -> dict[str, Any]:
        self.prompts += 1
        text = "\n".join(str(m.get("content", "")) for m in request.messages)
        for name in leaked(text):
            self.prompt_leaks.append(f"{name} in a simulator prompt: ...{text[:300]}")
        if self.answer is not None:
            return self.answer(request)
        try:
            return mock_world_answer(request)
        except (KeyError, IndexError, ValueError, TypeError):
            return {
                "is_error": True,
                "error_code": "not_found",
                "message": "Not found.",
                "output": None,
                "state_patch": [],
            }

    def __enter__(self) -> ThreadServer:
        worlds = load_worlds([canary_worlds(self.folder)]).worlds
        port = free_port()
        self.settings.port = port
        self.url = f"http://127.0.0.1:{port}"
        started = threading.Event()

        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            store = open_store(self.folder / "fuzz.db")
            self.app = build_server(worlds, FunctionBackend(self._answer), store, self.settings)
            try:
                async with serving(self.app, port):
                    for name in ("", "uvicorn", "uvicorn.error"):  # uvicorn's loggers do not propagate to the root
                        logging.getLogger(name).addHandler(self.errors)
                    started.set()
                    await self._stop.wait()
            finally:
                await store.close()

        def run() -> None:
            try:
                asyncio.run(main())
            except BaseException as exc:  # the server died: the fuzzer's finding
                self.crashed.append(exc)
                started.set()

        self._thread = threading.Thread(target=run, name="simia-fuzz-server", daemon=True)
        self._thread.start()
        started.wait(60)
        if self.crashed:
            raise RuntimeError(f"the server did not start: {self.crashed[0]!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        for name in ("", "uvicorn", "uvicorn.error"):
            logging.getLogger(name).removeHandler(self.errors)

    def alive(self) -> bool:
        return self._thread.is_alive() and not self.crashed
