"""simia-env-client: drive a simia server's episodes from a trainer's own environment, with httpx alone.

A trainer (verl, SkyRL, ART, verifiers, ...) pins its own `mcp` and `openai`, so it cannot import simia; this
package speaks simia's HTTP API and the episodes' MCP endpoints (stateless JSON-RPC, protocol 2026-07-28) itself:

    from simia_env_client import EnvClient, Rollout

    with EnvClient("http://127.0.0.1:8765") as client:
        world = client.world("mock")                       # policy, tools (MCP shape), tasks
        episode = client.create("mock", task="restock_milk", seed=1)
        result = client.call_tool(episode, "set_quantity", {"name": "milk", "qty": 4})
        ended = client.end(episode.id, transcript=[...])   # OpenAI chat messages of the policy
        ended.training_reward                              # 1.0 / 0.0, or None: mask the sample

        rollout = Rollout.start(client, world, "restock_milk")   # or drive it turn by turn from model text
        rollout.act('<tool_call>{"name": "get_item", "arguments": {"name": "milk"}}</tool_call>')

`AsyncEnvClient` and `AsyncRollout` are the same, awaited. A tool call resent after a lost answer carries the same
JSON-RPC id, so simia applies it once; a failed tool call is a `ToolResult` with `is_error`, never an exception.
Errors: `_errors.py` draws the tree.
"""

from ._client import AsyncEnvClient, EnvClient
from ._datasets import select_tasks, write_rows
from ._errors import ApiError, McpError, ServerUnreachable, SimiaEnvError
from ._mcp import PROTOCOL_VERSION
from ._prompts import agent_system_prompt, openai_tools, task_messages, tools_prompt
from ._rollout import AsyncRollout, Rollout, Turn
from ._wire import Ended, Episode, Task, ToolResult, World, training_reward
from .parsing import FORMAT_HINT, ParsedTurn, Problem, ToolCall, parse_openai_message, parse_tool_calls

__all__ = [
    "FORMAT_HINT",
    "PROTOCOL_VERSION",
    "ApiError",
    "AsyncEnvClient",
    "AsyncRollout",
    "Ended",
    "EnvClient",
    "Episode",
    "McpError",
    "ParsedTurn",
    "Problem",
    "Rollout",
    "ServerUnreachable",
    "SimiaEnvError",
    "Task",
    "ToolCall",
    "ToolResult",
    "Turn",
    "World",
    "agent_system_prompt",
    "openai_tools",
    "parse_openai_message",
    "parse_tool_calls",
    "select_tasks",
    "task_messages",
    "tools_prompt",
    "training_reward",
    "write_rows",
]
__version__ = "0.1.0"
