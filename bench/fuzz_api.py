"""API fuzzing: Schemathesis cases from simia's own `/openapi.json`, sent to live `simia serve` processes.

    python bench/fuzz_api.py [--cases N] [--seed S] [--quick]

Two servers run (scripted simulator, temporary database): one without tokens, one with two named
principals (`alice`, `bob`). For every operation of the document, in positive (fits the schema) and
negative (breaks it) generation, cases are sent with a token drawn from alice's, bob's, none, a wrong
one and malformed headers, and with path ids drawn from generated strings, a live episode, an ended
one, another principal's, and the worlds. Each answer must pass:

- no 5xx, and the server process alive, with no traceback in its log;
- the answer fits the document (status, content type, body schema);
- every API error is exactly `{"error": {"code", "message"}}` (MCP endpoints: that or a JSON-RPC error);
- negative data is refused with a 4xx; no token or a wrong one is a 401 (except `/healthz`);
- another principal's episode is a 404, never its data: alice's token on bob's episodes, and bob's own
  valid token on alice's (the control, `run_mixed_up`, fuzzes a server that gives both tokens to alice,
  and must catch it).

Prints `N cases, F failures` (and each distinct failure with a curl to replay it); exits 1 on any
failure. CI runs a few hundred cases (`tests/server/test_api_fuzz.py`); the long run is `--cases 10000`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fuzz import canary_worlds, is_error_body, is_jsonrpc_error, leaked
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)
from simia.testing.processes import serve_process

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "fixtures" / "mock_script.json"
TOKENS = {"alice": "alice-secret-0123456789", "bob": "bob-secret-0123456789"}
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|Exception in ASGI application")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    """A `simia serve` process on a free port, its log in a file."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    tokens: dict[str, str] = field(default_factory=dict)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tracebacks(self) -> list[str]:
        text = self.log.read_text(errors="replace")
        return [text[m.start() : m.start() + 1500] for m in TRACEBACK.finditer(text)]

    def request(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=10) as answer:
            return json.loads(answer.read())


@contextlib.contextmanager
def serve(tmp: Path, tokens: dict[str, str] | None = None, *, owners: dict[str, str] | None = None) -> Iterator[Server]:
    """`simia serve` with a `--token-for` per token, each for the principal of its name, or the one `owners`
    names for it (the fuzzer still takes the token for its name's: the control of `run_mixed_up`)."""
    port = free_port()
    log = tmp / f"server-{port}.log"
    args = [
        "--backend",
        f"scripted:{SCRIPT}",
        "--worlds-dir",
        str(canary_worlds(tmp / f"worlds-{port}")),
        "--db",
        str(tmp / f"fuzz-{port}.db"),
        "--synchronous",
        "NORMAL",
        "--log-level",
        "warning",
        "--max-live-episodes",
        "100000",
        "--max-live-episodes-per-principal",
        "100000",
        "--max-failed-logins",  # the fuzzer sends wrong tokens by the thousand from one address: each must be a 401
        "1000000",
    ]
    for name, secret in (tokens or {}).items():
        args += ["--token-for", f"{(owners or {}).get(name, name)}={secret}"]
    with serve_process(*args, port=port, log=log, grace=10, new_session=True) as process:
        yield Server(process.url, process.process, log, dict(tokens or {}))


@dataclass
class Fixtures:
    """Real ids to put in generated paths: what fuzzing with random strings alone would never reach."""

    episodes: list[str]  # the caller's: a live one, an ended one
    foreign: list[str]  # another principal's (404 for the caller)
    worlds: list[str]
    other_token: str | None  # another principal's token (the caller's episodes are foreign to it)


def fixtures(server: Server, principal: str | None) -> Fixtures:
    token = server.tokens.get(principal or "")
    live = server.request("POST", "/v1/episodes", {"world": "mock", "task": "restock_milk"}, token)["id"]
    ended = server.request("POST", "/v1/episodes", {"world": "retail"}, token)["id"]
    server.request("POST", f"/v1/episodes/{ended}/end", {}, token)
    others = [secret for name, secret in server.tokens.items() if name != principal]
    foreign = [server.request("POST", "/v1/episodes", {"world": "mock"}, secret)["id"] for secret in others]
    return Fixtures([live, ended], foreign, ["mock", "retail"], others[0] if others else None)


@dataclass
class Report:
    cases: int = 0
    by_status: Counter[int] = field(default_factory=Counter)
    failures: dict[str, str] = field(default_factory=dict)  # distinct failure -> an example (curl and answer)

    def fail(self, key: str, example: str) -> None:
        self.failures.setdefault(key, example)


