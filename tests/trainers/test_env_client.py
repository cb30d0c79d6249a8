"""simia-env-client, the trainer adapters' shared client, in a venv of its own (httpx only, no simia) against a
live `simia serve`: an episode played sync and async, a call resent after its answer was lost (applied once),
the reward and prompt it restates (equal to simia's own), its tool-call parser, SSE answers and its errors."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from simia.clients.prompt import agent_system_prompt
from simia.sim.verdict import Verdict
from simia.testing.trainer_venvs import trainer_venv

sys.path.insert(0, str(Path(__file__).parent))
from live import Served, json_lines, rules_decide, run_command, serve_faked  # type: ignore[import-not-found]

pytestmark = [pytest.mark.processes, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "training" / "adapters" / "client"
PACKAGES = ["-e", str(CLIENT)]  # editable: the venv is keyed by its pins, so it must see the code as it is now


@contextlib.asynccontextmanager
async def simia(tmp_path: Path) -> AsyncIterator[Served]:
    async with serve_faked(tmp_path, rules_decide) as url:
        yield Served(url)


async def run_script(code: str, tmp_path: Path, *args: str, timeout: float = 120) -> list[Any]:
    """Run `code` in the client's venv; the JSON it printed, one value a line."""
    python = await asyncio.to_thread(trainer_venv, "simia-env-client", PACKAGES)
    script = tmp_path / "script.py"
    script.write_text(code, encoding="utf-8")
    out, _ = await run_command([str(python), str(script), *args], tmp_path, os.environ, timeout)
    return json_lines(out, "[{")


PLAY = """
import asyncio, json, sys
from simia_env_client import AsyncEnvClient, AsyncRollout, EnvClient, Rollout

url = sys.argv[1]
SET = '<tool_call>{"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}}</tool_call>'
with EnvClient(url) as client:
    world = client.world("mock")
    rollout = Rollout.start(client, world, "restock_milk", seed=3)
    turn = rollout.act(SET)
    answer = rollout.act("The milk is at 4 litres.")
    ended, again = rollout.finish(), rollout.finish()
    repeat = client.end(rollout.episode.id)
    tools = [t["name"] for t in client.list_tools(rollout.episode)]
    print(json.dumps({"episode": ended.id, "reward": ended.training_reward, "same": ended == again,
                      "repeat": [repeat.reward, repeat.training_reward], "tools": tools,
                      "result": [turn.results[0].text, turn.results[0].seq], "done": [turn.done, answer.done]}))

async def unrewarded():
    async with AsyncEnvClient(url) as client:
        world = await client.world("mock")
        rollout = await AsyncRollout.start(client, world, "count_apples")
        await rollout.act('<tool_call>{"name": "get_item", "arguments": {"name": "apple"}}</tool_call>')
        await rollout.act("You have 3 apples.")
        ended = await rollout.finish()
        fork = await client.fork(ended.id, step=0)
        print(json.dumps({"episode": ended.id, "reward": ended.training_reward, "fork": fork.id}))

asyncio.run(unrewarded())
"""


async def test_an_episode_played_sync_and_async_receives_the_stored_verdicts_training_reward(tmp_path: Path) -> None:
    async with simia(tmp_path) as served:
        rewarded, unrewarded = await run_script(PLAY, tmp_path, served.url)
        assert (rewarded["reward"], unrewarded["reward"]) == (1.0, 0.0)
        for played in (rewarded, unrewarded):
            assert await served.stored_reward(played["episode"]) == played["reward"]
        assert rewarded["same"] and rewarded["repeat"] == [1, 1.0]  # ending twice: the same verdict
        assert rewarded["tools"] == ["list_items", "get_item", "set_quantity"]
        assert rewarded["result"] == ['{"name": "milk", "qty": 4}', 1] and rewarded["done"] == [False, True]
        detail = await served.episode(rewarded["episode"])
        assert (detail["task"], detail["seed"], detail["status"]) == ("restock_milk", 3, "ended")
        assert detail["verdict"]["transcript_mismatches"] == [] and not detail["verdict"]["fabricated"]
        assert [m["role"] for m in detail["transcript"]] == ["system", "user", "assistant", "tool", "assistant"]
        fork = await served.episode(unrewarded["fork"])
        assert (fork["parent_id"], fork["fork_step"], fork["task"]) == (unrewarded["episode"], 0, "count_apples")


