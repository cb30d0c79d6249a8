"""What a policy is shown: simia's agent system prompt, the tools (as OpenAI tools for a chat template, or as a
Hermes `<tools>` block for a template that cannot render them) and one prompt per task of a world.

`agent_system_prompt` is simia's (`simia.clients.prompt.agent_system_prompt`, restated because this package cannot
import simia; a test holds the two equal), so a policy trained through an adapter sees the prompt simia's own
rollouts, exports and GRPO use.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ._wire import Task, World

__all__ = ["agent_system_prompt", "openai_tools", "task_messages", "tools_prompt"]


def agent_system_prompt(policy: str) -> str:
    """The system prompt of a tool-using agent under `policy` (the tools reach the model through its chat
    template, or through `tools_prompt`)."""
    return (
        "You are a customer service agent. Help the user by calling tools; never invent facts that the tools did "
        "not return. Follow the policy.\n\n"
        f"# Policy\n{policy or '(none)'}"
    )


def openai_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """MCP tools (`tools/list`, or a world's `tools`) as OpenAI function tools, for `apply_chat_template(tools=)`
    or a chat-completions request."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": " ".join(str(tool.get("description") or tool.get("title") or tool["name"]).split()),
                "parameters": tool.get("inputSchema") or {"type": "object", "properties": {}},
            },
        }
        for tool in tools
    ]


def tools_prompt(tools: Sequence[dict[str, Any]]) -> str:
    """The tools as the Hermes / Qwen chat templates describe them in the system prompt, with the call format
    `parse_tool_calls` reads, for a model whose template cannot render tools itself."""
    listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in openai_tools(tools))
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{listed}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
        "\n</tool_call>"
    )


def task_messages(world: World, task: Task | str, *, tools_in_prompt: bool = False) -> list[dict[str, str]]:
    """A task's prompt: simia's agent system prompt under the world's policy, and the instruction as the user turn.

    Args:
        tools_in_prompt: append `tools_prompt` to the system prompt (for templates that cannot render tools).
    """
    chosen = world.task(task) if isinstance(task, str) else task
    system = agent_system_prompt(world.policy)
    if tools_in_prompt:
        system = f"{system}\n\n{tools_prompt(world.tools)}"
    return [{"role": "system", "content": system}, {"role": "user", "content": chosen.instruction}]
