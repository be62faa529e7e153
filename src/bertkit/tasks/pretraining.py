"""Pretraining end to end: raw text (or prepared shards) in; a BERT, its tokenizer, metrics and plots out.

:func:`pretrain` trains a :class:`~bertkit.BERTForPreTraining` on a data directory written by
:func:`bertkit.data.create_pretraining_data`, with the one training engine
(:class:`bertkit.training.Trainer`, single process or torchrun DDP). :func:`pretrain_from_text`
does everything from text files: it learns a WordPiece vocabulary, holds out every
``heldout_every``-th document, builds both data directories and pretrains.
:func:`evaluate_pretraining` scores held-out data the way Google reports it — MLM accuracy at
all selected positions — and also at the positions actually replaced by ``[MASK]``, each beside
the unigram baseline (always predicting the most frequent token), and NSP accuracy beside chance.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.config import BERTConfig
from bertkit.data.corpus import read_documents
from bertkit.data.shards import PretrainingDataset, create_pretraining_data
from bertkit.io import atomic_write_text
from bertkit.modeling import BERTForPreTraining
from bertkit.presets import SIZES, preset_fields
from bertkit.tokenization import BERTTokenizerFast
from bertkit.training import Trainer, TrainingConfig
from bertkit.training.metrics import plot_metrics

MODEL_DIR = "model"
EVALUATION_FILE = "evaluation.json"


@dataclass
class PretrainingResult:
    """Where a run put things, and what it measured on held-out data (empty without one)."""

    output_dir: Path
    model_dir: Path
    metrics_path: Path
    plot_path: Path | None
    evaluation: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


def model_config(model: str | os.PathLike | BERTConfig, tokenizer: BERTTokenizerFast, max_seq_length: int,
                 **overrides: Any) -> BERTConfig:
    """A preset size (``tiny`` ... ``large``) or a config JSON, fitted to the tokenizer's vocabulary."""
    if isinstance(model, BERTConfig):
        base = model.to_dict()
    elif str(model) in SIZES:
        base = preset_fields(str(model))
    elif Path(model).is_file():
        base = BERTConfig.from_json_file(model).to_dict()
    else:
        raise ValueError(f"model must be one of {list(SIZES)} or a config JSON file, got {model!r}.")
    special = {f"{name}_id": tokenizer.vocab[tok] for name, tok in tokenizer.special_tokens.items()}
    base.update(vocab_size=tokenizer.vocab_size, **special)
    base["max_position_embeddings"] = max(base.get("max_position_embeddings", 512), max_seq_length)
    base.pop("id2label", None)
    return BERTConfig(**{**base, **overrides})


def pretrain(data_dir: str | os.PathLike, output_dir: str | os.PathLike, *,
             model: str | os.PathLike | BERTConfig = "tiny", training: TrainingConfig | None = None,
             eval_data_dir: str | os.PathLike | None = None, resume_from: str | None = None,
             model_overrides: dict[str, Any] | None = None, masking: dict[str, Any] | None = None,
             callbacks=None) -> PretrainingResult:
    """Pretrain on ``data_dir``; save the model and tokenizer (HF format) under ``output_dir/model``.

    ``masking`` overrides the training collator's masking (e.g. ``mask_replace_prob``);
    evaluation always masks as BERT does (15%, 80/10/10).

    ``training`` defaults to a short run; its ``output_dir`` is set to ``output_dir``. The
    metrics go to ``metrics.jsonl``, a plot of the curves to ``metrics.png`` (with
    matplotlib), the held-out evaluation to ``evaluation.json``.
    """
    start = time.perf_counter()
    output_dir = Path(output_dir)
    dataset = PretrainingDataset(data_dir)
    tokenizer = dataset.load_tokenizer()
    training = (training or TrainingConfig(max_steps=1000, learning_rate=1e-3, warmup_ratio=0.1))
    training = training.replace(output_dir=str(output_dir))
    config = model_config(model, tokenizer, dataset.max_seq_length, **(model_overrides or {}))
    net = BERTForPreTraining(config)
    collator = dataset.collator(**(masking or {}))
    eval_dataset = PretrainingDataset(eval_data_dir) if eval_data_dir is not None else None
    trainer = Trainer(net, dataset, config=training, collate_fn=collator,
                      eval_dataset=eval_dataset, eval_collate_fn=_seeded_collator(eval_dataset, training.seed)
                      if eval_dataset is not None else None, callbacks=callbacks)
    trainer.train(resume_from=resume_from)
    model_dir = output_dir / MODEL_DIR
    result = PretrainingResult(output_dir, model_dir, output_dir / "metrics.jsonl", None)
    if trainer.ctx.is_main:
        net.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        result.plot_path = plot_metrics(result.metrics_path, output_dir / "metrics.png")
        if eval_dataset is not None:
            result.evaluation = evaluate_pretraining(net, eval_dataset, frequencies_from=dataset,
                                                     device=trainer.device, seed=training.seed)
            atomic_write_text(output_dir / EVALUATION_FILE, json.dumps(result.evaluation, indent=2) + "\n")
    result.seconds = time.perf_counter() - start
    return result


