"""Every shell command README.md shows, run as written: a subprocess in a temp dir, models played by FakeProvider.

The commands are read from README.md itself (the lines of its ```bash blocks and the `$ ` lines of its
plain blocks, continuations joined, comments dropped), so a test runs what the README says today;
`COVERED` names the test of each, and `test_every_readme_command_is_covered` fails on a README command
without one. What every test changes, and why (each test says what else it changes):

- `simia` runs as `python -m simia.cli` and `python` as this interpreter (the `simia` console script may
  belong to another checkout);
- `openai:MODEL` specs stay as written: the subprocess gets `OPENAI_API_KEY=test` and `OPENAI_BASE_URL`
  (the openai SDK's own setting: every OpenAI client these commands make reads it when given no base URL)
  pointing at a `FakeProvider` whose `answer` plays every role: simulator, agent, user, judge, synthesizer;
- `simia serve` gets `--port P` (a free port: 8765 may be taken) and later commands use its URL instead of
  http://127.0.0.1:8765.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import sys
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from mcp import Client, StdioServerParameters
from simia.server.inprocess import free_port
from simia.sim.judging import load_cases
from simia.sim.storage import SCHEMA_VERSION
from simia.testing import FakeProvider, mock_world_answer, parse_simulator_prompt
from simia.training._config import parse_config
from simia.training.grpo import GRPORun
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_URL = "http://127.0.0.1:8765"


@dataclass(frozen=True)
class Command:
    """One command of README.md: its words (continuations joined, comment dropped), whether it ends in `&`,
    and the output lines the README shows under it (`$ ` blocks)."""

    words: tuple[str, ...]
    background: bool = False
    output: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return shlex.join(self.words)


def readme_commands(text: str) -> list[Command]:
    """The shell commands of a README: every line of a ```bash block, and each `$ ` line of a plain block
    with the lines under it as its output."""
    commands: list[Command] = []
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S):
        if lang == "bash":
            pending = ""
            for line in body.splitlines():
                if line.rstrip().endswith("\\"):
                    pending += line.rstrip()[:-1] + " "
                    continue
                words = shlex.split(pending + line, comments=True)
                pending = ""
                if words:
                    background = words[-1] == "&"
                    commands.append(Command(tuple(words[:-1] if background else words), background))
        elif lang == "":
            shown: list[list[str]] = []
            for line in body.splitlines():
                if line.startswith("$ "):
                    shown.append([line[2:]])
                elif shown:
                    shown[-1].append(line)
            commands += [Command(tuple(shlex.split(first)), output=tuple(rest)) for first, *rest in shown]
    return commands


def inline_commands(text: str) -> list[str]:
    """The commands a README names in its prose: code spans outside fenced blocks that start with `simia`,
    `make`, `python`, `pip` or `bash` and a word."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    spans = re.findall(r"`([^`\n]+)`", prose)
    return list(dict.fromkeys(s for s in spans if re.match(r"(simia|make|python|pip|bash) \S", s)))


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))
INLINE = inline_commands(README.read_text(encoding="utf-8"))


def readme(text: str) -> Command:
    """The README's command whose text is `text`, from a block or inline (it must still be there, word for word)."""
    found = [c for c in COMMANDS if c.text == text] + [Command(tuple(shlex.split(s))) for s in INLINE if s == text]
    assert found, f"README.md no longer shows `{text}`: update COVERED and its test"
    return found[0]


SERVE_RUNS_DB = "simia serve --backend openai:gpt-5.4-mini --db runs.db"
ROLLOUT_AGENTS = (
    "simia rollout --server http://127.0.0.1:8765 --world retail --tasks all --agent openai:gpt-5.4-mini "
    "--user openai:gpt-5.4-mini --n 8 --concurrency 16 --max-turns 12 --out runs/"
)
VALIDATE = "simia validate tests/fixtures/broken_worlds/unknown_field"
PYDANTIC_AI = "python examples/pydantic_ai_agent.py http://127.0.0.1:8765 openai:gpt-5.4-mini"
ROLLOUT_TRAINING = (
    "simia rollout --server http://127.0.0.1:8765 --world retail --tasks all --agent openai:gpt-5.4-mini "
    "--user openai:gpt-5.4-mini --n 8 --out runs/"
)
VIEW = "simia view --db runs.db"
SYNTH = "simia synth --world retail --backend openai:gpt-5.4-mini --n 50 --out synth/"
EXPORT = "simia export --db runs.db --format hf --min-reward 1 --out sft-data/"
SFT = "python -m simia.training.sft --dataset sft-data/ --model embedded --max-steps 200 --output-dir ckpt/sft"
GRPO = (
    "python -m simia.training.grpo --server http://127.0.0.1:8765 --world retail --model ckpt/sft "
    "--max-steps 100 --num-generations 4 --output-dir ckpt/grpo"
)
GRPO_USER = (
    "python -m simia.training.grpo --server http://127.0.0.1:8765 --world retail --model ckpt/sft "
    "--user openai:gpt-5.4-mini"
)
PG = "postgresql://simia@127.0.0.1:5432/simia"
PG_COPY_IN = f"simia db copy --from runs.db --to {PG}"
PG_SERVE = f"simia serve --backend openai:gpt-5.4-mini --db {PG} --port 8765"
PG_SERVE_2 = f"simia serve --backend openai:gpt-5.4-mini --db {PG} --port 8766"
PG_MIGRATE = f"simia db migrate --db {PG}"
PG_COPY_OUT = f"simia db copy --from {PG} --to backup.db"
PG_TEST = ("test_two_replicas_share_one_postgres_database_as_the_readme_shows",)

