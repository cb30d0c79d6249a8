"""The agent's system prompt: one text for rollouts, SFT exports, GRPO and synthesis, so a policy is trained
on the prompt it is run with."""

from __future__ import annotations

from collections.abc import Sequence

from simia.sim.backends.actions import action_instructions
from simia.sim.world import ToolLike

__all__ = ["agent_system_prompt"]


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
    return f"{intro}\n\n{action_instructions(tools)}"
