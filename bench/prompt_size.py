"""Prompt size: simia's state-as-memory prompt vs replaying the whole history (Simia's way).

Runs one 50-call episode on the `retail` world with a deterministic backend that
answers from the state shown in the prompt, and prints, at call 50, the prompt
tokens of both approaches and their ratio (target <= 0.25), plus the share of each
prompt that is a stable prefix across calls (target >= 0.70).

    python bench/prompt_size.py [--calls N] [--quick]

The whole run takes about a second, so `--quick` keeps its 50 calls (the ratio is defined
at call 50) and only leaves the targets unchecked, whatever BENCH_STRICT says.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simia.sim import load_world
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.engine import Simulator, Step, ToolCall, system_prompt
from simia.sim.records import PastCall
from simia.testing.mock_world import parse_simulator_prompt

ROOT = Path(__file__).resolve().parent.parent
CALLS = 50


def respond(request: CompletionRequest) -> dict[str, Any]:
    """Answer like a competent simulator would: read records from the state, patch on writes."""
    tool, args, state = parse_simulator_prompt(str(request.messages[1]["content"]))
    patch: list[dict[str, Any]] = []
    output: dict[str, Any]
    if tool == "get_user_details":
        output = state["users"][args["user_id"]]
    elif tool == "get_order_details":
        output = state["orders"][args["order_id"]]
    elif tool == "get_product_details":
        output = state["products"][args["product_id"]]
    elif tool == "list_products":
        output = {"products": [{"product_id": k, "name": v["name"]} for k, v in state["products"].items()]}
    elif tool == "find_user_by_email":
        output = {"user_id": next(u for u, v in state["users"].items() if v["email"] == args["email"])}
    else:  # modify_pending_order_address
        address = {k: args.get(k, "") for k in ("address1", "address2", "city", "state", "country", "zip")}
        path = f"/orders/{args['order_id']}/address"
        patch = [{"op": "replace", "path": path, "value": address}]
        output = {"order_id": args["order_id"], "address": address}
    return {"is_error": False, "error_code": None, "message": "ok", "output": output, "state_patch": patch}


@functools.lru_cache(maxsize=1)
def token_counter() -> tuple[str, Callable[[str], int]]:
    """SmolLM2's tokenizer when llama-cpp-python and the model are installed, else ~4 characters a token."""
    try:
        from llama_cpp import Llama
        from simia.sim.backends.local import embedded_model_path

        vocab = Llama(model_path=str(embedded_model_path()), vocab_only=True, verbose=False)
    except Exception:  # any failure falls back to the estimate
        return "chars/4", lambda text: len(text) // 4
    return "SmolLM2 tokenizer", lambda text: len(vocab.tokenize(text.encode(), add_bos=False))


def episode_calls(n: int) -> list[ToolCall]:
    users = ["mia_lee_1021", "omar_haddad_3310", "lena_kraus_7788"]
    orders = ["#W1001", "#W1002", "#W1003", "#W1004", "#W1005"]
    products = ["P100", "P200", "P300"]
    calls = []
    for i in range(n):
        kind = i % 5
        if kind == 0:
            calls.append(ToolCall("get_user_details", {"user_id": users[i % 3]}))
        elif kind == 1:
            calls.append(ToolCall("get_order_details", {"order_id": orders[i % 5]}))
        elif kind == 2:
            calls.append(ToolCall("get_product_details", {"product_id": products[i % 3]}))
        elif kind == 3:
            calls.append(
                ToolCall(
                    "modify_pending_order_address",
                    {
                        "order_id": "#W1004",
                        "address1": f"{i} Congress Ave",
                        "city": "Austin",
                        "state": "TX",
                        "country": "USA",
                        "zip": "78701",
                    },
                )
            )
        else:
            calls.append(ToolCall("find_user_by_email", {"email": "mia.lee@example.com"}))
    return calls


USER_TURNS = [
    "Can you also check my other order? I think something is wrong with the address.",
    "Thanks. And what about the lamp, is it still available in black?",
    "Please update the shipping address, I moved last week.",
    "Great, one more thing: what did I pay for the bottle?",
]


def history_prompt(world_system: str, history: list[Step], call: ToolCall) -> str:
    """Simia-style: the whole trajectory so far, as the environment model reads it, then the new call.

    Simia-RL's environment model reads every user turn, assistant message (with its
    tool calls) and tool result. Messages are rendered as a chat template shows them
    (role header, text, `<tool_call>` JSON), not JSON-escaped. The agent says one or
    two short sentences per call and the user speaks every fifth call: terser than
    real agents, so the baseline is conservative.
    """
    lines = [world_system, "<|user|>\nHi, I need help with my orders. My email is mia.lee@example.com."]
    for i, step in enumerate([*history, None]):
        current = call if step is None else step
        if i and i % 5 == 0:
            lines.append(f"<|user|>\n{USER_TURNS[(i // 5) % len(USER_TURNS)]}")
        target = next(iter(current.arguments.values()), "")
        tool_call = json.dumps({"name": current.tool, "arguments": current.arguments})
        lines.append(
            f"<|assistant|>\nSure, I will look that up. Checking {target} with {current.tool} now."
            f"\n<tool_call>{tool_call}</tool_call>"
        )
        if step is not None:
            lines.append(f"<|tool|>\n{step.text}")
    return "\n".join(lines)


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


async def main(calls: int, strict: bool) -> None:
    world = load_world(ROOT / "tool_specs" / "retail")
    backend = FunctionBackend(respond)
    sim = Simulator(backend)
    state = world.initial_state
    history: list[Step] = []
    window: list[PastCall] = []  # what the server keeps of each event for the simulator's window
    simia_prompts: list[str] = []
    simia_style: list[str] = []
    for call in episode_calls(calls):
        simia_style.append(history_prompt(system_prompt(world), history, call))
        step = await sim.step(world, state, window, call)
        assert not step.is_error, step.detail or step.text
        request = backend.requests[-1]
        simia_prompts.append("\n".join(str(m["content"]) for m in request.messages))
        history.append(step)
        window.append(PastCall(step.tool, step.arguments, step.text if step.is_error else step.output, step.is_error))
        state = step.state
    name, count = token_counter()
    ours, theirs = count(simia_prompts[-1]), count(simia_style[-1])
    first = count(simia_prompts[0])
    shares = [common_prefix(a, b) / len(b) for a, b in itertools.pairwise(simia_prompts)]
    share = sum(shares) / len(shares)
    print(f"tokens counted with: {name}")
    print(f"call 1 prompt tokens (simia):            {first}")
    print(f"call {calls} prompt tokens (simia, state):   {ours}")
    print(f"call {calls} prompt tokens (full history):   {theirs}")
    print(f"ratio simia / full history at call {calls}:  {ours / theirs:.3f}   (target <= 0.25)")
    print(f"stable prefix share across calls:       {share:.3f}   (target >= 0.70)")
    if strict and (ours / theirs > 0.25 or share < 0.70):
        sys.exit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simia's prompt vs replaying the whole history")
    parser.add_argument("--calls", type=int, default=CALLS, help=f"calls in the episode (default {CALLS})")
    parser.add_argument("--quick", action="store_true", help="check that the bench runs, not its targets")
    args = parser.parse_args()
    asyncio.run(main(args.calls, strict=bool(os.environ.get("BENCH_STRICT")) and not args.quick))
