"""Embedded model fidelity of form: the share of simulated answers the simulator accepts, under the answer schema.

Runs the embedded model (SmolLM2 under a llama.cpp grammar; state-grounded tools are asked too) on the
retail world's tools (lookups with nested outputs, an unknown user) and on the tools of a real MCP server
imported with `simia import mcp` (the official memory server when given as `--mcp`, else
tests/fixtures/servers/counters.py), and prints per world the share of calls whose first answer the
simulator accepted, the share valid in the end (after the simulator's retries, which feed back the exact
problem) and the share that failed as `invalid_simulation` (an infrastructure error: the agent saw "try
again"). `--schema old` sends the answer schema of PROMPT_VERSION sim-3 instead (one object, `is_error`,
`error_code` and `output` free of each other, which a grammar-constrained model fills inconsistently; sent
through today's grammar form), for the before/after figure.

    python bench/schema_validity.py [N_CALLS] [--schema exact|old] [--mcp "COMMAND ..."] [--quick]

`--quick` runs 1 call per world with 1 attempt: it checks the bench runs, not its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from simia.sim import World, load_world
from simia.sim.backends import Backend, Completion, CompletionRequest
from simia.sim.backends.local import LocalBackend
from simia.sim.engine import Simulator, ToolCall
from simia.testing import schema_instance

ROOT = Path(__file__).resolve().parent.parent
COUNTERS = f"{shlex.quote(sys.executable)} {ROOT / 'tests' / 'fixtures' / 'servers' / 'counters.py'}"
RETAIL_CALLS = [
    ToolCall("get_order_details", {"order_id": "#W1001"}),
    ToolCall("get_user_details", {"user_id": "mia_lee_1021"}),
    ToolCall("list_products", {}),
    ToolCall("get_order_details", {"order_id": "#W1002"}),
    ToolCall("find_user_by_email", {"email": "nobody@example.com"}),
]
# Realistic arguments for the memory server's tools; any other tool gets an instance of its input schema.
MEMORY_ARGUMENTS: dict[str, dict[str, Any]] = {
    "create_entities": {"entities": [{"name": "Ada", "entityType": "person", "observations": ["writes code"]}]},
    "create_relations": {"relations": [{"from": "Ada", "to": "Babbage", "relationType": "works_with"}]},
    "add_observations": {"observations": [{"entityName": "Ada", "contents": ["likes tea"]}]},
    "read_graph": {},
    "search_nodes": {"query": "Ada"},
    "open_nodes": {"names": ["Ada"]},
    "delete_observations": {"deletions": [{"entityName": "Ada", "observations": ["likes tea"]}]},
    "delete_relations": {"relations": [{"from": "Ada", "to": "Babbage", "relationType": "works_with"}]},
    "delete_entities": {"entityNames": ["Babbage"]},
}


def imported_world(command: str, folder: Path) -> World:
    """The world `simia import mcp -- COMMAND` writes for a real MCP server."""
    out = folder / "imported"
    run = subprocess.run(
        [sys.executable, "-m", "simia.cli", "import", "mcp", "--out", str(out), "--", *shlex.split(command)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if run.returncode != 0:
        raise SystemExit(f"simia import mcp failed for {command!r}:\n{run.stdout}{run.stderr}")
    return load_world(out)


def calls_of(world: World) -> list[ToolCall]:
    """One call per tool of an imported world, with arguments valid for its input schema."""
    return [
        ToolCall(t.name, MEMORY_ARGUMENTS.get(t.name) or schema_instance(t.input_schema, seed=t.name))
        for t in world.tools
    ]


def old_answer_schema(world: World, tool: Any) -> dict[str, Any]:
    """The answer schema of PROMPT_VERSION sim-3: one object whose members are free of each other."""
    codes: list[Any] = [e.code for e in world.error_codes(tool)]
    output = {k: v for k, v in (tool.output_schema or {"type": "object"}).items() if k not in {"$schema", "$id"}}
    op = {
        "type": "object",
        "properties": {
            "op": {"enum": ["add", "remove", "replace", "move", "copy", "test"]},
            "path": {"type": "string"},
        },
        "required": ["op", "path"],
    }
    op["properties"].update({"value": {}, "from": {"type": "string"}})
    return {
        "type": "object",
        "properties": {
            "is_error": {"type": "boolean"},
            "error_code": {"enum": [*codes, None]},
            "message": {"type": "string"},
            "output": {"anyOf": [output, {"type": "null"}]},
            "state_patch": {"type": "array", "items": op},
        },
        "required": ["is_error", "error_code", "message", "output", "state_patch"],
        "additionalProperties": False,
    }


class OldSchema(Backend):
    """The embedded model, asked under the sim-3 answer schema of the call's tool instead of the exact one."""

    def __init__(self, inner: LocalBackend, world: World) -> None:
        super().__init__(max_concurrency=1, retry=inner.retry)
        self.inner, self.world = inner, world
        self.spec, self.model = inner.spec, inner.model

    async def generate(self, request: CompletionRequest, timeout: float) -> Completion:
        call = request.messages[1]["content"].split("\nCall: ", 1)[1].split("\n", 1)[0]
        tool = self.world.tool(call)
        return await self.inner.generate(
            dataclasses.replace(request, schema=old_answer_schema(self.world, tool)), timeout
        )


