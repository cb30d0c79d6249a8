"""The fake provider's own answers (`offline_answer`): every kind of request simia sends gets an answer simia
accepts, in every `--answer` mode, over real HTTP and through the real backends, one log line a request."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx2 as httpx
import pytest
import yaml
from simia.cli._common import in_process_server
from simia.clients.rollout import RolloutConfig, rollout
from simia.sim import load_world
from simia.sim.backends import resolve_backend
from simia.sim.importers import BootstrapConfig, bootstrap
from simia.sim.wire import TaskInfo, WorldInfo
from simia.testing import FakeProvider, offline_answer
from simia.testing.fake_answers import ANSWER_MODES

ROOT = Path(__file__).resolve().parents[2]
MOCK = load_world(ROOT / "tool_specs" / "mock")
pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("mode", ANSWER_MODES)
@pytest.mark.parametrize("provider", ["openai-compatible", "anthropic"])
async def test_every_role_of_a_rollout_is_answered_in_every_mode_and_each_request_is_logged(
    tmp_path: Path, mode: str, provider: str
) -> None:
    """The simulator, the agent, the user simulator and the judge all ask the fake provider: none gets a 5xx
    (before, the default mode answered the agent and the judge with HTTP 500), and the episode is judged. In
    `mock` mode the pantry agent does what the user asks, so the milk ends at 4 and the reward is 1."""
    lines: list[str] = []
    task = MOCK.task("restock_milk")
    assert task is not None
    asked = TaskInfo(id=task.id, instruction=task.instruction, user_hidden="It is for pancakes.")
    async with FakeProvider(offline_answer(mode), log=lines.append).running() as fake:
        url = fake.base_url if provider == "openai-compatible" else fake.anthropic_url
        env = {"ANTHROPIC_API_KEY": "test"}

        def model() -> object:
            return resolve_backend(f"{provider}:fake", base_url=url, env=env)

        sim, judge, agent, user = model(), model(), model(), model()
        async with in_process_server({"mock": MOCK}, sim, tmp_path / "simia.db", judge) as server:  # type: ignore[arg-type]
            config = RolloutConfig(
                server=server, world=WorldInfo(name="mock", tasks=[asked]), tasks=[asked], out=tmp_path, retries=0
            )
            [result] = (await rollout(config, agent, user)).results  # type: ignore[arg-type]
        for backend in (sim, judge, agent, user):
            await backend.aclose()  # type: ignore[attr-defined]
    kinds = {line.split()[4] for line in lines}
    assert len(lines) == len(fake.requests) and all(line.endswith("-> 200") for line in lines), lines
    assert {"agent", "user", "judge"} <= kinds, lines
    assert (result.status, result.verdict_status, result.error) == ("judged", "ok", ""), result
    if mode == "mock":
        assert "simulator" in kinds or MOCK.tool("set_quantity").grounding is not None  # type: ignore[union-attr]
        assert result.reward == 1 and result.tool_calls == 1


@pytest.mark.parametrize("mode", ANSWER_MODES)
async def test_bootstrap_drafts_a_state_and_tasks_from_the_fake_provider_in_every_mode(
    tmp_path: Path, mode: str
) -> None:
    """Before, `--answer schema` drafted `{"state_schema": {}}` (no schema of type object) and the mock mode
    answered HTTP 500: bootstrap got nothing offline."""
    folder = tmp_path / "pantry"
    shutil.copytree(ROOT / "tool_specs" / "mock", folder)
    raw = yaml.safe_load((folder / "world.yaml").read_text())
    raw.pop("state_schema", None)
    (folder / "world.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    for name in ("state.json", "tasks.jsonl"):
        (folder / name).unlink(missing_ok=True)
    async with FakeProvider(offline_answer(mode)).running() as fake:
        backend = resolve_backend("openai-compatible:fake", base_url=fake.base_url)
        report = await bootstrap(folder, backend, BootstrapConfig(tasks=2))
        await backend.aclose()
    world = load_world(folder)
    assert (report.state, report.tasks_written, report.tasks_dropped) == (
        "drafted",
        ["fake_task_1", "fake_task_2"],
        [],
    )
    assert world.initial_state and [t.id for t in world.tasks] == ["fake_task_1", "fake_task_2"]


async def test_a_body_that_is_not_json_is_a_400_not_a_500() -> None:
    lines: list[str] = []
    async with FakeProvider(offline_answer("mock"), log=lines.append).running() as fake, httpx.AsyncClient() as http:
        answer = await http.post(f"{fake.base_url}/chat/completions", content=b"{not json")
    assert answer.status_code == 400 and lines == ["fake provider: #0 /v1/chat/completions not JSON -> 400"]
