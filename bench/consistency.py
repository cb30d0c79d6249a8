"""Consistency by construction, measured: repeated reads and reads after writes on every shipped world.

For each world in tool_specs/, a call sequence is built from the tool calls of its reference
examples: every read-only call is made twice (the second must answer the same: repeated read),
and after every write the earlier read-only calls that name one of the write's argument values
are made again (they must answer differently: read after write). The sequence runs on a fresh
simulated episode, with no real server, under three simulator models:

- `faithful fake`: the fake provider answering from the state in the simulator's prompt (the
  `mock` world's `simia.testing.mock_world_answer`, and a rule answerer for `retail` below).
  It is deterministic and right by design, so its figure measures simia's part only: that the
  state each call is shown (sliced to the records it names), the applied patches and the window
  ground every answer. It is 1.00 unless that machinery breaks.
- `stale fake` (the baseline): the same rules answering from the world's initial state, as a
  model would that ignored the episode's state. Its reads after writes fail: what the checks
  catch when the grounding is missing.
- `embedded model` (SmolLM2 135M on llama.cpp): what a small real model does with the same
  prompts; printed, not asserted. Skipped under `--quick`.

Checks whose later read the state answered (a tool's declared `grounding`, `source: state`) are counted
apart from those a model answered: a declared read is consistent whatever the model.

    python bench/consistency.py [--quick] [--worlds-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simia.clients.fidelity import consistency, replay
from simia.clients.fidelity.consistency_checks import pairs, summary
from simia.sim.backends import Backend, resolve_backend
from simia.sim.backends.local import LocalBackend
from simia.sim.engine import ToolCall
from simia.sim.world import World, load_worlds
from simia.testing import FakeProvider, mock_world_answer, parse_simulator_prompt

ROOT = Path(__file__).resolve().parent.parent
Answer = Callable[[dict[str, Any]], dict[str, Any]]


def sequence(world: World) -> list[ToolCall]:
    """The checks' call sequence, from the world's reference examples (see the module docstring)."""
    calls: list[ToolCall] = []
    reads: list[ToolCall] = []
    for example in world.examples:
        for message in example.messages:
            for entry in message.get("tool_calls") or []:
                call = ToolCall(entry["function"]["name"], json.loads(entry["function"]["arguments"] or "{}"))
                tool = world.tool(call.tool)
                if tool is None:
                    continue
                if (tool.annotations or {}).get("readOnlyHint") is True:
                    calls += [call, call]
                    reads.append(call)
                    continue
                calls.append(call)
                named = {json.dumps(v) for v in call.arguments.values()}
                calls += [r for r in reads if named & {json.dumps(v) for v in r.arguments.values()}]
    return calls


def _ok(output: Any, patch: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"is_error": False, "error_code": None, "message": "ok", "output": output, "state_patch": patch or []}


def _error(code: str, message: str) -> dict[str, Any]:
    return {"is_error": True, "error_code": code, "message": message, "output": None, "state_patch": []}


def retail_answer(tool: str, args: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """A right answer for the retail tools the examples call, from `state`."""
    orders, users = state.get("orders", {}), state.get("users", {})
    if tool == "find_user_by_email":
        found = [u["user_id"] for u in users.values() if u.get("email") == args["email"]]
        return _ok({"user_id": found[0]}) if found else _error("user_not_found", "no user with that email")
    if tool in {"get_order_details", "cancel_pending_order"} and args["order_id"] not in orders:
        return _error("order_not_found", f"no order {args['order_id']}")
    order = orders.get(args.get("order_id"), {})
    if tool == "get_order_details":
        return _ok(order)
    if tool == "cancel_pending_order":
        if order["status"] != "pending":
            return _error("order_not_pending", f"order {order['order_id']} is {order['status']}")
        refund = sum(p["amount"] for p in order.get("payment_history", []) if p["transaction_type"] == "payment")
        patch = [{"op": "replace", "path": f"/orders/{_escape(order['order_id'])}/status", "value": "cancelled"}]
        return _ok({"order_id": order["order_id"], "status": "cancelled", "refund_amount": refund}, patch)
    return _error("invalid_argument", f"this bench answers no {tool}")


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def retail_body_answer(body: dict[str, Any]) -> dict[str, Any]:
    """`retail_answer` for one simulator request (an OpenAI request body)."""
    return retail_answer(*parse_simulator_prompt(str(body["messages"][1]["content"])))


def with_state(body: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """The request with `state` in place of the state its prompt shows."""
    lines = str(body["messages"][1]["content"]).split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("Current state"))
    lines[at + 1] = json.dumps(state)
    return {**body, "messages": [body["messages"][0], {"role": "user", "content": "\n".join(lines)}]}


def answerer(world: World, *, stale: bool) -> Answer:
    """The fake provider's answer function for `world`: right from the prompt's state, or (stale) right
    from the world's initial state whatever the episode did."""
    right = mock_world_answer if world.name == "mock" else retail_body_answer
    if not stale:
        return right
    return lambda body: right(with_state(body, world.initial_state))