COVERED: dict[str, tuple[str, ...]] = {
    PG_COPY_IN: PG_TEST,
    PG_SERVE: PG_TEST,
    PG_SERVE_2: PG_TEST,
    PG_MIGRATE: PG_TEST,
    PG_COPY_OUT: PG_TEST,
    SERVE_RUNS_DB: (
        "test_serve_prints_its_worlds_and_urls",
        "test_serve_prints_its_worlds_and_urls_column_for_column",
        "test_rollout_runs_every_task_and_writes_results",
        "test_the_training_pipeline_runs_from_rollouts_to_grpo",
    ),
    VALIDATE: ("test_validate_prints_one_line_per_problem",),
    ROLLOUT_AGENTS: ("test_rollout_runs_every_task_and_writes_results",),
    PYDANTIC_AI: ("test_the_pydantic_ai_recipe_runs_on_an_openai_model",),
    ROLLOUT_TRAINING: ("test_the_training_pipeline_runs_from_rollouts_to_grpo",),
    SYNTH: ("test_synth_amplifies_the_seed_and_reports_every_drop",),
    EXPORT: ("test_the_training_pipeline_runs_from_rollouts_to_grpo",),
    SFT: ("test_the_training_pipeline_runs_from_rollouts_to_grpo",),
    GRPO: ("test_the_training_pipeline_runs_from_rollouts_to_grpo",),
    GRPO_USER: ("test_the_training_pipeline_runs_from_rollouts_to_grpo",),
    VIEW: ("test_view_opens_the_runs_database_read_only_and_prints_its_url",),
}
IMPORTS_MCP = "tests/cli/test_import_mcp.py imports the pinned npm server and simia's own over stdio and HTTP"
IMPORTS_OPENAPI = "tests/cli/test_import_openapi.py imports the committed specs (tests/fixtures/openapi)"
BALANCED = "the replicas behind HAProxy: tests/server/test_balancer.py runs them (simia.testing.replicas)"
NOT_RUN = {
    "simia serve --backend openai:gpt-5.4-mini --db postgresql://simia@127.0.0.1:5432/simia --port 8765 "
    "--public-url http://127.0.0.1:8080": BALANCED,
    "simia serve --backend openai:gpt-5.4-mini --db postgresql://simia@127.0.0.1:5432/simia --port 8766 "
    "--public-url http://127.0.0.1:8080": BALANCED,
    "haproxy -f simia-haproxy.cfg": BALANCED + ", with the config README.md shows (checked there)",
    "make demo": "installs a venv and builds llama-cpp-python; tests/test_make.py checks what it runs",
    "make test": "runs this very suite; tests/test_make.py checks what it runs",
    "simia import mcp https://mcp.example.com/mcp --header 'Authorization: Bearer $TOKEN'": "a placeholder server; "
    + IMPORTS_MCP,
    "simia import mcp -- npx -y @modelcontextprotocol/server-everything": "npx fetches at run time; " + IMPORTS_MCP,
    "simia import mcp --probe calls.jsonl -- npx -y @modelcontextprotocol/server-everything": IMPORTS_MCP,
    "simia import mcp http://127.0.0.1:9000/mcp": "an unreachable server, on purpose; tests/cli/test_import_mcp.py",
    "simia import openapi petstore.yaml --tag store --name petstore": IMPORTS_OPENAPI,
    "simia import openapi petstore.yaml": IMPORTS_OPENAPI,
    "simia import openapi notes.yaml": "a file that is not OpenAPI, on purpose; " + IMPORTS_OPENAPI,
    "simia fidelity tool_specs/counters --calls calls.jsonl --backend openai:gpt-5.4-mini -- python counters.py": (
        "tests/clients/test_fidelity.py runs fidelity on tests/fixtures/servers/counters.py"
    ),
    "simia fidelity tool_specs/counters --agent openai:gpt-5.4-mini --task two-apples --backend openai:gpt-5.4-mini "
    "-- python counters.py": "tests/clients/test_fidelity.py runs --agent on tests/fixtures/servers/counters.py",
    "simia fidelity tool_specs/counters --calls calls.jsonl --backend openai:gpt-5.4-mini --grade openai:gpt-5.4 "
    "-- python counters.py": "tests/clients/test_fidelity.py runs --grade on tests/fixtures/servers/counters.py",
    "simia fidelity tool_specs/retail --calls calls.jsonl --backend openai:gpt-5.4-mini "
    "-- python tests/fixtures/servers/retail.py": "tests/clients/test_fidelity_retail.py runs it",
}

