"""simia-verl in verl's own venv (the released verl 0.9.1 on the CPU torch build) against a live `simia serve`: the
verl page's dataset command and CPU check as written (the URL and the tokenizer replaced: SmolLM2's, from the
embedded model's GGUF), the agent loop built as verl's workers build it, with a scripted `server_manager` as
verl's own CPU tests use; then bad input, a masked verdict, and what is stored for each."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from simia.sim.backends.local import embedded_model_path
from simia.testing import mock_world_answer
from simia.testing.trainer_venvs import trainer_venv

sys.path.insert(0, str(Path(__file__).parent))
from live import PASS, Served, json_lines, page_block, run_command, serve_faked  # type: ignore[import-not-found]
from live import page_command as live_page_command  # type: ignore[import-not-found]

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.timeout(1200)]  # the first test builds the venv

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "trainers" / "verl.md"
ADAPTERS = ROOT / "training" / "adapters"
# torch first, the CPU build on local disk (verl would pull a CUDA one); gguf: the test's tokenizer comes from the
# embedded model's GGUF file. Editable: the venv is keyed by its pins, so it must see the adapters as they are now.
PACKAGES = [
    "torch==2.13.0",
    "verl==0.9.1",
    "gguf>=0.17",
    *("-e", str(ADAPTERS / "client"), "-e", str(ADAPTERS / "verl")),
]
DOC_URL = "http://127.0.0.1:8765"
"""The server URL the page uses; each test's own server replaces it."""


def fake_answer(body: dict[str, Any]) -> dict[str, Any]:
    """A flawless simulator of the mock world, except that reading the rice breaks the tool's output schema (an
    infrastructure failure, after simia's retries), and a judge that passes every rubric: the rules decide."""
    name = (body.get("response_format") or {}).get("json_schema", {}).get("name")
    if name == "verdict":
        return PASS
    prompt = str(body["messages"][1]["content"])
    if "Call: get_item" in prompt and '"rice"' in prompt.split("Arguments: ", 1)[1].split("\n", 1)[0]:
        return {"is_error": False, "error_code": None, "message": "ok", "output": {"rice": "?"}, "state_patch": []}
    return mock_world_answer(body)


def page_python(first_line: str) -> str:
    return page_block(PAGE, "python", first_line)


def page_command(start: str) -> list[str]:
    return live_page_command(PAGE, start)


@contextlib.asynccontextmanager
async def simia(tmp_path: Path) -> AsyncIterator[Served]:
    async with serve_faked(tmp_path, fake_answer) as url:
        yield Served(url)


async def run(words: list[str], tmp_path: Path, timeout: float = 300) -> list[dict[str, Any]]:
    """Run a command in verl's venv (`python` is the venv's); the JSON objects it printed, one a line."""
    python = await asyncio.to_thread(trainer_venv, "verl", PACKAGES)
    command = [str(python) if w == "python" else w for w in words]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "RAY_DEDUP_LOGS": "0"}
    out, _ = await run_command(command, tmp_path, env, timeout)
    return json_lines(out)


def tokenizer_words(words: list[str]) -> list[str]:
    """The page's check command with the embedded SmolLM2 GGUF as its tokenizer (no hub here): its folder, then
    the file (the script's optional third argument)."""
    gguf = embedded_model_path()
    return [*words[:-1], str(gguf.parent), gguf.name]


