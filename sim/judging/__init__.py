"""Judging: a 0/1 reward for a finished episode, the rule checks it rests on, and how it is kept honest.

`rules` evaluates a task's `expected_state` on a state (no model); `progress` turns a task's weighted checks into
a progress curve and shaped per-step rewards, after every call; `transcript` compares an agent's account
with the calls the server executed; `Judge` combines both with an LLM verdict; `rejudge` scores stored
episodes again; `adversarial` measures how often transcripts built to fool the judge do; `step_grade`
scores one simulated answer against a real server's.
"""

from __future__ import annotations

from .adversarial import AdversarialReport, load_cases, run_adversarial
from .judge import JUDGE_PROMPT_VERSION, EpisodeView, Judge, data_block
from .progress import Check, ProgressTracker, progress_curve, task_checks
from .rejudge import rejudge
from .rules import check_holds, json_equal, rule_checks
from .step_grade import DIMENSIONS, GradeError, Score, StepGrade, grade_step
from .transcript import RecordedCall, fabricated_claims, recorded_calls, transcript_mismatches

__all__ = [
    "DIMENSIONS",
    "JUDGE_PROMPT_VERSION",
    "AdversarialReport",
    "Check",
    "EpisodeView",
    "GradeError",
    "Judge",
    "ProgressTracker",
    "RecordedCall",
    "Score",
    "StepGrade",
    "check_holds",
    "data_block",
    "fabricated_claims",
    "grade_step",
    "json_equal",
    "load_cases",
    "progress_curve",
    "recorded_calls",
    "rejudge",
    "rule_checks",
    "run_adversarial",
    "task_checks",
    "transcript_mismatches",
]
