"""Training a multi-vector (ColBERT) model on the one run: :func:`finetune_colbert`.

The run is the bi-encoder's (:mod:`bertkit.sentence.training`: the same data layouts, batches as the Trainer's
batch source, ``batch_size`` over all processes, DDP with every rank's documents gathered as candidates, exact
resume, ``--report-to``, evaluation during training, the kept best model, ``--patience``); what is a ColBERT's own:

* the model: a ColBERT directory trained as it is, or a new one built from a plain encoder
  (:func:`~bertkit.sentence.multi_vector_build.new_multi_vector_encoder`: the projection added, default 128, and
  sentence-transformers 6's defaults for markers, expansion and skiplist), loaded as a trainable
  :class:`~bertkit.sentence.multi_vector.MultiVectorEncoder`;
* the columns (:class:`MultiVectorCollator`): the anchors are queries, the positives and negatives documents, each
  tokenized as the model encodes it (:meth:`~bertkit.sentence.multi_vector.MultiVectorEncoder.features`: prompts or
  markers, the query length and expansion, the document skiplist), with the ``scored`` mask the losses read;
* the loss: a ``multi-vector`` row of the loss table (:mod:`bertkit.sentence.losses.multi_vector`: MNRL over
  MaxSim, its cached form, MarginMSE, KL distillation);
* the evaluation: retrieval on a BEIR directory by exact MaxSim over the corpus
  (:func:`bertkit.sentence.evaluation.multi_vector.evaluate_multivector_retrieval`).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit.inference.batching import pad_lists
from bertkit.sentence.data import PairCollator, training_rows
from bertkit.sentence.evaluation.ir_metrics import DEFAULT_K
from bertkit.sentence.losses import build_multi_vector_loss
from bertkit.sentence.multi_vector_build import ColBERTSettings
from bertkit.sentence.ranking_checks import check_bi_encoder_data
from bertkit.sentence.training import (
    BATCH_SIZE_COUNTS,
    EMBEDDING_DEFAULTS,
    BatchCollator,
    BiEncoder,
    EncoderRecipe,
    TrainingFiles,
    _prompts,
    check_evaluation_data,
    data_parallel,
    evaluation_card,
    model_card,
)
from bertkit.training import TrainingConfig
from bertkit.training.run import RunResult, run_recipe

#: TrainingConfig of :func:`finetune_colbert` where none is given (the bi-encoder's; sentence-transformers'
#: learning rate for a MultiVectorEncoder)
COLBERT_DEFAULTS = dict(EMBEDDING_DEFAULTS, learning_rate=3e-5)
#: the columns the collator pads, and their padding value (``input_ids``: the tokenizer's pad id)
PADDED = ("input_ids", "token_type_ids", "attention_mask", "scored")


@dataclass(frozen=True)
class MultiVectorLoss:
    """The loss of a ColBERT run: ``name`` (a ``multi-vector`` row of the loss table: mnrl, cached-mnrl,
    margin-mse, kl), ``scale`` (mnrl: 1 / temperature, default 1), ``mini_batch_size`` (cached-mnrl),
    ``temperature`` / ``student_temperature`` / ``teacher_temperature`` (kl, default 1)."""

    name: str = "mnrl"
    scale: float | None = None
    mini_batch_size: int | None = None
    temperature: float | None = None
    student_temperature: float | None = None
    teacher_temperature: float | None = None

    def build(self):
        return build_multi_vector_loss(self.name, scale=self.scale, mini_batch_size=self.mini_batch_size,
                                       temperature=self.temperature, student_temperature=self.student_temperature,
                                       teacher_temperature=self.teacher_temperature)

    def settings(self) -> dict[str, Any]:
        return {"loss": self.name, "scale": self.scale, "mini_batch_size": self.mini_batch_size,
                "temperature": self.temperature, "student_temperature": self.student_temperature,
                "teacher_temperature": self.teacher_temperature}


@dataclass(frozen=True)
class MultiVectorEvaluation:
    """What a ColBERT run is scored on during training: a BEIR directory (its ``split`` qrels, metrics at ``k``),
    by exact MaxSim over its corpus."""

    beir: str | os.PathLike | None = None
    split: str = "test"
    k: Sequence[int] = DEFAULT_K


class MultiVectorCollator(PairCollator):
    """:class:`~bertkit.sentence.data.PairCollator` whose columns are tokenized as ``net`` encodes them: the
    anchors as queries, the other columns as documents (:meth:`MultiVectorEncoder.features
    <bertkit.sentence.multi_vector.MultiVectorEncoder.features>`), padded, with ``scored`` ``[n, L]`` (the vectors
    the losses score)."""

    def __init__(self, net, **options: Any):
        super().__init__(net.tokenizer, **options)
        self.net = net

    def _tokenize(self, role: str, texts: list[str]) -> dict[str, torch.Tensor]:
        prompt = self.prompts.get(role, self.prompts.get("negative", "") if role.startswith("negative_") else "")
        rows = self.net.features(texts, prompt, "query" if role == "anchor" else "document")
        pad = {"input_ids": self.tokenizer.pad_token_id or 0}
        return {key: pad_lists([row[key] for row in rows], pad.get(key, 0)) for key in PADDED}


class MultiVectorBiEncoder(BiEncoder):
    """What the Trainer trains: the loss of the batch on a trainable
    :class:`~bertkit.sentence.multi_vector.MultiVectorEncoder`; ``embed`` gives a column's ``[n, L, D]`` token
    vectors (every position computed where a scored position is not attended: a query's expansion)."""

    def embed(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        attended, scored = inputs["attention_mask"], inputs["scored"]
        hidden = bool((scored.bool() & ~attended.bool()).any())
        return self.model(inputs["input_ids"], attended, inputs.get("token_type_ids"), every_position=hidden)


def finetune_colbert(model: str | os.PathLike, train_files: str | os.PathLike | Sequence[str | os.PathLike],
                     output_dir: str | os.PathLike, training: TrainingConfig | None = None, *,
                     loss: str | MultiVectorLoss = "mnrl", colbert: ColBERTSettings | None = None,
                     data: TrainingFiles | None = None, evaluation: MultiVectorEvaluation | None = None,
                     resume: bool = False, overwrite: bool = False, apply_changes: bool = False,
                     callbacks: Mapping[str, Any] | None = None) -> RunResult:
    """Train a ColBERT model from ``model`` (a ColBERT directory, or a plain encoder that gets the projection and
    ``colbert`` 's settings) on ``train_files`` (``finetune_embeddings``' layouts) with ``loss`` and write
    ``output_dir`` (``model/``: a sentence-transformers 6 ``MultiVectorEncoder`` directory; the run's files as
    every run's); :class:`MultiVectorRecipe` run by :func:`~bertkit.training.run.run_recipe`. ``training``
    default :data:`COLBERT_DEFAULTS`; ``evaluation`` scores the model at step 0, every ``eval_every`` steps and
    at the end (``keep_best`` e.g. ``"ndcg@10"``)."""
    if isinstance(loss, str):
        loss = MultiVectorLoss(loss)
    config = training if training is not None else TrainingConfig.from_dict(COLBERT_DEFAULTS)
    recipe = MultiVectorRecipe(model, train_files, config, loss=loss, colbert=colbert or ColBERTSettings(),
                               data=data or TrainingFiles(), evaluation=evaluation or MultiVectorEvaluation())
    return run_recipe(recipe, recipe.config, output_dir=output_dir, resume=resume, overwrite=overwrite,
                      apply_changes=apply_changes, callbacks=callbacks)


def check_teacher_scores(dataset, loss_name: str) -> None:
    """Refuse, before the run opens, a distillation loss (margin-mse, kl) on a file whose first row lacks hard
    negatives or teacher scores (a ``label``): one line naming the file and the columns it needs."""
    if loss_name not in ("margin-mse", "kl"):
        return
    for path, layout in zip(dataset.files, dataset.layouts):
        row = next((row for _, row in training_rows(path, layout, dataset.encoding)), {})
        negatives = row.get("negatives") or [k for k in row if k.startswith("negative")]
        if not negatives or row.get("label") is None:
            raise ValueError(f"{path}: --loss {loss_name} distills a teacher's scores of each row's positive and "
                             f"hard negatives, but its rows have {sorted(row)}; give rows of query, positive, "
                             "negatives and a label (the teacher's scores), or use --loss mnrl.")


class MultiVectorRecipe(EncoderRecipe):
    """A ColBERT model trained with a MaxSim loss on batches of rows (module docstring)."""

    settings_section = "colbert"
    evaluation_data = "--eval-beir DIR"

    def __init__(self, source, train_files, config, *, loss: MultiVectorLoss, colbert: ColBERTSettings,
                 data: TrainingFiles, evaluation: MultiVectorEvaluation):
        from bertkit.sentence.colbert_layouts import is_colbert_directory

        files = [train_files] if isinstance(train_files, (str, os.PathLike)) else list(train_files)
        objective = loss.build()  # checks the options before anything loads
        self.existing = is_colbert_directory(source)
        if self.existing and colbert != ColBERTSettings():
            raise ValueError(f"--model {os.fspath(source)} is a ColBERT model already, trained with its own "
                             "projection, lengths, expansion and skiplist; leave the new-model flags (--dim, "
                             "--query-length, ...) out, or start from a plain encoder.")
        if not self.existing:  # the base's limit, read from its config: refused before the run directory opens
            from bertkit.tasks.sources import inspect_source

            colbert.check_lengths(source, inspect_source(source).config.max_tokens)
        if data.max_seq_length is not None:
            raise ValueError("--max-seq-length does not apply to a ColBERT run: give --query-length and "
                             "--document-length (a new model's), which the model keeps.")
        self.described = check_evaluation_data(evaluation.beir, None, config.eval_every, evaluation.split,
                                               evaluation.k)
        dataset = data.dataset(files, config, None)  # every row checked before the run opens
        check_bi_encoder_data(dataset, objective, loss.name)
        check_teacher_scores(dataset, loss.name)
        self.loss, self.colbert, self.data, self.evaluation = loss, colbert, data, evaluation
        super().__init__(source, files, config, dataset, None, objective)

    def start(self, run, config) -> None:
        from bertkit.sentence.multi_vector import MultiVectorEncoder
        from bertkit.sentence.multi_vector_build import new_multi_vector_encoder

        super().start(run, config)
        torch.manual_seed(config.seed)  # the new projection is a function of the seed
        data = self.data
        if self.existing:
            net = MultiVectorEncoder(self.source, dtype="fp32", optimize=False)
        else:
            with tempfile.TemporaryDirectory(prefix="bertkit-colbert-") as staging:
                new_multi_vector_encoder(self.source, staging, self.colbert)
                net = MultiVectorEncoder(staging, dtype="fp32", optimize=False)
        if data.query_prompt is not None or data.document_prompt is not None:
            net.prompts = {**net.prompts, "query": data.query_prompt or "", "document": data.document_prompt or ""}
        query = net.prompts.get("query") or None
        document = next((net.prompts[name] for name in ("document", "passage", "corpus") if name in net.prompts),
                        None)
        self.prompts = _prompts(query, document)
        net.train()
        rank, world = data_parallel()
        self.collate_fn = BatchCollator(MultiVectorCollator(
            net, prompts=self.prompts, allow_repeated_queries=data.allow_repeated_queries, rank=rank,
            world_size=world))
        self.net, self.model = net, MultiVectorBiEncoder(net, self.objective)

    def settings(self) -> dict[str, Any]:
        data, colbert, net = self.data, self.colbert, self.net
        return {**self.loss.settings(), "dim": net.get_sentence_embedding_dimension(),
                "query_length": net.query_length, "document_length": net.document_length,
                "query_expansion": net.query_expansion, "skiplist": list(net.skiplist_words),
                "similarity_fn_name": net.similarity_fn_name, "new_model": not self.existing,
                "new_model_settings": dataclasses.asdict(colbert), "prompts": self.prompts, "columns": data.columns,
                "sampling": data.sampling, "batch_size": self.config.batch_size,
                "batch_size_counts": BATCH_SIZE_COUNTS, "allow_repeated_queries": data.allow_repeated_queries,
                "encoding": data.encoding}

    def scores(self) -> dict[str, float]:
        from bertkit.sentence.evaluation.beir import load_beir
        from bertkit.sentence.evaluation.multi_vector import evaluate_multivector_retrieval

        evaluation = self.evaluation
        if getattr(self, "_beir", None) is None:  # read once, checked before the run (check_evaluation_data)
            self._beir = load_beir(evaluation.beir, evaluation.split)
        data = self._beir
        with torch.inference_mode():  # the evaluator itself puts the model in eval mode and back
            report = evaluate_multivector_retrieval(self.net, data.queries, data.corpus, data.qrels,
                                                    k_values=evaluation.k)
        return report["metrics"]

    def reopen(self, directory: Path) -> torch.nn.Module:
        from bertkit.sentence.multi_vector import MultiVectorEncoder

        return MultiVectorEncoder(directory, dtype="fp32", optimize=False)

    def card(self, trainer, results: Mapping[str, Any], schedule) -> str:
        net = self.net
        expansion = net.query_expansion
        details = [f"model: ColBERT, {net.get_sentence_embedding_dimension()}-dimensional token vectors, scored by "
                   f"{net.similarity_fn_name}",
                   f"queries: {net.query_length} tokens"
                   + (f", expanded to {expansion['length']} with the mask token" if expansion else "")
                   + f"; documents: {net.document_length} tokens, skiplist of {len(net.skiplist_words)} words"]
        if self.prompts:
            details.append(f"prompts: query {self.prompts.get('anchor', '')!r}, document "
                           f"{self.prompts.get('positive', '')!r}")
        return model_card("A ColBERT (multi-vector) model trained with bertkit",
                          ["sentence-transformers", "multi-vector-encoder", "colbert", "bertkit"], self.source,
                          self.dataset, self.loss.name, self.objective, self.loss.settings(), details,
                          trainer.config, results, evaluation=evaluation_card(self.described, schedule, results))
