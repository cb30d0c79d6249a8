"""The user simulator: an LLM playing the user of a task, from its instruction, hidden facts and persona.

It plays a persona (`simia.sim.world.personas`: cooperative by default, terse, confused, impatient, adversarial),
states its request, reveals `user_hidden` facts only when asked, and ends the conversation (`done: true`) when
the goal is met or clearly impossible; `mark` names the persona on the user messages of the transcript handed
to the judge, which checks that the user kept its rules.

In a dual-control world (the world's `user_tools`: tau2-bench's telecom, where the user toggles airplane mode on
their own phone) `use_tools` gives it those tools and a way to call them (the episode's `user_mcp_url`): a turn may
then call them, read their results and call again (at most `max_tool_rounds` times) before it answers the agent.
Its calls are the episode's events (`side: user`); they stay out of the agent's transcript.

A task with a reference (its seed conversation, Simia-RL) gives the user simulator that conversation's user turns
(`reference_turns`, the wire's `TaskInfo.user_turns`): what the seed's user said, to say again in its own words.
Only those: the reference's calls and results hold the answers, and the harness that runs this simulator runs the
agent too.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from simia.sim.backends import Backend, CompletionRequest, Usage
from simia.sim.backends.actions import action_schema
from simia.sim.world import USER_RULES, ToolLike, mark_persona, tool_card
from simia.sim.world import persona as persona_of

__all__ = ["UserSimulator"]

SCHEMA_PROPERTIES: dict[str, Any] = {"message": {"type": "string"}, "done": {"type": "boolean"}}
SCHEMA: dict[str, Any] = {"type": "object", "properties": SCHEMA_PROPERTIES, "required": ["message", "done"]}

UserToolCaller = Callable[[str, dict[str, Any]], Awaitable[str]]
"""Calls one of the user's own tools (name, arguments) and gives its result text."""


class UserSimulator:
    """Plays the user; one instance per episode (it keeps the conversation).

    Raises:
        ValueError: `persona` names no persona (the message names those that do).
    """

    def __init__(
        self,
        backend: Backend,
        *,
        instruction: str,
        hidden: str | None = None,
        max_tokens: int = 256,
        temperature: float = 0.7,
        seed: int | None = None,
        persona: str | None = None,
        max_tool_rounds: int = 5,
        reference_turns: Sequence[str] = (),
    ) -> None:
        self.persona = played = persona_of(persona)
        self.max_tool_rounds = max_tool_rounds
        self.tools: list[ToolLike] = []
        self._call: UserToolCaller | None = None
        self.tool_calls = 0
        self.backend = backend
        self.instruction = instruction
        self.hidden = hidden
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.usage = Usage()
        self._pending = Usage()
        hidden_text = hidden or "(none)"
        said = "".join(f"\n{i}. {turn}" for i, turn in enumerate(reference_turns, start=1))
        reference = (
            "# What you said in the original conversation (in order: say the same things, in your own words, "
            f"when the conversation reaches them){said}\n"
            if said
            else ""
        )
        rules = "\n".join(f"- {rule}" for rule in (*USER_RULES, *played.rules))
        self.messages: list[dict[str, Any]] = [
            {
                "role": "system",
                "content": (
                    "You play a customer talking to a customer-service agent. Stay in character; write short, natural "
                    "messages. Never say you are an AI or a simulator.\n"
                    f"# Your persona\n{played.instructions}\n"
                    f"# Your rules (never break them)\n{rules}\n"
                    f"# Your goal\n{instruction}\n"
                    f"# Facts only you know (reveal one only when the agent asks for it)\n{hidden_text}\n"
                    f"{reference}"
                    '# Answer format\nOne JSON object {"message": what you say, "done": true when your goal is met or '
                    "clearly impossible, else false}."
                ),
            }
        ]

    def use_tools(self, tools: Sequence[ToolLike], call: UserToolCaller) -> None:
        """Give the user its own tools (a dual-control world's) and how to call them."""
        self.tools = list(tools)
        self._call = call
        if self.tools:
            cards = "\n".join(tool_card(t) for t in self.tools)
            self.messages[0]["content"] += (
                f"\n# Your own tools (on your device; the agent cannot use them)\n{cards}\n"
                "When the agent asks you to do or check something on your device, call the tool: add "
                '"tool_calls": [{"name", "arguments"}] to your answer; you get the results, then answer again. '
                "Ground what you tell the agent on those results; never make them up."
            )

    async def _say(self, prompt: str) -> tuple[str, bool]:
        self.messages.append({"role": "user", "content": prompt})
        for _ in range(self.max_tool_rounds + 1):
            data = await self._turn()
            calls = [c for c in data.get("tool_calls") or [] if isinstance(c, dict)] if self._call else []
            message = str(data.get("message") or "")
            self.messages.append({"role": "assistant", "content": json.dumps(data, ensure_ascii=False)})
            if not calls or self._call is None:
                self.messages[-1] = {"role": "assistant", "content": message}
                return message, bool(data.get("done"))
            results = []
            for call in calls:
                name, arguments = str(call.get("name")), dict(call.get("arguments") or {})
                self.tool_calls += 1
                results.append(f"Result of {name}: {await self._call(name, arguments)}")
            self.messages.append({"role": "user", "content": "\n".join(results)})
        self.messages.append({"role": "user", "content": "No more tool calls now: answer the agent."})
        data = await self._turn(with_tools=False)
        message = str(data.get("message") or "")
        self.messages.append({"role": "assistant", "content": message})
        return message, bool(data.get("done"))

    async def _turn(self, *, with_tools: bool = True) -> dict[str, Any]:
        schema: dict[str, Any] = SCHEMA
        if self.tools and with_tools:
            calls = action_schema(self.tools)["properties"]["tool_calls"]
            schema = {**SCHEMA, "properties": {**SCHEMA_PROPERTIES, "tool_calls": calls}}
        completion = await self.backend.complete(
            CompletionRequest(
                messages=self.messages,
                schema=schema,
                schema_name="user_turn",
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                seed=None if self.seed is None else self.seed * 1_000 + len(self.messages),
            )
        )
        self.usage = self.usage + completion.usage
        self._pending = self._pending + completion.usage
        data: dict[str, Any] = completion.data
        return data

    async def start(self, instruction: str) -> str:
        message, _ = await self._say("The agent greets you. Write your first message.")
        self._pending = Usage()
        return message or instruction

    async def reply(self, agent_message: str) -> tuple[str, bool]:
        return await self._say(f"The agent says: {agent_message}")

    def mark(self, transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`transcript` with its user messages naming this simulator's persona, for the judge (after the run:
        the agent never reads the marks)."""
        return mark_persona(transcript, self.persona.name)

    def take_usage(self) -> Usage:
        usage, self._pending = self._pending, Usage()
        return usage
