"""The sandbox the docs' commands run in, and the fake model that plays every role they need.

`Sandbox` runs a command as a page shows it (a subprocess in a temp dir); `fake_openai` is a `FakeProvider`
whose `answer` plays the simulator, the agent, the user, the judge and the synthesizer. What every test
changes in a command, and why (each test says what else it changes):

- `simia` runs as `python -m simia.cli` and `python` as this interpreter (the `simia` console script may
  belong to another checkout);
- `openai:MODEL` specs stay as written: the subprocess gets `OPENAI_API_KEY=test` and `OPENAI_BASE_URL`
  (the openai SDK's own setting: every OpenAI client these commands make reads it when given no base URL)
  pointing at the fake provider;
- `simia serve` gets `--port P` (a free port: 8765 may be taken) and later commands use its URL instead of
  http://127.0.0.1:8765.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import sys
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from doc_commands import DOC_URL, shown  # type: ignore[import-not-found]
from simia.server.inprocess import free_port
from simia.testing import FakeProvider, mock_world_answer, parse_simulator_prompt
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def agent_turn(conversation: list[tuple[str, str]]) -> dict[str, Any]:
    """The agent on the mock pantry, from (role, text) turns: the request's tool call, then what it returned.

    "Set the milk to 4 litres." -> set_quantity, "set the apples to 6 and the milk to 2" -> one set_quantity
    each, "How many apples ... top them up to 5" -> set_quantity, "How many apples are left?" -> get_item; a tool
    result is
    reported as it came back, so a wrong call never passes the task's rule checks.
    """
    role, text = conversation[-1]
    if role == "tool":
        return {"message": f"The pantry answered: {text}", "tool_calls": []}
    if sets := re.findall(r"\b(?:set|and) (?:the )?(\w+?)s? to (\d+)", text, flags=re.I):
        return {
            "message": "",
            "tool_calls": [
                {"name": "set_quantity", "arguments": {"name": name, "qty": int(qty)}} for name, qty in sets
            ],
        }
    if found := re.search(r"\bhow many (\w+?)s?\b.*\btop them up to (\d+)", text, flags=re.I | re.S):
        return {
            "message": "",
            "tool_calls": [{"name": "set_quantity", "arguments": {"name": found[1], "qty": int(found[2])}}],
        }
    if found := re.search(r"\bhow many (\w+?)s? ", text, flags=re.I):
        return {"message": "", "tool_calls": [{"name": "get_item", "arguments": {"name": found[1]}}]}
    return {"message": "Is there anything else I can do?", "tool_calls": []}


def user_turn(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The user simulator: states its goal (from its system prompt) first, then is done."""
    if messages[-1]["content"].startswith("The agent greets you"):
        goal = messages[0]["content"].split("# Your goal\n", 1)[1].split("\n", 1)[0]
        return {"message": goal, "done": False}
    return {"message": "Thanks, that is all.", "done": True}


