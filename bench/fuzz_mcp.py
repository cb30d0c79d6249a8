"""MCP fuzzing: generated messages to both kinds of MCP URL of a live simia server, with Hypothesis.

    python bench/fuzz_mcp.py [--cases N] [--seed S] [--quick]

Targets: `/episodes/{id}/mcp` in the 2026-07-28 era (sessionless) and the handshake era (a session),
and `/worlds/{name}/mcp` (handshake era). Messages: tool calls with arguments generated from each
tool's `inputSchema` (hypothesis-jsonschema), valid and broken (a missing or extra field, a wrong
type, odd unicode, huge or deeply nested values), unknown tools and methods, wrong JSON-RPC shapes,
malformed, truncated, deeply nested and oversized bodies, and wrong headers. Every answer must be:

- below 500, with the server alive and nothing logged at ERROR;
- a protocol error (a JSON-RPC error, or a 4xx from the transport) or a result (`isError` or not);
- for anything but a successful tool call: the episode's state unchanged (`GET /v1/episodes/{id}`
  before and after) and no event recorded except the refused call's own;
- free of the tasks' hidden facts (canary strings), as is every simulator prompt.

Prints `N cases, F failures` (each distinct failure with an example); exits 1 on any failure.
CI runs a few hundred cases (`tests/server/test_mcp_fuzz.py`); the long run is `--cases 10000`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis
import requests
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from mcp.shared.inbound import encode_header_value

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fuzz import CANARIES, ThreadServer, is_error_body, is_jsonrpc_error, leaked
from simia.server import ServerSettings

MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
CLIENT_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "simia-fuzz", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
MAX_BODY = 4 * 1024 * 1024
PER_EPISODE = 60  # cases sent to one episode before the fuzzer opens fresh ones
ODD_TEXT = [
    "\u0000",
    "\ud800",  # a lone surrogate: valid JSON (escaped), not encodable as UTF-8
    "\udfff\ud800",
    "\u202eevil",
    "\ufeff",
    "e\u0301",
    "\U0001d4e3\U0001d4f1",
    "\uffff",
    "' OR 1=1 --",
    "../../../etc/passwd",
    "{{7*7}}",
    "\r\nX-Injected: 1",
    "%00%2e%2e",
]


@dataclass
class Target:
    """One MCP URL to fuzz, and the episode behind it."""

    kind: str  # "episode-modern", "episode-session", "world-session"
    path: str
    episode: str
    world: str
    session: str | None = None

    def headers(self, method: str | None, name: str | None = None) -> dict[str, str]:
        headers = {"accept": ACCEPT, "content-type": "application/json"}
        if self.kind == "episode-modern":
            headers["mcp-protocol-version"] = MODERN
            if method:
                headers["mcp-method"] = method
            if name is not None:
                try:
                    headers["mcp-name"] = encode_header_value(name)
                except UnicodeEncodeError:  # an unpaired surrogate: no header can carry it (the SDK refuses: 400)
                    headers["mcp-name"] = "x"
        else:
            headers["mcp-protocol-version"] = HANDSHAKE
            if self.session:
                headers["mcp-session-id"] = self.session
        return headers


@dataclass
class Report:
    cases: int = 0
    kinds: Counter[str] = field(default_factory=Counter)  # what the answers were
    prompts: int = 0  # simulator prompts checked for canaries
    failures: dict[str, str] = field(default_factory=dict)

    def fail(self, key: str, example: str) -> None:
        self.failures.setdefault(key, example)


def messages_of(response: requests.Response) -> list[Any]:
    """The JSON-RPC messages in a JSON or SSE answer."""
    ctype = response.headers.get("content-type", "")
    if "text/event-stream" in ctype:  # SSE lines end at CR, LF or CRLF only (not at U+2028 or U+0085)
        lines = re.split(r"\r\n|\r|\n", text_of(response))
        return [json.loads(line[5:]) for line in lines if line.startswith("data:") and line[5:].strip()]
    if "json" in ctype and response.content:
        return [json.loads(text_of(response))]
    return []


def text_of(response: requests.Response) -> str:
    """The body as UTF-8 (what MCP sends; `requests` guesses Latin-1 for text/event-stream)."""
    return response.content.decode("utf-8", errors="replace")


class Mcp:
    """A raw MCP client on `requests` (the fuzzer must send what no SDK client would)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.http = requests.Session()

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> requests.Response:
        return self.http.post(self.base + path, data=body, headers=headers, timeout=30)

    def episode(self, world: str, task: str | None) -> dict[str, Any]:
        body = {"world": world, **({"task": task} if task else {})}
        answer = self.http.post(self.base + "/v1/episodes", json=body, timeout=10)
        answer.raise_for_status()
        result: dict[str, Any] = answer.json()
        return result

    def state(self, episode: str) -> tuple[Any, int, str]:
        answer = self.http.get(f"{self.base}/v1/episodes/{episode}", timeout=10)
        answer.raise_for_status()
        detail = answer.json()
        return detail["state"], len(detail["events"]), answer.text

    def open_session(self, path: str) -> str:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": HANDSHAKE,
                "capabilities": {},
                "clientInfo": {"name": "fuzz", "version": "0"},
            },
        }
        headers = {"accept": ACCEPT, "content-type": "application/json"}
        answer = self.post(path, json.dumps(init).encode(), headers)
        session = answer.headers["mcp-session-id"]
        headers |= {"mcp-session-id": session, "mcp-protocol-version": HANDSHAKE}
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        self.post(path, json.dumps(note).encode(), headers)
        return session


