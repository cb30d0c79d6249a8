"""A verdict: the judge's score of one ended episode, and the one rule for whether a trainer may use it.

Every consumer (the HTTP API, exports, GRPO, rollouts) reads the same `Verdict`;
`training_reward()` is the only place that decides which rewards are usable and
which are masked (`mask_reason()` says why). `outcome` names what an episode is as training data in the one
vocabulary every summary prints: rewarded, unrewarded, or masked with its reason; `tally` counts them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Criterion",
    "FailedBy",
    "Outcome",
    "OutcomeKind",
    "ProcessScores",
    "ProcessStep",
    "ProgressCheck",
    "ProgressCurve",
    "ProgressStep",
    "RuleCheck",
    "Verdict",
    "VerdictStatus",
    "masked_why",
    "outcome",
    "tally",
]

VerdictStatus = Literal["ok", "judge_error", "unjudged"]
FailedBy = Literal["agent", "user", "tool"]
"""Who made an episode fail: the agent, the simulated user (it broke its own rules: `simia.sim.world.personas`)
or the tool (the simulated environment answered against its state or policy; an injected fault is not one)."""
StepScore = Literal["useful", "neutral", "harmful"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")  # verdicts stored by older versions may carry retired fields


class RuleCheck(_Model):
    """One `expected_state` assertion evaluated on the final state ("absent" stands for nothing there)."""

    pointer: str
    expected: Any = None
    actual: Any = None
    passed: bool


class ProgressCheck(_Model):
    """One check as progress weighs it (`simia.sim.judging.progress`).

    Attributes:
        pointer: the JSON Pointer it reads.
        expected: the value it checks for ("absent": nothing there).
        weight: its weight (the task's `weights`, 1 by default).
        forbidden: a forbidden state (a policy violation) rather than a goal of `expected_state`.
        at_start: whether it held at the episode's start.
        at_end: whether it held at its end.
        missing: the pointer resolves to nothing at the end (the check holds only if it expects absence).
    """

    pointer: str
    expected: Any = None
    weight: float = 1.0
    forbidden: bool = False
    at_start: bool = False
    at_end: bool = False
    missing: bool = False


class ProgressStep(_Model):
    """Progress after one event of the episode (`seq`), and the shaped reward of that call.

    Attributes:
        seq: the event's `seq`.
        progress: Phi after the call.
        reward: gamma * Phi(after) - Phi(before); 0 for an `infra` event.
        infra: the call failed for infrastructure reasons or a budget refused it: it never reached the world
            (no state change), so it earns nothing and a trainer should not credit or blame the agent for it.
        achieved: goal checks the call made hold.
        broken: goal checks the call made stop holding.
        violated: forbidden states the call made hold.
    """

    seq: int
    progress: float
    reward: float
    infra: bool = False
    achieved: list[str] = Field(default_factory=list)
    broken: list[str] = Field(default_factory=list)
    violated: list[str] = Field(default_factory=list)


class ProgressCurve(_Model):
    """How far an episode got after each call, from its explicit state (`simia.sim.judging.progress`).

    Attributes:
        start: progress (Phi) at the episode's start; 1 is a full solution.
        end: progress after its last event.
        gamma: the discount of the shaped rewards; with 1, the step rewards sum to `end - start`.
        checks: the checks progress weighs.
        steps: progress and the shaped reward after each event, aligned to event `seq`.
    """

    start: float
    end: float
    gamma: float = 1.0
    checks: list[ProgressCheck] = Field(default_factory=list)
    steps: list[ProgressStep] = Field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        """The shaped reward of each step, in event order."""
        return [step.reward for step in self.steps]


class ProcessStep(_Model):
    """One agent step as the process judge scored it (`simia.sim.judging.process`).

    Attributes:
        step: its number, from 1, in the order the agent took them.
        turn: the index of its assistant message among the transcript's assistant messages (None: the episode had no
            transcript, and each step is one recorded call).
        seqs: the `seq`s of the events its tool calls made (progress steps carry the same), empty for a message.
        score: useful (it moved the task forward), neutral (it did neither) or harmful (it set the task back or
            broke the policy).
        reason: why, in the judge's words.
    """

    step: int
    turn: int | None = None
    seqs: list[int] = Field(default_factory=list)
    score: StepScore = "neutral"
    reason: str = ""

    @property
    def reward(self) -> float:
        """1 for useful, 0 for neutral, -1 for harmful."""
        return {"useful": 1.0, "neutral": 0.0, "harmful": -1.0}[self.score]


class ProcessScores(_Model):
    """The process judge's score of every agent step of an episode (`simia serve --process-judge`).

    Attributes:
        status: `ok`, or `judge_error` (it failed after its retries: no step scores, the outcome unchanged).
        steps: the steps, in order.
        reason: why it failed, on a `judge_error`.
    """

    status: Literal["ok", "judge_error"] = "ok"
    steps: list[ProcessStep] = Field(default_factory=list)
    reason: str = ""

    @property
    def rewards(self) -> list[float]:
        """The process reward of each step, in step order."""
        return [step.reward for step in self.steps]


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
        progress: the progress curve and shaped per-step rewards of a task with checks (None without checks);
            `reward` stays the outcome.
        persona: the persona the simulated user played, as the judge was told (None: no simulated user).
        failed_by: who made the episode fail, as the judge named it (a policy violation is the agent's whatever
            it said); `user` and `tool` are masked from training. None: nothing failed, or no model judged.
        failure: what failed, in the judge's words.
        process: the process judge's per-step scores, when it ran (`--process-judge`).
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
    progress: ProgressCurve | None = None
    persona: str | None = None
    failed_by: FailedBy | None = None
    failure: str = ""
    process: ProcessScores | None = None

    def training_reward(self) -> float | None:
        """The reward a trainer may learn from, or None to mask the sample.

        Masked: judge errors and unjudged episodes (no score exists), episodes with an
        infrastructure failure (the environment, not the policy, went wrong: retry with a fresh
        episode), and transcripts that fabricate tool calls or results (the judge read a story
        the server never told), and episodes the judge says the simulated user or the simulated tool made fail
        (the agent did not cause them: tau2-bench's user-simulator failures). A plain 0 is a real score and is kept.
        """
        if self.reward is None or self.mask_reason() is not None:
            return None
        return float(self.reward)

    def mask_reason(self) -> str | None:
        """Why `training_reward()` masks this verdict, in a few words (the same words for every episode masked for
        one cause, so summaries can count them); None when its reward is usable."""
        if self.status == "judge_error":
            return "judge error"
        if self.status == "unjudged":
            return "unjudged"
        if self.reward is None:
            return "no reward"
        if self.infra_failures:
            return "infrastructure failure"
        if self.fabricated:
            return "fabricated tool calls"
        if self.failed_by == "user":
            return "user failure"
        if self.failed_by == "tool":
            return "tool failure"
        return None

    def mask_detail(self) -> str | None:
        """`mask_reason` with what the verdict says of it (the judge's last reasons, the calls that failed, the
        transcript's mismatches), for an answer to the client whose reward is withheld; None when its reward is
        usable."""
        reason = self.mask_reason()
        if reason is None:
            return None
        if reason == "infrastructure failure":
            detail = [f"{self.infra_failures} call(s) failed for infrastructure reasons"]
        elif reason == "fabricated tool calls":
            detail = self.transcript_mismatches[:2] or ["the transcript claims calls or results the server never ran"]
        else:
            detail = self.reasons[-2:]
        return f"{reason}: {'; '.join(detail)}" if detail else reason

    def as_json(self) -> dict[str, Any]:
        """The verdict as stored and sent (JSON-ready)."""
        return self.model_dump(mode="json")


def masked_why(verdict: Verdict | None) -> str:
    """Why an episode's reward is withheld, in a few words (`Verdict.mask_detail`): what the trainer protocols
    answer a client whose reward is masked."""
    if verdict is None:
        return "the episode has no verdict (the server has no judge)"
    return verdict.mask_detail() or "its reward is usable"


OutcomeKind = Literal["rewarded", "unrewarded", "masked"]


@dataclass(frozen=True)
class Outcome:
    """What an episode is as training data: `rewarded` (a usable reward above 0), `unrewarded` (a usable 0: a real
    score, kept) or `masked` (no usable reward: never training data unless asked for), with why it is masked."""

    kind: OutcomeKind
    reason: str = ""

    def __str__(self) -> str:
        return f"masked ({self.reason})" if self.kind == "masked" and self.reason else self.kind


def outcome(verdict: Verdict | None, *, unjudged: str = "not judged") -> Outcome:
    """The outcome of an episode with `verdict` (None: it has none, masked with the reason `unjudged`)."""
    if verdict is None:
        return Outcome("masked", unjudged)
    reward = verdict.training_reward()
    if reward is None:
        return Outcome("masked", verdict.mask_reason() or "no reward")
    return Outcome("rewarded" if reward > 0 else "unrewarded")


def tally(outcomes: Iterable[Outcome]) -> str:
    """Outcomes counted in the one vocabulary: `rewarded 2  unrewarded 1  masked 1 (judge error 1)`."""
    seen = list(outcomes)
    counts = Counter(o.kind for o in seen)
    why = Counter(o.reason for o in seen if o.kind == "masked" and o.reason)
    reasons = f" ({', '.join(f'{reason} {n}' for reason, n in sorted(why.items()))})" if why else ""
    masked = f"masked {counts['masked']}{reasons}"
    return f"rewarded {counts['rewarded']}  unrewarded {counts['unrewarded']}  {masked}"