RESEND = """
import json, sys
import httpx
from simia_env_client import EnvClient

class LosesTheFirstAnswer(httpx.HTTPTransport):
    '''Delivers each tools/call, but drops the first one's answer, as a connection reset after the server
    committed the call does.'''
    def __init__(self):
        super().__init__()
        self.bodies = []
    def handle_request(self, request):
        response = super().handle_request(request)
        if b'"tools/call"' in request.content:
            self.bodies.append(json.loads(request.content))
            if len(self.bodies) == 1:
                response.read()
                raise httpx.ReadError("connection reset by peer", request=request)
        return response

transport = LosesTheFirstAnswer()
with EnvClient(sys.argv[1], transport=transport) as client:
    episode = client.create("mock", "restock_milk")
    first = client.call_tool(episode, "set_quantity", {"name": "milk", "qty": 4})
    second = client.call_tool(episode, "set_quantity", {"name": "milk", "qty": 4})
    mine = client.call_tool(episode, "get_item", {"name": "milk"}, call_id="my-call-1")
    mine_again = client.call_tool(episode, "get_item", {"name": "milk"}, call_id="my-call-1")
ids = [b["id"] for b in transport.bodies]
print(json.dumps({"episode": episode.id, "seqs": [first.seq, second.seq, mine.seq, mine_again.seq], "ids": ids}))
"""


async def test_a_call_resent_after_its_answer_was_lost_is_applied_once(tmp_path: Path) -> None:
    """The first answer is lost after the server committed the call: the client resends it with the same JSON-RPC
    id and gets the committed result; the same call made again on purpose (a new id) runs again; an explicit
    `call_id` repeated is answered from the committed call."""
    async with simia(tmp_path) as served:
        [out] = await run_script(RESEND, tmp_path, served.url)
        assert out["seqs"] == [1, 2, 3, 3]
        first_id, resent_id, second_id, *_ = out["ids"]
        assert first_id == resent_id != second_id and out["ids"][-2:] == ["my-call-1", "my-call-1"]
        detail = await served.episode(out["episode"])
        assert [(e["seq"], e["tool"]) for e in detail["events"]] == [
            (1, "set_quantity"),
            (2, "set_quantity"),
            (3, "get_item"),
        ]


RESTATED = """
import json, sys
from simia_env_client import agent_system_prompt, training_reward
cases = json.loads(sys.argv[1])
print(json.dumps({"rewards": [training_reward(c) for c in cases["verdicts"]],
                  "prompts": [agent_system_prompt(p) for p in cases["policies"]]}))
"""


async def test_the_restated_training_reward_and_agent_prompt_equal_simias_own(tmp_path: Path) -> None:
    """The client cannot import simia, so it restates `Verdict.training_reward()` and `agent_system_prompt`:
    both give simia's answers (a drift here would train on other rewards, or another prompt)."""
    verdicts = [
        Verdict(reward=r, status=s, infra_failures=i, fabricated=f).as_json()
        for r in (0, 1, None)
        for s in ("ok", "judge_error", "unjudged")
        for i in (0, 2)
        for f in (False, True)
    ]
    policies = ["", "- Quantities are whole numbers.\n- Be kind."]
    [out] = await run_script(RESTATED, tmp_path, json.dumps({"verdicts": verdicts, "policies": policies}))
    assert out["rewards"] == [Verdict.model_validate(v).training_reward() for v in verdicts]
    assert out["prompts"] == [agent_system_prompt(p) for p in policies]


PARSE = """
import json
from simia_env_client import FORMAT_HINT, parse_openai_message, parse_tool_calls
texts = [
    'Let me look.<tool_call>\\n{"name": "get_item", "arguments": {"name": "milk"}}\\n</tool_call>',
    '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    '<tool_call>{"name": "b", "arguments": "{\\\\"x\\\\": 1}"}</tool_call>',
    '<tool_call>{"name": "set_quantity", "arguments": {"name": "milk"',
    '<tool_call>{"arguments": {}}</tool_call>',
    '<tool_call>{"name": "x", "arguments": [1]}</tool_call>',
    '```json\\n{"name": "get_item", "arguments": {"name": "rice"}}\\n```',
    '{"tool_calls": [{"type": "function", "function": {"name": "list_items", "arguments": "{}"}}]}',
    '[{"name": "get_item", "parameters": {"name": "apple"}}]',
    '{"message": "Done.", "tool_calls": []}',
    'The milk is at 4 litres.',
    '{"answer": 4}',
]

def problems(turn):
    assert all(p.message.endswith(FORMAT_HINT) for p in turn.problems)
    return [p.message.removesuffix(FORMAT_HINT).strip() for p in turn.problems]

out = []
for text in texts:
    turn = parse_tool_calls(text, id_prefix="t")
    out.append([turn.content, [[c.name, c.arguments, c.id] for c in turn.calls], problems(turn), turn.is_answer])
native = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "get_item", "arguments": '{"name": "milk"}'}},
    {"id": "c2", "type": "function", "function": {"name": "get_item", "arguments": '{"name": '}}]}
turn = parse_openai_message(native)
out.append([[[c.name, c.arguments, c.id] for c in turn.calls], [p.id for p in turn.problems], problems(turn)])
print(json.dumps(out))
"""


