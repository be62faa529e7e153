"""Fine-tuning a cross-encoder (a reranker) on the one training engine: :func:`finetune_reranker`.

The same run as :func:`bertkit.sentence.training.finetune_embeddings` (the dataset as the Trainer's batch
source, ``batch_size`` the rows per optimizer step over all processes, run directory, exact resume,
``metrics.jsonl``, ``results.json``), with a :class:`~bertkit.sentence.cross_encoder.CrossEncoder` as the model
and a reranking loss (:mod:`bertkit.sentence.losses.rerank`) on a
:class:`~bertkit.sentence.losses.rerank.RerankBatch`:

* (query, passage, label) rows: each row's one passage with its label (0/1 or a score);
* (query, positive, negatives...) rows: the positive first, then the negatives, labelled 1, 0, 0, ... (a row's
  ``label`` may instead list a score per passage);
* ``mnrl`` needs no labels (the positive is each row's first passage; other rows' passages are negatives).

``OUT/model`` is written by :meth:`CrossEncoder.save`, with a short model card ``README.md``:
sentence-transformers' ``CrossEncoder`` loads it with the same scores and ``bertkit serve`` serves it on
``/rerank``.

With rows to rerank and/or a BEIR directory and a first stage (:mod:`bertkit.sentence.evaluation.reranking`'s
evaluators), the cross-encoder wrapping the model being trained is scored at step 0, every N steps and at the
end, as the bi-encoder is (:class:`~bertkit.sentence.eval_schedule.EvalSchedule`): ``"eval"`` records of
``metrics.jsonl``, the final scores in ``results.json`` and a before/after table in the model card.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.sentence.data import RowBatch
from bertkit.sentence.data_layout import UNIT, LabelRule
from bertkit.sentence.evaluation.ir_metrics import DEFAULT_K
from bertkit.sentence.losses import RERANK_LOSSES, build_rerank_loss  # noqa: F401 (RERANK_LOSSES: its old public place)
from bertkit.sentence.ranking_checks import check_reranker_data
from bertkit.sentence.training import (
    BATCH_SIZE_COUNTS,
    RowBatchRecipe,
    TrainingFiles,
    data_parallel,
    evaluation_card,
    model_card,
    split_keywords,
)
from bertkit.training import TrainingConfig
from bertkit.training.run import RunResult, run_recipe


class RerankCollator:
    """The Trainer's ``collate_fn``: a ``RowBatch`` -> ``{"rows": [n] int64, "rerank": RerankBatch}`` (see the
    module docstring for the labels); ``labelled``: whether the loss reads labels. Under DDP it is given the
    global batch and keeps rank ``rank`` 's share (:meth:`~bertkit.sentence.data.RowBatch.part`); the reranking
    losses score each rank's rows on their own (mnrl's in-batch negatives come from the rank's share)."""

    def __init__(self, tokenize, labelled: bool, rank: int = 0, world_size: int = 1):
        self.tokenize, self.labelled = tokenize, labelled
        self.rank, self.world_size = rank, world_size

    def __call__(self, batch: RowBatch) -> dict[str, Any]:
        from bertkit.sentence.losses.rerank import RerankBatch

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


#: TrainingConfig of :func:`finetune_reranker` where none is given (the recipe's defaults)
RERANK_DEFAULTS = dict(epochs=1.0, batch_size=16, learning_rate=2e-5, warmup_ratio=0.1, weight_decay=0.01,
                       max_grad_norm=1.0, seed=42)


@dataclass(frozen=True)
class RerankLoss:
    """The loss of a reranker run (:func:`build_rerank_loss`): ``name`` one of :data:`RERANK_LOSSES`,
    ``mini_batch_size`` (pairs scored at a time) and ``num_negatives`` (mnrl's in-batch negatives per row)."""

    name: str = "bce"
    mini_batch_size: int | None = None
    num_negatives: int | None = None

    def build(self) -> nn.Module:
        return build_rerank_loss(self.name, mini_batch_size=self.mini_batch_size, num_negatives=self.num_negatives)


@dataclass(frozen=True)
class RerankEvaluation:
    """What a reranker run is scored on during training: ``rerank`` (rows, as ``bertkit evaluate --rerank``) and/or
    ``beir`` with ``first_stage`` (an embedding model directory, encoding in fp32, or a run file, as ``--beir
    --first-stage``: its ``top_k`` documents per query of the ``split`` reranked), metrics at each of ``k``."""

    rerank: str | os.PathLike | None = None
    beir: str | os.PathLike | None = None
    first_stage: Any = None
    top_k: int = 100
    split: str = "test"
    k: Sequence[int] = DEFAULT_K


def finetune_reranker(model: str | os.PathLike, train_files: str | os.PathLike | Sequence[str | os.PathLike],
                      output_dir: str | os.PathLike, training: TrainingConfig | None = None, *,
                      loss: str | RerankLoss = "bce", data: TrainingFiles | None = None,
                      evaluation: RerankEvaluation | None = None, resume: bool = False, overwrite: bool = False,
                      apply_changes: bool = False, callbacks: Mapping[str, Any] | None = None,
                      **keywords: Any) -> RunResult:
    """Fine-tune ``model`` (a cross-encoder, or a base checkpoint or bi-encoder directory: its encoder, a new
    one-label head seeded by ``seed``) as a reranker on ``train_files`` with ``loss`` (a name of
    :data:`RERANK_LOSSES` or a :class:`RerankLoss`) as ``training`` says (default :data:`RERANK_DEFAULTS`) and
    write ``output_dir``; :class:`RerankRecipe` run by :func:`~bertkit.training.run.run_recipe`. ``data``,
    ``resume``, ``overwrite``, ``apply_changes``, ``callbacks`` and the keyword arguments of before: as
    :func:`~bertkit.sentence.training.finetune_embeddings` (the prompts and ``allow_repeated_queries`` are a
    bi-encoder's).

    ``evaluation`` (:class:`RerankEvaluation`) scores the model being trained at step 0, every ``eval_every``
    steps (default: every epoch) and at the last step, without changing what it learns (:func:`rerank_evaluators`:
    read, checked and the first stage run before training starts); ``keep_best`` (e.g. ``"ndcg@10"``) keeps the
    best evaluation's model and ``patience`` stops early."""
    if isinstance(loss, str):
        loss = RerankLoss(loss)
    objects, config = split_keywords("finetune_reranker", keywords, {
        "loss": loss, "data": data or TrainingFiles, "evaluation": evaluation or RerankEvaluation},
        training, RERANK_DEFAULTS)
    recipe = RerankRecipe(model, train_files, config, **objects)
    return run_recipe(recipe, recipe.config, output_dir=output_dir, resume=resume, overwrite=overwrite,
                      apply_changes=apply_changes, callbacks=callbacks)


