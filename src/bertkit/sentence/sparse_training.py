"""Training a learned-sparse model (SPLADE, or inference-free SPLADE) on the one run: :func:`finetune_sparse`.

The run is the bi-encoder's (:mod:`bertkit.sentence.training`: the same data layouts, batches as the Trainer's
batch source, ``batch_size`` over all processes, DDP with every rank's candidates gathered, exact resume,
``--report-to``, evaluation during training, the kept best model); what is a sparse model's own:

* the model (:func:`~bertkit.sentence.sparse_build.new_sparse_encoder`): a SPLADE directory built from the MLM
  base (or the sparse directory given), loaded as a trainable :class:`~bertkit.sentence.sparse.SparseEncoder`;
  ``inference_free``: a Router whose query side is a static weight per token, initialised from the IDF of the
  training files' documents (their positives and negatives), trained at its own learning rate;
* the loss: :class:`~bertkit.sentence.losses.sparse.SpladeLoss` (a sparse row of the loss table inside the query
  and document regularisers, whose weights warm up over the first steps: the loss reads the step from the run);
* the columns: the anchors are queries (an inference-free model's static side, tokenized without special tokens
  as it encodes them), the positives and negatives documents;
* the evaluation: retrieval on a BEIR directory through the sparse index
  (:func:`bertkit.sentence.evaluation.sparse.evaluate_sparse_retrieval`), with the active dimensions.
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

from bertkit.sentence.data import PairCollator, training_rows
from bertkit.sentence.evaluation.ir_metrics import DEFAULT_K
from bertkit.sentence.losses import build_sparse_loss
from bertkit.sentence.losses.sparse import CachedSpladeLoss, RegulariserWarmup
from bertkit.sentence.modules import is_sentence_transformer, read_layout
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
    model_card,
)
from bertkit.training import TrainingConfig
from bertkit.training.run import RunResult, run_recipe

#: an inference-free model's routes by the index the collator stores in a column's ``route`` input
ROUTES = ("query", "document")
#: TrainingConfig of :func:`finetune_sparse` where none is given
SPARSE_DEFAULTS = dict(EMBEDDING_DEFAULTS, learning_rate=2e-5)


@dataclass(frozen=True)
class SparseLoss:
    """The loss of a sparse run: ``name`` (a sparse row of the loss table: mnrl, margin-mse, kl, cosent) with
    ``scale`` / ``temperature``, inside SpladeLoss with the regulariser weights (``query_weight`` None: 5e-5, or 0
    for an inference-free model, whose static query side needs none), ``*_regulariser`` (flops, l1), the warm-up
    (``warmup``: fraction of the steps, ``warmup_shape``); ``mini_batch_size``: its cached form."""

    name: str = "mnrl"
    scale: float | None = None
    temperature: float | None = None
    mini_batch_size: int | None = None
    query_weight: float | None = None
    document_weight: float = 3e-5
    query_regulariser: str = "flops"
    document_regulariser: str = "flops"
    warmup: float = 1 / 3
    warmup_shape: str = "quadratic"

    def build(self, inference_free: bool):
        query = self.query_weight if self.query_weight is not None else (0.0 if inference_free else 5e-5)
        return build_sparse_loss(self.name, scale=self.scale, temperature=self.temperature,
                                 mini_batch_size=self.mini_batch_size, query_weight=query,
                                 document_weight=self.document_weight, query_regulariser=self.query_regulariser,
                                 document_regulariser=self.document_regulariser,
                                 warmup=RegulariserWarmup(self.warmup, self.warmup_shape))

    def settings(self, inference_free: bool) -> dict[str, Any]:
        loss = self.build(inference_free)
        return {"loss": self.name, "scale": self.scale, "temperature": self.temperature,
                "mini_batch_size": self.mini_batch_size, "query_weight": loss.query_weight,
                "document_weight": self.document_weight, "query_regulariser": self.query_regulariser,
                "document_regulariser": self.document_regulariser, "warmup": self.warmup,
                "warmup_shape": self.warmup_shape}


@dataclass(frozen=True)
class SparseModel:
    """The sparse model built from the base: ``inference_free`` (a static query side, trained at
    ``static_learning_rate``), ``max_active_dims`` (weights kept per vector when encoding), SpladePooling's
    ``pooling`` and ``activation``."""

    inference_free: bool = False
    static_learning_rate: float = 1e-3
    max_active_dims: int | None = None
    pooling: str = "max"
    activation: str = "relu"

    def __post_init__(self):
        if not self.static_learning_rate > 0:
            raise ValueError(f"--static-learning-rate must be positive, got {self.static_learning_rate}.")


class SparseCollator(PairCollator):
    """:class:`~bertkit.sentence.data.PairCollator` that marks each column's route (``route``: 0 for the query
    side, 1 for the documents) and, for a ``router`` model, tokenizes the anchors without special tokens, as the
    static query side encodes them."""

    def __init__(self, tokenizer, *, router: bool, **options: Any):
        super().__init__(tokenizer, **options)
        self.router = router

    def _tokenize(self, role: str, texts: list[str]) -> dict[str, torch.Tensor]:
        query = role == "anchor"
        if self.router and query:
            prompt = self.prompts.get("anchor", "")
            encoded = dict(self.tokenizer([prompt + t for t in texts], padding=True, truncation=True,
                                          max_length=self.max_length, add_special_tokens=False,
                                          return_tensors="pt").items())
        else:
            encoded = super()._tokenize(role, texts)
        encoded["route"] = torch.full((len(texts),), 0 if query else 1)
        return encoded


class SparseBiEncoder(BiEncoder):
    """What the Trainer trains: the SpladeLoss of the batch on a trainable
    :class:`~bertkit.sentence.sparse.SparseEncoder` (each column through its route, whose max pooling trains
    through :func:`~bertkit.sentence.splade_max.max_logits`'s sparse backward), the loss's parts and the regulariser
    weights as metrics. ``clock()`` gives the optimizer steps taken (the warm-up reads it)."""

    def __init__(self, model, loss, learning_rate_scales: Mapping[str, float] | None = None):
        super().__init__(model, loss)
        self.learning_rate_scales = dict(learning_rate_scales or {})
        self.clock = lambda: 0

    @property
    def grad_sync(self) -> str:
        return "manual" if isinstance(self.loss, CachedSpladeLoss) else "ddp"

    def embed(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        route = self.model.route(ROUTES[int(inputs["route"][0])] if self.model.layout.routes else None)
        return route(inputs["input_ids"], inputs["attention_mask"], inputs.get("token_type_ids"))

    def training_step(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        self.loss.step = self.clock()
        loss, _ = super().training_step(batch)
        query, document = self.loss.weights()
        metrics = {**self.loss.parts, "document_regulariser_weight": document}
        if query is not None:
            metrics["query_regulariser_weight"] = query
        return loss, {name: torch.tensor(float(value)) for name, value in metrics.items()}


def check_router_vocabulary(net, source) -> None:
    """Refuse (one line naming ``--model``) an inference-free model whose static query side has another tokenizer
    than its document side: the loss and the regularisers compare the two sides' vectors term by term."""
    if not net.layout.routes:
        return
    query, document = net.route("query"), net.route("document")
    ids = range(document.vocab_size)
    if query.tokenizer.convert_ids_to_tokens(list(ids)) != document.tokenizer.convert_ids_to_tokens(list(ids)):
        raise ValueError(f"--model {os.fspath(source)}: the query side's tokenizer is not the document side's, so "
                         "the same term has different ids on each side; save the static query weights with the "
                         "document side's tokenizer, or pass the SPLADE document side with --inference-free.")


@dataclass(frozen=True)
class SparseEvaluation:
    """What a sparse run is scored on during training: a BEIR directory (its ``split`` qrels, metrics at ``k``)."""

    beir: str | os.PathLike | None = None
    split: str = "test"
    k: Sequence[int] = DEFAULT_K


def finetune_sparse(model: str | os.PathLike, train_files: str | os.PathLike | Sequence[str | os.PathLike],
                    output_dir: str | os.PathLike, training: TrainingConfig | None = None, *,
                    loss: str | SparseLoss = "mnrl", sparse: SparseModel | None = None,
                    data: TrainingFiles | None = None, evaluation: SparseEvaluation | None = None,
                    resume: bool = False, overwrite: bool = False, apply_changes: bool = False,
                    callbacks: Mapping[str, Any] | None = None) -> RunResult:
    """Train a learned-sparse model from ``model`` (an MLM checkpoint or a sparse directory) on ``train_files``
    (the layouts of ``finetune_embeddings``) with ``loss`` and write ``output_dir`` (``model/``: a
    sentence-transformers sparse encoder directory; the run's files as every run's); :class:`SparseRecipe` run by
    :func:`~bertkit.training.run.run_recipe`. ``training`` default :data:`SPARSE_DEFAULTS`; ``evaluation`` scores
    the model at step 0, every ``eval_every`` steps and at the end (``keep_best`` e.g. ``"ndcg@10"``)."""
    if isinstance(loss, str):
        loss = SparseLoss(loss)
    config = training if training is not None else TrainingConfig.from_dict(SPARSE_DEFAULTS)
    recipe = SparseRecipe(model, train_files, config, loss=loss, sparse=sparse or SparseModel(),
                          data=data or TrainingFiles(), evaluation=evaluation or SparseEvaluation())
    return run_recipe(recipe, recipe.config, output_dir=output_dir, resume=resume, overwrite=overwrite,
                      apply_changes=apply_changes, callbacks=callbacks)


class SparseRecipe(EncoderRecipe):
    """A sparse encoder trained with SpladeLoss on batches of rows (module docstring)."""

    settings_section = "sparse"
    evaluation_data = "--eval-beir DIR"

    def __init__(self, source, train_files, config, *, loss: SparseLoss, sparse: SparseModel, data: TrainingFiles,
                 evaluation: SparseEvaluation):
        files = [train_files] if isinstance(train_files, (str, os.PathLike)) else list(train_files)
        if is_sentence_transformer(source) and read_layout(source).routes:  # an inference-free model already
            sparse = dataclasses.replace(sparse, inference_free=True)
        objective = loss.build(sparse.inference_free)  # checks the options before anything loads
        if sparse.max_active_dims is not None and (isinstance(sparse.max_active_dims, bool) or
                                                   not isinstance(sparse.max_active_dims, int) or
                                                   sparse.max_active_dims < 1):
            raise ValueError(f"--max-active-dims must be a positive integer (the weights kept per vector), got "
                             f"{sparse.max_active_dims!r}; leave it out to keep every non-zero weight.")
        self.described = check_evaluation_data(evaluation.beir, None, config.eval_every, evaluation.split,
                                               evaluation.k)
        dataset = data.dataset(files, config, None)  # every row checked before the run opens
        check_bi_encoder_data(dataset, objective.base, loss.name)
        self.loss, self.sparse, self.data, self.evaluation = loss, sparse, data, evaluation
        super().__init__(source, files, config, dataset, None, objective)

    def documents(self) -> list[str]:
        """The distinct documents (positives and negatives) of the training files: the IDF's corpus."""
        seen: dict[str, None] = {}
        for path, layout in zip(self.dataset.files, self.dataset.layouts):
            for _, row in training_rows(path, layout, self.dataset.encoding):
                for role, value in row.items():
                    if role == "positive" or role.startswith("negative"):
                        seen.update(dict.fromkeys(value if isinstance(value, list) else [value]))
        return list(seen)

    def start(self, run, config) -> None:
        from bertkit.sentence.sparse import SparseEncoder
        from bertkit.sentence.sparse_build import new_sparse_encoder

        super().start(run, config)
        torch.manual_seed(config.seed)
        sparse, data = self.sparse, self.data
        self.prompts = _prompts(data.query_prompt, data.document_prompt)
        saved_prompts = {"query": data.query_prompt or "", "document": data.document_prompt or ""} \
            if self.prompts else {}
        if is_sentence_transformer(self.source) and (read_layout(self.source).routes or not sparse.inference_free):
            net = SparseEncoder(self.source, dtype="fp32", optimize=False)  # a sparse model trained on as it is
            check_router_vocabulary(net, self.source)
            net.max_active_dims = sparse.max_active_dims or net.max_active_dims
            net.prompts = {**net.prompts, **saved_prompts}
        else:
            with tempfile.TemporaryDirectory(prefix="bertkit-sparse-") as staging:
                new_sparse_encoder(self.source, staging, inference_free=sparse.inference_free,
                                   documents=self.documents() if sparse.inference_free else None,
                                   pooling=sparse.pooling, activation=sparse.activation,
                                   max_active_dims=sparse.max_active_dims, max_seq_length=data.max_seq_length,
                                   prompts=saved_prompts)
                net = SparseEncoder(staging, dtype="fp32", optimize=False)
        self.router = bool(net.layout.routes)
        scales = {}
        if self.router:
            static = net.route("query").weight
            static.requires_grad_(True)
            scales["model.routes.query.weight"] = sparse.static_learning_rate / config.learning_rate
        net.train()
        rank, world = data_parallel()
        document = net.route("document" if self.router else None)
        self.collate_fn = BatchCollator(SparseCollator(
            document.tokenizer, router=self.router, max_length=document.max_seq_length, prompts=self.prompts,
            allow_repeated_queries=data.allow_repeated_queries, rank=rank, world_size=world))
        self.net, self.model = net, SparseBiEncoder(net, self.objective, scales)

    def begin(self, trainer, run) -> None:
        self.objective.total_steps = trainer.config.max_steps
        self.model.clock = lambda: trainer.state.step

    def settings(self) -> dict[str, Any]:
        data, sparse = self.data, self.sparse
        return {**self.loss.settings(sparse.inference_free), "inference_free": sparse.inference_free,
                "static_learning_rate": sparse.static_learning_rate if sparse.inference_free else None,
                "max_active_dims": sparse.max_active_dims, "pooling": sparse.pooling,
                "activation": sparse.activation, "prompts": self.prompts, "columns": data.columns,
                "sampling": data.sampling, "batch_size": self.config.batch_size,
                "batch_size_counts": BATCH_SIZE_COUNTS, "max_seq_length": data.max_seq_length,
                "allow_repeated_queries": data.allow_repeated_queries, "encoding": data.encoding}

    def scores(self) -> dict[str, float]:
        from bertkit.sentence.evaluation.beir import load_beir
        from bertkit.sentence.evaluation.sparse import evaluate_sparse_retrieval

        evaluation = self.evaluation
        if getattr(self, "_beir", None) is None:  # read once, checked before the run (check_evaluation_data)
            self._beir = load_beir(evaluation.beir, evaluation.split)
        data = self._beir
        return evaluate_sparse_retrieval(self.net, data.queries, data.corpus, data.qrels,
                                         k_values=evaluation.k)["metrics"]

    def reopen(self, directory: Path) -> torch.nn.Module:
        from bertkit.sentence.sparse import SparseEncoder

        return SparseEncoder(directory, dtype="fp32", optimize=False)

    def card(self, trainer, results: Mapping[str, Any], schedule) -> str:
        from bertkit.sentence.training import evaluation_card

        sparse = self.sparse
        kind = "inference-free SPLADE (static IDF-initialised query weights, SPLADE documents)" \
            if sparse.inference_free else "SPLADE"
        query, document = self.objective.query_weight, self.objective.document_weight
        details = [f"model: {kind}, pooling {sparse.pooling}, activation {sparse.activation}, max active dims "
                   f"{sparse.max_active_dims or 'all'}",
                   f"regularisers: query {self.loss.query_regulariser} x {query}, document "
                   f"{self.loss.document_regulariser} x {document}, warmed up over {self.loss.warmup:.2f} of the "
                   f"steps ({self.loss.warmup_shape})"]
        return model_card("A learned-sparse encoder trained with bertkit", ["sentence-transformers", "sparse-encoder",
                                                                            "splade", "bertkit"],
                          self.source, self.dataset, self.loss.name, self.objective, self.loss.settings(
                              sparse.inference_free), details, trainer.config, results,
                          evaluation=evaluation_card(self.described, schedule, results))