def judge_turn(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The judge: reward 1 when the server recorded at least one tool call (the rule checks do the rest)."""
    prompt = messages[-1]["content"]
    block = re.search(r"^<<<DATA (\w+)>>>\n(.*)\n<<<END DATA \1>>>$", prompt, flags=re.M | re.S)
    assert block is not None, "the judge prompt has no data section"
    data = json.loads(block[2])
    calls = data["recorded_tool_calls"]
    rubric = prompt.split("# Rubric\n", 1)[1].split("\n\n#", 1)[0]
    evidence = f"{len(calls)} recorded call(s): " + ", ".join(c["tool"] for c in calls)
    return {
        "criteria": [{"criterion": rubric, "passed": bool(calls), "evidence": evidence}],
        "reasoning": "The agent used the tools." if calls else "The agent made no tool call.",
        "reward": int(bool(calls)),
    }


def process_turn(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The process judge: a step is useful when it made a call that did not fail, else neutral."""
    prompt = messages[-1]["content"]
    block = re.search(r"^<<<DATA (\w+)>>>\n(.*)\n<<<END DATA \1>>>$", prompt, flags=re.M | re.S)
    assert block is not None, "the process judge prompt has no data section"
    steps = json.loads(block[2])["agent_steps"]
    return {
        "steps": [
            {
                "step": s["step"],
                "score": "useful" if s["tool_calls"] and not any(c["is_error"] for c in s["tool_calls"]) else "neutral",
                "reason": f"{len(s['tool_calls'])} recorded call(s)",
            }
            for s in steps
        ]
    }


RETAIL_ORDERS = [
    ("#W1001", "mia.lee@example.com", "mia_lee_1021", "pending"),
    ("#W1002", "omar.haddad@example.com", "omar_haddad_3310", "delivered"),
    ("#W1003", "lena.kraus@example.com", "lena_kraus_7788", "delivered"),
    ("#W1004", "mia.lee@example.com", "mia_lee_1021", "pending"),
    ("#W1005", "omar.haddad@example.com", "omar_haddad_3310", "pending"),
]


def synth_trajectory(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Simia-SFT's amplification in the retail world: variation i asks for the status of order i mod 5, so
    the 5 orders give 5 distinct trajectories and every later variation repeats one (a near-duplicate)."""
    asked = re.search(r"\(variation (\d+) of \d+\)", messages[-1]["content"])
    assert asked is not None, "the amplification prompt names no variation"
    variation = int(asked[1])
    order, email, user, status = RETAIL_ORDERS[(variation - 1) % len(RETAIL_ORDERS)]
    return {
        "messages": [
            {"role": "user", "content": f"Hi, what is the status of my order {order}? My email is {email}."},
            {
                "role": "assistant",
                "content": "Let me find your account.",
                "tool_calls": [{"name": "find_user_by_email", "arguments": {"email": email}}],
            },
            {"role": "tool", "content": json.dumps({"user_id": user})},
            {
                "role": "assistant",
                "content": "Now the order.",
                "tool_calls": [{"name": "get_order_details", "arguments": {"order_id": order}}],
            },
            {"role": "tool", "content": json.dumps({"order_id": order, "user_id": user, "status": status})},
            {"role": "assistant", "content": f"Your order {order} is {status}."},
        ]
    }


def simulate(body: dict[str, Any]) -> dict[str, Any]:
    """The simulator: flawless on the mock world (`mock_world_answer`) and on the retail world's
    find_user_by_email; any other call gets a plain error."""
    if "# World: Mock pantry" in body["messages"][0]["content"]:
        return mock_world_answer(body)
    tool, arguments, state = parse_simulator_prompt(body["messages"][1]["content"])
    if tool == "find_user_by_email":
        found = [uid for uid, user in state["users"].items() if user.get("email") == arguments["email"]]
        if found:
            return {
                "is_error": False,
                "error_code": None,
                "message": "ok",
                "output": {"user_id": found[0]},
                "state_patch": [],
            }
        return {
            "is_error": True,
            "error_code": "user_not_found",
            "message": "No account has this email.",
            "output": None,
            "state_patch": [],
        }
    return {
        "is_error": True,
        "error_code": None,
        "message": f"{tool} is not simulated here",
        "output": None,
        "state_patch": [],
    }


SCHEMA_ROLES = {
    "simulate_tool_call": "simulator",
    "verdict": "judge",
    "step_scores": "process judge",
    "user_turn": "user",
    "agent_action": "agent (structured action)",
    "seed_check": "synth pre-filter",
    "trajectory": "synth",
}


def role(body: dict[str, Any]) -> str:
    """Who sent a request: structured answers name their schema (`response_format.json_schema.name`); the
    agent's native tool calling sends `tools` (chat completions) or `input` (the Responses API)."""
    name = (body.get("response_format") or {}).get("json_schema", {}).get("name")
    if name is None:
        return "agent" if body.get("tools") or "input" in body else "unknown"
    return SCHEMA_ROLES.get(name, f"unknown ({name})")


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """The fake provider's answer to a chat-completions request, by the role that sent it."""
    messages: list[dict[str, Any]] = body["messages"]
    match role(body):
        case "agent":
            return agent_turn([(m["role"], str(m.get("content") or "")) for m in messages])
        case "agent (structured action)":  # tool results come back as a user turn "Result of ..."
            text = str(messages[-1]["content"])
            return agent_turn([("tool" if text.startswith("Result of ") else "user", text)])
        case "simulator":
            return simulate(body)
        case "user":
            return user_turn(messages)
        case "judge":
            return judge_turn(messages)
        case "process judge":
            return process_turn(messages)
        case "synth pre-filter":
            return {"complete": True, "logical": True, "format_ok": True, "reason": "a complete cancellation"}
        case "synth":
            return synth_trajectory(messages)
        case unknown:
            raise ValueError(f"the fake provider has no answer for a request from {unknown}")


async def responses_api(fake: FakeProvider, request: Request) -> JSONResponse:
    """OpenAI's Responses API (pydantic-ai's `openai:` models use it): the agent's turn as a function call or
    a message."""
    body = await request.json()
    fake.requests.append(body)
    turns = []
    for item in body["input"]:
        if item.get("type") == "function_call_output":
            turns.append(("tool", str(item["output"])))
        elif item.get("role") == "user":
            content = item["content"]
            turns.append(("user", content if isinstance(content, str) else " ".join(c["text"] for c in content)))
    turn = agent_turn(turns)
    output: list[dict[str, Any]] = [
        {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": f"call_{len(fake.requests)}_{i}",
            "name": call["name"],
            "arguments": json.dumps(call["arguments"]),
            "status": "completed",
        }
        for i, call in enumerate(turn["tool_calls"])
    ]
    if not output:
        output = [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn["message"], "annotations": []}],
            }
        ]
    return JSONResponse(
        {
            "id": f"resp_{len(fake.requests)}",
            "object": "response",
            "created_at": 0,
            "model": body["model"],
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 100,
                "output_tokens": 20,
                "total_tokens": 120,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }
    )


