"""Server processes in tests: wait until one answers, and stop one on the way out.

Tests and benches that start `simia serve` (or HAProxy, or a fake provider) as real subprocesses use these,
so a process that dies while starting fails with its exit status and its log's tail instead of a timeout.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import httpx2 as httpx

__all__ = ["stop_process", "wait_answering"]


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
