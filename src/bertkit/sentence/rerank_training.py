"""Fine-tuning a cross-encoder (a reranker) on the one training engine: :func:`finetune_reranker`.

The same run as :func:`bertkit.embedding.training.finetune_embeddings` (its :class:`BatchSchedule` adapter, run
directory, exact resume, ``metrics.jsonl``, ``results.json``), with a :class:`~bertkit.embedding.cross_encoder.
CrossEncoder` as the model and a reranking loss (:mod:`bertkit.embedding.rerank_losses`) on a
:class:`~bertkit.embedding.rerank_losses.RerankBatch`:

* (query, passage, label) rows: each row's one passage with its label (0/1 or a score);
* (query, positive, negatives...) rows: the positive first, then the negatives, labelled 1, 0, 0, ... (a row's
  ``label`` may instead list a score per passage);
* ``mnrl`` needs no labels (the positive is each row's first passage; other rows' passages are negatives).

``OUT/model`` is written by :meth:`CrossEncoder.save`, with a short model card ``README.md``:
sentence-transformers' ``CrossEncoder`` loads it with the same scores and ``bertkit serve`` serves it on
``/rerank``.

With rows to rerank and/or a BEIR directory and a first stage (:mod:`bertkit.embedding.reranking`'s
evaluators), the cross-encoder wrapping the model being trained is scored at step 0, every N steps and at the
end, as the bi-encoder is (:class:`~bertkit.embedding.eval_schedule.EvalSchedule`): ``"eval"`` records of
``metrics.jsonl``, the final scores in ``results.json`` and a before/after table in the model card.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.io import atomic_write_text
from bertkit.sentence.data import RowBatch
from bertkit.sentence.data_layout import UNIT, LabelRule
from bertkit.sentence.evaluation.ir_metrics import DEFAULT_K
from bertkit.sentence.losses import build_rerank_loss
from bertkit.sentence.ranking_checks import check_reranker_data
from bertkit.sentence.training import (
    MODEL_DIR,
    EmbeddingTrainingResult,
    data_parallel,
    finish,
    global_batches,
    model_card,
    train_batches,
)


class RerankCollator:
    """The Trainer's ``collate_fn``: ``[RowBatch]`` -> ``{"rows": [n] int64, "rerank": RerankBatch}`` (see the
    module docstring for the labels); ``labelled``: whether the loss reads labels. Under DDP it is given the
    global batch and keeps rank ``rank`` 's share (:meth:`~bertkit.embedding.data.RowBatch.part`); the reranking
    losses score each rank's rows on their own (mnrl's in-batch negatives come from the rank's share)."""

    def __init__(self, tokenize, labelled: bool, rank: int = 0, world_size: int = 1):
        self.tokenize, self.labelled = tokenize, labelled
        self.rank, self.world_size = rank, world_size

    def __call__(self, batches: list[RowBatch]) -> dict[str, Any]:
        from bertkit.sentence.losses.rerank import RerankBatch

        (batch,) = batches
        batch = batch.part(self.rank, self.world_size)
        queries, documents, labels = [], [], []
        for place, row in zip(batch.where, batch.rows):
            passages = _passages(row)
            queries.append(row["anchor"])
            documents.append(passages)
            labels.append(_row_labels(row.get("label"), len(passages), place))
        return {"rows": torch.arange(len(queries)),
                "rerank": RerankBatch(queries, documents, self.tokenize, labels if self.labelled else None)}


def _passages(row: Mapping[str, Any]) -> list[str]:
    """A row's passages: its positive, then its negatives (a list, or ``negative_1..k`` in order)."""
    negatives = row.get("negatives") or [row[k] for k in sorted(row, key=_number) if k.startswith("negative_")]
    return [row["positive"], *negatives]


def _number(role: str) -> int:
    return int(role.split("_")[1]) if role.startswith("negative_") else 0


def check_rerank_row(loss: str, row: Mapping[str, Any], place: str) -> None:
    """What ``--loss loss`` needs of a training row, checked as the data is read (``place``: the file and line):
    one label per passage (or none), each in [0, 1] for ``bce``; mnrl reads no labels."""
    if loss == "mnrl":
        return
    _row_labels(row.get("label"), len(_passages(row)), place)
    if loss == "bce":
        LabelRule(f"--loss {loss}", *UNIT)(row, place)


def _row_labels(label: Any, passages: int, place: str) -> list[float]:
    """A row's label per passage: the row's own (one number for one passage, or one per passage), else the
    positive 1 and each negative 0."""
    if label is None:
        return [1.0] + [0.0] * (passages - 1)
    values = label if isinstance(label, list) else [label]
    if len(values) != passages:
        raise ValueError(f"{place}: {len(values)} label(s) for {passages} passage(s); give one score per passage "
                         "(positive first), or leave the label out of (query, positive, negatives) rows.")
    return [float(v) for v in values]


