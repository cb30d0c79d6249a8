"""What the fake provider answers when nothing is scripted: every kind of request simia sends, in each mode.

A request's kind is read from what it carries: the name of its JSON schema (`simulate_tool_call`, `verdict`,
`user_turn`, `world_state`, ...) or, without one, its `tools` (an agent's native tool-calling turn). Each
`--answer` mode answers every kind with an answer simia accepts, never an error:

    mock    the `mock` world played flawlessly (`mock_world_answer`), a pantry agent that does what the user
            asks ("set the milk to 4"), a user who states their goal then is done, a judge that passes every
            criterion (the task's rule checks decide the reward), a process judge that scores every step, and
            bootstrap drafts that pass its checks; any other request: an instance of its schema
    schema  an instance of each request's schema (`schema_answer`), but bootstrap drafts as in `mock` (an
            instance of "any object" is no state schema) and a final message for a native tool turn
    ok      `{"ok": true}` where the request's schema takes it (or it has none), else as `schema`
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from simia.sim.schema import validate_instance

from .mock_world import message_text, mock_world_answer
from .schema_instances import request_schema, schema_answer

__all__ = ["ANSWER_MODES", "offline_answer", "request_kind"]

ANSWER_MODES = ("mock", "schema", "ok")

_KINDS = {
    "simulate_tool_call": "simulator",
    "agent_action": "agent",
    "user_turn": "user",
    "verdict": "judge",
    "step_scores": "process judge",
    "step_grade": "step grader",
    "world_state": "bootstrap state",
    "world_tasks": "bootstrap tasks",
    "world_groundings": "bootstrap groundings",
    "seed_check": "synth pre-filter",
    "trajectory": "synth",
}
_DATA = re.compile(r"^<<<DATA (\w+)>>>\n(.*)\n<<<END DATA \1>>>$", flags=re.M | re.S)
_SET = re.compile(r"\b(?:set|and) (?:the )?(\w+?)s? to (\d+)", flags=re.I)


def schema_name(body: dict[str, Any]) -> str | None:
    """The name of the request's schema: OpenAI's `response_format.json_schema.name`, or the tool an Anthropic
    request forces."""
    spec = (body.get("response_format") or {}).get("json_schema")
    if isinstance(spec, dict) and isinstance(spec.get("name"), str):
        return str(spec["name"])
    choice = body.get("tool_choice")
    return str(choice["name"]) if isinstance(choice, dict) and isinstance(choice.get("name"), str) else None


def request_kind(body: dict[str, Any]) -> str:
    """Who sent the request: `simulator`, `agent`, `user`, `judge`, `process judge`, `bootstrap state|tasks|
    groundings`, `synth`, ... (`other (NAME)` for a schema simia does not send, `other` without a schema)."""
    name = schema_name(body)
    if name is None:
        return "agent" if body.get("tools") else "other"
    return _KINDS.get(name, f"other ({name})")


def offline_answer(mode: str = "mock", seed: int = 0) -> Callable[[dict[str, Any]], Any]:
    """The fake provider's answer function for `--answer MODE` (see the module docstring).

    Raises:
        ValueError: an unknown mode.
    """
    if mode not in ANSWER_MODES:
        raise ValueError(f"unknown answer mode {mode!r}; use one of {', '.join(ANSWER_MODES)}")
    instance = schema_answer(seed)

    def answer(body: dict[str, Any]) -> Any:
        kind = request_kind(body)
        if kind.startswith("bootstrap"):
            return _bootstrap(kind, body)
        if mode == "ok":
            schema = request_schema(body)
            if schema is None or not validate_instance(schema, {"ok": True}):
                return {"ok": True}
        if mode == "mock":
            found = _mock(kind, body)
            if found is not None:
                return found
        if kind == "agent" and request_schema(body) is None:  # a native tool turn: a final answer, no call
            return {"message": "I have nothing more to do.", "tool_calls": []}
        return instance(body)

    def never_failing(body: dict[str, Any]) -> Any:
        try:
            return answer(body)
        except Exception:  # a prompt this fake misreads: an instance of the schema is still an answer
            try:
                return instance(body)
            except Exception:
                return {}

    return never_failing


def _texts(body: dict[str, Any]) -> list[tuple[str, str]]:
    """The request's messages as (role, text): an Anthropic system prompt first, tool results as `tool`."""
    turns = [("system", message_text(body["system"]))] if body.get("system") else []
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            turns.append(("tool", json.dumps(content)))
        else:
            turns.append((str(message.get("role")), message_text(content or "")))
    return turns


