"""`simia synth --batch` and `simia judge --batch` as a user runs them: real subprocesses, the fake provider's
OpenAI Batch API and Anthropic Message Batches, and a run interrupted mid-batch then resumed without paying twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from simia.testing.fake_provider import FakeProvider

pytestmark = pytest.mark.processes
ROOT = Path(__file__).resolve().parents[2]


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """The fake model: every seed passes the pre-filter; each amplification is a one-call trajectory of the mock
    world (the quantity named after the variation, so the kept records differ)."""
    text = json.dumps(body["messages"])
    if "well formatted" in text:
        return {"complete": True, "logical": True, "format_ok": True, "reason": "fine"}
    variation = int(text.split("(variation ")[1].split(" ")[0]) if "(variation " in text else 0
    qty = 10 + variation
    return {
        "messages": [
            {"role": "user", "content": f"Set apples to {qty}, please."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"name": "set_quantity", "arguments": {"name": "apple", "qty": qty}}],
            },
            {"role": "tool", "content": json.dumps({"name": "apple", "qty": qty})},
            {"role": "assistant", "content": f"Apples are at {qty} now."},
        ]
    }


async def simia(*args: str, cwd: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "simia.cli",
        *args,
        cwd=cwd,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_synth_batch_interrupted_mid_batch_resumes_from_its_journal_without_submitting_again(
    provider: str, tmp_path: Path
) -> None:
    async with FakeProvider(answer).running() as fake:
        if provider == "openai":
            spec, url, env = "openai:gpt-4.1-mini", fake.base_url, {"OPENAI_API_KEY": "sk-test"}
        else:
            spec, url, env = "anthropic:claude-sonnet-4-6", fake.anthropic_url, {"ANTHROPIC_API_KEY": "sk-test"}
        argv = ["synth", "--world", "mock", "--backend", spec, "--base-url", url, "--n", "2", "--out", "out"]
        argv += ["--batch", "--batch-poll", "0.05", "--worlds-dir", str(ROOT / "tool_specs")]
        journal = tmp_path / "out" / "batch_journal.json"

        fake.batches.polls = 1_000_000  # the first run's batch stays in progress until it is killed
        first = await simia(*argv, cwd=tmp_path, env=env)
        while not journal.exists():  # noqa: ASYNC110 (the subprocess writes it)
            await asyncio.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        await first.wait()
        submitted_before = dict(fake.batches.submitted)

        fake.batches.polls = 0
        second = await simia(*argv, cwd=tmp_path, env=env)
        out, err = await asyncio.wait_for(second.communicate(), 120)
    assert second.returncode == 0, err.decode()
    assert len(submitted_before) == 1  # the killed run had paid for its pre-filter batch
    assert next(iter(fake.batches.submitted)) == next(iter(submitted_before))  # ... which the resumed run read back
    prefilter = next(iter(submitted_before.values()))
    assert all(cid not in batch for cid in prefilter for batch in list(fake.batches.submitted.values())[1:])
    records = [json.loads(line) for line in (tmp_path / "out" / "synth.jsonl").read_text().splitlines()]
    assert len(records) >= 1 and all(r["messages"][0]["role"] in ("system", "user") for r in records)
    text = out.decode()
    assert "batch:" in text and "resumed from" in text and "0 failed" in text
    assert "model calls: input" in text and "cached), output" in text and "per 1,000 model calls" in text
    assert text.count("interactively") == 1 and "0 answered interactively" in text


async def test_batch_on_a_backend_without_a_batch_api_is_refused_with_the_fix(tmp_path: Path) -> None:
    argv = ["synth", "--world", "mock", "--backend", "openai-compatible:qwen3", "--base-url", "http://127.0.0.1:9"]
    process = await simia(*argv, "--batch", "--out", "out", cwd=tmp_path, env={})
    _, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 2
    assert (
        "--batch needs a provider with a batch API (openai:MODEL or anthropic:MODEL); openai-compatible:qwen3"
        in err.decode()
    )
    assert "drop --batch" in err.decode()
