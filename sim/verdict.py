"""A verdict: the judge's score of one ended episode, and the one rule for whether a trainer may use it.

Every consumer (the HTTP API, exports, GRPO, rollouts) reads the same `Verdict`;
`training_reward()` is the only place that decides which rewards are usable and
which are masked.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Criterion", "RuleCheck", "Verdict", "VerdictStatus"]

VerdictStatus = Literal["ok", "judge_error", "unjudged"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")  # verdicts stored by older versions may carry retired fields


class RuleCheck(_Model):
    """One `expected_state` assertion evaluated on the final state ("absent" stands for nothing there)."""

    pointer: str
    expected: Any = None
    actual: Any = None
    passed: bool


class Criterion(_Model):
    """One rubric criterion as the LLM judge scored it, with its evidence."""

    criterion: str = ""
    passed: bool = False
    evidence: str = ""


class Verdict(_Model):
    """The score of one episode.

    Attributes:
        reward: 1 or 0; None when nothing could be scored (`judge_error`, `unjudged`).
        status: `ok`, `judge_error` (the judge model failed after its retries) or `unjudged`
            (no rule checks and no judge model).
        reasons: short explanations, failed rules first.
        criteria: the LLM judge's rubric criteria.
        rule_checks: the task's `expected_state` checks.
        transcript_mismatches: where the client's transcript disagrees with what the server executed.
        fabricated: the transcript claims tool calls or results the server never produced.
        infra_failures: calls of the episode that failed for infrastructure reasons (backend, timeout, budget).
        checks: which checks ran (`rules`, `llm`).
        judge_model: the model that judged, if any.
        usage: the judge's tokens and cost.
        prompt_version: the judge prompt's version.
    """

    reward: int | None = None
    status: VerdictStatus = "ok"
    reasons: list[str] = Field(default_factory=list)
    criteria: list[Criterion] = Field(default_factory=list)
    rule_checks: list[RuleCheck] = Field(default_factory=list)
    transcript_mismatches: list[str] = Field(default_factory=list)
    fabricated: bool = False
    infra_failures: int = 0
    checks: list[str] = Field(default_factory=list)
    judge_model: str | None = None
    usage: dict[str, Any] = Field(default_factory=dict)
    prompt_version: str = ""

    def training_reward(self) -> float | None:
        """The reward a trainer may learn from, or None to mask the sample.

        Masked: judge errors and unjudged episodes (no score exists), episodes with an
        infrastructure failure (the environment, not the policy, went wrong: retry with a fresh
        episode), and transcripts that fabricate tool calls or results (the judge read a story
        the server never told). A plain 0 is a real score and is kept.
        """
        if self.status != "ok" or self.reward is None or self.infra_failures or self.fabricated:
            return None
        return float(self.reward)

    def as_json(self) -> dict[str, Any]:
        """The verdict as stored and sent (JSON-ready)."""
        return self.model_dump(mode="json")