def _leaks(path: str, response: requests.Response) -> list[str]:
    """The hidden task facts in an answer. `GET /v1/worlds` may carry `user_hidden` (the harness plays the user);
    an ended episode's verdict reports each rule's expected value (`rule_checks`); nothing else may carry any."""
    text = response.content.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("verdict"), dict):
        verdict = json.dumps(data.pop("verdict"))
        rest = json.dumps(data)
        return leaked(rest) + [name for name in leaked(verdict) if name != "expected_state"]
    return leaked(text, harness=path == "/v1/worlds")


def _own_checks(response: requests.Response, case: schemathesis.Case, auth: str, foreign_id: bool) -> list[str]:
    """simia's promises beyond the document; each broken one is a line."""
    problems = []
    status = response.status_code
    mcp = case.operation.path.endswith("/mcp")
    public = case.operation.path == "/healthz"
    if status >= 500:
        problems.append(f"HTTP {status}")
    # The MCP transport's own refusals (a wrong method, Accept or Content-Type) may come without a JSON body.
    sdk_refusal = mcp and status in (400, 405, 406, 413, 415) and "json" not in _ctype(response)
    if status >= 400 and not sdk_refusal:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not (is_error_body(body) or (mcp and is_jsonrpc_error(body))):
            problems.append(f"HTTP {status} without the error body")
    if auth in ("none", "wrong", "malformed") and not public and status not in (401, 403, 421):
        problems.append(f"a request with {auth} token got HTTP {status}, not 401")
    if auth == "other" and status == 401:
        problems.append("another principal's valid token got HTTP 401")
    if foreign_id and status < 400 and not (mcp and status in (202,)):
        if auth == "other":
            problems.append(f"another principal's token got HTTP {status} on the caller's episode")
        else:
            problems.append(f"another principal's episode answered HTTP {status}")
    return problems


def _ctype(response: requests.Response) -> str:
    return response.headers.get("content-type", "")


SCHEMA_CHECKS = [status_code_conformance, content_type_conformance, response_schema_conformance]