def modelled(world: World) -> World:
    """`world` with every tool answered by the model (a state-grounded tool would not ask it)."""
    return world.model_copy(update={"tools": [t.model_copy(update={"grounding": None}) for t in world.tools]})


async def measure(name: str, world: World, calls: list[ToolCall], n: int, attempts: int, schema: str) -> int:
    """Prints the world's figures; returns how many of its `n` calls were valid in the end."""
    world = modelled(world)
    local = LocalBackend()
    backend: Backend = local if schema == "exact" else OldSchema(local, world)
    sim = Simulator(backend, max_attempts=attempts)  # the default answer cap, as `simia serve` uses
    first = final = invalid = 0
    problems: dict[str, int] = {}
    for i in range(n):
        step = await sim.step(world, world.initial_state, [], calls[i % len(calls)], seed=i)
        ok = step.error_kind != "infra"
        final += ok
        first += ok and step.attempts <= 1
        invalid += step.error_code == "invalid_simulation"
        if not ok:
            reason = step.detail.split(": ", 1)[-1][:90]
            problems[reason] = problems.get(reason, 0) + 1
    print(f"{name} ({len(world.tools)} tools, {n} calls, schema {schema}):")
    print(f"  schema-valid on the first attempt: {first / n:.2f}; in the end ({attempts} attempts): {final / n:.2f}")
    print(f"  invalid_simulation (infra): {invalid / n:.2f}")
    for reason, count in sorted(problems.items(), key=lambda kv: -kv[1])[:3]:
        print(f"  {count} x {reason}")
    return final


async def main(n: int, attempts: int, schema: str, mcp: str) -> None:
    retail = load_world(ROOT / "tool_specs" / "retail")
    valid = await measure("retail", retail, RETAIL_CALLS, n, attempts, schema)
    with tempfile.TemporaryDirectory() as folder:
        world = imported_world(mcp, Path(folder))
        valid += await measure(f"imported MCP world {world.name!r}", world, calls_of(world), n, attempts, schema)
    print(f"ratio valid-in-the-end / calls: {valid / (2 * n):.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("n", nargs="?", type=int, default=20, help="calls per world")
    parser.add_argument("--schema", choices=["exact", "old"], default="exact", help="the answer schema to send")
    parser.add_argument("--mcp", default=COUNTERS, help="the stdio command of the MCP server to import")
    parser.add_argument("--quick", action="store_true", help="1 call per world: does the bench still run?")
    args = parser.parse_args()
    asyncio.run(main(1, 1, args.schema, args.mcp) if args.quick else main(args.n, 3, args.schema, args.mcp))
