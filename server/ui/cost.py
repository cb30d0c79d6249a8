"""What the model calls behind the viewer's pages cost: USD, input tokens (those read from and written to the
provider's prompt cache among them) and output tokens.

An episode's cost is summed from its events' recorded usage (`Spend.of_events`); a run's (the episodes a runs page
lists) from the episode rows, which keep input, output and USD but not the cache split (`Spend.of_rows`). A call
whose model has no known price adds no USD: the cost of calls none of which was priced shows as unknown, never $0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from simia.sim.records import EventRecord
from simia.sim.storage import EpisodeRow

from .html import h

__all__ = ["Spend"]


@dataclass(frozen=True)
class Spend:
    """Tokens and USD of some model calls.

    Attributes:
        input: input tokens, the cached and written ones included.
        cached: input tokens read from the provider's prompt cache (None where the source does not keep them).
        written: input tokens written to the provider's prompt cache (None likewise).
        output: output tokens.
        usd: the cost, None when no call was priced.
    """

    input: int
    cached: int | None
    written: int | None
    output: int
    usd: float | None

    @classmethod
    def of_events(cls, events: Sequence[EventRecord]) -> Spend:
        """The spend of an episode's events, from each one's usage."""
        usage = [e.usage for e in events]
        priced = [float(u["cost_usd"]) for u in usage if u.get("cost_usd") is not None]
        spend = cls(
            input=sum(int(u.get("prompt_tokens", 0)) for u in usage),
            cached=sum(int(u.get("cached_tokens", 0)) for u in usage),
            written=sum(int(u.get("cache_write_tokens", 0)) for u in usage),
            output=sum(int(u.get("completion_tokens", 0)) for u in usage),
            usd=sum(priced),
        )
        return spend if priced else spend.unpriced()

    @classmethod
    def of_rows(cls, rows: Sequence[EpisodeRow]) -> Spend:
        """The spend of the listed episodes (their rows keep no cache split)."""
        usd = sum(r.cost_usd for r in rows)
        spend = cls(
            input=sum(r.prompt_tokens for r in rows),
            cached=None,
            written=None,
            output=sum(r.completion_tokens for r in rows),
            usd=usd,
        )
        return spend if usd else spend.unpriced()  # a priced call costs more than nothing

    def unpriced(self) -> Spend:
        """This spend with no call priced: its USD unknown, unless it made no model call (then nothing)."""
        return replace(self, usd=None if self.input or self.output else 0.0)

    def html(self) -> str:
        """One line for a page's facts: USD, then input (cached, written) and output tokens."""
        usd = "cost unknown (no price for the model; set one with --price)" if self.usd is None else f"${self.usd:.4f}"
        cache = [f"{n:,} {what}" for n, what in ((self.cached, "cached"), (self.written, "written to the cache")) if n]
        split = f" ({', '.join(cache)})" if cache else ""
        parts = [usd, f"{self.input:,} input tokens{split}", f"{self.output:,} output tokens"]
        return h(" · ".join(parts))