def targets(client: Mcp, worlds: dict[str, Any]) -> list[Target]:
    """For each world: a task episode on its URL in both eras, and a world-URL session."""
    out = []
    for name, world in worlds.items():
        task = world.tasks[0].id if world.tasks else None
        modern = client.episode(name, task)["id"]
        out.append(Target("episode-modern", f"/episodes/{modern}/mcp", modern, name))
        handshake = client.episode(name, task)["id"]
        path = f"/episodes/{handshake}/mcp"
        out.append(Target("episode-session", path, handshake, name, client.open_session(path)))
        world_path = f"/worlds/{name}/mcp"
        target = Target("world-session", world_path, "", name, client.open_session(world_path))
        listed = client.post(world_path, _rpc(1, "tools/list", {}), target.headers("tools/list"))
        target.episode = messages_of(listed)[-1]["result"]["_meta"]["simia/episode"]
        out.append(target)
    return out


def _rpc(request_id: Any, method: str, params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()


JSON_LEAF = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
JSON = st.recursive(
    JSON_LEAF, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
)
ODD = st.sampled_from(ODD_TEXT) | st.text(st.characters(codec=None, exclude_categories=()), max_size=12)


def nested(depth: int) -> Any:
    value: Any = "deep"
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


def broken(arguments: dict[str, Any], draw: Callable[[Any], Any], schema: dict[str, Any]) -> Any:
    """A mutation of valid arguments that breaks the schema (or tests its edges)."""
    how = draw(st.sampled_from(["drop", "extra", "wrong_type", "odd", "huge", "deep", "not_object"]))
    args = dict(arguments)
    required = schema.get("required", [])
    if how == "drop" and required:
        args.pop(draw(st.sampled_from(required)), None)
    elif how == "extra":
        args[draw(st.text(min_size=1, max_size=10))] = draw(JSON)
    elif how == "wrong_type" and args:
        args[draw(st.sampled_from(sorted(args)))] = draw(JSON)
    elif how == "odd":
        key = draw(st.sampled_from(sorted(args))) if args else draw(ODD)
        args[key] = draw(ODD)
    elif how == "huge":
        args[draw(st.sampled_from(sorted(args))) if args else "x"] = "x" * draw(st.sampled_from([33_000, 1_000_000]))
    elif how == "deep":
        args[draw(st.sampled_from(sorted(args))) if args else "x"] = nested(draw(st.sampled_from([50, 200, 900])))
    else:
        return draw(st.sampled_from([[], "args", 3, None, [args]]))
    return args


@st.composite
def case(
    draw: Any, target: Target, tools: list[dict[str, Any]], pools: dict[str, list[str]]
) -> tuple[str, bytes, dict[str, str]]:
    """(what, body, headers) of one request to `target`."""
    kind = draw(
        st.sampled_from(
            ["call", "call", "call", "broken_call", "broken_call", "unknown_tool", "method", "shape", "raw", "headers"]
        )
    )
    request_id: Any = draw(st.integers(1, 50) | st.text(min_size=1, max_size=8))
    tool = draw(st.sampled_from(tools))
    schema = tool["inputSchema"]
    method, name, what = "tools/call", tool["name"], kind
    if kind in ("call", "broken_call"):
        arguments = draw(from_schema(schema))
        if isinstance(arguments, dict) and pools.get(target.world) and draw(st.booleans()):
            for key, value in list(arguments.items()):  # real names and ids, so calls reach the world's data
                if isinstance(value, str):
                    arguments[key] = draw(st.sampled_from(pools[target.world]))
        if kind == "broken_call":
            arguments = broken(arguments, draw, schema)
        params: Any = {"name": name, "arguments": arguments}
        body = _message(request_id, method, params, target)
    elif kind == "unknown_tool":
        name = draw(ODD | st.text(max_size=70) | st.just("x" * 300))
        params = {"name": name, "arguments": draw(st.dictionaries(st.text(max_size=5), JSON, max_size=3))}
        body = _message(request_id, method, params, target)
    elif kind == "method":
        method = draw(
            st.sampled_from(["tools/list", "ping", "resources/list", "prompts/list", "initialize", "logging/setLevel"])
            | st.text(max_size=30)
            | st.sampled_from(["notifications/cancelled", "notifications/initialized", "rpc.discover"])
        )
        params = draw(st.just({}) | st.dictionaries(st.text(max_size=5), JSON, max_size=3))
        notification = method.startswith("notifications/") and draw(st.booleans())
        body = _message(None if notification else request_id, method, params, target)
        name = None
        method = method if method.isascii() and method.isprintable() else "x"
    elif kind == "shape":
        valid = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": {}}}
        mutation = draw(st.sampled_from(["jsonrpc", "id", "method", "params", "batch", "extra", "drop"]))
        message: Any = dict(valid)
        if mutation == "batch":
            message = [valid, valid]
        elif mutation == "extra":
            message[draw(st.text(max_size=8))] = draw(JSON)
        elif mutation == "drop":
            message.pop(draw(st.sampled_from(sorted(valid))))
        else:
            message[mutation] = draw(JSON)
        body = json.dumps(message).encode()
        what = f"shape:{mutation}"
    elif kind == "raw":
        sort = draw(st.sampled_from(["bytes", "truncated", "deep", "huge", "not_object", "empty"]))
        full = _message(request_id, method, {"name": name, "arguments": {}}, target)
        body = {
            "bytes": lambda: draw(st.binary(max_size=200)),
            "truncated": lambda: full[: draw(st.integers(0, max(0, len(full) - 1)))],
            "deep": lambda: b"[" * 100_000 + b"]" * 100_000,
            "huge": lambda: (
                b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "' + b"y" * MAX_BODY + b'"}}'
            ),
            "not_object": lambda: json.dumps(draw(JSON_LEAF)).encode(),
            "empty": lambda: b"",
        }[sort]()
        what = f"raw:{sort}"
    else:
        body = _message(request_id, method, {"name": name, "arguments": {}}, target)
    headers = target.headers(method, name)
    if kind == "headers":
        which = draw(
            st.sampled_from(
                ["accept", "content-type", "mcp-protocol-version", "mcp-session-id", "mcp-method", "mcp-name", "drop"]
            )
        )
        if which == "drop":
            headers.pop(draw(st.sampled_from(sorted(headers))))
        else:
            headers[which] = draw(
                st.sampled_from(
                    ["", "text/plain", "*/*", "2024-01-01", "2099-12-31", "bogus", "application/xml", "ping"]
                )
                | st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
            )
        what = f"headers:{which}"
    return what, body, headers