SERVE_HELP = "simia serve --help"
STDIO = "simia serve --transport stdio --world retail"
REJUDGE = "simia judge EPISODE_ID... --db simia.db --backend SPEC"
ADVERSARIAL = "simia judge --adversarial --backend SPEC"
MAKE_HELP = "make help"
INLINE_COVERED: dict[str, tuple[str, ...]] = {
    SERVE_HELP: ("test_serve_help_lists_the_limits_the_readme_names",),
    STDIO: ("test_stdio_serves_one_episode_and_judge_rejudges_it",),
    REJUDGE: ("test_stdio_serves_one_episode_and_judge_rejudges_it",),
    ADVERSARIAL: ("test_the_adversarial_check_prints_both_rates",),
    MAKE_HELP: ("test_make_help_lists_every_target",),
}
NAMES_ONLY = "names a command or a flag in prose; the blocks above run the command"
INLINE_NOT_RUN = {
    "make install": "installs a venv; tests/test_make.py checks what it runs",
    "simia demo": "about 2 minutes on the embedded model; tests/clients/test_demo.py runs it (local_model)",
    "make bench": "minutes at full size, with targets; `make bench-quick` is its smoke test",
    "make bench-quick": "tests/bench/test_benches.py runs every benchmark --quick",
    "make lint": "lints this checkout (CI runs it); tests/test_architecture.py runs its import contracts",
    "pip install torch==2.13.0": "installs",
    'pip install -e ".[train]"': "installs",
    "bash .ci/conformance/run.sh": "needs npm; tests/server/test_conformance.py (conformance mark) runs it",
    "simia validate PATH...": "a synopsis: the `$ simia validate` block runs it",
    "simia serve": NAMES_ONLY,
    "simia serve --db": NAMES_ONLY,
    "simia serve --judge-backend SPEC": NAMES_ONLY,
    "simia rollout": NAMES_ONLY,
    "simia export": NAMES_ONLY,
    "simia export --format ...": NAMES_ONLY,
    "simia export --injected drop": NAMES_ONLY,
    "simia synth": NAMES_ONLY,
    "simia validate": NAMES_ONLY,
    "make test": "runs this very suite; tests/test_make.py checks what it runs",
    "python bench/fuzz_api.py --cases 10000": "the long run (minutes); tests/bench/test_benches.py runs it --quick",
    "python bench/fuzz_mcp.py --cases 10000": "the long run (minutes); tests/bench/test_benches.py runs it --quick",
    "python bench/chaos_provider.py --agents 200 --calls 10": "tests/bench/test_benches.py runs it --quick",
    "python bench/replicas.py kill --rounds 20": "the long run; tests/server/test_balancer.py runs 5 rounds",
    "python bench/kill_rounds.py": "the long run (minutes); tests/bench/test_benches.py runs it --quick",
    "python bench/soak.py": "the long run (minutes); tests/bench/test_benches.py runs it --quick",
    "simia import": NAMES_ONLY,
    "simia import mcp": NAMES_ONLY,
    "simia import openapi": NAMES_ONLY,
    "simia bootstrap": NAMES_ONLY,
    "simia fidelity": NAMES_ONLY,
    "simia view": NAMES_ONLY,
    "python bench/viewer.py": "the full size (100,000 episodes); tests/bench/test_benches.py runs it --quick",
    "simia db copy": NAMES_ONLY,
    "simia db migrate": NAMES_ONLY,
    "simia bootstrap WORLD --backend SPEC": "a synopsis; tests/sim/test_bootstrap.py runs the command",
    "simia fidelity WORLD --calls CALLS.jsonl --backend SPEC (--real URL | -- COMMAND ARGS...)": (
        "a synopsis; tests/clients/test_fidelity.py runs the command"
    ),
    "python bench/consistency.py": "minutes on the embedded model; tests/bench/test_benches.py runs it --quick",
    "simia export --format rl": NAMES_ONLY,
}


