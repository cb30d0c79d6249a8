"""CPU per model call of the HTTP stacks a backend could use, against the fake provider, same run.

Prints CPU milliseconds per sequential chat-completions call for the openai SDK (as simia's
OpenAI backend calls it), raw httpx2, `LeanHTTP` (the client simia's openai-compatible backend
uses on plain http), and a raw asyncio HTTP/1.1 connection, and each ratio to the raw
baseline: the floor under simia's per-call overhead with a real backend. Reported, no targets.

    python bench/backend_http_cost.py [CALLS] [--quick]

`--quick` makes 20 calls per stack (a smoke run: the figures are noisy).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx2
import openai
from _driver import PY, Connection, Process, free_port
from openai.types.chat import ChatCompletion
from simia.sim.backends._http import LeanHTTP

BODY = {
    "model": "fake",
    "max_tokens": 100,
    "messages": [
        {"role": "system", "content": "You simulate a pantry. " * 100},
        {
            "role": "user",
            "content": 'Current state:\n{"items": {"milk": {"qty": 0}}}\n\nCall: list_items\nArguments: {}',
        },
    ],
}


async def cpu_ms(call: Callable[[], Awaitable[Any]], n: int) -> float:
    await call()  # warm up
    start = time.process_time()
    for _ in range(n):
        await call()
    return (time.process_time() - start) / n * 1000


async def main(n: int) -> None:
    port = free_port()
    provider = await Process([PY, "-m", "simia.testing.fake_provider", "--port", str(port), "--quiet"], port).ready(
        "/v1/chat/completions"
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        sdk = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
        raw_httpx = httpx2.AsyncClient()
        lean = LeanHTTP(url, headers={"authorization": "Bearer x"})
        conn = Connection(port)

        async def via_sdk() -> Any:
            return await sdk.post("/chat/completions", body=BODY, cast_to=ChatCompletion, options={"timeout": 10})

        async def via_httpx() -> Any:
            return (await raw_httpx.post(f"{url}/chat/completions", json=BODY)).json()

        async def via_lean() -> Any:
            return (await lean.post("/chat/completions", BODY)).json()

        async def via_asyncio() -> Any:
            return json.loads((await conn.request("POST", "/v1/chat/completions", BODY))[1])

        results = {
            name: await cpu_ms(fn, n)
            for name, fn in (
                ("openai SDK", via_sdk),
                ("httpx2", via_httpx),
                ("LeanHTTP", via_lean),
                ("raw asyncio", via_asyncio),
            )
        }
        base = results["raw asyncio"]
        for name, ms in results.items():
            print(f"{name:<12} {ms:6.2f} ms CPU per call   {ms / base:5.1f}x raw asyncio")
        await sdk.close()
        await raw_httpx.aclose()
        await lean.aclose()
        await conn.close()
    finally:
        provider.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="CPU per model call of the HTTP stacks a backend could use.")
    parser.add_argument("calls", nargs="?", type=int, default=300, help="sequential calls per stack (default 300)")
    parser.add_argument("--quick", action="store_true", help="20 calls per stack: a smoke run, noisy figures")
    args = parser.parse_args()
    asyncio.run(main(20 if args.quick else args.calls))