def _message(request_id: Any, method: str, params: Any, target: Target) -> bytes:
    if target.kind == "episode-modern" and isinstance(params, dict):
        params = {**params, "_meta": CLIENT_META}
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        message["id"] = request_id
    return json.dumps(message).encode()


def check(
    what: str, response: requests.Response, before: tuple[Any, int, str], after: tuple[Any, int, str]
) -> tuple[str, list[str]]:
    """(the answer's kind, problems) for one request."""
    status = response.status_code
    problems = []
    if status >= 500:
        problems.append(f"HTTP {status}")
    try:
        messages = messages_of(response)
    except ValueError:
        messages = []
        if "json" in response.headers.get("content-type", ""):
            problems.append("an answer that says JSON but is not")
    answer = messages[-1] if messages else None
    result = answer.get("result") if isinstance(answer, dict) else None
    tool_result = isinstance(result, dict) and "content" in result and "isError" in result
    if tool_result:
        kind = "isError" if result["isError"] else "result"
    elif is_jsonrpc_error(answer):
        kind = "jsonrpc_error"
    elif isinstance(result, dict):
        kind = "other_result"
    elif status == 202:
        kind = "accepted"
    elif 400 <= status < 500:
        kind = f"http_{status}"
        if "json" in response.headers.get("content-type", "") and not (
            is_error_body(answer) or is_jsonrpc_error(answer)
        ):
            problems.append(f"HTTP {status} with a JSON body that is no error")
    else:
        kind = f"unexpected_{status}"
        problems.append(f"HTTP {status} that is neither a result nor an error")
    state_before, events_before, _ = before
    state_after, events_after, detail = after
    if kind != "result" and state_after != state_before:
        problems.append(f"a refused request ({kind}) changed the episode's state")
    grew = events_after - events_before
    if grew > 1 or (grew == 1 and not tool_result) or grew < 0:
        problems.append(f"{grew} events recorded for one {kind} answer")
    for name in leaked(text_of(response)):
        problems.append(f"{name} canary in an MCP answer")
    for name in leaked(detail, harness=True):
        problems.append(f"{name} canary in GET /v1/episodes/{{id}}")
    return kind, problems


