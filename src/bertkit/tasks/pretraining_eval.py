"""Scoring a pretraining model on held-out data, beside the baselines that tell learning from chance.

:func:`evaluate_pretraining` scores masked-LM (and NSP) the way Google reports it: MLM accuracy at all
selected positions, and also at the positions actually replaced by ``[MASK]``, each beside the unigram
baseline (always predicting the most frequent token, :func:`most_frequent_token`; its loss from
:func:`token_counts` and :func:`unigram_surprisal`), and NSP accuracy beside chance.
:func:`evaluate_replaced_token_detection` scores ELECTRA's discriminator beside calling every token original.
Masks are drawn from a seed, so a score is reproducible. The run-level pieces :mod:`bertkit.tasks.pretraining`
calls after training (``_evaluate``, and ``_evaluate_before`` for a continued run) sit at the end.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.data.mixture import PretrainingData
from bertkit.data.shards import PretrainingDataset
from bertkit.modeling import BERTForMaskedLM, BERTForPreTraining
from bertkit.modeling.electra import ELECTRAForPretrainingRTD
from bertkit.training.evaluation import predict_batches
from bertkit.training.rundir import RunDirectory

logger = logging.getLogger("bertkit.pretraining")


@torch.no_grad()
def evaluate_pretraining(model: BERTForPreTraining | BERTForMaskedLM, dataset: PretrainingDataset, *,
                         frequencies_from: PretrainingData | None = None, batch_size: int = 64,
                         device: torch.device | str = "cpu", seed: int = 0, nsp: bool = True) -> dict[str, Any]:
    """Held-out MLM and NSP accuracy beside their baselines (masks drawn with ``seed``, reproducible).

    ``mlm_accuracy_selected`` is Google's metric (every position chosen for prediction);
    ``mlm_accuracy_masked`` counts only positions replaced by ``[MASK]``. The unigram baseline
    predicts the most frequent non-special token of ``frequencies_from`` (default: ``dataset``)
    at the same positions; NSP's baseline is the majority label's share (NSP is left out of
    the result with ``nsp=False``, for a model trained without it: a :class:`~bertkit.BERTForMaskedLM` needs it).
    ``mlm_loss_masked`` / ``mlm_loss_selected`` are the mean cross-entropy (nats) at those positions, beside
    ``unigram_loss_*``, the add-one smoothed unigram model's (:func:`unigram_surprisal`): every position
    counts there, so the loss tells learning from chance on far fewer positions than the accuracy does.
    """
    tokenizer = dataset.load_tokenizer()
    frequencies = token_counts(frequencies_from or dataset, tokenizer.all_special_ids)
    unigram = int(frequencies.argmax())
    unigram_nats = unigram_surprisal(frequencies)
    collator = _seeded_collator(dataset, seed, **({} if model.config.type_vocab_size > 1 else {"token_types": False}))
    counts = dict.fromkeys(("selected", "selected_hits", "selected_unigram", "masked", "masked_hits",
                            "masked_unigram", "nsp", "nsp_hits", "nsp_ones"), 0)
    nats = dict.fromkeys(("selected", "masked", "selected_unigram", "masked_unigram"), 0.0)

    def predictions(model: BERTForPreTraining, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        seq, pooled = model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        labelled = batch["mlm_labels"] != -100
        scores = model.cls.predictions(seq[labelled]).float()
        surprisal = F.cross_entropy(scores, batch["mlm_labels"][labelled], reduction="none")
        nsp_predicted = model.cls.seq_relationship(pooled).argmax(-1) if nsp else labelled.new_zeros(0)
        return scores.argmax(-1), surprisal, nsp_predicted

    model.to(device)
    for batch, (predicted, surprisal, nsp_predicted) in predict_batches(model, dataset, collate_fn=collator,
                                                                        batch_size=batch_size, forward=predictions):
        selected = batch["mlm_labels"] != -100
        targets = batch["mlm_labels"][selected]
        was_mask = batch["input_ids"][selected] == tokenizer.mask_token_id
        counts["selected"] += int(targets.numel())
        counts["selected_hits"] += int((predicted == targets).sum())
        counts["selected_unigram"] += int((targets == unigram).sum())
        counts["masked"] += int(was_mask.sum())
        counts["masked_hits"] += int((predicted == targets)[was_mask].sum())
        counts["masked_unigram"] += int((targets == unigram)[was_mask].sum())
        baseline = unigram_nats[targets]
        nats["selected"] += float(surprisal.double().sum())
        nats["masked"] += float(surprisal[was_mask].double().sum())
        nats["selected_unigram"] += float(baseline.sum())
        nats["masked_unigram"] += float(baseline[was_mask].sum())
        nsp_labels = batch["nsp_labels"] if nsp else nsp_predicted
        counts["nsp"] += int(nsp_labels.numel())
        counts["nsp_hits"] += int((nsp_predicted == nsp_labels).sum())
        counts["nsp_ones"] += int(nsp_labels.sum())

    def ratio(a: str, b: str) -> float:
        return counts[a] / counts[b] if counts[b] else float("nan")

    ones = ratio("nsp_ones", "nsp")
    result = {
        "mlm_accuracy_masked": ratio("masked_hits", "masked"),
        "unigram_accuracy_masked": ratio("masked_unigram", "masked"),
        "mlm_accuracy_selected": ratio("selected_hits", "selected"),
        "unigram_accuracy_selected": ratio("selected_unigram", "selected"),
        "mlm_loss_masked": nats["masked"] / counts["masked"] if counts["masked"] else float("nan"),
        "unigram_loss_masked": nats["masked_unigram"] / counts["masked"] if counts["masked"] else float("nan"),
        "mlm_loss_selected": nats["selected"] / counts["selected"] if counts["selected"] else float("nan"),
        "unigram_loss_selected": (nats["selected_unigram"] / counts["selected"] if counts["selected"]
                                  else float("nan")),
        "nsp_accuracy": ratio("nsp_hits", "nsp"),
        "nsp_chance": max(ones, 1 - ones),
        "masked_positions": counts["masked"],
        "selected_positions": counts["selected"],
        "nsp_examples": counts["nsp"],
        "unigram_token": tokenizer.convert_ids_to_tokens(unigram),
    }
    if not nsp:
        for key in ("nsp_accuracy", "nsp_chance", "nsp_examples"):
            del result[key]
    return result


def _seeded_collator(dataset: PretrainingDataset, seed: int, nsp: bool = True, **options: Any):
    """A collator whose masks depend only on ``seed`` (evaluation is then reproducible); ``options`` are the
    collator's (``token_types``, masking)."""
    return dataset.collator(generator=torch.Generator().manual_seed(seed), nsp=nsp, **options)