def test_every_readme_command_is_covered() -> None:
    shown = {c.text for c in COMMANDS}
    assert shown - set(COVERED) - set(NOT_RUN) == set(), "README commands without a test here"
    assert (set(COVERED) | set(NOT_RUN)) - shown == set(), "tests of commands README.md no longer shows"
    named = set(INLINE)
    assert named - set(INLINE_COVERED) - set(INLINE_NOT_RUN) == set(), "commands README.md names without a test"
    assert (set(INLINE_COVERED) | set(INLINE_NOT_RUN)) - named == set(), "tests of commands README.md no longer names"
    tests = {name for name, value in globals().items() if name.startswith("test_") and callable(value)}
    assert {t for names in [*COVERED.values(), *INLINE_COVERED.values()] for t in names} <= tests


def test_the_parsers_read_continuations_background_jobs_shown_output_and_inline_commands() -> None:
    text = (
        "```bash\nsimia serve --db a.db &\n# a comment\nsimia rollout --n 8 \\\n    --out runs/  # why\n```\n"
        "```\n$ simia validate x\nFAIL  x\n```\n```python\nprint(1)\n```\n"
    )
    assert readme_commands(text) == [
        Command(("simia", "serve", "--db", "a.db"), background=True),
        Command(("simia", "rollout", "--n", "8", "--out", "runs/")),
        Command(("simia", "validate", "x"), output=("FAIL  x",)),
    ]
    prose = "Run `make help` or `simia serve --help`, not `simia.cli` or `make`:\n```bash\n`make demo`\n```\n"
    assert inline_commands(prose) == ["make help", "simia serve --help"]


