"""A trajectory printed for people: the user's and agent's turns, tool calls, outputs, state changes, verdict.

`simia demo` prints its episode with it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TextIO

from simia.sim.verdict import Verdict, outcome
from simia.sim.wire import Event

__all__ = ["render"]


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render(transcript: list[dict[str, Any]], events: Sequence[Event], verdict: Verdict | None, out: TextIO) -> None:
    """Print a trajectory readably."""
    by_call = iter(events)
    for message in transcript:
        role = message["role"]
        if role == "system":
            continue
        if role == "user":
            print(f"  USER       {_short(message.get('content') or '')}", file=out)
        elif role == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                fn = call["function"]
                print(f"  AGENT ->   {fn['name']}({_short(fn['arguments'], 120)})", file=out)
        elif role == "assistant":
            print(f"  AGENT      {_short(message.get('content') or '')}", file=out)
        elif role == "tool":
            event = next(by_call, None)
            kind = f" [{event.error_kind} error]" if event and event.is_error else ""
            print(f"  TOOL{kind:<7}{_short(message.get('content') or '')}", file=out)
            if event and event.state_patch:
                print(f"  STATE      {_short(event.state_patch)}", file=out)
    if verdict:
        print(f"  VERDICT    {outcome(verdict)}", file=out)
        for check in verdict.rule_checks:
            mark = "pass" if check.passed else "FAIL"
            print(
                f"    rule {mark}: {check.pointer} expected {json.dumps(check.expected)}, "
                f"found {json.dumps(check.actual)}",
                file=out,
            )
        for reason in verdict.reasons[:3]:
            print(f"    reason: {_short(reason)}", file=out)
