"""Batch APIs: requests answered through the OpenAI Batch API and Anthropic Message Batches of the fake provider,
at half price, resumable from the journal without paying twice, with what a batch did not answer retried."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from simia.sim.backends import CompletionRequest, RetryPolicy, resolve_backend
from simia.sim.backends.batch import BatchBackend
from simia.sim.errors import BackendConfigError, BackendUnavailable
from simia.testing.fake_provider import FakeProvider, FakeReply

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
KINDS = ["openai", "anthropic"]


def question(n: int) -> CompletionRequest:
    return CompletionRequest(
        messages=[{"role": "system", "content": "You add numbers."}, {"role": "user", "content": f"{n}+{n}?"}],
        schema=SCHEMA,
        schema_name="sum",
        max_tokens=64,
    )


def doubled(body: dict[str, Any]) -> dict[str, Any]:
    """The fake's answer to a question: the sum it asks for (so each result is checked against its request)."""
    text = body["messages"][-1]["content"]
    n = int(text.split("+")[0])
    return {"answer": 2 * n}


def interactive(kind: str, fake: FakeProvider) -> Any:
    if kind == "openai":
        return resolve_backend(
            "openai:gpt-4.1-mini", base_url=fake.base_url, env={"OPENAI_API_KEY": "k"}, retry=RetryPolicy()
        )
    return resolve_backend(
        "anthropic:claude-sonnet-4-6", base_url=fake.anthropic_url, env={"ANTHROPIC_API_KEY": "k"}, retry=RetryPolicy()
    )


def batched(kind: str, fake: FakeProvider, journal: Path, **options: Any) -> BatchBackend:
    return BatchBackend(interactive(kind, fake), journal, linger=0.05, poll=0.01, **options)


async def answer_all(backend: BatchBackend, numbers: range) -> list[Any]:
    return list(await asyncio.gather(*(backend.complete(question(n)) for n in numbers)))


@pytest.mark.parametrize("kind", KINDS)
async def test_concurrent_requests_become_one_batch_and_each_gets_its_own_answer_at_half_price(
    kind: str, tmp_path: Path
) -> None:
    async with FakeProvider(doubled).running() as fake:
        backend = batched(kind, fake, tmp_path / "journal.json")
        completions = await answer_all(backend, range(1, 6))
        price = interactive(kind, fake)
        alone = await price.complete(question(1))
        await price.aclose()
        await backend.aclose()
    assert [c.data for c in completions] == [{"answer": 2 * n} for n in range(1, 6)]
    assert len(fake.batches.submitted) == 1 and len(next(iter(fake.batches.submitted.values()))) == 5
    assert completions[0].usage.cost_usd == pytest.approx(alone.usage.cost_usd * 0.5)
    assert backend.report == {"submitted": 5, "batches": 1, "succeeded": 5}
    journal = json.loads((tmp_path / "journal.json").read_text())
    assert list(journal["batches"]) == list(fake.batches.submitted)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_resumed_run_reads_the_batches_it_paid_for_instead_of_submitting_them_again(
    kind: str, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.json"
    async with FakeProvider(doubled).running() as fake:
        fake.batches.polls = 10_000  # the first run is interrupted while its batch is in progress
        first = batched(kind, fake, journal)
        run = asyncio.ensure_future(answer_all(first, range(1, 4)))
        while not journal.exists():  # noqa: ASYNC110 (another task writes it; the file is what a resume reads)
            await asyncio.sleep(0.01)
        run.cancel()
        await first.aclose()
        fake.batches.polls = 0
        again = batched(kind, fake, journal)
        completions = await answer_all(again, range(1, 4))
        await again.aclose()
    assert [c.data for c in completions] == [{"answer": 2}, {"answer": 4}, {"answer": 6}]
    assert len(fake.batches.submitted) == 1  # nothing submitted twice
    assert again.report == {"resumed": 3, "succeeded": 3}


@pytest.mark.parametrize("kind", KINDS)
async def test_an_expired_batch_is_answered_interactively_or_reported(kind: str, tmp_path: Path) -> None:
    async with FakeProvider(doubled).running() as fake:
        fake.batches.expire_next = True
        backend = batched(kind, fake, tmp_path / "a.json")
        completions = await answer_all(backend, range(1, 3))
        await backend.aclose()
        fake.batches.expire_next = True
        strict = batched(kind, fake, tmp_path / "b.json", fallback=False)
        with pytest.raises(BackendUnavailable, match=r"did not answer request simia-\w+: expired.*without --batch"):
            await strict.complete(question(7))
        await strict.aclose()
    assert [c.data for c in completions] == [{"answer": 2}, {"answer": 4}]
    assert backend.report == {"submitted": 2, "batches": 1, "interactive": 2}
    assert completions[0].usage.cost_usd is not None  # interactive: full price, not discounted


@pytest.mark.parametrize("kind", KINDS)
async def test_a_request_the_batch_errored_is_retried_interactively(kind: str, tmp_path: Path) -> None:
    async with FakeProvider(doubled).running() as fake:
        fake.script(FakeReply({"m": "overloaded"}, status=500))  # the batched attempt gets a 500
        backend = batched(kind, fake, tmp_path / "j.json")
        completion = await backend.complete(question(4))
        await backend.aclose()
    assert completion.data == {"answer": 8}
    assert backend.report == {"submitted": 1, "batches": 1, "interactive": 1}


def test_a_file_that_is_not_a_journal_is_refused_not_overwritten(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text('{"todo": 1}')

    class Nothing:
        spec, model = "openai:x", "x"

        def batches(self) -> None:
            return None

    with pytest.raises(BackendConfigError, match=r"is not a batch journal .* give a new file"):
        BatchBackend(Nothing(), notes)  # type: ignore[arg-type]
    assert notes.read_text() == '{"todo": 1}'