def agent_turn(conversation: list[tuple[str, str]]) -> dict[str, Any]:
    """The agent on the mock pantry, from (role, text) turns: the request's tool call, then what it returned.

    "Set the milk to 4 litres." -> set_quantity, "How many apples ... top them up to 5" -> set_quantity,
    "How many apples are left?" -> get_item; a tool result is
    reported as it came back, so a wrong call never passes the task's rule checks.
    """
    role, text = conversation[-1]
    if role == "tool":
        return {"message": f"The pantry answered: {text}", "tool_calls": []}
    if found := re.search(r"\bset (?:the )?(\w+?)s? to (\d+)", text, flags=re.I):
        return {
            "message": "",
            "tool_calls": [{"name": "set_quantity", "arguments": {"name": found[1], "qty": int(found[2])}}],
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
    """A temp dir where README commands run, with the environment that points openai: specs at the fake."""

    cwd: Path
    env: dict[str, str]
    fake: FakeProvider
    server: str = README_URL

    def roles(self) -> Counter[str]:
        """How many requests the fake provider answered, by the role that sent them."""
        return Counter(role(body) for body in self.fake.requests)

    def argv(self, text: str, replace: Mapping[str, str]) -> list[str]:
        """The README command `text` with `replace` applied (each must apply), the server's URL for
        127.0.0.1:8765, and this interpreter for `simia` and `python`."""
        for old, new in replace.items():
            assert old in text, f"`{old}` is no longer in `{text}`"
            text = text.replace(old, new)
        words = shlex.split(text.replace(README_URL, self.server))
        if words[0] == "simia":
            return [sys.executable, "-m", "simia.cli", *words[1:]]
        if words[0] == "python":
            return [sys.executable, *words[1:]]
        return words

    async def run(self, text: str, *, replace: Mapping[str, str] | None = None, timeout: float = 120) -> Done:
        """Run the README command `text` to the end (killed after `timeout` seconds)."""
        argv = self.argv(readme(text).text, replace or {})
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
        """Run the README's `simia serve` command `text` (with `replace` applied) in the background on a free
        port until it answers /healthz; later commands use its URL. Yields the lines it printed."""
        port = free_port()
        argv = [*self.argv(readme(text).text, replace or {}), "--port", str(port)]
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
            self.server = README_URL
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


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[Sandbox]:
    """A temp dir, and a fake OpenAI that every `openai:` spec in it reaches (OPENAI_BASE_URL)."""
    async with fake_openai() as fake:
        env = {
            **os.environ,
            "OPENAI_API_KEY": "test",
            "OPENAI_BASE_URL": fake.base_url,
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("ANTHROPIC_API_KEY", None)
        for name in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS"):  # a user's shell, not the `make test` this may run under
            env.pop(name, None)
        yield Sandbox(tmp_path, env, fake)


async def served_lines(sandbox: Sandbox) -> tuple[list[str], list[str]]:
    """(what `$ simia serve --backend openai:gpt-5.4-mini --db runs.db` printed, what README.md shows under it
    with its port 8765 as the free port P the test gave it and /home/me as the temp dir)."""
    async with sandbox.serve(SERVE_RUNS_DB) as printed:
        port = sandbox.server.rsplit(":", 1)[1]
    database = str((sandbox.cwd / "runs.db").resolve())
    shown = [line.replace("8765", port).replace("/home/me/runs.db", database) for line in readme(SERVE_RUNS_DB).output]
    return printed, shown


async def test_serve_prints_its_worlds_and_urls(sandbox: Sandbox) -> None:
    """The README's `$ simia serve` block, word for word (changed: `--port P`, see `served_lines`)."""
    printed, shown = await served_lines(sandbox)
    assert [line.split() for line in printed] == [line.split() for line in shown]


async def test_serve_prints_its_worlds_and_urls_column_for_column(sandbox: Sandbox) -> None:
    """The README's `$ simia serve` block, character for character (changed: `--port P`, see `served_lines`)."""
    printed, shown = await served_lines(sandbox)
    assert printed == shown


async def test_view_opens_the_runs_database_read_only_and_prints_its_url(sandbox: Sandbox) -> None:
    """README "Looking at episodes": `$ simia view --db runs.db` over the database `simia serve ... --db runs.db`
    wrote prints what README.md shows (changed: `--port P`, and /home/me as the temp dir), serves the episode
    at /ui, and leaves the file as it was."""
    async with sandbox.serve(SERVE_RUNS_DB), httpx.AsyncClient(base_url=sandbox.server) as http:
        episode = (await http.post("/v1/episodes", json={"world": "mock", "task": "restock_milk"})).json()
    files = {p.name: p.read_bytes() for p in sandbox.cwd.glob("runs.db*") if p.suffix != ".db-shm"}
    port = free_port()
    argv = [*sandbox.argv(readme(VIEW).text, {}), "--port", str(port)]
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=sandbox.cwd, env=sandbox.env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(60):
            printed = [(await proc.stdout.readline()).decode().rstrip("\n") for _ in readme(VIEW).output]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                while True:
                    with contextlib.suppress(httpx.TransportError):
                        page = await http.get("/ui")
                        break
                    await asyncio.sleep(0.05)
                detail = await http.get(f"/ui/episodes/{episode['id']}")
    finally:
        proc.terminate()
        await proc.communicate()
    database = str((sandbox.cwd / "runs.db").resolve())
    shown = [line.replace("8766", str(port)).replace("/home/me/runs.db", database) for line in readme(VIEW).output]
    assert printed == shown
    assert page.status_code == 200 and episode["id"][:14] in page.text
    assert detail.status_code == 200 and "restock_milk" in detail.text
    # read-only: the database and its write-ahead log as they were (the -shm file is SQLite's shared-memory index;
    # serve's clean shutdown removes the log, and a reader of a WAL database then opens an empty one: no data)
    after = {p.name: p.read_bytes() for p in sandbox.cwd.glob("runs.db*") if p.suffix != ".db-shm"}
    if "runs.db-wal" not in files and after.get("runs.db-wal") == b"":
        del after["runs.db-wal"]
    assert after == files


async def test_two_replicas_share_one_postgres_database_as_the_readme_shows(sandbox: Sandbox, pg_url: str) -> None:
    """README "Several replicas": runs.db copied to Postgres, two replicas on it, `db migrate`, a copy back.
    Changed: the URL -> a throwaway database's (password included), `--port P`; runs.db is the previous
    release's fixture (tests/fixtures/previous_release.db: 3 episodes), which the copy upgrades first."""
    shutil.copy(ROOT / "tests" / "fixtures" / "previous_release.db", sandbox.cwd / "runs.db")
    url = {PG: pg_url}
    copied = await sandbox.run(PG_COPY_IN, replace=url)
    assert copied.code == 0 and "episodes 3, events 23, snapshots 1, llm_cache 22 (counts checked)" in copied.out, (
        copied
    )
    async with sandbox.serve(PG_SERVE, replace=url) as printed:
        first = sandbox.server
        assert "  database: postgresql://simia:***@127.0.0.1:" in "\n".join(printed)
        async with sandbox.serve(PG_SERVE_2, replace=url), httpx.AsyncClient() as http:
            second = sandbox.server
            episode = (await http.post(f"{first}/v1/episodes", json={"world": "mock"})).json()
            async with Client(f"{second}/episodes/{episode['id']}/mcp") as client:  # the other replica
                result = await client.call_tool("set_quantity", {"name": "milk", "qty": 4})
            assert not result.is_error, result
            stored = (await http.get(f"{first}/v1/episodes/{episode['id']}")).json()
            assert [e["seq"] for e in stored["events"]] == [1] and stored["state"]["items"]["milk"]["qty"] == 4
            listed = (await http.get(f"{second}/v1/episodes")).json()["episodes"]
            assert len(listed) == 4  # the 3 copied and the new one, seen from either replica
    migrated = await sandbox.run(PG_MIGRATE, replace=url)
    assert migrated.code == 0 and migrated.out.endswith(f"schema version {SCHEMA_VERSION}, up to date\n"), migrated
    back = await sandbox.run(PG_COPY_OUT, replace=url)
    assert back.code == 0 and "episodes 4, events 24," in back.out, back
    assert pg_url.split(":")[2].split("@")[0] not in copied.out + migrated.out + back.out  # no password shown


async def test_validate_prints_one_line_per_problem(sandbox: Sandbox) -> None:
    """`$ simia validate tests/fixtures/broken_worlds/unknown_field` prints what README.md shows, and fails;
    the fixture is copied into the temp dir at the same relative path."""
    fixture = "tests/fixtures/broken_worlds/unknown_field"
    shutil.copytree(ROOT / fixture, sandbox.cwd / fixture)
    done = await sandbox.run(VALIDATE)
    assert done.code == 1, done
    assert (done.out + done.err).splitlines() == list(readme(VALIDATE).output), done


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


async def test_rollout_runs_every_task_and_writes_results(sandbox: Sandbox) -> None:
    """README "Running agents": `simia serve ... &` then `simia rollout ... --n 8 --concurrency 16 --max-turns 12
    --out runs/`. Changed: `--world retail` -> `--world mock` (the fake simulates the mock world flawlessly,
    `mock_world_answer`; its agent solves the mock tasks), `--port P` and its URL."""
    async with sandbox.serve(SERVE_RUNS_DB):
        done = await sandbox.run(ROLLOUT_AGENTS, replace={"--world retail": "--world mock"})
    assert done.code == 0, done
    results = jsonl(sandbox.cwd / "runs" / "results.jsonl")
    tasks = {"restock_milk", "count_apples", "no_bananas"}
    assert sorted((r["task"], r["status"], r["training_reward"]) for r in results) == sorted(
        (task, "judged", 1.0) for task in tasks for _ in range(8)
    )
    summary = json.loads((sandbox.cwd / "runs" / "summary.json").read_text())
    assert summary["runs"] == 24 and summary["judged"] == 24, summary
    table = done.out.splitlines()
    assert table[0].split() == ["TASK", "RUNS", "JUDGED", "INFRA", "AGENT-FAIL", "MEAN", "REWARD"]
    assert sorted(line.split() for line in table[1:4]) == sorted([t, "8", "8", "0", "0", "1.00"] for t in tasks)
    assert sorted(table[5:8]) == [  # eight attempts per task: pass^k, interval and flips
        f"{t}  n=8  mean 1.00 [0.68, 1.00]  pass^1..8 {' '.join(['1.00'] * 8)}  flips 0.00" for t in sorted(tasks)
    ]
    assert table[-1] == "results: runs/results.jsonl  summary: runs/summary.json"
    assert set(sandbox.roles()) == {"simulator", "agent", "user", "judge"}


async def test_the_pydantic_ai_recipe_runs_on_an_openai_model(sandbox: Sandbox) -> None:
    """README "Running agents": `python examples/pydantic_ai_agent.py http://127.0.0.1:8765 openai:gpt-5.4-mini`,
    examples/ copied into the temp dir, against `simia serve --backend openai:gpt-5.4-mini --db runs.db &`.
    Changed: `--port P` and its URL; pydantic-ai's `openai:` models speak the Responses API, which the fake
    provider gets here (`responses_api`). The recipe uses the mock world: it sets the milk to 4."""
    pytest.importorskip("pydantic_ai", reason="install the `recipes` extra")
    shutil.copytree(ROOT / "examples", sandbox.cwd / "examples")
    async with sandbox.serve(SERVE_RUNS_DB):
        done = await sandbox.run(PYDANTIC_AI)
    assert done.code == 0, done
    printed = ast.literal_eval(done.out.strip())
    assert printed["milk"] == 4, done
    assert printed["output"] == 'The pantry answered: {"name":"milk","qty":4}', done
    assert set(sandbox.roles()) == {"simulator", "agent"}  # the recipe ends no episode: no judge


async def test_synth_amplifies_the_seed_and_reports_every_drop(sandbox: Sandbox) -> None:
    """README "Training" step 1b, `simia synth --world retail --backend openai:gpt-5.4-mini --n 50 --out synth/`,
    as written: the retail world's one seed, 50 variations (`synth_trajectory`: 5 distinct ones, 45 repeats)."""
    done = await sandbox.run(SYNTH)
    assert done.code == 0, done
    assert done.out.splitlines() == [
        "seeds 1 (pre-filter dropped 0), generated 50, dropped: near_duplicate 45; kept 5 "
        "(arguments repaired in 0); 0 already done",
        "records: synth/synth.jsonl  report: synth/synth_report.json",
    ]
    kept = jsonl(sandbox.cwd / "synth" / "synth.jsonl")
    assert sorted(r["messages"][1]["content"].split("order ")[1][:6] for r in kept) == [o[0] for o in RETAIL_ORDERS]
    report = json.loads((sandbox.cwd / "synth" / "synth_report.json").read_text())
    assert (report["generated"], report["dropped"], report["kept"]) == (50, {"near_duplicate": 45}, 5)
    assert sandbox.roles() == {"synth pre-filter": 1, "synth": 50}
    again = await sandbox.run(SYNTH)  # "a re-run skips finished work"
    assert again.code == 0 and again.out.startswith("seeds 1 (pre-filter dropped 0), generated 0"), again
    assert "50 already done" in again.out and len(jsonl(sandbox.cwd / "synth" / "synth.jsonl")) == 5
    assert sandbox.roles() == {"synth pre-filter": 1, "synth": 50}  # no model call the second time


@pytest.mark.timeout(900)  # five commands, two of them loading torch and TRL
async def test_the_training_pipeline_runs_from_rollouts_to_grpo(sandbox: Sandbox) -> None:
    """README "Training" steps 1, 2, 3 and 4, in order in one temp dir, each step reading what the last wrote
    (step 1b has its own test). Changed, besides `--port P` and its URL: the rollout's `--world retail` ->
    `--world mock` (the fake simulates the mock world and its agent solves its tasks: judged episodes to
    export); SFT's `--model embedded --max-steps 200` -> `--model tiny --max-steps 1` (a random 2-layer Llama
    with SmolLM2's tokenizer: a step in seconds, not minutes); GRPO's `--max-steps 100` -> `--max-steps 1` and
    `--max-steps 1` added to the multi-turn one (its default is 2). GRPO keeps `--world retail` and
    `--model ckpt/sft` (the tiny checkpoint step 3 wrote)."""
    pytest.importorskip("trl", reason="install the `train` extra")
    datasets = pytest.importorskip("datasets", reason="install the `train` extra")
    async with sandbox.serve(SERVE_RUNS_DB):
        rollout = await sandbox.run(ROLLOUT_TRAINING, replace={"--world retail": "--world mock"})
        assert rollout.code == 0, rollout
        assert len(jsonl(sandbox.cwd / "runs" / "results.jsonl")) == 24

        export = await sandbox.run(EXPORT)
        assert (export.code, export.out) == (0, "wrote 24 record(s) to sft-data; skipped 0\n"), export
        data = datasets.load_from_disk(str(sandbox.cwd / "sft-data"))
        assert len(data) == 24 and set(data.column_names) >= {"messages", "tools"}

        sft = await sandbox.run(SFT, replace={"--model embedded": "--model tiny", "--max-steps 200": "--max-steps 1"})
        assert sft.code == 0, sft
        assert json.loads(sft.out.splitlines()[-1])["steps"] == 1, sft
        assert (sandbox.cwd / "ckpt" / "sft" / "config.json").is_file()

        before = sandbox.roles()
        grpo = await sandbox.run(GRPO, replace={"--max-steps 100": "--max-steps 1"}, timeout=400)
        assert grpo.code == 0, grpo
        trained = json.loads(grpo.out.splitlines()[-1])
        assert (trained["steps"], trained["output_dir"]) == (1, "ckpt/grpo"), grpo
        assert (sandbox.cwd / "ckpt" / "grpo" / "config.json").is_file()
        assert sandbox.roles() - before == {"judge": 4}  # the reward of each of the 4 generations

        before = sandbox.roles()
        multi = await sandbox.run(GRPO_USER, replace={"--user": "--max-steps 1 --user"}, timeout=400)
        assert multi.code == 0, multi
        trained = json.loads(multi.out.splitlines()[-1])
        assert (trained["steps"], trained["output_dir"]) == (1, "checkpoints/grpo"), multi
        assert (sandbox.cwd / "checkpoints" / "grpo" / "config.json").is_file()
        assert sandbox.roles() - before == {"judge": 2, "user": 2}  # 2 generations, each a user turn and a verdict


async def test_serve_help_lists_the_limits_the_readme_names(sandbox: Sandbox) -> None:
    """README "Limits and budgets" (`simia serve --help`): every flag that paragraph names is in the help,
    with the default it gives (--max-argument-bytes 32768). Run as written."""
    paragraph = README.read_text(encoding="utf-8").split("**Limits and budgets**", 1)[1].split("\n\n", 1)[0]
    flags = re.findall(r"`(--[a-z-]+)`", paragraph)
    assert "--max-argument-bytes" in flags, paragraph
    done = await sandbox.run(SERVE_HELP)
    assert done.code == 0, done
    assert [f for f in flags if f not in done.out] == [], done
    assert re.search(r"--max-argument-bytes [^(]*\(32768\)", " ".join(done.out.split())), done


async def test_stdio_serves_one_episode_and_judge_rejudges_it(sandbox: Sandbox) -> None:
    """README "Desktop clients": `simia serve --transport stdio --world retail`, as written (the MCP SDK's
    stdio client starts it; with OPENAI_API_KEY set its default backend is openai:gpt-5.4-mini, the fake),
    then README "Rewards": `simia judge EPISODE_ID... --db simia.db --backend SPEC` with that episode's id and
    SPEC = openai:gpt-5.4-mini."""
    readme(STDIO)
    argv = sandbox.argv(STDIO, {})
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=sandbox.env, cwd=sandbox.cwd)
    async with Client(params) as client:
        tools = await client.list_tools()
        found = await client.call_tool("find_user_by_email", {"email": "mia.lee@example.com"})
    assert len(tools.tools) == 10
    assert (found.is_error, found.structured_content) == (False, {"user_id": "mia_lee_1021"})
    episode = str((found.meta or {})["simia/episode"])
    assert sandbox.roles() == {"simulator": 1, "judge": 1}  # the episode was judged when the client left

    done = await sandbox.run(REJUDGE, replace={"EPISODE_ID...": episode, "SPEC": "openai:gpt-5.4-mini"})
    assert done.code == 0, done
    assert json.loads(done.out) == {
        "id": episode,
        "reward": 1,
        "status": "ok",
        "reasons": ["The agent used the tools."],
    }
    assert sandbox.roles() == {"simulator": 1, "judge": 2}


async def test_the_adversarial_check_prints_both_rates(sandbox: Sandbox) -> None:
    """README "Rewards": `simia judge --adversarial --backend SPEC` with SPEC = openai:gpt-5.4-mini: 25 attack
    transcripts plus 2 honest successes, and both rates. The fake judge rewards any episode with a recorded
    call, so its false positives are the attacks that made calls."""
    cases = load_cases()
    attacks = [c for c in cases if not c["benign"]]
    fooled = sum(1 for c in attacks if c["calls"])
    done = await sandbox.run(ADVERSARIAL, replace={"SPEC": "openai:gpt-5.4-mini"})
    assert done.code == 0, done
    assert done.out.splitlines()[-2:] == [
        f"false-positive rate: {fooled / 25:.2f} ({fooled} of 25 adversarial cases rewarded; 0 judge errors)",
        "benign true-positive rate: 1.00 (2 cases)",
    ]
    assert sandbox.roles() == {"judge": 27}


async def test_make_help_lists_every_target(sandbox: Sandbox) -> None:
    """README "Set up": `make help` lists every target; run as written on a copy of the Makefile."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    shutil.copy(ROOT / "Makefile", sandbox.cwd / "Makefile")
    done = await sandbox.run(MAKE_HELP)
    assert done.code == 0, done
    phony = re.search(r"^\.PHONY: (.*)$", makefile, flags=re.M)
    assert phony is not None, "the Makefile declares no .PHONY targets"
    assert sorted(line.split()[0] for line in done.out.splitlines()) == sorted(phony[1].split()), done


def test_the_grpo_user_simulator_can_use_an_openai_compatible_server() -> None:
    """README "Simulator backends": `openai-compatible:MODEL --base-url URL`; README "Training": GRPO's
    `--user SPEC`. Together they should parse (in process: the flags, not a training run)."""
    argv = ["--user", "openai-compatible:Qwen/Qwen3-8B", "--base-url", "http://127.0.0.1:8000/v1"]
    try:
        run = parse_config(GRPORun, argv)
    except SystemExit as exc:
        pytest.fail(f"grpo refused {shlex.join(argv)} (exit {exc.code})")
    assert run.user == "openai-compatible:Qwen/Qwen3-8B"
