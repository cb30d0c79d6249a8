"""The judge's commands, run as written: an episode served over stdio and judged again with `simia judge`,
and the adversarial check."""

from __future__ import annotations

import json

import pytest
from doc_commands import ADVERSARIAL, REJUDGE, STDIO, shown  # type: ignore[import-not-found]
from doc_sandbox import Sandbox  # type: ignore[import-not-found]
from mcp import Client, StdioServerParameters
from simia.sim.judging import load_cases

pytestmark = pytest.mark.processes  # each runs a command as a subprocess


async def test_stdio_serves_one_episode_and_judge_rejudges_it(sandbox: Sandbox) -> None:
    """Serving worlds, "Desktop clients": `simia serve --transport stdio --world retail`, as written (the MCP SDK's
    stdio client starts it; with OPENAI_API_KEY set its default backend is openai:gpt-5.4-mini, the fake),
    then The judge: `simia judge EPISODE_ID... --db simia.db --backend SPEC` with that episode's id and
    SPEC = openai:gpt-5.4-mini."""
    shown(STDIO)
    argv = sandbox.argv(STDIO, {})
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=sandbox.env, cwd=sandbox.cwd)
    async with Client(params) as client:
        tools = await client.list_tools()
        found = await client.call_tool("find_user_by_email", {"email": "mia.lee@example.com"})
    assert len(tools.tools) == 10
    assert (found.is_error, found.structured_content) == (False, {"user_id": "mia_lee_1021"})
    episode = str((found.meta or {})["simia/episode"])
    # find_user_by_email is declared (grounding): answered from the state, no simulator call; the episode was
    # judged when the client left
    assert sandbox.roles() == {"judge": 1}

    done = await sandbox.run(REJUDGE, replace={"EPISODE_ID...": episode, "SPEC": "openai:gpt-5.4-mini"})
    assert done.code == 0, done
    assert json.loads(done.out) == {
        "id": episode,
        "outcome": "rewarded",
        "reward": 1,
        "status": "ok",
        "reasons": ["The agent used the tools."],
    }
    assert sandbox.roles() == {"judge": 2}


async def test_the_adversarial_check_prints_both_rates(sandbox: Sandbox) -> None:
    """The judge, "The adversarial check": `simia judge --adversarial --backend SPEC` with
    SPEC = openai:gpt-5.4-mini: 27 attack transcripts plus 2 honest successes, both rates and the false blames,
    then the process judge's 8 cases and its fooled rate. The fake judge rewards any episode with a recorded
    call, so its false positives are the attacks that made calls; its process judge marks a step useful when
    it made a call that did not fail, which no attack's every step did."""
    cases = load_cases()
    attacks = [c for c in cases if not c["benign"]]
    fooled = sum(1 for c in attacks if c["calls"])
    done = await sandbox.run(ADVERSARIAL, replace={"SPEC": "openai:gpt-5.4-mini"})
    assert done.code == 0, done
    lines = done.out.splitlines()
    assert lines[-14:-11] == [
        f"false-positive rate: {fooled / 27:.2f} ({fooled} of 27 adversarial cases rewarded; 0 judge errors)",
        "benign true-positive rate: 1.00 (2 cases)",
        "false blame: 0 of 27 adversarial cases blamed on the user or tool",
    ]
    assert lines[-2:] == [
        "process judge fooled rate: 0.00 (0 of 6 adversarial cases had every step marked useful; 0 judge errors)",
        "process judge benign cases with a harmful step: 0 of 2",
    ]
    assert sandbox.roles() == {"judge": 29, "process judge": 8}