@torch.no_grad()
def evaluate_replaced_token_detection(model: ELECTRAForPretrainingRTD, dataset: PretrainingDataset, *,
                                      batch_size: int = 64, device: torch.device | str = "cpu", seed: int = 0,
                                      masking: dict[str, Any] | None = None) -> dict[str, Any]:
    """Held-out scores of ELECTRA's discriminator on the generator's replacements (masks and samples drawn from
    ``seed``: reproducible; ``masking``: the collator's, e.g. :data:`bertkit.tasks.pretraining.ELECTRA_MASKING`).

    ``discriminator_accuracy`` over every real token, beside ``all_original_accuracy`` (calling every token
    original, the baseline), and separately on the ``replaced`` and the ``original`` tokens; ``replaced_share``:
    of the masked tokens, those the generator's sample changed; ``replaced_tokens`` / ``real_tokens``: counts.
    """
    model.to(device)
    collator = _seeded_collator(dataset, seed, nsp=False, **(masking or {}))
    samples = torch.Generator(device=torch.device(device)).manual_seed(seed)
    counts = dict.fromkeys(("real", "replaced", "masked", "hits", "replaced_hits", "original_hits"), 0)

    def forward(model: ELECTRAForPretrainingRTD, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["mlm_labels"],
                    generator=samples)
        return out.discriminator_logits > 0, out.replaced.bool()

    for batch, (said_replaced, replaced) in predict_batches(model, dataset, collate_fn=collator,
                                                            batch_size=batch_size, forward=forward):
        real = batch["attention_mask"].bool()
        right = (said_replaced == replaced) & real
        counts["real"] += int(real.sum())
        counts["replaced"] += int((replaced & real).sum())
        counts["masked"] += int((batch["mlm_labels"] != -100).sum())
        counts["hits"] += int(right.sum())
        counts["replaced_hits"] += int((right & replaced).sum())
        counts["original_hits"] += int((right & ~replaced).sum())

    def ratio(a: int, b: int) -> float:
        return a / b if b else float("nan")

    original = counts["real"] - counts["replaced"]
    return {
        "discriminator_accuracy": ratio(counts["hits"], counts["real"]),
        "all_original_accuracy": ratio(original, counts["real"]),
        "discriminator_accuracy_replaced": ratio(counts["replaced_hits"], counts["replaced"]),
        "discriminator_accuracy_original": ratio(counts["original_hits"], original),
        "replaced_share": ratio(counts["replaced"], counts["masked"]),
        "replaced_tokens": counts["replaced"],
        "real_tokens": counts["real"],
    }