def fuzz(server: Server, cases: int, seed: int, principal: str | None, report: Report) -> None:
    """Send about `cases` generated requests to `server`, spread over its operations and both generation modes."""
    headers = {"authorization": f"Bearer {server.tokens[principal]}"} if principal else {}
    document = requests.get(server.url + "/openapi.json", headers=headers, timeout=10).json()
    schema = schemathesis.openapi.from_dict(document)
    schema.config.update(base_url=server.url)
    ids = fixtures(server, principal)
    operations = [result.ok() for result in schema.get_all_operations()]
    buckets = [(op, mode) for op in operations for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
    auths = ["own"] * 5  # 7 in 10 get past the guard (the caller's token or the other principal's), 3 test it
    if server.tokens:
        auths += ["other", "other", "none", "wrong", "malformed"]
    session = requests.Session()
    target = report.cases + cases
    # Small operations run out of distinct cases early (hypothesis stops): rounds with new seeds until the target.
    for round_ in range(1000):
        per_bucket = max(1, (target - report.cases) // len(buckets))
        before = report.cases
        for op, mode in buckets:
            strategy = op.as_strategy(generation_mode=mode)
            # Unsatisfiable: nothing in this operation can be broken (no parameters, no body): no negative case.
            with contextlib.suppress(hypothesis.errors.Unsatisfiable):
                _bucket(server, op, mode, strategy, per_bucket, seed + round_, ids, auths, headers, session, report)()
            if not server.alive():
                report.fail("server process died", server.log.read_text()[-2000:])
                return
        if report.cases >= target or report.cases == before:
            break
    for trace in server.tracebacks():
        report.fail("a traceback in the server log", trace)


def _bucket(
    server: Server,
    op: Any,
    mode: GenerationMode,
    strategy: Any,
    per_bucket: int,
    seed: int,
    ids: Fixtures,
    auths: list[str],
    headers: dict[str, str],
    session: requests.Session,
    report: Report,
) -> Callable[[], None]:
    """The hypothesis test of one operation in one generation mode."""

    @hypothesis.seed(seed)
    @settings(
        max_examples=per_bucket,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy, data=st.data())
    def one(case: schemathesis.Case, data: st.DataObject) -> None:
        owner = None  # whose fixture episode the path names: the caller's (`own`), the other principal's, or none
        if "episode_id" in (case.path_parameters or {}):
            pool = ["generated", *ids.episodes, *(["foreign"] if ids.foreign else [])]
            pick = data.draw(st.sampled_from(pool), label="episode_id")
            if pick == "foreign":
                case.path_parameters["episode_id"] = data.draw(st.sampled_from(ids.foreign))
                owner = "other"
            elif pick != "generated":
                case.path_parameters["episode_id"] = pick
                owner = "own"
        if "world" in (case.path_parameters or {}) and data.draw(st.booleans(), label="real world"):
            case.path_parameters["world"] = data.draw(st.sampled_from(ids.worlds))
        auth = data.draw(st.sampled_from(auths), label="auth")
        generated = {k.lower() for k in case.headers or {}}
        if mode.is_negative and headers and "authorization" not in generated:
            auth = "none"  # the negative case is "the required Authorization header is missing": keep it missing
        # The episode is foreign when its owner is not the principal whose token is sent.
        foreign_id = owner is not None and owner != ("other" if auth == "other" else "own")
        sent = dict(headers) if auth == "own" else {}
        if auth == "other":  # the second principal's own valid token: the caller's episodes are foreign to it
            sent["authorization"] = f"Bearer {ids.other_token}"
        elif auth == "wrong":
            sent["authorization"] = "Bearer not-a-token"
        elif auth == "malformed":
            sent["authorization"] = data.draw(st.sampled_from(["Bearer", "Basic abc", "bearer  ", "Token x"]))
        # A JSON-RPC message to the MCP endpoint needs these to get past the transport's own checks.
        if op.path.endswith("/mcp") and data.draw(st.booleans(), label="mcp headers"):
            sent.setdefault("accept", "application/json, text/event-stream")
        try:
            response = case.call(session=session, headers=sent, timeout=15)
        except requests.RequestException as exc:
            report.fail(f"{op.label}: no answer ({type(exc).__name__})", str(exc)[:300])
            return
        report.cases += 1
        report.by_status[response.status_code] += 1
        curl = case.as_curl_command(headers=dict(response.request.headers))
        for name in _leaks(case.operation.path, response):
            report.fail(f"{op.label}: the {name} canary in an answer", f"{curl}\n-> {response.text[:300]}")
        for problem in _own_checks(response, case, auth, foreign_id):
            report.fail(f"{op.label}: {problem}", f"{curl}\n-> {response.status_code} {response.text[:300]}")
        checks: list[Callable[..., Any]] = list(SCHEMA_CHECKS)
        if mode.is_negative and auth == "own":
            checks.append(negative_data_rejection)
        try:
            case.validate_response(response, checks=checks, headers=sent)
        except FailureGroup as group:  # the checks that failed
            for failure in group.exceptions:
                title = getattr(failure, "title", type(failure).__name__)
                why = getattr(failure, "message", "")[:600]
                report.fail(f"{op.label}: {title}", f"{why}\n{curl}\n-> {response.status_code} {response.text[:300]}")

    return one  # type: ignore[no-any-return]


def run(cases: int, seed: int = 0) -> Report:
    """About `cases` cases against a server without tokens and one with two principals (half each)."""
    report = Report()
    with tempfile.TemporaryDirectory(prefix="simia-fuzz-") as tmp:
        with serve(Path(tmp)) as open_server:
            fuzz(open_server, cases // 2, seed, None, report)
        with serve(Path(tmp), TOKENS) as locked:
            fuzz(locked, cases - cases // 2, seed, "alice", report)
    return report


def run_mixed_up(cases: int, seed: int = 0) -> Report:
    """The control: a server that gives bob's token to alice (one principal, two secrets), fuzzed as if they were
    two principals. A fuzzer that sends bob's real token reports it reading alice's episodes."""
    report = Report()
    with (
        tempfile.TemporaryDirectory(prefix="simia-fuzz-") as tmp,
        serve(Path(tmp), TOKENS, owners={"bob": "alice"}) as mixed,
    ):
        fuzz(mixed, cases, seed, "alice", report)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000, help="about how many requests to send (default 10000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a tiny run: does the fuzzer still run?")
    args = parser.parse_args()
    cases = 60 if args.quick else args.cases
    start = time.perf_counter()
    report = run(cases, args.seed)
    seconds = time.perf_counter() - start
    statuses = ", ".join(f"{s}: {n}" for s, n in sorted(report.by_status.items()))
    print(f"api fuzz: {report.cases} cases, {len(report.failures)} failures in {seconds:.0f} s (statuses {statuses})")
    for key, example in report.failures.items():
        print(f"\nFAIL {key}\n{example}")
    os._exit(1 if report.failures else 0)


if __name__ == "__main__":
    main()
