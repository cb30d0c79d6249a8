"""The Training page's commands, run as written: synthesis, then rollouts -> export -> SFT -> GRPO in one temp
dir, each step reading what the last wrote."""

from __future__ import annotations

import json
import shlex

import pytest
from doc_commands import (  # type: ignore[import-not-found]
    EXPORT,
    GRPO,
    GRPO_USER,
    ROLLOUT_TRAINING,
    SERVE_RUNS_DB,
    SFT,
    SYNTH,
)
from doc_sandbox import RETAIL_ORDERS, Sandbox, jsonl  # type: ignore[import-not-found]
from simia.training._config import parse_config
from simia.training.grpo import GRPORun


@pytest.mark.processes
async def test_synth_amplifies_the_seed_and_reports_every_drop(sandbox: Sandbox) -> None:
    """Training, step 1b: `simia synth --world retail --backend openai:gpt-5.4-mini --n 50 --out synth/`,
    as written: the retail world's one seed, 50 variations (`synth_trajectory`: 5 distinct ones, 45 repeats)."""
    done = await sandbox.run(SYNTH)
    assert done.code == 0, done
    summary, cost, records = done.out.splitlines()
    assert summary == (
        "seeds 1 (pre-filter dropped 0), generated 50, dropped: near_duplicate 45; kept 5 "
        "(arguments repaired in 0); 0 already done"
    )
    assert cost.startswith("51 model calls: input ") and "per 1,000 model calls" in cost  # 1 pre-filter + 50
    assert records == "records: synth/synth.jsonl  report: synth/synth_report.json"
    kept = jsonl(sandbox.cwd / "synth" / "synth.jsonl")
    assert sorted(r["messages"][1]["content"].split("order ")[1][:6] for r in kept) == [o[0] for o in RETAIL_ORDERS]
    report = json.loads((sandbox.cwd / "synth" / "synth_report.json").read_text())
    assert (report["generated"], report["dropped"], report["kept"]) == (50, {"near_duplicate": 45}, 5)
    assert sandbox.roles() == {"synth pre-filter": 1, "synth": 50}
    again = await sandbox.run(SYNTH)  # "a re-run skips finished work"
    assert again.code == 0 and again.out.startswith("seeds 1 (pre-filter dropped 0), generated 0"), again
    assert "50 already done" in again.out and len(jsonl(sandbox.cwd / "synth" / "synth.jsonl")) == 5
    assert sandbox.roles() == {"synth pre-filter": 1, "synth": 50}  # no model call the second time


@pytest.mark.processes
@pytest.mark.slow  # loads torch and TRL twice
@pytest.mark.timeout(900)  # five commands, two of them loading torch and TRL
async def test_the_training_pipeline_runs_from_rollouts_to_grpo(sandbox: Sandbox) -> None:
    """Training, steps 1, 2, 3 and 4, in order in one temp dir, each step reading what the last wrote
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
        assert len(jsonl(sandbox.cwd / "runs" / "results.jsonl")) == 32  # 4 tasks x --n 8

        export = await sandbox.run(EXPORT)
        assert (export.code, export.out) == (0, "wrote 32 record(s) to sft-data; skipped 0\n"), export
        data = datasets.load_from_disk(str(sandbox.cwd / "sft-data"))
        assert len(data) == 32 and set(data.column_names) >= {"messages", "tools"}

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


def test_the_grpo_user_simulator_can_use_an_openai_compatible_server() -> None:
    """Simulator backends: `openai-compatible:MODEL --base-url URL`; Training: GRPO's `--user SPEC` (the page
    names the two together). Together they should parse (in process: the flags, not a training run)."""
    argv = ["--user", "openai-compatible:Qwen/Qwen3-8B", "--base-url", "http://127.0.0.1:8000/v1"]
    try:
        run = parse_config(GRPORun, argv)
    except SystemExit as exc:
        pytest.fail(f"grpo refused {shlex.join(argv)} (exit {exc.code})")
    assert run.user == "openai-compatible:Qwen/Qwen3-8B"
