"""Calibrating a loaded model for static int8 before it is written (``bertkit convert SRC -o OUT --dtype int8
[--calibration FILE]``): the texts (:mod:`bertkit.tasks.calibration_set`, or the default set shipped with
bertkit), :func:`bertkit.inference.int8_plan.calibrate`, and the plan put on the model (``model.int8_plan``),
which ``save_pretrained(dir, dtype="int8")`` writes as a static int8 checkpoint (:mod:`bertkit.weights.int8`).

A plain checkpoint (a backbone or a task model) is measured on its encoder's mean-pooled last hidden states: the
retrieval metric that chooses the fallback layers compares those with the float model's. The whole model runs,
so every dense layer (task heads too) gets an activation range. A sentence-transformers directory is calibrated
on its own embeddings instead (:func:`bertkit.sentence.saving.convert_sentence_transformer`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from bertkit.tasks.calibration_set import FLAG, check_language, read_calibration

#: texts per forward pass while calibrating
BATCH_SIZE = 32


def calibrated_plan(model: nn.Module, tokenizer, calibration: str | os.PathLike | None, *,
                    embed: Callable[[list[str]], torch.Tensor] | None = None, encoding: str = "utf-8"):
    """The :class:`~bertkit.inference.int8_plan.Int8Plan` of ``model`` calibrated on the file ``calibration``
    (in ``encoding``, read and checked against ``tokenizer``:
    :func:`~bertkit.tasks.calibration_set.read_calibration`) or, for None, on the default set (English: checked
    against ``tokenizer`` too). ``embed(texts) -> [n, d]``: how the model's output is compared with float's
    (default: :func:`pooled_embedder`). The model is left float."""
    from bertkit.inference.calibration import DEFAULT_SOURCE
    from bertkit.inference.int8_plan import calibrate
    from bertkit.resources import calibration_texts

    if calibration is None:  # English: a model of another language needs its own
        texts, source = calibration_texts(), DEFAULT_SOURCE
        check_language(texts, tokenizer, f"the default calibration set ({source}, English)",
                       f"give {FLAG} FILE with texts in the model's language")
    else:
        found = read_calibration(calibration, tokenizer, encoding)
        texts, source = found.texts, found.source
    return calibrate(model, texts, embed=embed or pooled_embedder(model, tokenizer), source=source)


def pooled_embedder(model: nn.Module, tokenizer, batch_size: int = BATCH_SIZE
                    ) -> Callable[[list[str]], torch.Tensor]:
    """``embed(texts) -> [n, hidden]``: ``model`` run whole on the texts (batches of ``batch_size``, cut at its
    position limit), its encoder's last hidden states mean-pooled over each text's tokens."""
    encoder = getattr(model, "base_model", model)
    limit = model.config.max_tokens

    def embed(texts: list[str]) -> torch.Tensor:
        seen: list[torch.Tensor] = []
        hook = encoder.register_forward_hook(lambda module, args, out: seen.append(out[0]))
        pooled = []
        try:
            with torch.no_grad():
                for start in range(0, len(texts), batch_size):
                    batch = tokenizer(list(texts[start:start + batch_size]), padding=True, truncation=True,
                                      max_length=limit, return_tensors="pt")
                    seen.clear()
                    model(**{k: v for k, v in batch.items() if k in ("input_ids", "attention_mask",
                                                                     "token_type_ids")})
                    mask = batch["attention_mask"].unsqueeze(-1).to(seen[-1].dtype)
                    pooled.append((seen[-1] * mask).sum(1) / mask.sum(1).clamp(min=1))
        finally:
            hook.remove()
        return torch.cat(pooled)

    return embed


def calibrator(source: str | os.PathLike, calibration: str | os.PathLike | None, encoding: str = "utf-8"
               ) -> Callable[[nn.Module, object], None]:
    """What :func:`bertkit.weights.convert.convert` runs on the loaded model before writing it (``prepare=``):
    the plan of :func:`calibrated_plan` put on the model; with no ``calibration`` file a static int8 source keeps
    the plan it has (converting it again needs no new calibration)."""
    from bertkit.tasks.sources import _checkpoint_tokenizer
    from bertkit.weights.download import resolve_source

    def prepare(model: nn.Module, checkpoint) -> None:
        if calibration is None and getattr(model, "int8_plan", None) is not None:
            return
        tokenizer = _checkpoint_tokenizer(checkpoint, Path(resolve_source(source)), source)
        model.int8_plan = calibrated_plan(model, tokenizer, calibration, encoding=encoding)

    return prepare
