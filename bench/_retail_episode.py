"""One retail episode as the prompt benches replay it: the agent's calls, a model answering them from the state in
its prompt, and the prompt Simia's way of simulating costs for the same episode (the whole history resent).

`retail_world()` is the shipped `retail` world with its grounding removed, so every call is one the model answers
(the calls whose prompt is measured; with its declarations the reads are answered from the state, no model).
`answer(prompt)` answers a simulator prompt as a competent model would (records read from the state shown, a patch
on writes). `history_parts(history, call)` is Simia-RL's environment prompt as append-only parts: the parts of call
k are a prefix of those of call k+1, as a provider's prefix cache sees a replayed trajectory. Shared by
bench/prompt_size.py and bench/cost.py.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simia.sim import load_world
from simia.sim.engine import Step, ToolCall, undeclared
from simia.sim.world import World
from simia.testing.mock_world import parse_simulator_prompt

__all__ = ["USER_TURNS", "answer", "common_prefix", "episode_calls", "history_parts", "prefix_share", "retail_world"]

ROOT = Path(__file__).resolve().parent.parent

USER_TURNS = [
    "Can you also check my other order? I think something is wrong with the address.",
    "Thanks. And what about the lamp, is it still available in black?",
    "Please update the shipping address, I moved last week.",
    "Great, one more thing: what did I pay for the bottle?",
]
OPENING = "<|user|>\nHi, I need help with my orders. My email is mia.lee@example.com."


def retail_world() -> World:
    """The shipped `retail` world, every tool model-answered (its grounding removed)."""
    return undeclared(load_world(ROOT / "tool_specs" / "retail"))


def answer(prompt: str) -> dict[str, Any]:
    """Answer the simulator's user message `prompt` like a competent model: read records from the state, patch
    on writes."""
    tool, args, state = parse_simulator_prompt(prompt)
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
    if tool != "modify_pending_order_address":  # a read-only tool's answer has no state_patch (the answer schema)
        return {"is_error": False, "output": output}
    return {"is_error": False, "output": output, "state_patch": patch}


def episode_calls(n: int, start: int = 0) -> list[ToolCall]:
    """`n` calls of a customer-service episode (reads of users, orders and products, address changes), from the
    `start`th call of the pattern on (parallel episodes start at different points)."""
    users = ["mia_lee_1021", "omar_haddad_3310", "lena_kraus_7788"]
    orders = ["#W1001", "#W1002", "#W1003", "#W1004", "#W1005"]
    products = ["P100", "P200", "P300"]
    calls = []
    for i in range(start, start + n):
        kind = i % 5
        if kind == 0:
            calls.append(ToolCall("get_user_details", {"user_id": users[i % 3]}))
        elif kind == 1:
            calls.append(ToolCall("get_order_details", {"order_id": orders[i % 5]}))
        elif kind == 2:
            calls.append(ToolCall("get_product_details", {"product_id": products[i % 3]}))
        elif kind == 3:
            address = {
                "address1": f"{i} Congress Ave",
                "city": "Austin",
                "state": "TX",
                "country": "USA",
                "zip": "78701",
            }
            calls.append(ToolCall("modify_pending_order_address", {"order_id": "#W1004", **address}))
        else:
            calls.append(ToolCall("find_user_by_email", {"email": "mia.lee@example.com"}))
    return calls


def history_parts(history: Sequence[Step], call: ToolCall) -> list[str]:
    """Simia-style: the whole trajectory so far, as the environment model reads it, then the new call; one part
    per message, after the world's system prompt.

    Simia-RL's environment model reads every user turn, assistant message (with its tool calls) and tool result.
    Messages are rendered as a chat template shows them (role header, text, `<tool_call>` JSON), not JSON-escaped.
    The agent says one or two short sentences per call and the user speaks every fifth call: terser than real
    agents, so the baseline is conservative. Each call's parts end with its own call, and are a prefix of the next
    call's parts.
    """
    parts = [OPENING]
    for i, step in enumerate([*history, None]):
        current = call if step is None else step
        if i and i % 5 == 0:
            parts.append(f"<|user|>\n{USER_TURNS[(i // 5) % len(USER_TURNS)]}")
        target = next(iter(current.arguments.values()), "")
        tool_call = json.dumps({"name": current.tool, "arguments": current.arguments})
        parts.append(
            f"<|assistant|>\nSure, I will look that up. Checking {target} with {current.tool} now."
            f"\n<tool_call>{tool_call}</tool_call>"
        )
        if step is not None:
            parts.append(f"<|tool|>\n{step.text}")
    return parts


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of `a` and `b`."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def prefix_share(prompts: Sequence[str]) -> float:
    """The mean share of each prompt that repeats the one before it from its start (a stable prefix)."""
    shares = [common_prefix(a, b) / len(b) for a, b in itertools.pairwise(prompts)]
    return sum(shares) / len(shares)
