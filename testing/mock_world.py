"""A rule-based stand-in for a perfect simulator of the bundled `mock` world.

It reads the call and the state from the simulator's own prompt and answers as a
flawless model would. Tests, demos and benchmarks use it where they need a correct
simulator without a model: `FunctionBackend(mock_world_answer)`.
"""

from __future__ import annotations

import json
from typing import Any

from simia.sim.backends import CompletionRequest

__all__ = ["message_text", "mock_world_answer", "parse_simulator_prompt"]


def message_text(content: Any) -> str:
    """A message's content as text: a string as it is, content blocks (Anthropic's, OpenAI's parts) joined."""
    if isinstance(content, list):
        return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return str(content)


def parse_simulator_prompt(prompt: str | list[Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(tool, arguments, state view) from the user message of a simulator prompt (its text, or its content
    blocks as an Anthropic request carries them)."""
    prompt = message_text(prompt)
    state: dict[str, Any] = json.loads(prompt.split("Current state", 1)[1].split("\n", 2)[1])
    tool = prompt.split("Call: ", 1)[1].split("\n", 1)[0]
    arguments: dict[str, Any] = json.loads(prompt.split("Arguments: ", 1)[1].split("\n", 1)[0])
    return tool, arguments, state


def _ok(output: dict[str, Any], patch: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"is_error": False, "error_code": None, "message": "ok", "output": output, "state_patch": patch or []}


def mock_world_answer(request: CompletionRequest | dict[str, Any]) -> dict[str, Any]:
    """Answer one simulator request of the `mock` world (a `CompletionRequest`, or an OpenAI or Anthropic request
    body: the call is in the first user message)."""
    messages = request.messages if isinstance(request, CompletionRequest) else request["messages"]
    prompt = next(m["content"] for m in messages if m["role"] == "user")
    tool, args, state = parse_simulator_prompt(prompt)
    items = state["items"]
    if tool == "list_items":
        return _ok({"items": [{"name": k, "qty": v["qty"]} for k, v in items.items()]})
    name = args.get("name")
    if name not in items:
        return {
            "is_error": True,
            "error_code": "item_not_found",
            "message": f"No item named {name}.",
            "output": None,
            "state_patch": [],
        }
    if tool == "get_item":
        return _ok({"name": name, "qty": items[name]["qty"]})
    patch = [{"op": "replace", "path": f"/items/{name}/qty", "value": args["qty"]}]
    return _ok({"name": name, "qty": args["qty"]}, patch)