class Reranker(nn.Module):
    """What the Trainer trains: ``training_step({"rerank": RerankBatch}) -> (loss(cross.score, batch), {})``."""

    def __init__(self, cross, loss: nn.Module):
        super().__init__()
        self.model, self.loss = cross.model, loss  # the parameters the optimizer sees
        self.cross = cross

    def training_step(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        return self.loss(self.cross.score, batch["rerank"]), {}


def finetune_reranker(model: str | os.PathLike, train_files: str | os.PathLike | Sequence[str | os.PathLike],
                      output_dir: str | os.PathLike, *, loss: str = "bce", mini_batch_size: int | None = None,
                      num_negatives: int | None = None, columns: Mapping[str, Any] | None = None,
                      sampling: str = "proportional", encoding: str = "utf-8", max_seq_length: int | None = None,
                      batch_size: int = 16,
                      epochs: float = 1.0, max_steps: int | None = None, learning_rate: float = 2e-5,
                      warmup_ratio: float = 0.1, weight_decay: float = 0.01, max_grad_norm: float | None = 1.0,
                      seed: int = 42, precision: str = "auto", device: str = "auto", save_every: int | None = None,
                      resume: bool = False, overwrite: bool = False, apply_changes: bool = False, progress: bool = True,
                      threads: int | str | None = None, callbacks: Mapping[str, Any] | None = None,
                      gradient_accumulation_steps: int = 1, report_to: str | Sequence[str] | None = None,
                      eval_rerank: str | os.PathLike | None = None, eval_beir: str | os.PathLike | None = None,
                      eval_first_stage: Any = None, eval_top_k: int = 100, eval_every: int | None = None,
                      eval_split: str = "test", eval_k: Sequence[int] = DEFAULT_K) -> EmbeddingTrainingResult:
    """Fine-tune ``model`` (a cross-encoder, or a base checkpoint or bi-encoder directory: its encoder, a new
    one-label head seeded by ``seed``) as a reranker on ``train_files`` with ``loss`` (:func:`build_rerank_loss`)
    and write ``output_dir``; the other arguments are :func:`~bertkit.embedding.training.finetune_embeddings`'.

    ``eval_rerank`` (rows, as ``bertkit evaluate --rerank``) and ``eval_beir`` with ``eval_first_stage`` (an
    embedding model directory, encoding in fp32, or a run file, as ``--beir --first-stage``: its ``eval_top_k``
    documents per query of the ``eval_split`` reranked) score the model being trained, metrics at each of
    ``eval_k``, at step 0, every ``eval_every`` steps (default: every epoch) and at the last step, without
    changing what it learns (:func:`rerank_evaluators`: read, checked and the first stage run before training
    starts)."""
    from bertkit.sentence.cross_encoder import CrossEncoder
    from bertkit.sentence.eval_schedule import EvalSchedule
    from bertkit.sentence.training import evaluation_card
    from bertkit.training.config import resolve_device
    from bertkit.training.rundir import file_fingerprint, open_run

    start = time.perf_counter()
    files = [train_files] if isinstance(train_files, (str, os.PathLike)) else list(train_files)
    objective = build_rerank_loss(loss, mini_batch_size=mini_batch_size, num_negatives=num_negatives)
    evaluators, described = rerank_evaluators(eval_rerank, eval_beir, eval_first_stage, eval_top_k, eval_every,
                                              eval_split, eval_k)
    rank, world = data_parallel()  # the data is read and every row checked before the run directory opens
    dataset = global_batches(files, batch_size, world, columns=columns, sampling=sampling, seed=seed,
                             encoding=encoding, check=functools.partial(check_rerank_row, loss))
    check_reranker_data(dataset, objective, loss, world)  # before the run directory: a refused run leaves nothing
    with open_run(output_dir, resume=resume, overwrite=overwrite) as run:
        torch.manual_seed(seed)  # a new head's initial weights are a function of the seed
        cross = CrossEncoder(model, num_labels=1, max_length=max_seq_length, from_bi_encoder=True, dtype="fp32",
                             device=resolve_device(device, int(os.environ.get("LOCAL_RANK", 0))))
        settings = {"loss": loss, "mini_batch_size": mini_batch_size, "num_negatives": num_negatives,
                    "columns": columns, "sampling": sampling, "batch_size": batch_size,
                    "max_seq_length": cross.max_length,
                    **({"encoding": encoding} if encoding != "utf-8" else {})}  # older runs still resume
        run.check("model", {"source": os.fspath(model)})
        run.check("data", {"train": file_fingerprint(files)})
        run.check("reranker", json.loads(json.dumps(settings)))
        run.save()
        collate = RerankCollator(cross.tokenize, labelled=loss != "mnrl", rank=rank, world_size=world)
        evaluation = EvalSchedule(functools.partial(evaluate_reranker, cross, evaluators), eval_every) \
            if evaluators else None
        trainer, results = train_batches(run, Reranker(cross, objective), dataset, collate, epochs=epochs,
                                   max_steps=max_steps, save_every=save_every, callbacks=callbacks,
                                   evaluation=evaluation,
                                   learning_rate=learning_rate, warmup_ratio=warmup_ratio, weight_decay=weight_decay,
                                   max_grad_norm=max_grad_norm, seed=seed, precision=precision, device=device,
                                   progress_bar=progress, threads=threads, report_to=report_to,
                                   gradient_accumulation_steps=gradient_accumulation_steps,
                                   apply_changes=apply_changes)
        if not trainer.ctx.is_main:
            return EmbeddingTrainingResult(run.path, run.path / MODEL_DIR, results, run.path / "metrics.jsonl")
        cross.model.eval()
        cross.save(run.path / MODEL_DIR)
        card = model_card("A cross-encoder (reranker) fine-tuned with bertkit",
                          ["sentence-transformers", "cross-encoder", "reranker", "bertkit"], model, dataset, loss,
                          objective, {"mini_batch_size": mini_batch_size, "num_negatives": num_negatives},
                          [f"max sequence length: {cross.max_length}"], trainer.config, results,
                          evaluation=evaluation_card(described, evaluation))
        atomic_write_text(run.path / MODEL_DIR / "README.md", card)
        return finish(trainer, run.path / MODEL_DIR, results, start)


# ---------------------------------------------------------------------- evaluation during training
def rerank_evaluators(rows, beir, first_stage, top_k: int, every: int | None, split: str,
                      k_values: Sequence[int]) -> tuple[dict[str, Any], dict[str, str]]:
    """``({"rerank": RowsRerankEvaluator, "beir": BeirRerankEvaluator}, {same keys: a line describing each})``
    for the rows file ``rows`` and the BEIR directory ``beir`` reranked over ``first_stage``'s ``top_k`` (each
    None to leave it out; both empty without either), built before training: the data read and checked, the
    first stage retrieved. A missing file or directory, bad content, a BEIR directory without a first stage (or
    the reverse), ``every`` without data and a bad k or top k are one-line ``ValueError`` s naming the flag."""
    from bertkit.sentence.eval_schedule import check_beir_directory, check_every, check_needed
    from bertkit.sentence.evaluation.ir_metrics import check_k_values
    from bertkit.sentence.evaluation.reranking import BeirRerankEvaluator, RowsRerankEvaluator

    check_every(every)
    if (beir is None) != (first_stage is None):
        raise ValueError("--eval-beir DIR and --eval-first-stage EMBEDDER|RUN_FILE go together: the first stage "
                         "gives each query of the BEIR directory the documents the reranker reorders.")
    evaluators: dict[str, Any] = {}
    described: dict[str, str] = {}
    if rows is not None or beir is not None:
        k_values = check_k_values(k_values, "--eval-k")
        cut = ", ".join(map(str, k_values))
    if rows is not None:
        if not Path(rows).is_file():
            raise ValueError(f"--eval-rerank {os.fspath(rows)}: no such file; give rows of query, positive(s) and "
                             "negatives (negative_1.. or a list) or a ranked 'documents' list.")
        evaluators["rerank"] = RowsRerankEvaluator(rows, k_values=k_values, flag="--eval-rerank")
        described["rerank"] = (f"reranking: `{Path(rows).name}`: {len(evaluators['rerank'].rows)} rows; mrr and "
                               f"ndcg at k = {cut}, map")
    if beir is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"--eval-top-k must be a whole number of at least 1 (the first stage's documents "
                             f"reranked per query), got {top_k!r}.")
        if isinstance(first_stage, str | os.PathLike) and not Path(first_stage).exists():
            raise ValueError(f"--eval-first-stage {os.fspath(first_stage)}: no such file or directory; give an "
                             "embedding model directory or a run file (TREC lines or JSON {qid: {docid: score}}).")
        check_beir_directory(beir, split)
        evaluator = BeirRerankEvaluator(beir, first_stage, split=split, top_k=top_k, k_values=k_values,
                                        precision="fp32", first_stage_flag="--eval-first-stage")
        evaluators["beir"] = evaluator
        source = Path(first_stage).name if isinstance(first_stage, str | os.PathLike) else type(first_stage).__name__
        described["beir"] = (f"reranking the top {top_k} of `{source}` on `{Path(beir).name}` (BEIR, "
                             f"`qrels/{split}.tsv`): {len(evaluator.hits)} judged queries, {len(evaluator.data.corpus)}"
                             f" documents; metrics at k = {cut}")
    check_needed(every, described, "--eval-rerank FILE and/or --eval-beir DIR --eval-first-stage EMBEDDER|RUN_FILE")
    return evaluators, described


def evaluate_reranker(cross, evaluators: Mapping[str, Any]) -> dict[str, float]:
    """The flat metrics of ``cross`` (a :class:`~bertkit.embedding.cross_encoder.CrossEncoder`) from each of
    ``evaluators`` (:func:`rerank_evaluators`'); with both, the rows' are prefixed ``rerank_`` and the BEIR
    directory's ``beir_``."""
    both = len(evaluators) > 1
    return {f"{name}_{metric}" if both else metric: value
            for name, evaluator in evaluators.items() for metric, value in evaluator(cross).items()}