async def test_the_pages_dataset_and_cpu_check_play_rewarded_and_unrewarded_groups_with_the_stored_rewards(
    tmp_path: Path,
) -> None:
    """verl page, "The dataset" and "Check the wiring on CPU", as written: the rows and the agent-loop YAML the
    command writes, two samples per task in one GRPO group each; every `reward_score` is its stored verdict's
    training reward (1.0 where the rules hold, 0.0 where they do not), the tool results' tokens are masked, and
    each group's second episode is a fork of its first, with the token data kept on the episode."""
    (tmp_path / "check_verl.py").write_text(page_python("# check_verl.py"), encoding="utf-8")
    dataset = page_command("python -m simia_verl.dataset")
    async with simia(tmp_path) as served:
        await run([w.replace(DOC_URL, served.url) for w in dataset], tmp_path)
        config = (tmp_path / "data" / "simia_agent.yaml").read_text(encoding="utf-8")
        assert (
            config == f"- name: simia_agent\n  _target_: simia_verl.agent_loop.SimiaAgentLoop\n  server: {served.url}\n"
        )
        printed = await run(tokenizer_words(page_command("python check_verl.py")), tmp_path)
        assert [(p["task"], p["reward"]) for p in printed] == [
            ("restock_milk", 1.0),
            ("restock_milk", 1.0),
            ("count_apples", 0.0),
            ("count_apples", 0.0),
        ]
        for played in printed:
            assert await served.stored_reward(played["episode"]) == played["reward"]
            assert 0 < played["policy_tokens"] < played["response_tokens"]
            detail = await served.episode(played["episode"])
            assert detail["verdict"]["fabricated"] is False and detail["verdict"]["transcript_mismatches"] == []
            tokens = detail["tokens"]
            assert len(tokens["completion_ids"]) == len(tokens["env_mask"]) == played["response_tokens"]
            assert sum(tokens["env_mask"]) == played["policy_tokens"]
        for first, second in (printed[0:2], printed[2:4]):
            fork = await served.episode(second["episode"])
            assert (fork["parent_id"], fork["fork_step"], fork["group_id"]) == (first["episode"], 0, first["episode"])


BAD_INPUT = """
import asyncio, json, sys
import hydra
from omegaconf import OmegaConf
from transformers import AutoTokenizer
import simia_verl.agent_loop  # registers simia_agent, as importing it in a worker does
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

server, folder, gguf = sys.argv[1:4]
tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 2048,
                                                             "multi_turn": {"max_assistant_turns": 6}}}, "data": {}})

class Scripted:
    def __init__(self, turns):
        self.turns = list(turns)
    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        ids = tokenizer.encode(self.turns.pop(0), add_special_tokens=False)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))  # as an engine computing logprobs does

def loop(turns, **loop_config):
    entry = OmegaConf.merge(_agent_loop_registry["simia_agent"], loop_config)
    return hydra.utils.instantiate(entry, trainer_config=DictConfigWrap(config), server_manager=Scripted(turns),
                                   tokenizer=tokenizer, processor=None, dataset_cls=RLHFDataset,
                                   data_config=DictConfigWrap(config.data), tools=ToolListWrap([]))

async def play(task, turns, **loop_config):
    row = {"raw_prompt": [{"role": "user", "content": task}], "agent_name": "simia_agent",
           "extra_info": {"world": "mock", "task": task, "server": server}}
    out = await loop(turns, **loop_config).run({"temperature": 1.0}, **row)
    return {"episode": out.extra_fields["simia_episode"], "reward": out.reward_score,
            "masked": out.extra_fields["simia_masked"], "policy_tokens": sum(out.response_mask),
            "response_tokens": len(out.response_ids), "turns": out.num_turns,
            "dense": {k: out.extra_fields[k] for k in ("tool_rewards", "turn_scores", "simia_progress")}}

async def main():
    bad = await play("restock_milk", [
        '<tool_call>{"name": "set_quantity", "arguments": {"name": "milk", "qty": 4}</tool_call>',
        '<tool_call>{"name": "restock", "arguments": {"item": "milk"}}</tool_call>',
        '<tool_call>{"name": "set_quantity", "arguments": {"name": "milk", "qty": "four"}}</tool_call>',
        "I could not set the milk.",
    ])
    masked = await play("count_apples", [
        '<tool_call>{"name": "get_item", "arguments": {"name": "rice"}}</tool_call>', "Something went wrong.",
    ], perturbation={"rate": 0.0, "kinds": ["timeout"]})
    restock = await play("weekly_restock", [
        '<tool_call>{"name": "get_item", "arguments": {"name": "apple"}}</tool_call>',
        '<tool_call>{"name": "set_quantity", "arguments": {"name": "apple", "qty": 6}}</tool_call>\\n'
        '<tool_call>{"name": "set_quantity", "arguments": {"name": "milk", "qty": 2}}</tool_call>',
        "Apples at 6, milk at 2.",
    ])
    errors = {}
    try:
        await loop([]).run({}, raw_prompt=[], extra_info={"world": "mock"})
    except ValueError as exc:
        errors["no_task"] = str(exc)
    print(json.dumps({"bad": bad, "masked": masked, "restock": restock, "errors": errors}))

asyncio.run(main())
"""


