"""What state-grounded tools save: the share of calls answered without a model, and the model calls and prompt
tokens each call saves, against the same world with its declarations removed, measured in the same run.

For each world (the shipped ones, or those under `--world-dir`: a world folder or a folder of worlds, an imported
OpenAPI world say), a call sequence is drawn from its reference examples (as `bench/consistency.py` draws them),
then one call of every tool, its arguments generated: an argument a declared pointer names after a collection
(`/orders/{order_id}`) gets a key of that collection in the initial state, any other a schema-valid instance.
The sequence runs twice on a fresh episode: on the world as declared, and on `undeclared(world)` (every call
model-answered, the baseline). The model is a function backend answering each request with a schema-valid
instance of its answer schema; its token counts are the scripted backends' estimate (a quarter of the characters
sent), so the figures compare prompt sizes, not any provider's tokenizer.

    python bench/grounded.py [--quick] [--world-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from consistency import sequence
from simia.clients.fidelity import replay
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.engine import ToolCall, undeclared
from simia.sim.world import Effect, World, load_worlds, resolve_pointer, template_names
from simia.testing import schema_instance

ROOT = Path(__file__).resolve().parent.parent


def _pointers(world: World) -> dict[str, list[str]]:
    """Each tool's declared pointer templates."""
    out: dict[str, list[str]] = {}
    for tool in world.tools:
        g = tool.grounding
        if g is None:
            continue
        found = [c.pointer for c in g.preconditions if c.pointer is not None]
        found += [e.path for e in g.effects if isinstance(e, Effect)]
        found += [g.read.pointer] if g.read is not None and g.read.pointer is not None else []
        out[tool.name] = found
    return out


def generated(world: World, rng: random.Random) -> list[ToolCall]:
    """One call of every tool, its arguments drawn from the state where a declared pointer names them."""
    pointers = _pointers(world)
    calls: list[ToolCall] = []
    for tool in world.tools:
        try:
            arguments: dict[str, Any] = schema_instance(tool.input_schema, f"{world.name}/{tool.name}")
        except ValueError:
            continue  # a schema the generator cannot satisfy: no call of this tool
        for template in pointers.get(tool.name, []):
            head, _, _ = template.partition("{")
            names = list(template_names(template[len(head) :]))
            collection = resolve_pointer(world.initial_state, head.rstrip("/"))
            if names and names[0] in arguments and isinstance(collection, dict) and collection:
                arguments[names[0]] = rng.choice(sorted(collection))
        calls.append(ToolCall(tool.name, arguments))
    return calls


def _answer(request: CompletionRequest) -> dict[str, Any]:
    """A schema-valid instance of the request's answer schema (seeded by the prompt: one answer per prompt)."""
    return dict(schema_instance(request.schema, str(request.messages[-1].get("content")), check=False))


@dataclass
class Cost:
    calls: int = 0
    state_answered: int = 0
    model_calls: int = 0
    prompt_tokens: int = 0


async def cost(world: World, calls: list[ToolCall]) -> Cost:
    steps = [step for step, _ in await replay(world, calls, FunctionBackend(_answer))]
    return Cost(
        calls=len(steps),
        state_answered=sum(s.source == "state" for s in steps),
        model_calls=sum(s.usage.calls for s in steps),
        prompt_tokens=sum(s.usage.prompt_tokens for s in steps),
    )


async def main(quick: bool, worlds_dirs: list[Path]) -> None:
    report = load_worlds(worlds_dirs)
    for error in report.errors:
        print(f"skipped invalid world {error.world}: {error.issues[0]}")
    totals = {"declared": Cost(), "undeclared": Cost()}
    for name, world in sorted(report.worlds.items()):
        calls = sequence(world) + generated(world, random.Random(7))
        if quick:
            calls = calls[:24]
        declared, baseline = await cost(world, calls), await cost(undeclared(world), calls)
        for label, c in (("declared", declared), ("undeclared", baseline)):
            total = totals[label]
            total.calls += c.calls
            total.state_answered += c.state_answered
            total.model_calls += c.model_calls
            total.prompt_tokens += c.prompt_tokens
        share = declared.state_answered / declared.calls if declared.calls else 0.0
        print(f"{name:12} {declared.calls:3} calls: {declared.state_answered:3} without a model ({share:.2f}); "
              f"model calls {declared.model_calls} / {baseline.model_calls} undeclared, "
              f"prompt tokens {declared.prompt_tokens:,} / {baseline.prompt_tokens:,}")  # fmt: skip
    mine, base = totals["declared"], totals["undeclared"]
    n = max(mine.calls, 1)
    print(f"share answered without a model: {mine.state_answered / n:.2f} of {mine.calls} calls (undeclared: 0.00)")
    print(f"per call saved: {(base.model_calls - mine.model_calls) / n:.2f} model calls, "
          f"{(base.prompt_tokens - mine.prompt_tokens) / n:,.0f} prompt tokens")  # fmt: skip
    ratio = mine.prompt_tokens / base.prompt_tokens if base.prompt_tokens else 0.0
    calls_ratio = mine.model_calls / base.model_calls if base.model_calls else 0.0
    print(f"ratio declared / undeclared: model calls {calls_ratio:.2f}, prompt tokens {ratio:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="at most 24 calls a world: does the bench still run?")
    parser.add_argument("--world-dir", type=Path, action="append", help="a world folder or a folder of worlds")
    args = parser.parse_args()
    asyncio.run(main(args.quick, args.world_dir or [ROOT / "tool_specs"]))
