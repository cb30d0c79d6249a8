"""Prompt size: simia's state-as-memory prompt vs replaying the whole history (Simia's way).

Runs one 50-call episode on the `retail` world (every tool model-answered: its grounding
removed, `_retail_episode.retail_world`) with a deterministic backend that answers from the
state shown in the prompt, and prints, at call 50, the prompt
tokens of both approaches and their ratio (target <= 0.25), plus the share of each
prompt that is a stable prefix across calls (target >= 0.70).

    python bench/prompt_size.py [--calls N] [--quick]

The whole run takes about a second, so `--quick` keeps its 50 calls (the ratio is defined
at call 50) and only leaves the targets unchecked, whatever BENCH_STRICT says.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _retail_episode import answer, episode_calls, history_parts, prefix_share, retail_world
from simia.sim.backends import CompletionRequest, FunctionBackend
from simia.sim.engine import Simulator, Step, system_prompt
from simia.sim.records import PastCall

CALLS = 50


def respond(request: CompletionRequest) -> dict[str, Any]:
    """Answer from the state shown in the prompt (`_retail_episode.answer`)."""
    return answer(str(request.messages[1]["content"]))


@functools.lru_cache(maxsize=1)
def token_counter() -> tuple[str, Callable[[str], int]]:
    """SmolLM2's tokenizer when llama-cpp-python and the model are installed, else ~4 characters a token."""
    try:
        from llama_cpp import Llama
        from simia.sim.backends.local import embedded_model_path

        vocab = Llama(model_path=str(embedded_model_path()), vocab_only=True, verbose=False)
    except Exception:  # any failure falls back to the estimate
        return "chars/4", lambda text: len(text) // 4
    return "SmolLM2 tokenizer", lambda text: len(vocab.tokenize(text.encode(), add_bos=False))


async def main(calls: int, strict: bool) -> None:
    world = retail_world()
    backend = FunctionBackend(respond)
    sim = Simulator(backend)
    state = world.initial_state
    history: list[Step] = []
    window: list[PastCall] = []  # what the server keeps of each event for the simulator's window
    simia_prompts: list[str] = []
    simia_style: list[str] = []
    for call in episode_calls(calls):
        simia_style.append("\n".join([system_prompt(world), *history_parts(history, call)]))
        step = await sim.step(world, state, window, call)
        assert not step.is_error, step.detail or step.text
        request = backend.requests[-1]
        simia_prompts.append("\n".join(str(m["content"]) for m in request.messages))
        history.append(step)
        window.append(PastCall(step.tool, step.arguments, step.text if step.is_error else step.output, step.is_error))
        state = step.state
    name, count = token_counter()
    ours, theirs = count(simia_prompts[-1]), count(simia_style[-1])
    first = count(simia_prompts[0])
    share = prefix_share(simia_prompts)
    print(f"tokens counted with: {name}")
    print(f"call 1 prompt tokens (simia):            {first}")
    print(f"call {calls} prompt tokens (simia, state):   {ours}")
    print(f"call {calls} prompt tokens (full history):   {theirs}")
    print(f"ratio simia / full history at call {calls}:  {ours / theirs:.3f}   (target <= 0.25)")
    print(f"stable prefix share across calls:       {share:.3f}   (target >= 0.70)")
    if strict and (ours / theirs > 0.25 or share < 0.70):
        sys.exit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simia's prompt vs replaying the whole history")
    parser.add_argument("--calls", type=int, default=CALLS, help=f"calls in the episode (default {CALLS})")
    parser.add_argument("--quick", action="store_true", help="check that the bench runs, not its targets")
    args = parser.parse_args()
    asyncio.run(main(args.calls, strict=bool(os.environ.get("BENCH_STRICT")) and not args.quick))