async def test_tool_calls_are_read_from_hermes_blocks_and_openai_json_and_bad_ones_are_problems(
    tmp_path: Path,
) -> None:
    """Hermes blocks (text around them kept, the last one unclosed), OpenAI-style JSON (fenced, `tool_calls`,
    a list, `parameters`, simia's structured action), plain answers; a bad block is a problem that says what is
    wrong and the format to use, and a native call's problem keeps its id (its answer must carry it)."""
    [out] = await run_script(PARSE, tmp_path)
    *texts, native = out
    assert texts == [
        ["Let me look.", [["get_item", {"name": "milk"}, "t_0"]], [], False],
        ["", [["a", {}, "t_0"], ["b", {"x": 1}, "t_1"]], [], False],
        ["", [], ["tool call 1 is not valid JSON (Expecting ',' delimiter at char 53)."], False],
        ["", [], ["tool call 1: the tool call has no name."], False],
        ["", [], ["tool call 1: the arguments of x must be a JSON object."], False],
        ["", [["get_item", {"name": "rice"}, "t_0"]], [], False],
        ["", [["list_items", {}, "t_0"]], [], False],
        ["", [["get_item", {"name": "apple"}, "t_0"]], [], False],
        ["Done.", [], [], True],
        ["The milk is at 4 litres.", [], [], True],
        ['{"answer": 4}', [], [], True],
    ]
    assert native == [
        [["get_item", {"name": "milk"}, "c1"]],
        ["c2"],
        ["tool call 2: the arguments of get_item are not valid JSON (Expecting value)."],
    ]


ANSWERS = """
import json
from simia_env_client import McpError
from simia_env_client._mcp import rpc_result
sse = ('event: message\\ndata: {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}\\n\\n'
       'event: message\\ndata: {"jsonrpc": "2.0", "id": "k-1", "result": {"content": [], "isError": false}}\\n\\n')
out = [rpc_result("text/event-stream", sse, "k-1"),
       rpc_result("application/json", '{"jsonrpc": "2.0", "id": "k-2", "result": {"tools": []}}', "k-2")]
error = '{"jsonrpc": "2.0", "id": "k", "error": {"code": -32602, "message": "bad"}}'
empty = "event: message\\ndata: {}\\n\\n"
bad = [("application/json", error), ("text/event-stream", empty), ("application/json", "<html>")]
for content_type, body in bad:
    try:
        rpc_result(content_type, body, "k")
    except McpError as exc:
        out.append([exc.code, exc.message[:40]])
print(json.dumps(out))
"""


async def test_json_and_sse_answers_are_read_alike_and_rpc_errors_raise(tmp_path: Path) -> None:
    [out] = await run_script(ANSWERS, tmp_path)
    assert out == [
        {"content": [], "isError": False},
        {"tools": []},
        [-32602, "bad"],
        [-32603, "the server's answer holds no JSON-RPC re"],
        [-32603, "the server's answer holds no JSON-RPC re"],
    ]


ERRORS = """
import json, sys
from simia_env_client import ApiError, EnvClient, Episode, ServerUnreachable
out = {}
nowhere = sys.argv[1] + "/episodes/ep_nope/mcp"
with EnvClient(sys.argv[1]) as client:
    for name, call in {
        "world": lambda: client.world("nope"),
        "task": lambda: client.create("mock", "nope"),
        "episode": lambda: client.call_tool(Episode("ep_nope", "mock", None, None, nowhere), "get_item", {}),
        "end": lambda: client.end("ep_nope"),
    }.items():
        try:
            call()
        except ApiError as exc:
            out[name] = [exc.status, exc.code]
    episode = client.create("mock", "restock_milk")
    client.end(episode.id)
    late = client.call_tool(episode, "get_item", {"name": "milk"})
    out["after_end"] = [late.is_error, late.error_kind, late.error_code]
    out["events"] = len(client.get(episode.id)["events"])
try:
    EnvClient("http://127.0.0.1:9", retries=1).worlds()
except ServerUnreachable as exc:
    out["unreachable"] = "is `simia serve` running there?" in str(exc)
try:
    EnvClient("127.0.0.1:8765")
except ValueError as exc:
    out["url"] = str(exc)
print(json.dumps(out))
"""


async def test_refusals_are_api_errors_with_codes_and_a_call_after_the_end_is_a_clean_error_result(
    tmp_path: Path,
) -> None:
    async with simia(tmp_path) as served:
        [out] = await run_script(ERRORS, tmp_path, served.url)
    assert out == {
        "world": [404, "not_found"],
        "task": [404, "not_found"],
        "episode": [404, "not_found"],
        "end": [404, "not_found"],
        "after_end": [True, "infra", "conflict"],
        "events": 0,
        "unreachable": True,
        "url": "base_url must be the server's URL, e.g. http://127.0.0.1:8765 (got '127.0.0.1:8765')",
    }
