"""Fine-tuning a bi-encoder (an embedding model) on the one training engine: :func:`finetune_embeddings`.

The pieces are the ones :mod:`bertkit.sentence` already has: :class:`~bertkit.sentence.data.EmbeddingDataset`
streams batches of one training file's rows, :class:`~bertkit.sentence.data.PairCollator` tokenizes them into
a :class:`~bertkit.sentence.batch.PairBatch`, a loss is called as ``loss(embed, batch)``, and the model is a
trainable :class:`~bertkit.sentence.SentenceTransformer`. This module adapts them to
:class:`~bertkit.training.Trainer`, which calls only ``model.training_step(batch)``:

* ``batch_size`` is the rows per optimizer step over all processes (``TrainingConfig.batch_size``, as for every
  trainer; docs/how-to/train-embeddings.md says why). With ``gradient_accumulation_steps`` k a step is k batches
  of ``batch_size / k`` rows in turn, each its own loss (the mean of the k losses' gradients): for a loss of each
  row alone (cosine, triplet, contrastive, MarginMSE, KL) that is the gradient of one batch of ``batch_size``
  rows; an in-batch loss (MNRL, CoSENT, GIST) draws its negatives from one batch of ``batch_size / k`` rows:
  ``cached-mnrl`` with ``mini_batch_size`` gives the whole step's negatives in a small batch's memory.
* The :class:`~bertkit.sentence.data.EmbeddingDataset` is the Trainer's *batch source*
  (:mod:`bertkit.training.batch_source`): it yields one batch per micro-batch, which :class:`BatchCollator`
  tokenizes (in DataLoader workers with ``num_workers > 0``). Its ``state_dict`` (epoch, batches taken) is
  snapshotted by the Trainer after every micro-batch and stored in each checkpoint: a resumed run reads past the
  batches already taken (without tokenizing them) and continues with the next one, so a run interrupted at a
  checkpoint and resumed ends with the weights of an uninterrupted one, bit for bit on CPU in fp32
  (tests/test_embedding_training.py).
* Under torchrun (``W`` processes, :func:`data_parallel`) the dataset yields *global* batches of
  ``batch_size / k`` rows (whole ones only: ``drop_last``; ``batch_size`` must divide by ``k * W``), every rank
  reads the same stream (same seed, same position, so a checkpoint's data state is the global stream
  position), and the collate function hands rank ``r`` its contiguous share ``r`` of each global batch
  (:meth:`~bertkit.sentence.data.RowBatch.part`). With the losses gathering their in-batch candidates (and
  their text ids) from every rank, a ``W``-process run trains as one process with the same ``batch_size``
  would (without dropout: the ranks draw different dropout masks). Rank 0 alone writes the run directory.
* :class:`BiEncoder` is the model the Trainer sees: ``training_step`` is the loss on the batch, nothing else;
  its ``grad_sync`` tells the Trainer how the ranks' gradients meet (``"manual"`` for the cached loss, whose
  backward runs the encoder again: DDP's reducer refuses that).

The run directory works as ``bertkit finetune``'s (:mod:`bertkit.tasks.finetuning`): ``OUT/run.json``,
checkpoints, ``metrics.jsonl`` and ``metrics.png``, ``results.json``, and ``OUT/model``: a
sentence-transformers directory with the prompts and a short model card. With a BEIR directory and/or an STS
file to evaluate on, the model being trained is scored at step 0, every N steps and at the end
(:class:`~bertkit.sentence.eval_schedule.EvalSchedule`): ``"eval"`` records of ``metrics.jsonl``, the final
scores in ``results.json`` and a before/after table in the model card.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.sentence.batch import PairBatch
from bertkit.sentence.data import EmbeddingDataset, PairCollator, RowBatch
from bertkit.sentence.data_layout import BINARY, LabelRule
from bertkit.sentence.eval_schedule import EvalSchedule, check_every, evaluation_table, json_metrics
from bertkit.sentence.evaluation.ir_metrics import DEFAULT_K
from bertkit.sentence.losses import LOSSES, build_loss  # noqa: F401 (LOSSES: its old public place)
from bertkit.sentence.ranking_checks import check_bi_encoder_data
from bertkit.training import TrainingConfig
from bertkit.training.distributed import average_gradients  # noqa: F401  (its old public place)
from bertkit.training.run import Recipe, RunResult, TrainingData, run_recipe

logger = logging.getLogger(__name__)

MODEL_DIR = "model"
#: what ``batch_size`` counts, recorded in run.json (runs without it counted rows per step *and process*)
BATCH_SIZE_COUNTS = "rows per optimizer step over all processes"
RESULTS_FILE = "results.json"


def label_rule(name: str) -> LabelRule | None:
    """What the loss ``name`` needs of every label beyond a finite number, checked as the training data is read
    (:class:`~bertkit.sentence.data_layout.LabelRule`); None when nothing more."""
    return LabelRule(f"--loss {name}", *BINARY) if name in ("contrastive", "online-contrastive") else None


class BatchCollator:
    """The Trainer's ``collate_fn`` of the dataset's batches: a :class:`RowBatch` (one per micro-batch) ->
    ``{"rows": [n] int64, "pairs": PairBatch}`` (``rows``, this rank's, is there for the Trainer's example
    count)."""

    def __init__(self, collator: PairCollator):
        self.collator = collator

    def __call__(self, batch: RowBatch) -> dict[str, Any]:
        pairs = self.collator(batch)
        return {"rows": pairs.text_ids[0], "pairs": pairs}


class BiEncoder(nn.Module):
    """What the Trainer trains: ``training_step({"pairs": PairBatch}) -> (loss(embed, pairs), {})``, where
    ``embed`` runs ``model`` (a trainable :class:`~bertkit.sentence.SentenceTransformer`) on one column."""

    def __init__(self, model: nn.Module, loss: nn.Module):
        super().__init__()
        self.model, self.loss = model, loss

    @property
    def grad_sync(self) -> str:
        """How the Trainer syncs the ranks' gradients: ``"manual"`` (after the backward) for the cached loss, whose
        backward replays the encoder (DDP's reducer refuses a parameter reached twice in one backward), else
        ``"ddp"``."""
        return "manual" if _gradcache_loss(self.loss) is not None else "ddp"

    def embed(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        prompt = inputs.get("prompt_length")  # the column's prompt, which a pooling may leave out
        return self.model(inputs["input_ids"], inputs["attention_mask"], inputs.get("token_type_ids"),
                          int(prompt[0]) if prompt is not None and len(prompt) else 0)

    def training_step(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        return self.loss(self.embed, on_device(batch["pairs"], self.model.device)), {}


def on_device(batch: PairBatch, device: torch.device) -> PairBatch:
    """``batch`` with its tensors on ``device``."""
    def move(x):
        return x.to(device)
    return PairBatch(batch.columns, [{k: move(v) for k, v in inputs.items()} for inputs in batch.inputs],
                     [move(t) for t in batch.text_ids], None if batch.labels is None else move(batch.labels),
                     {k: move(v) for k, v in batch.extra.items()})


#: what an embedding or reranker run returns (the one run's result; this name from before it)
EmbeddingTrainingResult = RunResult
#: TrainingConfig of :func:`finetune_embeddings` where none is given (the recipe's defaults)
EMBEDDING_DEFAULTS = dict(epochs=1.0, batch_size=32, learning_rate=5e-5, warmup_ratio=0.1, weight_decay=0.01,
                          max_grad_norm=1.0, seed=42)


@dataclass(frozen=True)
class EmbeddingLoss:
    """The loss of a bi-encoder run and its options (:func:`build_loss`): ``name`` one of :data:`LOSSES`;
    ``scale``, ``symmetric``, ``mini_batch_size`` (``cached-mnrl``), ``matryoshka_dims`` and ``guide`` (``gist``:
    the embedding model that filters false negatives, :class:`~bertkit.sentence.losses.guide.Guide`; any tokenizer,
    frozen, not saved with the model)."""

    name: str = "mnrl"
    scale: float | None = None
    symmetric: bool = False
    mini_batch_size: int | None = None
    matryoshka_dims: Sequence[int] | None = None
    guide: str | os.PathLike | None = None

    def build(self, guide=None) -> nn.Module:
        """The loss module (``guide``: the loaded guide, for gist)."""
        return build_loss(self.name, scale=self.scale, symmetric=self.symmetric,
                          mini_batch_size=self.mini_batch_size, matryoshka_dims=self.matryoshka_dims,
                          guide=guide if guide is not None else self.guide)

    def card_options(self) -> dict[str, Any]:
        """The options the model card lists."""
        return {"scale": self.scale, "symmetric": self.symmetric, "mini_batch_size": self.mini_batch_size,
                "matryoshka_dims": list(self.matryoshka_dims or []),
                "guide": os.fspath(self.guide) if self.guide is not None else None}


@dataclass(frozen=True)
class TrainingFiles:
    """How the training files are read and tokenized: ``columns`` (role -> column), ``sampling`` and ``encoding``
    (:class:`~bertkit.sentence.data.EmbeddingDataset`), ``max_seq_length`` (default: the model's); for a
    bi-encoder also ``query_prompt`` / ``document_prompt`` (prefixed to the anchors / to the positives and
    negatives, saved as the model's ``"query"`` / ``"document"`` prompts) and ``allow_repeated_queries``
    (:class:`~bertkit.sentence.data.PairCollator`)."""

    columns: Mapping[str, Any] | None = None
    sampling: str = "proportional"
    encoding: str = "utf-8"
    max_seq_length: int | None = None
    query_prompt: str | None = None
    document_prompt: str | None = None
    allow_repeated_queries: bool = False

    def dataset(self, files: Sequence[str | os.PathLike], config, check) -> EmbeddingDataset:
        """The global batches of ``files`` for ``config`` 's batch size and accumulation on this job's processes
        (:func:`global_batches`), every row checked (``check``: what the loss needs of a row)."""
        return global_batches(files, config.batch_size, data_parallel()[1], config.gradient_accumulation_steps,
                              columns=self.columns, sampling=self.sampling, seed=config.seed, encoding=self.encoding,
                              check=check)


@dataclass(frozen=True)
class EmbeddingEvaluation:
    """What a bi-encoder run is scored on during training: ``beir`` (a BEIR directory: its ``split`` qrels,
    metrics at each of ``k``, as ``bertkit evaluate --beir``) and/or ``sts`` (pairs with gold scores, as
    ``--sts``)."""

    beir: str | os.PathLike | None = None
    sts: str | os.PathLike | None = None
    split: str = "test"
    k: Sequence[int] = DEFAULT_K


#: the keyword arguments of the recipe functions before they took a TrainingConfig and options objects:
#: keyword -> (options object, its field)
OLD_KEYWORDS = {
    **{name: ("loss", name) for name in ("scale", "symmetric", "mini_batch_size", "matryoshka_dims", "guide",
                                         "num_negatives")},
    **{name: ("data", name) for name in ("columns", "sampling", "encoding", "max_seq_length", "query_prompt",
                                         "document_prompt", "allow_repeated_queries")},
    **{f"eval_{name}": ("evaluation", name) for name in ("beir", "sts", "split", "k", "rerank", "first_stage",
                                                         "top_k")},
}


def split_keywords(function: str, options: dict[str, Any], objects: Mapping[str, Any], training,
                   defaults: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """The options objects and the TrainingConfig of a recipe function called with the older keyword arguments
    (:data:`OLD_KEYWORDS`, TrainingConfig fields, ``progress`` for ``progress_bar``): ``objects`` (name ->
    the object given, or its class) with them applied, and the config (:func:`~bertkit.training.run.
    config_from_keywords`). A keyword neither takes is a ``TypeError`` naming ``function``."""
    from bertkit.training.run import config_from_keywords

    config = config_from_keywords(training, options, defaults, renamed={"progress": "progress_bar"})
    built = {name: given() if isinstance(given, type) else given for name, given in objects.items()}
    changes: dict[str, dict[str, Any]] = {name: {} for name in objects}
    for key in list(options):
        target, field_name = OLD_KEYWORDS.get(key, ("", ""))
        if target in built and field_name in {f.name for f in dataclasses.fields(built[target])}:
            changes[target][field_name] = options.pop(key)
    if options:
        raise TypeError(f"{function}() got an unexpected keyword argument {next(iter(options))!r}")
    return {name: dataclasses.replace(value, **changes[name]) for name, value in built.items()}, config


def finetune_embeddings(model: str | os.PathLike, train_files: str | os.PathLike | Sequence[str | os.PathLike],
                        output_dir: str | os.PathLike, training: TrainingConfig | None = None, *,
                        loss: str | EmbeddingLoss = "mnrl", data: TrainingFiles | None = None,
                        evaluation: EmbeddingEvaluation | None = None, pooling: str | None = None,
                        resume: bool = False, overwrite: bool = False, apply_changes: bool = False,
                        callbacks: Mapping[str, Any] | None = None, **keywords: Any) -> RunResult:
    """Fine-tune the sentence-transformers (or plain) checkpoint ``model`` on ``train_files`` with ``loss`` (a name
    of :data:`LOSSES` or an :class:`EmbeddingLoss`) as ``training`` says (a
    :class:`~bertkit.training.TrainingConfig`; default :data:`EMBEDDING_DEFAULTS`) and write ``output_dir``
    (module docstring); :class:`EmbeddingRecipe` run by :func:`~bertkit.training.run.run_recipe`. A static
    ``model`` (a Model2Vec or sentence-transformers static directory, or a
    :class:`~bertkit.sentence.static_training.StaticInit` fresh table) trains its token table instead
    (:class:`~bertkit.sentence.static_training.StaticRecipe`: the default ``training`` is then
    :data:`~bertkit.sentence.static_training.STATIC_DEFAULTS`, the static-retrieval-mrl-en-v1 recipe).

    ``TrainingConfig.batch_size`` is the rows per optimizer step over all processes (module docstring); the
    default ``max_steps`` is ``epochs`` times the steps of an epoch, a checkpoint every epoch. ``data``
    (:class:`TrainingFiles`): how the files are read, the prompts. ``pooling`` replaces the model's pooling (a
    plain checkpoint has mean); the model records the similarity the loss trains for (:func:`trained_similarity`)
    as its ``similarity_fn_name``. ``evaluation`` (:class:`EmbeddingEvaluation`) scores the model being trained,
    in fp32 with its current pooling and prompts, at step 0, every ``eval_every`` steps (default: every epoch)
    and at the last step, without changing what it learns (read and checked before training starts);
    ``keep_best`` (e.g. ``"ndcg@10"``) keeps the best evaluation's model and ``patience`` stops early.
    ``resume`` continues the run in ``output_dir`` (changed hyperparameters refused unless ``apply_changes``),
    ``overwrite`` replaces it; ``callbacks`` go to the Trainer.

    The keyword arguments of before (``batch_size=``, ``learning_rate=``, ``scale=``, ``query_prompt=``,
    ``eval_beir=``, ``progress=``, ...) still work: each sets the field of the same name of ``training`` or of the
    options objects (``eval_X``: ``evaluation.X``).
    """
    from bertkit.sentence.static_training import STATIC_DEFAULTS, StaticRecipe, is_static_source  # imports this

    static = is_static_source(model)
    if isinstance(loss, str):
        loss = EmbeddingLoss(loss)
    objects, config = split_keywords("finetune_embeddings", keywords, {
        "loss": loss, "data": data or TrainingFiles, "evaluation": evaluation or EmbeddingEvaluation},
        training, STATIC_DEFAULTS if static else EMBEDDING_DEFAULTS)
    recipe = (StaticRecipe if static else EmbeddingRecipe)(model, train_files, config, pooling=pooling, **objects)
    return run_recipe(recipe, recipe.config, output_dir=output_dir, resume=resume, overwrite=overwrite,
                      apply_changes=apply_changes, callbacks=callbacks)


class RowBatchRecipe(Recipe):
    """What the bi-encoder and the reranker recipes share: the files read as batches of rows (the Trainer's batch
    source), checked before the run directory opens, epochs counted in those batches, a step-0 evaluation, the
    results (:meth:`results`) and the model card written beside the saved model. A subclass sets :attr:`model`
    (the module the Trainer trains) in :meth:`start` and gives :meth:`card`."""

    evaluate_at_start = True
    #: the run.json section of the recipe's settings (with ``batch_size`` and ``batch_size_counts``)
    settings_section = ""

    def __init__(self, source, files, config, dataset: EmbeddingDataset, collate_fn, objective: nn.Module):
        self.source, self.files, self.dataset = source, files, dataset
        self.collate_fn, self.objective = collate_fn, objective
        self.config = config_for_data_parallel(config)
        check_accumulation(dataset, config.gradient_accumulation_steps, objective)

    def start(self, run, config) -> None:
        adopt_old_batch_size(run, self.settings_section, config.batch_size)

    def checks(self) -> dict[str, Any]:
        from bertkit.training.rundir import file_fingerprint

        return {"model": {"source": self.source_name()}, "data": {"train": file_fingerprint(self.files)},
                self.settings_section: json.loads(json.dumps(self.settings()))}

    def settings(self) -> dict[str, Any]:
        """The recipe's settings a resumed run must keep (its run.json :attr:`settings_section`)."""
        raise NotImplementedError

    def source_name(self) -> str:
        """What the run started from, as run.json records it."""
        return os.fspath(self.source)

    def steps_per_epoch(self, config) -> int:
        return len(self.dataset) // config.gradient_accumulation_steps

    def training_data(self, config) -> TrainingData:
        return TrainingData(batch_source=self.dataset, collate_fn=self.collate_fn)

    def evaluate(self, trainer) -> Mapping[str, float]:
        return self.scores()

    def finish(self, trainer, result: RunResult) -> dict[str, Any]:
        """The results (:func:`batch_results`) and the model card (``README.md`` of the saved model)."""
        from bertkit.io import atomic_write_text

        schedule = trainer.stateful.get(self.evaluation_state)  # the run's schedule, when it evaluates
        results = batch_results(trainer, self.dataset, self.steps_per_epoch(trainer.config), schedule, result.best)
        atomic_write_text(result.model_dir / "README.md", self.card(trainer, results, schedule))
        return results


def config_for_data_parallel(config):
    """``config`` with DDP told of parameters no loss reads (a pooler) when the job has several processes."""
    return config.replace(find_unused_parameters=True) if data_parallel()[1] > 1 else config


def check_accumulation(dataset: EmbeddingDataset, accumulation: int, loss: nn.Module) -> None:
    """Refuse more accumulation steps than an epoch has batches; tell an in-batch loss that its negatives stay
    each micro-batch's own."""
    if len(dataset) // accumulation == 0:
        raise ValueError(f"--gradient-accumulation-steps {accumulation} is more than the {len(dataset)} batches of an "
                         "epoch; accumulate fewer batches, or give more rows.")
    if accumulation > 1 and _in_batch(loss):
        logger.warning("--gradient-accumulation-steps %d: each micro-batch's in-batch negatives stay its own %d "
                       "rows; for the negatives of the whole step use --loss cached-mnrl with --mini-batch-size",
                       accumulation, dataset.batch_size)


class EncoderRecipe(RowBatchRecipe):
    """A :class:`RowBatchRecipe` whose trained module :attr:`net` is an encoder saved in its own layout as
    ``OUT/<model_dir>``: :meth:`reopen` reads such a directory back (the kept best model, for :meth:`load`), and
    the finished model is left in eval mode. It evaluates when its evaluation data was described (``described``,
    set by the subclass from ``check_evaluation_data``)."""

    @property
    def evaluates(self) -> bool:
        return bool(self.described)

    def reopen(self, directory: Path) -> nn.Module:
        """The encoder saved in ``directory``, in fp32."""
        raise NotImplementedError

    def save(self, output: Path) -> None:
        self.net.save(output / self.model_dir)

    def load(self, output: Path) -> None:
        self.net.load_state_dict(self.reopen(output / self.model_dir).state_dict())

    def finish(self, trainer, result: RunResult) -> dict[str, Any]:
        self.net.eval()
        return super().finish(trainer, result)


class EmbeddingRecipe(EncoderRecipe):
    """A bi-encoder fine-tuned with a loss on batches of rows (:func:`finetune_embeddings` says what each part
    does); the model directory is a sentence-transformers directory with a model card."""

    settings_section = "embedding"
    evaluation_data = "--eval-beir DIR and/or --eval-sts FILE"

    def __init__(self, source, train_files, config, *, loss: EmbeddingLoss, data: TrainingFiles,
                 evaluation: EmbeddingEvaluation, pooling: str | None = None):
        files = [train_files] if isinstance(train_files, (str, os.PathLike)) else list(train_files)
        objective = loss.build()  # checks the options before anything loads
        self.described = check_evaluation_data(evaluation.beir, evaluation.sts, config.eval_every, evaluation.split,
                                               evaluation.k)
        dataset = data.dataset(files, config, label_rule(loss.name))  # every row checked before the run opens
        check_bi_encoder_data(dataset, objective, loss.name)  # before the run directory: a refused run leaves nothing
        self.loss, self.data, self.evaluation, self.pooling = loss, data, evaluation, pooling
        super().__init__(source, files, config, dataset, None, objective)

    def start(self, run, config) -> None:
        from bertkit.sentence import SentenceTransformer

        super().start(run, config)
        torch.manual_seed(config.seed)  # what the checkpoint lacks (a pooler no loss reads) is a function of the seed
        net = SentenceTransformer(self.source, optimize=False, pooling=self.pooling)
        data = self.data
        _check_model(net, self.source, self.loss.matryoshka_dims, data.max_seq_length)
        if data.max_seq_length is not None:
            net.max_seq_length = data.max_seq_length
        if self.loss.guide is not None:
            from bertkit.sentence.losses.guide import load_guide

            self.objective = self.loss.build(guide=load_guide(self.loss.guide, net.tokenizer))
        net.similarity_fn_name = trained_similarity(self.objective) or net.similarity_fn_name
        self.prompts = _prompts(data.query_prompt, data.document_prompt)
        if self.prompts:
            net.prompts = {**net.prompts, "query": data.query_prompt or "", "document": data.document_prompt or ""}
        rank, world = data_parallel()
        self.collate_fn = BatchCollator(PairCollator(net.tokenizer, max_length=net.max_seq_length, prompts=self.prompts,
                                                     allow_repeated_queries=data.allow_repeated_queries, rank=rank,
                                                     world_size=world))
        self.net, self.model = net, BiEncoder(net, self.objective)

    def settings(self) -> dict[str, Any]:
        loss, data, net = self.loss, self.data, self.net
        return {"loss": loss.name, "scale": loss.scale, "symmetric": loss.symmetric,
                "mini_batch_size": loss.mini_batch_size, "matryoshka_dims": list(loss.matryoshka_dims or []),
                "pooling": list(net.pooling.modes), "prompts": self.prompts, "columns": data.columns,
                "sampling": data.sampling, "batch_size": self.config.batch_size,
                "batch_size_counts": BATCH_SIZE_COUNTS, "max_seq_length": net.max_seq_length,
                "allow_repeated_queries": data.allow_repeated_queries, "similarity_fn_name": net.similarity_fn_name,
                **({"guide": os.fspath(loss.guide)} if loss.guide is not None else {}),
                **({"encoding": data.encoding} if data.encoding != "utf-8" else {})}  # older runs still resume

    def scores(self) -> dict[str, float]:
        evaluation = self.evaluation
        return evaluate_embeddings(self.net, evaluation.beir, evaluation.sts, evaluation.split, evaluation.k)

    def reopen(self, directory: Path) -> nn.Module:
        from bertkit.sentence import SentenceTransformer

        return SentenceTransformer(directory, optimize=False)

    def card(self, trainer, results: Mapping[str, Any], schedule) -> str:
        net, data = self.net, self.data
        details = [f"max sequence length: {net.max_seq_length}, pooling: {', '.join(net.pooling.modes)}, "
                   f"similarity: {net.similarity_fn_name}"]
        if self.prompts:
            details.append(f"prompts: query {data.query_prompt or ''!r}, document {data.document_prompt or ''!r}")
        return model_card("A bi-encoder fine-tuned with bertkit", ["sentence-transformers", "bertkit"], self.source,
                          self.dataset, self.loss.name, self.objective, self.loss.card_options(), details,
                          trainer.config, results, evaluation=evaluation_card(self.described, schedule, results))


def adopt_old_batch_size(run, section: str, batch_size: int) -> None:
    """Convert a resumed run started when ``--batch-size`` counted rows per step *and process* (its run.json
    ``section`` has no ``batch_size_counts``) to the rows per optimizer step over all processes: when
    ``batch_size`` is the run's rows per step (its batch size times its processes and accumulation steps), its
    run.json and checkpoints are rewritten to say so (``examples_seen`` in rows, counting whole batches);
    otherwise a one-line ``ValueError`` gives the ``--batch-size`` to resume with."""
    from bertkit.training.checkpoint import rewrite_checkpoint_states

    stored = run.info.get(section) if run.resumed else None
    if stored is None or "batch_size_counts" in stored:
        return
    training = run.info.get("training") or {}
    accumulation = training.get("gradient_accumulation_steps", 1)
    per_step = training.get("batch_size", accumulation)  # the old config counted batches: processes x accumulation
    rows = stored["batch_size"] * per_step
    if batch_size != rows:
        raise ValueError(f"{run.final} was started when --batch-size counted the rows per step and process "
                         f"({stored['batch_size']}, x {per_step // accumulation} process(es) x {accumulation} "
                         f"accumulation step(s)); it now counts the rows per optimizer step over all processes: "
                         f"resume with --batch-size {rows}.")

    def convert(state: dict[str, Any]) -> None:
        state["config"]["batch_size"] = rows
        state["trainer"]["examples_seen"] = state["trainer"]["examples_seen"] // per_step * rows

    rewrite_checkpoint_states(run.path, convert)
    run.info[section] = {**stored, "batch_size": rows, "batch_size_counts": BATCH_SIZE_COUNTS}
    if "training" in run.info:
        run.info["training"]["batch_size"] = rows
    run.save()
    logger.info("%s: converted to --batch-size %d rows per optimizer step over all processes (the run was started "
                "with --batch-size %d rows per step and process)", run.final, rows, stored["batch_size"])


def data_parallel() -> tuple[int, int]:
    """``(rank, world_size)`` of this process under torchrun, ``(0, 1)`` otherwise (read from the environment,
    as :func:`~bertkit.training.distributed.init_distributed` reads it, before the Trainer joins the group)."""
    from bertkit.training.distributed import launched_by_torchrun

    if not launched_by_torchrun():
        return 0, 1
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def global_batches(files: Sequence[str | os.PathLike], batch_size: int, world_size: int, accumulation: int = 1,
                   **options: Any) -> EmbeddingDataset:
    """The dataset of the global micro-batches: ``batch_size`` rows per optimizer step over ``world_size``
    processes and ``accumulation`` micro-batches (:func:`check_batch_split`), so batches of ``batch_size /
    accumulation`` rows, whole ones only when ``world_size > 1`` (each rank then holds exactly ``batch_size /
    (accumulation * world_size)`` rows; module docstring)."""
    check_batch_split(batch_size, accumulation, world_size)
    return EmbeddingDataset(files, batch_size // accumulation, drop_last=world_size > 1, **options)


def check_batch_split(batch_size: int, accumulation: int, world_size: int) -> None:
    """A one-line ``ValueError`` naming the flag unless ``batch_size`` (rows per optimizer step over all processes)
    and ``accumulation`` are positive integers and the rows split evenly over the micro-batches and processes."""
    for flag, value in (("--batch-size", batch_size), ("--gradient-accumulation-steps", accumulation)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{flag} must be a positive integer, got {value!r}.")
    parts = accumulation * world_size
    if batch_size % parts:
        raise ValueError(f"--batch-size {batch_size} (rows per optimizer step over all processes) does not split into "
                         f"{accumulation} accumulation step(s) x {world_size} process(es); give a multiple of {parts}.")


def _in_batch(loss: nn.Module | None) -> bool:
    """Whether ``loss`` (or the loss a wrapper holds) compares rows with other rows of the batch."""
    from bertkit.sentence.losses.contrastive import MultipleNegativesRankingLoss
    from bertkit.sentence.losses.distillation import GISTEmbedLoss
    from bertkit.sentence.losses.pairwise import CoSENTLoss

    return any(isinstance(candidate, MultipleNegativesRankingLoss | GISTEmbedLoss | CoSENTLoss)
               for candidate in _nested(loss))


def _gradcache_loss(loss: nn.Module | None) -> nn.Module | None:
    """The cached (GradCache) loss in ``loss`` (itself, or the one a wrapper holds), else None."""
    from bertkit.sentence.losses.cached import CachedMultipleNegativesRankingLoss

    return next((c for c in _nested(loss) if isinstance(c, CachedMultipleNegativesRankingLoss)), None)


def _nested(loss: nn.Module | None):
    """``loss`` and, depth first, the losses its wrappers hold (Matryoshka's ``inner``, the cached loss's
    ``plain``)."""
    if loss is None:
        return
    yield loss
    for attribute in ("inner", "plain"):
        if isinstance(getattr(loss, attribute, None), nn.Module):
            yield from _nested(getattr(loss, attribute))


def last_train_record(path: Path) -> dict[str, Any]:
    """The last training record of ``metrics.jsonl`` (a resumed run's file holds the earlier steps too);
    ``{}`` when there is none."""
    last: dict[str, Any] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line) if line.strip() else {}
            if record.get("split") == "train":
                last = record
    return last


def batch_results(trainer, dataset: EmbeddingDataset, per_epoch: int, schedule, best: Mapping[str, Any]
                  ) -> dict[str, Any]:
    """``results.json`` of a run on ``dataset`` 's batches: steps, epochs, the final training loss, the files and
    their rows, and with evaluations (``schedule``) their steps, the base and the final scores, and the kept
    ``best`` (metric, value, step) where one was kept."""
    last = last_train_record(trainer.metrics_path)
    results = {"steps": trainer.state.step, "epochs": trainer.state.step / per_epoch,
               "final_train_loss": last.get("loss"), "final_train_loss_step": last.get("step"),
               "log_every": trainer.config.log_every,
               "data": [{"file": f, "rows": n} for f, n in zip(dataset.files, dataset.sizes)]}
    if schedule is not None and schedule.history:
        results["evaluation"] = {"every": schedule.every, "steps": [h["step"] for h in schedule.history],
                                 "base": json_metrics(schedule.first["metrics"]) if schedule.first["step"] == 0
                                 else None, "final_step": schedule.last["step"],
                                 "final": json_metrics(schedule.last["metrics"])}
    if best:
        results["best"] = dict(best)
    return results


def innermost_loss(loss: nn.Module) -> nn.Module:
    """The loss that compares the embeddings: ``loss`` past Matryoshka's inner loss and the cached loss's plain
    one."""
    *_, innermost = _nested(loss)
    return innermost


def trained_similarity(loss: nn.Module) -> str | None:
    """The similarity function ``loss`` trains the embeddings for (cosine, dot, ...), None where it names none
    (distance-based losses): what the saved model records as its ``similarity_fn_name``."""
    return getattr(innermost_loss(loss), "similarity", None)


def _prompts(query_prompt: str | None, document_prompt: str | None) -> dict[str, str]:
    """The collator's prompts (role -> text) for the given ones."""
    prompts = {"anchor": query_prompt} if query_prompt else {}
    if document_prompt:
        prompts.update(positive=document_prompt, negative=document_prompt)
    return prompts


def _check_model(net, source, matryoshka_dims, max_seq_length) -> None:
    """Refuse, in one line each, what the model cannot train with."""
    dimension = net.get_sentence_embedding_dimension()
    above = [d for d in matryoshka_dims or [] if d > dimension]
    if above:
        raise ValueError(f"--matryoshka-dims {','.join(map(str, above))} is above the embedding dimension "
                         f"{dimension} of {os.fspath(source)}; use dimensions up to {dimension}.")
    limit = net.bert.config.max_tokens
    if max_seq_length is not None and not 0 < max_seq_length <= limit:
        raise ValueError(f"--max-seq-length {max_seq_length}: {os.fspath(source)} takes 1 to {limit} tokens.")


def model_card(title: str, tags: Sequence[str], base, dataset: EmbeddingDataset, loss_name: str, loss: nn.Module,
               loss_options: Mapping[str, Any], details: Sequence[str], config, results: Mapping[str, Any],
               evaluation: Sequence[str] = ()) -> str:
    """A short README for a trained model: ``title``, base, data, loss (with the ``loss_options`` set),
    hyperparameters (``details``: lines of the model's own settings), final training loss, and ``evaluation``
    (markdown lines, e.g. :func:`evaluation_card`'s) as its "Evaluation" section."""
    data = "\n".join(f"- `{os.path.basename(f)}`: {n} rows ({layout.describe()})"
                     for f, n, layout in zip(dataset.files, dataset.sizes, dataset.layouts))
    options = {k: v for k, v in loss_options.items() if v not in (None, [], False)}
    final = results["final_train_loss"]
    lines = [
        "---", "library_name: sentence-transformers", "tags:", *(f"- {tag}" for tag in tags), "---", "",
        f"# {title}", "", f"Base model: `{os.fspath(base)}`.", "", "## Training data", "", data, "",
        f"Batches of {dataset.batch_size} rows of one file, files mixed by `{dataset.sampling}` sampling.", "",
        "## Loss", "", f"`{loss_name}` ({type(loss).__name__}): "
        + (", ".join(f"{k}={v}" for k, v in options.items()) or "default settings"), "",
        "## Hyperparameters", "",
        f"- steps: {results['steps']} ({results['epochs']:.2f} epochs), learning rate {config.learning_rate}, "
        f"warmup ratio {config.warmup_ratio}, weight decay {config.weight_decay}, seed {config.seed}",
        *(f"- {line}" for line in details),
    ]
    if final is not None:
        lines += ["", "## Result", "",
                  f"Final training loss: {final:.4f} (logged at step {results['final_train_loss_step']}: the mean "
                  f"over the steps since the previous log, every {results['log_every']} steps)."]
    if evaluation:
        lines += ["", "## Evaluation", "", *evaluation]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- evaluation during training
def check_evaluation_data(beir, sts, every, split: str, k_values: Sequence[int]) -> dict[str, str]:
    """Read and check what the run evaluates on, before it trains: ``{"beir": line, "sts": line}`` describing
    each (file, counts), empty without either. A missing directory or file, bad content, ``eval_every`` without
    data and a bad k are one-line ``ValueError`` s naming the flag or file."""
    from bertkit.sentence.eval_schedule import check_beir_directory, check_needed
    from bertkit.sentence.evaluation.beir import load_beir
    from bertkit.sentence.evaluation.ir_metrics import check_k_values
    from bertkit.sentence.evaluation.sts import read_sts

    check_every(every)
    described = {}
    if beir is not None:
        check_beir_directory(beir, split)
        k_values = check_k_values(k_values, "--eval-k")
        data = load_beir(beir, split)
        described["beir"] = (f"retrieval: `{Path(beir).name}` (BEIR, `qrels/{split}.tsv`): {len(data.qrels)} judged "
                             f"queries, {len(data.corpus)} documents; metrics at k = {', '.join(map(str, k_values))}")
    if sts is not None:
        if not Path(sts).is_file():
            raise ValueError(f"--eval-sts {os.fspath(sts)}: no such file; give a CSV/TSV/JSON lines file of "
                             "sentence1, sentence2, score.")
        pairs, _ = read_sts(sts)
        described["sts"] = f"similarity: `{Path(sts).name}`: {len(pairs)} pairs with gold scores"
    check_needed(every, described, "--eval-beir DIR and/or --eval-sts FILE")
    return described


def evaluate_embeddings(net, beir, sts, split: str, k_values: Sequence[int]) -> dict[str, float]:
    """The flat metrics of ``net`` (a :class:`~bertkit.sentence.SentenceTransformer`) on the BEIR directory
    (:func:`~bertkit.sentence.evaluation.evaluate.beir_report`'s: ``ndcg@10``, ``mrr@10``, ...) and on the STS file
    (:func:`~bertkit.sentence.evaluation.evaluate.sts_report`'s: ``pearson_cosine``, ``spearman_cosine``, ...)."""
    from bertkit.sentence.evaluation.evaluate import beir_report, sts_report

    metrics: dict[str, float] = {}
    if beir is not None:
        metrics.update(beir_report(net, beir, split=split, k_values=k_values)["metrics"])
    if sts is not None:
        metrics.update(sts_report(net, sts)["metrics"])
    return metrics


def evaluation_card(described: Mapping[str, str], evaluation: EvalSchedule | None,
                    results: Mapping[str, Any] | None = None) -> list[str]:
    """The model card's "Evaluation" lines: the data, then :func:`~bertkit.sentence.eval_schedule.evaluation_table`
    of the evaluations, and the kept best model (``results["best"]``) where one was kept; ``[]`` without any."""
    if evaluation is None or not evaluation.history:
        return []
    best = (results or {}).get("best")
    kept = [f"The model is the one of step {best['step']}, the best {best['metric']} ({best['value']:.4f})."] \
        if best else []
    return ["Scored during training on", "", *(f"- {line}" for line in described.values()), "",
            *evaluation_table(evaluation.history), "",
            f"Every evaluation (every {evaluation.every} steps) is an `eval` record of `metrics.jsonl`.", *kept]
