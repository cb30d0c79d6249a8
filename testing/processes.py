"""Server processes in tests: start `simia serve` and wait until it answers, and stop one on the way out.

`serve_process(ARGS)` runs `python -m simia.cli serve ARGS --port P` (a free port unless given) and, in a
`with` or `async with` block, waits for its `/healthz`; a server that dies while starting fails with its exit
status and its output's tail instead of a timeout. Tests and benches that start HAProxy or a fake provider
use `wait_answering` and `stop_process` directly.

    async with serve_process("--db", str(db), "--world", "mock") as server:
        ...  # server.url, server.port, server.process (SIGKILL it to test crash recovery)
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import httpx2 as httpx
from simia.server.inprocess import free_port

__all__ = ["ServeProcess", "serve_process", "stop_process", "wait_answering"]

SIMIA_SERVE = (sys.executable, "-m", "simia.cli", "serve")
"""The default command of `serve_process`: this interpreter's `simia serve`."""
PORT_ATTEMPTS = 3
"""Starts of a server on ports it chose, when each one was taken by another process before the server bound it."""


class ServeProcess:
    """A `simia serve` subprocess on `port`; `with` / `async with` start it, wait until healthy and stop it.

    Args:
        args: the `simia serve` arguments (without `--port`).
        port: the port to listen on (`--port`); default: a free one.
        command: what runs instead of `python -m simia.cli serve` (a wrapper script, or `simia view`).
        cwd: the working directory. env: variables added to this process's environment.
        log: where the process's stdout and stderr go (appended, kept); default: a temporary file.
        timeout: seconds to wait for `/healthz`. grace: seconds between SIGTERM and SIGKILL on `stop`.
        new_session: start it in its own session (a Ctrl-C at the terminal does not reach it).
    """

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        port: int | None = None,
        command: Sequence[str] = SIMIA_SERVE,
        cwd: Path | str | None = None,
        env: Mapping[str, str] | None = None,
        log: Path | None = None,
        timeout: float = 60,
        grace: float = 15,
        new_session: bool = False,
    ) -> None:
        self._own_port = port is None  # a port it chose: another may be chosen when that one was taken meanwhile
        self._starts = 0
        self._command = [*command, *args]
        self._listen(port or free_port())
        self.cwd, self.log, self.timeout, self.grace, self.new_session = cwd, log, timeout, grace, new_session
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self._output: IO[bytes] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def _listen(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.argv = [*self._command, "--port", str(port)]

    def _start_again(self, error: BaseException) -> bool:
        """Whether to start again after `error`: the process refused a port it chose because another process took
        it between the choice and the bind, and tries are left (`PORT_ATTEMPTS`); if so, it listens on another."""
        taken = self._own_port and isinstance(error, RuntimeError) and "Address already in use" in str(error)
        self._starts += 1
        if not taken or self._starts >= PORT_ATTEMPTS:
            return False
        self._listen(free_port())
        return True

    @property
    def process(self) -> subprocess.Popen[bytes]:
        """The running (or last) process.

        Raises:
            RuntimeError: not started yet.
        """
        if self._process is None:
            raise RuntimeError("start the server first (`with serve_process(...)` or `.start()`)")
        return self._process

    @property
    def started(self) -> bool:
        """Whether `start` was called (the process may have exited since)."""
        return self._process is not None

    def start(self) -> None:
        """Start the process (again, after `stop`: same port, same arguments); does not wait for it."""
        if self._process is not None and self._process.poll() is None:
            raise RuntimeError(f"{self.what} is already running")
        if self.log is not None:
            with self.log.open("ab") as out:
                self._process = self._spawn(out)
        else:
            if self._output is None:
                self._output = tempfile.TemporaryFile()  # noqa: SIM115 (closed by `close`)
            self._process = self._spawn(self._output)

    def _spawn(self, out: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.argv, cwd=self.cwd, env=self.env, stdout=out, stderr=out, start_new_session=self.new_session
        )

    @property
    def what(self) -> str:
        return f"{' '.join(Path(a).name if i == 0 else a for i, a in enumerate(self.argv[:4]))} on port {self.port}"

    def output_tail(self, size: int = 3000) -> str:
        """The last `size` bytes the process wrote (stdout and stderr), as text."""
        if self.log is not None:
            return self.log.read_bytes()[-size:].decode(errors="replace") if self.log.exists() else ""
        if self._output is None:
            return ""
        end = os.fstat(self._output.fileno()).st_size
        return os.pread(self._output.fileno(), size, max(0, end - size)).decode(errors="replace")

    def _failed(self) -> RuntimeError:
        return RuntimeError(f"{self.what} exited with {self.process.returncode} while starting:\n{self.output_tail()}")

    def _timed_out(self, timeout: float) -> TimeoutError:
        return TimeoutError(f"{self.what} did not answer /healthz within {timeout} s:\n{self.output_tail()}")

    def wait_healthy(self, timeout: float | None = None) -> None:
        """Block until `/healthz` answers 200.

        Raises:
            RuntimeError: the process exited first (with its output's tail). TimeoutError: not healthy in time.
        """
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2) as http:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise self._failed()
                try:
                    if http.get(f"{self.url}/healthz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
        raise self._timed_out(timeout)

    async def healthy(self, timeout: float | None = None) -> None:
        """`wait_healthy` without blocking the event loop (a fake provider in this loop keeps answering)."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2) as http:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise self._failed()
                try:
                    if (await http.get(f"{self.url}/healthz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)
        raise self._timed_out(timeout)

    def stop(self) -> None:
        """SIGTERM the process if it still runs, SIGKILL it after `grace` seconds, and reap it."""
        if self._process is not None:
            stop_process(self._process, self.grace)

    def kill(self) -> None:
        """SIGKILL the process and reap it."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def close(self) -> None:
        """Stop the process and drop its temporary output file."""
        try:
            self.stop()
        finally:
            if self._output is not None:
                self._output.close()
                self._output = None

    def __enter__(self) -> ServeProcess:
        self._starts = 0
        while True:
            self.start()
            try:
                self.wait_healthy()
                return self
            except BaseException as error:
                self.close()
                if not self._start_again(error):
                    raise

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> ServeProcess:
        self._starts = 0
        while True:
            self.start()
            try:
                await self.healthy()
                return self
            except BaseException as error:
                await asyncio.to_thread(self.close)
                if not self._start_again(error):
                    raise

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)  # a draining server may wait on a fake provider in this loop


