"""Shared helpers for the benchmarks: token counting with the embedded model's tokenizer."""

from __future__ import annotations

import functools
from collections.abc import Callable


@functools.lru_cache(maxsize=1)
def token_counter() -> tuple[str, Callable[[str], int]]:
    """SmolLM2's tokenizer when llama-cpp-python and the model are installed, else ~4 characters a token."""
    try:
        from llama_cpp import Llama
        from simia.sim.backends.local import embedded_model_path

        vocab = Llama(model_path=str(embedded_model_path()), vocab_only=True, verbose=False)
    except Exception:
        return "chars/4", lambda text: len(text) // 4
    return "SmolLM2 tokenizer", lambda text: len(vocab.tokenize(text.encode(), add_bos=False))
