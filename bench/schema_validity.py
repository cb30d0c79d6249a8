"""Embedded model fidelity of form: the share of simulated answers that fit a nested output schema.

Runs the retail world's read tools whose outputs hold arrays of objects (orders with items,
users with payment history, the product list) on the embedded model and prints the share of
calls that got a schema-valid answer on the first attempt, and in the end (after the
simulator's retries, which feed back the exact problem), next to the share of calls that
failed as `invalid_simulation` (an infrastructure error: the agent saw "try again").

    python bench/schema_validity.py [N_CALLS] [--quick]

`--quick` runs 1 call with 1 attempt: it checks the bench runs, not its figures.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from simia.sim import load_world
from simia.sim.backends.local import LocalBackend
from simia.sim.engine import Simulator, ToolCall

ROOT = Path(__file__).resolve().parent.parent
CALLS = [
    ToolCall("get_order_details", {"order_id": "#W1001"}),
    ToolCall("get_user_details", {"user_id": "mia_lee_1021"}),
    ToolCall("list_products", {}),
    ToolCall("get_order_details", {"order_id": "#W1002"}),
]


async def main(n: int, attempts: int) -> None:
    world = load_world(ROOT / "tool_specs" / "retail")
    sim = Simulator(LocalBackend(), max_tokens=512, max_attempts=attempts)
    first = final = invalid = 0
    for i in range(n):
        step = await sim.step(world, world.initial_state, [], CALLS[i % len(CALLS)], seed=i)
        ok = step.error_kind != "infra"
        final += ok
        first += ok and step.attempts <= 1
        invalid += step.error_code == "invalid_simulation"
    print(f"nested-output calls on the embedded model: {n}")
    print(f"schema-valid on the first attempt: {first / n:.2f}; in the end ({attempts} attempts): {final / n:.2f}")
    print(f"invalid_simulation (infra): {invalid / n:.2f}")
    print(f"ratio valid-in-the-end / calls: {final / n:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("n", nargs="?", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="1 call: does the bench still run?")
    args = parser.parse_args()
    asyncio.run(main(1, 1) if args.quick else main(args.n, 3))