def token_counts(dataset: PretrainingData, exclude: list[int]) -> torch.Tensor:
    """How often each token id occurs in ``dataset``'s shards (int64 ``[vocab_size]``); ``exclude`` (the special
    tokens) count 0."""
    counts = np.zeros(dataset.load_tokenizer().vocab_size, dtype=np.int64)
    for tokens in dataset.token_arrays():
        counts += np.bincount(np.asarray(tokens, dtype=np.int64), minlength=len(counts))[:len(counts)]
    counts[exclude] = 0
    return torch.from_numpy(counts)


def unigram_surprisal(counts: torch.Tensor) -> torch.Tensor:
    """``-log p(token)`` in nats (float64 ``[vocab_size]``) of the add-one smoothed unigram model of ``counts``:
    what a model that ignores the context scores at best, on average, on text like the one counted."""
    counts = counts.double() + 1.0
    return counts.sum().log() - counts.log()


def most_frequent_token(dataset: PretrainingData, exclude: list[int]) -> int:
    """The most frequent token id in ``dataset``'s shards, special tokens excluded."""
    return int(token_counts(dataset, exclude).argmax())


def _evaluate(net: torch.nn.Module, eval_dataset: PretrainingDataset, dataset: PretrainingData,
              device: torch.device, seed: int, nsp: bool, electra_masking: dict[str, Any] | None) -> dict[str, Any]:
    """Held-out scores of a pretraining model: :func:`evaluate_pretraining`; for ELECTRA's pair its generator's,
    beside :func:`evaluate_replaced_token_detection` of the pair (masked as it trained)."""
    if not isinstance(net, ELECTRAForPretrainingRTD):
        return evaluate_pretraining(net, eval_dataset, frequencies_from=dataset, device=device, seed=seed, nsp=nsp)
    generator = evaluate_pretraining(net.generator, eval_dataset, frequencies_from=dataset, device=device, seed=seed,
                                     nsp=False)
    return {**generator, **evaluate_replaced_token_detection(net, eval_dataset, device=device, seed=seed,
                                                             masking=electra_masking)}


def _evaluate_before(run: RunDirectory, evaluate) -> dict[str, Any]:
    """The loaded checkpoint's held-out scores, measured once per run (a resumed run keeps the first run's)."""
    stored = run.info.get("evaluation_before") if run.resumed else None
    if stored is not None:
        return stored
    before = evaluate()
    logger.info("held-out [MASK] accuracy before training: %s (unigram %s)",
                _percent(before["mlm_accuracy_masked"]), _percent(before["unigram_accuracy_masked"]))
    run.record("evaluation_before", before)
    run.save()
    return before


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"