@contextlib.asynccontextmanager
async def fake_openai() -> AsyncIterator[FakeProvider]:
    """A FakeProvider answering every role (`answer`), with the Responses API added."""
    fake = FakeProvider(answer)

    async def responses(request: Request) -> JSONResponse:
        return await responses_api(fake, request)

    fake.app.router.routes.append(Route("/v1/responses", responses, methods=["POST"]))
    async with fake.running():
        yield fake


@dataclass
class Done:
    """A finished command: its exit status and output."""

    code: int
    out: str
    err: str

    def __str__(self) -> str:  # what a failed assertion shows
        return f"exit {self.code}\n--- stdout\n{self.out[-4000:]}\n--- stderr\n{self.err[-4000:]}"


@dataclass
class Sandbox:
    """A temp dir where the docs' commands run, with the environment that points openai: specs at the fake."""

    cwd: Path
    env: dict[str, str]
    fake: FakeProvider
    server: str = DOC_URL

    def roles(self) -> Counter[str]:
        """How many requests the fake provider answered, by the role that sent them."""
        return Counter(role(body) for body in self.fake.requests)

    def argv(self, text: str, replace: Mapping[str, str]) -> list[str]:
        """The docs' command `text` with `replace` applied (each must apply), the server's URL for
        127.0.0.1:8765, and this interpreter for `simia` and `python`."""
        for old, new in replace.items():
            assert old in text, f"`{old}` is no longer in `{text}`"
            text = text.replace(old, new)
        words = shlex.split(text.replace(DOC_URL, self.server))
        if words[0] == "simia":
            return [sys.executable, "-m", "simia.cli", *words[1:]]
        if words[0] == "python":
            return [sys.executable, *words[1:]]
        return words

    async def run(self, text: str, *, replace: Mapping[str, str] | None = None, timeout: float = 120) -> Done:
        """Run the docs' command `text` to the end (killed after `timeout` seconds)."""
        argv = self.argv(shown(text).text, replace or {})
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=self.cwd, env=self.env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            out, err = await proc.communicate()
            pytest.fail(f"`{shlex.join(argv)}` ran past {timeout} s\n{Done(-9, out.decode(), err.decode())}")
        return Done(proc.returncode if proc.returncode is not None else -1, out.decode(), err.decode())

    @contextlib.asynccontextmanager
    async def serve(
        self, text: str, *, replace: Mapping[str, str] | None = None, timeout: float = 60
    ) -> AsyncIterator[list[str]]:
        """Run the docs' `simia serve` command `text` (with `replace` applied) in the background on a free
        port until it answers /healthz; later commands use its URL. Yields the lines it printed."""
        port = free_port()
        argv = [*self.argv(shown(text).text, replace or {}), "--port", str(port)]
        log_path = self.cwd / f"serve-{port}.log"
        log = log_path.open("wb")
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=self.cwd, env=self.env, stdout=asyncio.subprocess.PIPE, stderr=log
        )
        assert proc.stdout is not None
        lines: list[str] = []
        drain: asyncio.Task[bytes] | None = None
        try:
            async with asyncio.timeout(timeout):
                while not lines or not lines[-1].startswith("  auth:"):
                    line = await proc.stdout.readline()
                    assert line, f"`{shlex.join(argv)}` stopped:\n{log_path.read_text()}"
                    lines.append(line.decode().rstrip("\n"))
                drain = asyncio.create_task(proc.stdout.read())  # nothing more is expected; never block it
                url = f"http://127.0.0.1:{port}"
                async with httpx.AsyncClient(base_url=url) as http:
                    while True:
                        with contextlib.suppress(httpx.TransportError):
                            if (await http.get("/healthz")).status_code == 200:
                                break
                        await asyncio.sleep(0.05)
            self.server = url
            yield lines
        finally:
            self.server = DOC_URL
            if proc.returncode is None:
                proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), 15)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
            if drain is not None:
                await drain
            log.close()


def jsonl(path: Path) -> list[dict[str, Any]]:
    """The objects of a JSONL file a command wrote."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