async def measure(
    world: World, calls: list[ToolCall], backend: Backend
) -> tuple[tuple[int, int], tuple[int, int], str]:
    """(repeated read, read after write, what the calls got): a check needs both of its reads answered."""
    steps = [step for step, _ in await replay(world, calls, backend)]
    codes = Counter(f"{s.error_kind} {s.error_code}" for s in steps if s.is_error)
    got = f"{len(steps) - sum(codes.values())} answered" + "".join(f", {n} {code}" for code, n in codes.most_common())
    found = pairs(world, calls, steps)
    for source, label in (("state", "declared"), ("simulated", "model-answered")):
        mine = summary([p for p in found if (steps[p.second].source == "state") == (source == "state")])
        got += f"; {label}: repeated {mine.repeated_read[0]}/{mine.repeated_read[1]}"
        got += f", after write {mine.read_after_write[0]}/{mine.read_after_write[1]}"
    return (*consistency(world, calls, steps), got)


def _share(pair: tuple[int, int]) -> str:
    return f"{pair[0]}/{pair[1]}"


async def main(quick: bool, worlds_dir: Path) -> None:
    worlds = dict(load_worlds([worlds_dir]).worlds)
    totals: dict[str, list[int]] = {}
    for name, world in sorted(worlds.items()):
        calls = sequence(world)
        if name not in {"mock", "retail"}:
            print(f"{name}: no faithful fake for this world; skipped")
            continue
        models: list[tuple[str, Answer | None]] = [
            ("faithful fake", answerer(world, stale=False)),
            ("stale fake", answerer(world, stale=True)),
        ]
        if not quick:
            models.append(("embedded model", None))
        for label, answer in models:
            if answer is None:
                backend: Backend = LocalBackend()
                repeated, after, got = await measure(world, calls, backend)
            else:
                async with FakeProvider(answer).running() as fake:
                    backend = resolve_backend("openai-compatible:fake", base_url=fake.base_url, env={})
                    try:
                        repeated, after, got = await measure(world, calls, backend)
                    finally:
                        await backend.aclose()
            print(f"{name:8} {label:15} {len(calls):3} calls  repeated read {_share(repeated):5}  "
                  f"read after write {_share(after)}  ({got})")  # fmt: skip
            total = totals.setdefault(label, [0, 0])
            total[0] += repeated[0] + after[0]
            total[1] += repeated[1] + after[1]
    shares = {label: ok / checked if checked else 0.0 for label, (ok, checked) in totals.items()}
    for label, share in shares.items():
        print(f"{label}: {share:.2f} of {totals[label][1]} checks consistent")
    print(f"ratio consistent faithful fake / stale fake: {shares['faithful fake']:.2f} / {shares['stale fake']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the fakes only: does the bench still run?")
    parser.add_argument("--worlds-dir", type=Path, default=ROOT / "tool_specs")
    args = parser.parse_args()
    asyncio.run(main(args.quick, args.worlds_dir))