class RerankRecipe(RowBatchRecipe):
    """A cross-encoder fine-tuned as a reranker on batches of rows (:func:`finetune_reranker`); the model
    directory is :meth:`CrossEncoder.save`'s with a model card."""

    settings_section = "reranker"
    evaluation_data = "--eval-rerank FILE and/or --eval-beir DIR --eval-first-stage EMBEDDER|RUN_FILE"

    def __init__(self, source, train_files, config, *, loss: RerankLoss, data: TrainingFiles,
                 evaluation: RerankEvaluation):
        files = [train_files] if isinstance(train_files, (str, os.PathLike)) else list(train_files)
        bi_encoder_only = [f for f in ("query_prompt", "document_prompt", "allow_repeated_queries")
                           if getattr(data, f)]
        if bi_encoder_only:
            raise ValueError(f"{bi_encoder_only[0]} does not apply to a reranker (it is a bi-encoder's: "
                             "finetune_embeddings); leave it out.")
        if config.num_workers:
            raise ValueError(f"num_workers={config.num_workers}: a reranker's batches are tokenized in its loss "
                             "(RerankBatch), so DataLoader workers would have nothing to do; leave num_workers 0.")
        objective = loss.build()
        self.evaluators, self.described = rerank_evaluators(evaluation.rerank, evaluation.beir,
                                                            evaluation.first_stage, evaluation.top_k,
                                                            config.eval_every, evaluation.split, evaluation.k)
        dataset = data.dataset(files, config, functools.partial(check_rerank_row, loss.name))
        check_reranker_data(dataset, objective, loss.name, data_parallel()[1])  # before the run directory
        self.loss, self.data = loss, data
        super().__init__(source, files, config, dataset, None, objective)

    @property
    def evaluates(self) -> bool:
        return bool(self.evaluators)

    def start(self, run, config) -> None:
        from bertkit.sentence.cross_encoder import CrossEncoder
        from bertkit.training.config import resolve_device

        super().start(run, config)
        torch.manual_seed(config.seed)  # a new head's initial weights are a function of the seed
        self.cross = CrossEncoder(self.source, num_labels=1, max_length=self.data.max_seq_length,
                                  from_bi_encoder=True, dtype="fp32",
                                  device=resolve_device(config.device, int(os.environ.get("LOCAL_RANK", 0))))
        rank, world = data_parallel()
        self.collate_fn = RerankCollator(self.cross.tokenize, labelled=self.loss.name != "mnrl", rank=rank,
                                         world_size=world)
        self.model = Reranker(self.cross, self.objective)

    def settings(self) -> dict[str, Any]:
        loss, data = self.loss, self.data
        return {"loss": loss.name, "mini_batch_size": loss.mini_batch_size, "num_negatives": loss.num_negatives,
                "columns": data.columns, "sampling": data.sampling, "batch_size": self.config.batch_size,
                "batch_size_counts": BATCH_SIZE_COUNTS, "max_seq_length": self.cross.max_length,
                **({"encoding": data.encoding} if data.encoding != "utf-8" else {})}  # older runs still resume

    def scores(self) -> dict[str, float]:
        return evaluate_reranker(self.cross, self.evaluators)

    def save(self, output: Path) -> None:
        self.cross.save(output / self.model_dir)

    def load(self, output: Path) -> None:
        from bertkit.sentence.cross_encoder import CrossEncoder

        kept = CrossEncoder(output / self.model_dir, num_labels=1, dtype="fp32", device=self.cross.device)
        self.cross.model.load_state_dict(kept.model.state_dict())

    def finish(self, trainer, result: RunResult) -> dict[str, Any]:
        self.cross.model.eval()
        return super().finish(trainer, result)

    def card(self, trainer, results: Mapping[str, Any], schedule) -> str:
        return model_card("A cross-encoder (reranker) fine-tuned with bertkit",
                          ["sentence-transformers", "cross-encoder", "reranker", "bertkit"], self.source, self.dataset,
                          self.loss.name, self.objective, {"mini_batch_size": self.loss.mini_batch_size,
                                                           "num_negatives": self.loss.num_negatives},
                          [f"max sequence length: {self.cross.max_length}"], trainer.config, results,
                          evaluation=evaluation_card(self.described, schedule, results))


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
    """The flat metrics of ``cross`` (a :class:`~bertkit.sentence.cross_encoder.CrossEncoder`) from each of
    ``evaluators`` (:func:`rerank_evaluators`'); with both, the rows' are prefixed ``rerank_`` and the BEIR
    directory's ``beir_``."""
    both = len(evaluators) > 1
    return {f"{name}_{metric}" if both else metric: value
            for name, evaluator in evaluators.items() for metric, value in evaluator(cross).items()}
