"""The user simulator: an LLM playing the user of a task, from its instruction, hidden facts and persona.

It plays a persona (`simia.sim.world.personas`: cooperative by default, terse, confused, impatient, adversarial),
states its request, reveals `user_hidden` facts only when asked, and ends the conversation (`done: true`) when
the goal is met or clearly impossible; `mark` names the persona on the user messages of the transcript handed
to the judge, which checks that the user kept its rules.
"""

from __future__ import annotations

from typing import Any

from simia.sim.backends import Backend, CompletionRequest, Usage
from simia.sim.world import USER_RULES, mark_persona
from simia.sim.world import persona as persona_of

__all__ = ["UserSimulator"]

SCHEMA = {
    "type": "object",
    "properties": {"message": {"type": "string"}, "done": {"type": "boolean"}},
    "required": ["message", "done"],
}


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
    ) -> None:
        self.persona = played = persona_of(persona)
        self.backend = backend
        self.instruction = instruction
        self.hidden = hidden
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.usage = Usage()
        self._pending = Usage()
        hidden_text = hidden or "(none)"
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
                    '# Answer format\nOne JSON object {"message": what you say, "done": true when your goal is met or '
                    "clearly impossible, else false}."
                ),
            }
        ]

    async def _say(self, prompt: str) -> tuple[str, bool]:
        self.messages.append({"role": "user", "content": prompt})
        completion = await self.backend.complete(
            CompletionRequest(
                messages=self.messages,
                schema=SCHEMA,
                schema_name="user_turn",
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                seed=None if self.seed is None else self.seed * 1_000 + len(self.messages),
            )
        )
        self.usage = self.usage + completion.usage
        self._pending = self._pending + completion.usage
        message = str(completion.data.get("message") or "")
        self.messages.append({"role": "assistant", "content": message})
        return message, bool(completion.data.get("done"))

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