def _mock(kind: str, body: dict[str, Any]) -> Any:
    """The `mock` mode's answer to a request of `kind`; None: answer it with an instance of its schema."""
    turns = _texts(body)
    if kind == "simulator":
        try:
            return mock_world_answer(body)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):  # another world's call
            return None
    if kind == "agent":
        return _pantry_agent(turns, json.dumps(body.get("tools") or body.get("response_format") or {}))
    if kind == "user" and turns:
        if turns[-1][1].startswith("The agent greets you"):
            goal = turns[0][1].split("# Your goal\n", 1)[-1].split("\n", 1)[0]
            return {"message": goal, "done": False}
        return {"message": "Thanks, that is all.", "done": True}
    if kind == "judge":
        return {
            "criteria": [{"criterion": "the rubric", "passed": True, "evidence": "the fake judge passes every one"}],
            "reasoning": "The fake judge passes every criterion: the task's rule checks decide the reward.",
            "reward": 1,
            "failed_by": "none",
            "failure": "",
        }
    if kind == "process judge":
        steps = _data(turns).get("agent_steps")
        if isinstance(steps, list):
            scored = [{"step": i, "score": "neutral", "reason": "the fake judge"} for i in range(1, len(steps) + 1)]
            return {"steps": scored}
    return None


def _pantry_agent(turns: list[tuple[str, str]], tools: str) -> dict[str, Any]:
    """An agent that does what the user asks of a pantry ("set the milk to 4"), then reports the result."""
    role, text = turns[-1] if turns else ("user", "")
    if role == "tool" or text.startswith("Result of "):
        return {"message": f"Done: {text[:500]}", "tool_calls": []}
    sets = _SET.findall(text) if "set_quantity" in tools else []
    if sets:
        calls = [{"name": "set_quantity", "arguments": {"name": name, "qty": int(qty)}} for name, qty in sets]
        return {"message": "", "tool_calls": calls}
    return {"message": "How can I help you with the pantry?", "tool_calls": []}


def _data(turns: list[tuple[str, str]]) -> dict[str, Any]:
    """The data section a judge's prompt carries (`simia.sim.judging.view.data_block`), parsed ({} without one)."""
    for _, text in reversed(turns):
        found = _DATA.search(text)
        if found:
            try:
                data = json.loads(found[2])
            except json.JSONDecodeError:
                return {}
            return data if isinstance(data, dict) else {}
    return {}


def _drafted_tasks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tasks this conversation drafted before (its assistant turns), so a new draft takes new ids."""
    tasks: list[dict[str, Any]] = []
    for message in body.get("messages") or []:
        if message.get("role") == "assistant":
            try:
                tasks += json.loads(message_text(message.get("content") or "")).get("tasks") or []
            except (json.JSONDecodeError, AttributeError):
                continue
    return [t for t in tasks if isinstance(t, dict)]


def _bootstrap(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """Bootstrap drafts its checks accept: one record per collection the prompt names (else one `records`
    collection), and a task whose one rule (`/fake_task_done`) fails until an agent makes it hold."""
    prompt = "\n".join(text for _, text in _texts(body))
    if kind == "bootstrap state":
        named = re.search(r"The state must hold the collections (.+?), each a JSON object", prompt)
        collections = re.findall(r"`([^`]+)`", named[1]) if named else ["records"]
        state = {c: {f"{c}_1": {"id": f"{c}_1", "name": f"first of {c}"}} for c in collections}
        return {"state_schema": {"type": "object"}, "state": state}
    if kind == "bootstrap tasks":
        wanted = re.search(r"Write (\d+) different tasks", prompt)
        used = re.search(r"Ids already used: (.*)\.", prompt)
        taken = set((used[1] if used else "").split(", "))
        taken |= {str(t.get("id")) for t in _drafted_tasks(body)}
        ids = (f"fake_task_{n}" for n in range(1, 100_000) if f"fake_task_{n}" not in taken)
        task = {
            "instruction": "Do what the tools allow, then say you are done.",
            "rubric": "The agent used the tools and said it was done.",
            "expected_state": {"/fake_task_done": True},
        }
        return {"tasks": [{"id": next(ids), **task} for _ in range(int(wanted[1]) if wanted else 1)]}
    return {"groundings": []}
