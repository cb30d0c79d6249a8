"""Embedded model speed: p50 latency of a simulated call on the `mock` world vs raw decoding.

Prints the p50 / p90 wall time of `Simulator.step` with the `local` backend over a
fixed set of mock calls, next to the raw speed of the same model on the same
machine (prompt processing and decode tokens per second of a plain completion),
and the ratio of the measured p50 to what raw speed predicts for the same tokens.

    python bench/local_latency.py [N_CALLS] [--quick]

`--quick` simulates 2 calls and decodes 32 raw tokens: it checks the bench runs, not its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import time
from pathlib import Path

from simia.sim import load_world
from simia.sim.backends.local import LocalBackend
from simia.sim.engine import Simulator, Step, ToolCall

ROOT = Path(__file__).resolve().parent.parent


def raw_speed(backend: LocalBackend, decode_tokens: int = 128) -> tuple[float, float]:
    """(prompt tokens/s, decode tokens/s) of a plain, unconstrained completion."""
    llama = backend.llama
    prompt = "Write a short story about a pantry that keeps track of apples, rice and milk. " * 8
    llama.create_completion(prompt[:50], max_tokens=4)  # warm up
    llama.reset()  # llama.cpp would reuse the prompt already in its cache and time no prefill
    start = time.perf_counter()
    llama.create_completion(prompt, max_tokens=1, temperature=0)
    prefill = time.perf_counter() - start
    n_prompt = len(llama.tokenize(prompt.encode()))
    llama.reset()
    start = time.perf_counter()
    out = llama.create_completion(prompt, max_tokens=decode_tokens, temperature=0.8, seed=1)
    total = time.perf_counter() - start
    n_out = out["usage"]["completion_tokens"]
    return n_prompt / prefill, n_out / max(total - prefill, 1e-6)


async def main(n: int, decode_tokens: int) -> None:
    world = load_world(ROOT / "tool_specs" / "mock")
    backend = LocalBackend()
    prefill_tps, decode_tps = raw_speed(backend, decode_tokens)
    sim = Simulator(backend, max_tokens=512)
    calls = [
        ToolCall("list_items", {}),
        ToolCall("get_item", {"name": "apple"}),
        ToolCall("set_quantity", {"name": "milk", "qty": 4}),
        ToolCall("get_item", {"name": "banana"}),
    ]
    steps: list[Step] = []
    for i in range(n):
        steps.append(await sim.step(world, world.initial_state, [], calls[i % len(calls)], seed=i))
    latencies = sorted(s.latency_ms / 1000 for s in steps)
    p50 = statistics.median(latencies)
    p90 = latencies[math.ceil(0.9 * len(latencies)) - 1]  # nearest rank: never below the median
    prompt_tokens = statistics.median(s.usage.prompt_tokens / max(s.usage.calls, 1) for s in steps)
    completion_tokens = statistics.median(s.usage.completion_tokens / max(s.usage.calls, 1) for s in steps)
    attempts = statistics.mean(s.attempts for s in steps)
    predicted = prompt_tokens / prefill_tps + completion_tokens / decode_tps
    outcomes = {k: sum(1 for s in steps if (s.error_kind or "ok") == k) for k in ("ok", "agent", "infra")}
    print(f"model: {backend.model} ({backend.path.name}), {n} simulated calls on the mock world")
    print(f"raw speed: prompt {prefill_tps:.0f} tok/s, decode {decode_tps:.1f} tok/s")
    print(
        f"per attempt (median): {prompt_tokens:.0f} prompt + {completion_tokens:.0f} completion tokens; "
        f"mean attempts per call {attempts:.2f}"
    )
    print(f"simulated call latency: p50 {p50:.2f} s, p90 {p90:.2f} s")
    print(f"raw-speed prediction for one attempt: {predicted:.2f} s; p50 / prediction = {p50 / predicted:.2f}")
    print(f"outcomes: {outcomes}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="embedded model: simulated call latency vs raw decoding")
    parser.add_argument("calls", nargs="?", type=int, default=12, help="simulated calls (default 12)")
    parser.add_argument("--quick", action="store_true", help="2 calls, 32 raw tokens: check that the bench runs")
    args = parser.parse_args()
    asyncio.run(main(2, 32) if args.quick else main(args.calls, 128))