async def test_bad_calls_reach_the_policy_as_tool_results_and_a_masked_verdict_trains_on_no_token(
    tmp_path: Path,
) -> None:
    """A call that does not parse gets its problem back and reaches no server; an unknown tool and bad arguments
    get simia's error results (recorded as the agent's); the answer ends the episode, judged 0.0 and not masked.
    A simulator failure (reading the rice breaks the output schema) masks the verdict: `reward_score` 0.0 with
    every token masked out. A row without its task is refused with what to do. A task with weighted checks
    carries each call's shaped reward and each turn's sum in verl's `tool_rewards` and `turn_scores`."""
    script = tmp_path / "bad_input.py"
    script.write_text(BAD_INPUT, encoding="utf-8")
    gguf = embedded_model_path()
    async with simia(tmp_path) as served:
        [out] = await run(["python", str(script), served.url, str(gguf.parent), gguf.name], tmp_path)
        bad, masked = out["bad"], out["masked"]
        assert (bad["reward"], bad["masked"], bad["turns"]) == (0.0, False, 8)  # 4 policy turns, 3 results, prompt
        assert await served.stored_reward(bad["episode"]) == 0.0
        assert 0 < bad["policy_tokens"] < bad["response_tokens"]
        detail = await served.episode(bad["episode"])
        tokens = detail["tokens"]  # the logprobs aligned with the response: the policy's, and 0 on tool results
        assert len(tokens["logprobs"]) == len(tokens["env_mask"]) == bad["response_tokens"]
        assert {p for p, m in zip(tokens["logprobs"], tokens["env_mask"], strict=True) if m} == {-0.5}
        assert [(e["tool"], e["error_kind"], e["error_code"]) for e in detail["events"]] == [
            ("restock", "agent", "unknown_tool"),
            ("set_quantity", "agent", "invalid_arguments"),
        ]
        assert detail["verdict"]["transcript_mismatches"] == [] and detail["verdict"]["reward"] == 0
        assert [m["role"] for m in detail["transcript"]] == [
            "user", "assistant", "assistant", "tool", "assistant", "tool", "assistant"
        ]  # fmt: skip
        assert (masked["reward"], masked["masked"], masked["policy_tokens"]) == (0.0, True, 0)
        assert await served.stored_reward(masked["episode"]) is None
        detail = await served.episode(masked["episode"])
        assert [(e["tool"], e["error_kind"]) for e in detail["events"]] == [("get_item", "infra")]
        assert detail["verdict"]["infra_failures"] == 1 and detail["perturbation"] == {
            "rate": 0.0,
            "kinds": ["timeout"],
        }
    assert "python -m simia_verl.dataset" in out["errors"]["no_task"]
    # the outcome stays the verdict's; the dense rewards are each call's shaped reward and their sum per turn
    # (weekly_restock: the apples weigh 2 of 4, the milk 1; the rice kept at 2 counts from the start)
    assert (out["restock"]["reward"], out["restock"]["masked"]) == (1.0, False)
    assert out["restock"]["dense"] == {
        "tool_rewards": [0.0, 0.5, 0.25],
        "turn_scores": [0.0, 0.75, 0.0],
        "simia_progress": {"start": 0.25, "end": 1.0, "gamma": 1.0},
    }
    assert out["bad"]["dense"]["tool_rewards"] == [0.0, 0.0]  # refused calls change nothing
