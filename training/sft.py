"""Supervised fine-tuning on exported episodes with TRL's SFTTrainer (CPU-friendly defaults).

    python -m simia.training.sft --dataset runs/sft --model embedded --max-steps 20 --output-dir ckpt/
    python -m simia.training.sft --config sft.yaml --learning-rate 1e-5

The dataset is a `simia export --format hf` folder or .parquet (or `--format openai` JSONL):
`messages` (tool calls included) and `tools` columns. Only the assistant turns are trained.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import models
from ._config import parse_config

__all__ = ["SFTRun", "load_sft_dataset", "main", "train"]


@dataclass
class SFTRun:
    """Fields of one SFT run (YAML `--config` and `--field value` set them).

    Attributes:
        dataset: `simia export --format hf` folder or .parquet, or an OpenAI-format JSONL.
        model: a Hugging Face path, a .gguf file, `embedded` (SmolLM2-135M) or `tiny` (random, for tests).
        output_dir: where the checkpoint goes.
        max_steps: optimizer steps.
        learning_rate: AdamW learning rate.
        batch_size: conversations per step.
        max_length: tokens per conversation (longer ones are truncated).
        assistant_only_loss: train only the assistant turns (tool calls and answers).
        seed: random seed.
        save: write the final model and tokenizer to output_dir.
    """

    dataset: str = "sft"
    model: str = "embedded"
    output_dir: str = "checkpoints/sft"
    max_steps: int = 10
    learning_rate: float = 1e-4
    batch_size: int = 2
    max_length: int = 1024
    assistant_only_loss: bool = True
    seed: int = 0
    save: bool = True


def load_sft_dataset(path: str) -> Any:
    """The dataset as TRL takes it: `messages` and `tools` columns, tool-call arguments as objects."""
    from datasets import Dataset, load_from_disk  # optional extra (train)

    source = Path(path)
    if source.is_dir():
        return load_from_disk(str(source))
    if source.suffix == ".parquet":
        return Dataset.from_parquet(str(source))
    rows = []
    for line in source.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            for message in row["messages"]:
                if message.get("content") is None:
                    message["content"] = ""
                for call in message.get("tool_calls") or []:
                    if isinstance(call["function"]["arguments"], str):
                        call["function"]["arguments"] = json.loads(call["function"]["arguments"])
            rows.append({"messages": row["messages"], "tools": row.get("tools", [])})
    return Dataset.from_list(rows, on_mixed_types="use_json")


def train(run: SFTRun, *, model: Any = None, tokenizer: Any = None) -> dict[str, Any]:
    """Run SFT; returns the per-step losses and where the checkpoint went."""
    from trl import SFTConfig, SFTTrainer  # type: ignore[attr-defined]

    if model is None:
        model, tokenizer = models.tiny_model() if run.model == "tiny" else models.load_model(run.model)
    dataset = load_sft_dataset(run.dataset)
    config = SFTConfig(
        output_dir=run.output_dir,
        max_steps=run.max_steps,
        learning_rate=run.learning_rate,
        per_device_train_batch_size=run.batch_size,
        gradient_accumulation_steps=1,
        logging_steps=1,
        max_length=run.max_length,
        assistant_only_loss=run.assistant_only_loss,
        seed=run.seed,
        bf16=False,
        fp16=False,
        activation_checkpointing=False,
        use_cpu=True,  # CPU: bf16 is ~250x slower here
        save_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
    )
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    if run.save:
        trainer.save_model(run.output_dir)
        tokenizer.save_pretrained(run.output_dir)
    return {"losses": losses, "output_dir": run.output_dir, "steps": trainer.state.global_step}


def main(argv: list[str] | None = None) -> int:
    run = parse_config(SFTRun, argv, description=__doc__ or "")
    result = train(run)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