def serve_process(
    *args: str,
    port: int | None = None,
    command: Sequence[str] = SIMIA_SERVE,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    timeout: float = 60,
    grace: float = 15,
    new_session: bool = False,
) -> ServeProcess:
    """`python -m simia.cli serve ARGS --port P` as a `ServeProcess` (its docstring says what each option does);
    `with` or `async with` it to start it, wait for `/healthz` and stop it at the end of the block."""
    return ServeProcess(
        args,
        port=port,
        command=command,
        cwd=cwd,
        env=env,
        log=log,
        timeout=timeout,
        grace=grace,
        new_session=new_session,
    )


async def wait_answering(
    url: str,
    proc: subprocess.Popen[bytes],
    *,
    what: str = "simia serve",
    log: Path | None = None,
    timeout: float = 30,
) -> None:
    """Wait until `url` answers with a status under 500 (for `simia serve`: its `/healthz`).

    Raises:
        RuntimeError: `proc` exited first (with `log`'s tail, when given). TimeoutError: no answer in `timeout` s.
    """
    async with httpx.AsyncClient(timeout=2) as http:
        for _ in range(int(timeout / 0.05)):
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:] if log is not None else ""
                raise RuntimeError(f"{what} exited with {proc.returncode}: {tail}")
            try:
                if (await http.get(url)).status_code < 500:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    raise TimeoutError(f"{what} did not answer within {timeout} s")


def stop_process(proc: subprocess.Popen[bytes], grace: float = 15) -> None:
    """SIGTERM `proc` if it still runs, SIGKILL it after `grace` seconds, and reap it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