@torch.no_grad()
def evaluate_pretraining(model: BERTForPreTraining, dataset: PretrainingDataset, *,
                         frequencies_from: PretrainingDataset | None = None, batch_size: int = 64,
                         device: torch.device | str = "cpu", seed: int = 0) -> dict[str, float]:
    """Held-out MLM and NSP accuracy beside their baselines (masks drawn with ``seed``, reproducible).

    ``mlm_accuracy_selected`` is Google's metric (every position chosen for prediction);
    ``mlm_accuracy_masked`` counts only positions replaced by ``[MASK]``. The unigram baseline
    predicts the most frequent non-special token of ``frequencies_from`` (default: ``dataset``)
    at the same positions; NSP's baseline is the majority label's share.
    """
    tokenizer = dataset.load_tokenizer()
    unigram = most_frequent_token(frequencies_from or dataset, tokenizer.all_special_ids)
    collator = _seeded_collator(dataset, seed)
    model.eval()
    counts = dict.fromkeys(("selected", "selected_hits", "selected_unigram", "masked", "masked_hits",
                            "masked_unigram", "nsp", "nsp_hits", "nsp_ones"), 0)
    for start in range(0, len(dataset), batch_size):
        batch = {k: v.to(device) for k, v in collator([dataset[i] for i in range(start, min(start + batch_size,
                                                                                            len(dataset)))]).items()}
        seq, pooled = model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        selected = batch["mlm_labels"] != -100
        targets = batch["mlm_labels"][selected]
        predictions = model.cls.predictions(seq[selected]).argmax(-1)
        was_mask = batch["input_ids"][selected] == tokenizer.mask_token_id
        counts["selected"] += int(targets.numel())
        counts["selected_hits"] += int((predictions == targets).sum())
        counts["selected_unigram"] += int((targets == unigram).sum())
        counts["masked"] += int(was_mask.sum())
        counts["masked_hits"] += int((predictions == targets)[was_mask].sum())
        counts["masked_unigram"] += int((targets == unigram)[was_mask].sum())
        nsp = batch["nsp_labels"]
        counts["nsp"] += int(nsp.numel())
        counts["nsp_hits"] += int((model.cls.seq_relationship(pooled).argmax(-1) == nsp).sum())
        counts["nsp_ones"] += int(nsp.sum())

    def ratio(a: str, b: str) -> float:
        return counts[a] / counts[b] if counts[b] else float("nan")

    ones = ratio("nsp_ones", "nsp")
    return {
        "mlm_accuracy_masked": ratio("masked_hits", "masked"),
        "unigram_accuracy_masked": ratio("masked_unigram", "masked"),
        "mlm_accuracy_selected": ratio("selected_hits", "selected"),
        "unigram_accuracy_selected": ratio("selected_unigram", "selected"),
        "nsp_accuracy": ratio("nsp_hits", "nsp"),
        "nsp_chance": max(ones, 1 - ones),
        "masked_positions": counts["masked"],
        "selected_positions": counts["selected"],
        "nsp_examples": counts["nsp"],
        "unigram_token": tokenizer.convert_ids_to_tokens(unigram),
    }


def _seeded_collator(dataset: PretrainingDataset, seed: int):
    """A collator whose masks depend only on ``seed`` (evaluation is then reproducible)."""
    return dataset.collator(generator=torch.Generator().manual_seed(seed))


def most_frequent_token(dataset: PretrainingDataset, exclude: list[int]) -> int:
    """The most frequent token id in ``dataset``'s shards, special tokens excluded."""
    counts = np.zeros(dataset.load_tokenizer().vocab_size, dtype=np.int64)
    for tokens in dataset.token_arrays():
        counts += np.bincount(np.asarray(tokens, dtype=np.int64), minlength=len(counts))[:len(counts)]
    counts[exclude] = -1
    return int(counts.argmax())


def pretrain_from_text(files: list[str | os.PathLike] | str | os.PathLike, output_dir: str | os.PathLike, *,
                       model: str | os.PathLike | BERTConfig = "tiny", vocab_size: int = 8000,
                       do_lower_case: bool = True, max_seq_length: int = 128, heldout_every: int = 20,
                       dupe_factor: int = 1, whole_word: bool = False, masked_lm_prob: float = 0.15,
                       training: TrainingConfig | None = None,
                       model_overrides: dict[str, Any] | None = None, masking: dict[str, Any] | None = None,
                       progress: bool = True, callbacks=None) -> PretrainingResult:
    """Learn a vocabulary, build train / held-out data (every ``heldout_every``-th document held out), pretrain.

    ``masked_lm_prob`` applies to training; held-out data is always masked at BERT's 15%.
    """
    output_dir = Path(output_dir)
    data_root = output_dir / "data"
    data_root.mkdir(parents=True, exist_ok=True)
    documents = list(read_documents(files))
    if len(documents) < 2 * heldout_every:
        heldout_every = max(2, len(documents) // 2)
    heldout = documents[::heldout_every]
    train = [d for i, d in enumerate(documents) if i % heldout_every]
    for name, docs in (("train.txt", train), ("heldout.txt", heldout)):  # Google's one-sentence-per-line format
        atomic_write_text(data_root / name, "\n\n".join("\n".join(doc) for doc in docs) + "\n")
    tokenizer = BERTTokenizerFast.train([data_root / "train.txt"], vocab_size=vocab_size,
                                        do_lower_case=do_lower_case, show_progress=progress)
    common = dict(max_seq_length=max_seq_length, whole_word=whole_word, progress=progress, format="google")
    train_dir = create_pretraining_data([data_root / "train.txt"], tokenizer, data_root / "train",
                                        dupe_factor=dupe_factor, masked_lm_prob=masked_lm_prob, **common)
    heldout_dir = create_pretraining_data([data_root / "heldout.txt"], tokenizer, data_root / "heldout",
                                          seed=7, **common)
    return pretrain(train_dir, output_dir, model=model, training=training, eval_data_dir=heldout_dir,
                    model_overrides=model_overrides, masking=masking, callbacks=callbacks)
