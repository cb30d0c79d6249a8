"""The agent's system prompt: one text for rollouts, SFT exports, GRPO and synthesis, so a policy is trained
on the prompt it is run with."""

from __future__ import annotations

from collections.abc import Sequence

from simia.sim.tool_views import ToolLike, tool_card

__all__ = ["ANSWER_FORMAT", "agent_system_prompt"]

ANSWER_FORMAT = (
    '# Answer format\nOne JSON object: {"message": text for the user, "tool_calls": [{"name", "arguments"}]}. '
    "Call tools when you need information or must act; answer with an empty tool_calls list to reply to the user."
)


def agent_system_prompt(policy: str, tools: Sequence[ToolLike] | None = None) -> str:
    """The system prompt of a tool-using agent under `policy`.

    Args:
        policy: the world's policy text.
        tools: for models without native tool calling (the structured action), the tools to list as
            cards with the answer format; None when the provider or chat template receives the tools
            itself (native tool calling, SFT and GRPO data).
    """
    intro = (
        "You are a customer service agent. Help the user by calling tools; never invent facts that the tools did "
        "not return. Follow the policy.\n\n"
        f"# Policy\n{policy or '(none)'}"
    )
    if tools is None:
        return intro
    cards = "\n".join(tool_card(t) for t in tools)
    return f"{intro}\n\n# Tools\n{cards}\n\n{ANSWER_FORMAT}"