def fuzz(server: ThreadServer, cases: int, seed: int, report: Report) -> None:
    """About `cases` cases spread over every target of every world."""
    client = Mcp(server.url)
    worlds = server.app.service.worlds
    tools = {name: [t.mcp_dict() for t in world.tools] for name, world in worlds.items()}
    pools = {name: _strings(world.initial_state) for name, world in worlds.items()}
    # Fresh episodes every round: each case reads its episode twice, so episodes stay short (O(events) reads).
    target = report.cases + cases
    for round_ in range(10_000):
        left = target - report.cases
        if left <= 0:
            break
        fresh = targets(client, worlds)
        each = max(1, min(PER_EPISODE, left // len(fresh)))
        before = report.cases
        for one in fresh:
            _run(server, client, one, tools[one.world], pools, each, seed + round_, report)()
            if not server.alive():
                report.fail("the server died", repr(server.crashed))
                return
        if report.cases == before:
            break
    for record in server.errors.records:
        report.fail("an ERROR logged by the server", record)
    for leak in server.prompt_leaks:
        report.fail("a canary in a simulator prompt", leak)
    worlds_answer = client.http.get(server.url + "/v1/worlds", timeout=10).text
    for name in leaked(worlds_answer, harness=True):
        report.fail(f"{name} canary in GET /v1/worlds", worlds_answer[:300])
    if CANARIES["user_hidden"] not in worlds_answer:  # the control: the canaries are there to be leaked
        report.fail("the canaries were not planted", worlds_answer[:300])
    report.prompts = server.prompts
    if cases >= 50 and not server.prompts:
        report.fail("no simulator prompt was checked for canaries", "")


def _strings(state: Any) -> list[str]:
    """Keys and string values of a world's state: names the fuzzer's calls can hit."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                found.append(key)
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)
        elif isinstance(value, str) and len(value) < 80:
            found.append(value)

    walk(state)
    return sorted(set(found))[:500]


def _run(
    server: ThreadServer,
    client: Mcp,
    target: Target,
    tools: list[dict[str, Any]],
    pools: dict[str, list[str]],
    n: int,
    seed: int,
    report: Report,
) -> Callable[[], None]:
    @hypothesis.seed(seed)
    @settings(
        max_examples=n,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(one=case(target, tools, pools))
    def run(one: tuple[str, bytes, dict[str, str]]) -> None:
        what, body, headers = one
        before = client.state(target.episode)
        try:
            response = client.post(target.path, body, headers)
        except requests.RequestException as exc:
            report.fail(f"{target.kind} {what}: no answer ({type(exc).__name__})", str(exc)[:300])
            return
        after = client.state(target.episode)
        kind, problems = check(what, response, before, after)
        report.cases += 1
        report.kinds[kind] += 1
        for problem in problems:
            example = f"{body[:400]!r}\nheaders {headers}\n-> {response.status_code} {text_of(response)[:400]}"
            report.fail(f"{target.kind} {what.split(':')[0]}: {problem}", example)

    return run  # type: ignore[no-any-return]


def run(cases: int, seed: int = 0) -> Report:
    report = Report()
    with tempfile.TemporaryDirectory(prefix="simia-mcp-fuzz-") as tmp:
        settings_ = ServerSettings(max_calls_per_episode=1_000_000, max_sim_tokens_per_episode=10**12)
        with ThreadServer(Path(tmp), settings_) as server:
            fuzz(server, cases, seed, report)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a tiny run: does the fuzzer still run?")
    args = parser.parse_args()
    start = time.perf_counter()
    report = run(60 if args.quick else args.cases, args.seed)
    kinds = ", ".join(f"{k}: {n}" for k, n in sorted(report.kinds.items()))
    print(
        f"mcp fuzz: {report.cases} cases, {len(report.failures)} failures in {time.perf_counter() - start:.0f} s "
        f"(answers {kinds}); {report.prompts} simulator prompts checked for canaries, 0 leaks"
        if not any("canary" in key for key in report.failures)
        else f"(answers {kinds}); CANARY LEAKS"
    )
    for key, example in report.failures.items():
        print(f"\nFAIL {key}\n{example}")
    sys.stdout.flush()
    os._exit(1 if report.failures else 0)


if __name__ == "__main__":
    main()
