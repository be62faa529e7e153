"""Fine-tuning a bi-encoder (an embedding model) on the one training engine: :func:`finetune_embeddings`.

The pieces are the ones :mod:`bertkit.embedding` already has: :class:`~bertkit.embedding.data.EmbeddingDataset`
streams batches of one training file's rows, :class:`~bertkit.embedding.data.PairCollator` tokenizes them into
a :class:`~bertkit.embedding.batch.PairBatch`, a loss is called as ``loss(embed, batch)``, and the model is a
trainable :class:`~bertkit.sentence.SentenceTransformer`. This module adapts them to
:class:`~bertkit.training.Trainer`, which calls only ``model.training_step(batch)``:

* :class:`BatchSchedule` is the Trainer's sampler *and* its dataset. Its "indices" are the positions of the
  dataset's batches in the epoch (0, 1, ...), one per micro-batch (``TrainingConfig.batch_size`` is 1
  batch; the number of rows per batch is the dataset's). Iterating it reads the dataset's next batch and
  yields its position; ``schedule[position]`` hands that batch to the collate function. Its
  ``state_dict`` is the dataset's (epoch, batches taken), which the Trainer snapshots after every
  micro-batch and stores in each checkpoint: a resumed run reads past the batches already taken (without
  tokenizing them) and continues with the next one, so a run interrupted at a checkpoint and resumed ends
  with the weights of an uninterrupted one, bit for bit on CPU in fp32 (tests/test_embedding_training.py).
  It needs ``num_workers=0`` (the batch is handed over in-process).
* ``gradient_accumulation_steps`` k: a step is k batches in turn, each its own loss (the mean of the k losses'
  gradients). For a loss of each row alone (cosine, triplet, contrastive, MarginMSE, KL) that is the gradient of
  one batch of k times the rows; an in-batch loss (MNRL, CoSENT, GIST) still draws its negatives from one batch:
  ``cached-mnrl`` with ``mini_batch_size`` gives the large batch's negatives in a small batch's memory.
* Under torchrun (``W`` processes, :func:`data_parallel`) ``batch_size`` stays the rows per process per step:
  the dataset yields *global* batches of ``W * batch_size`` rows (whole ones only: ``drop_last``), every rank
  reads the same stream (same seed, same position, so a checkpoint's data state is the global stream
  position), and the collate function hands rank ``r`` its contiguous share ``r`` of each global batch
  (:meth:`~bertkit.embedding.data.RowBatch.part`). With the losses gathering their in-batch candidates (and
  their text ids) from every rank, a ``W``-process run trains as one process with ``batch_size * W`` rows
  would (without dropout: the ranks draw different dropout masks). Rank 0 alone writes the run directory.
* :class:`BiEncoder` is the model the Trainer sees: ``training_step`` is the loss on the batch, nothing else.

The run directory works as ``bertkit finetune``'s (:mod:`bertkit.tasks.finetuning`): ``OUT/run.json``,
checkpoints, ``metrics.jsonl`` and ``metrics.png``, ``results.json``, and ``OUT/model``: a
sentence-transformers directory with the prompts and a short model card. With a BEIR directory and/or an STS
file to evaluate on, the model being trained is scored at step 0, every N steps and at the end
(:class:`~bertkit.embedding.eval_schedule.EvalSchedule`): ``"eval"`` records of ``metrics.jsonl``, the final
scores in ``results.json`` and a before/after table in the model card.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
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
from bertkit.sentence.losses import build_loss
from bertkit.sentence.ranking_checks import check_bi_encoder_data

logger = logging.getLogger(__name__)

MODEL_DIR = "model"
RESULTS_FILE = "results.json"


def label_rule(name: str) -> LabelRule | None:
    """What the loss ``name`` needs of every label beyond a finite number, checked as the training data is read
    (:class:`~bertkit.embedding.data_layout.LabelRule`); None when nothing more."""
    return LabelRule(f"--loss {name}", *BINARY) if name in ("contrastive", "online-contrastive") else None


class BatchSchedule:
    """The Trainer's sampler and dataset over an :class:`EmbeddingDataset` (see the module docstring)."""

    def __init__(self, dataset: EmbeddingDataset):
        self.dataset = dataset
        self._pending: tuple[int, RowBatch] | None = None

    def __len__(self) -> int:
        return len(self.dataset)

    def set_epoch(self, epoch: int) -> None:
        self.dataset.load_state_dict({**self.dataset.state_dict(), "epoch": epoch, "taken": 0})

    def __iter__(self):
        for batch in self.dataset:
            position = self.dataset.taken - 1
            self._pending = (position, batch)
            yield position

    def __getitem__(self, position: int) -> RowBatch:
        if self._pending is None or self._pending[0] != position:
            raise RuntimeError(f"batch {position} was asked for out of turn: the embedding batches stream in "
                               "order, so train them with num_workers=0.")
        return self._pending[1]

    def state_dict(self) -> dict[str, Any]:
        return self.dataset.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.dataset.load_state_dict(state)


class BatchCollator:
    """The Trainer's ``collate_fn``: ``[RowBatch]`` (one batch per micro-batch) -> ``{"rows": [n] int64,
    "pairs": PairBatch}`` (``rows`` is there for the Trainer's example count)."""

    def __init__(self, collator: PairCollator):
        self.collator = collator

    def __call__(self, batches: list[RowBatch]) -> dict[str, Any]:
        (batch,) = batches
        pairs = self.collator(batch)
        return {"rows": pairs.text_ids[0], "pairs": pairs}


class BiEncoder(nn.Module):
    """What the Trainer trains: ``training_step({"pairs": PairBatch}) -> (loss(embed, pairs), {})``, where
    ``embed`` runs ``model`` (a trainable :class:`~bertkit.sentence.SentenceTransformer`) on one column."""

    def __init__(self, model: nn.Module, loss: nn.Module):
        super().__init__()
        self.model, self.loss = model, loss

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


@dataclass
class EmbeddingTrainingResult:
    """Where the run put things: ``model_dir`` (the saved model), ``results`` (what
    ``results.json`` holds: steps, final training loss, data)."""

    output_dir: Path
    model_dir: Path
    results: dict[str, Any]
    metrics_path: Path
    plot_path: Path | None = None
    seconds: float = 0.0


def finetune_embeddings(model: str | os.PathLike, train_files: str | os.PathLike | Sequence[str | os.PathLike],
                        output_dir: str | os.PathLike, *, loss: str = "mnrl", scale: float | None = None,
                        symmetric: bool = False, mini_batch_size: int | None = None,
                        matryoshka_dims: Sequence[int] | None = None, pooling: str | None = None,
                        query_prompt: str | None = None, document_prompt: str | None = None,
                        columns: Mapping[str, Any] | None = None, sampling: str = "proportional",
                        encoding: str = "utf-8", allow_repeated_queries: bool = False,
                        max_seq_length: int | None = None,
                        batch_size: int = 32, epochs: float = 1.0, max_steps: int | None = None,
                        learning_rate: float = 5e-5, warmup_ratio: float = 0.1, weight_decay: float = 0.01,
                        max_grad_norm: float | None = 1.0, seed: int = 42, precision: str = "auto",
                        device: str = "auto", save_every: int | None = None, resume: bool = False,
                        overwrite: bool = False, apply_changes: bool = False, progress: bool = True,
                        threads: int | str | None = None,
                        gradient_accumulation_steps: int = 1, report_to: str | Sequence[str] | None = None,
                        callbacks: Mapping[str, Any] | None = None, eval_beir: str | os.PathLike | None = None,
                        eval_sts: str | os.PathLike | None = None, eval_every: int | None = None,
                        eval_split: str = "test", eval_k: Sequence[int] = DEFAULT_K,
                        guide: str | os.PathLike | None = None) -> EmbeddingTrainingResult:
    """Fine-tune the sentence-transformers (or plain) checkpoint ``model`` on ``train_files`` with ``loss``
    (:func:`build_loss`) and write ``output_dir`` (module docstring).

    ``pooling`` replaces the model's pooling (a plain checkpoint has mean). ``query_prompt`` /
    ``document_prompt`` are prefixed to the anchors / to the positives and negatives, and saved as the
    model's ``"query"`` / ``"document"`` prompts; the model records the similarity the loss trains for
    (:func:`trained_similarity`) as its ``similarity_fn_name``. ``columns``, ``sampling`` and
    ``allow_repeated_queries``: see :class:`~bertkit.embedding.data.EmbeddingDataset` (``encoding``: of the
    training files) and :class:`~bertkit.embedding.data.PairCollator`.
    ``batch_size`` rows per step (one file's; per process under torchrun, module docstring); ``max_steps``
    (default: ``epochs`` times the batches per epoch); ``save_every`` steps a checkpoint (default: every
    epoch). ``resume`` continues the run in ``output_dir`` (changed hyperparameters refused unless
    ``apply_changes``), ``overwrite`` replaces it. ``report_to``: experiment
    trackers (:mod:`bertkit.training.reporting`), which get the metrics, the settings and ``results.json``'s.

    ``eval_beir`` (a BEIR directory: its ``eval_split`` qrels, metrics at each of ``eval_k``, as ``bertkit
    evaluate --beir``) and ``eval_sts`` (pairs with gold scores, as ``--sts``) score the model being trained, in
    fp32 with its current pooling and prompts, at step 0, every ``eval_every`` steps (default: every epoch) and
    at the last step, without changing what it learns; both are read and checked before training starts.

    ``guide`` (``loss="gist"``): the embedding model that filters false negatives
    (:class:`~bertkit.embedding.guide.Guide`; any tokenizer), frozen, not saved with the model.
    """
    from bertkit.sentence import SentenceTransformer
    from bertkit.training.rundir import file_fingerprint, open_run

    start = time.perf_counter()
    files = [train_files] if isinstance(train_files, (str, os.PathLike)) else list(train_files)
    loss_options = dict(scale=scale, symmetric=symmetric, mini_batch_size=mini_batch_size,
                        matryoshka_dims=matryoshka_dims)
    objective = build_loss(loss, **loss_options, guide=guide)  # checks the options before anything loads
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}.")
    eval_data = check_evaluation_data(eval_beir, eval_sts, eval_every, eval_split, eval_k)
    rank, world = data_parallel()  # the data is read and every row checked before the run directory opens
    dataset = global_batches(files, batch_size, world, columns=columns, sampling=sampling, seed=seed,
                             encoding=encoding, check=label_rule(loss))
    check_bi_encoder_data(dataset, objective, loss)  # before the run directory: a refused run leaves nothing
    with open_run(output_dir, resume=resume, overwrite=overwrite) as run:
        torch.manual_seed(seed)  # what the checkpoint lacks (a pooler no loss reads) is a function of the seed
        net = SentenceTransformer(model, optimize=False, pooling=pooling)
        _check_model(net, model, matryoshka_dims, max_seq_length)
        if max_seq_length is not None:
            net.max_seq_length = max_seq_length
        if guide is not None:
            from bertkit.sentence.losses.guide import load_guide

            objective = build_loss(loss, **loss_options, guide=load_guide(guide, net.tokenizer))
        net.similarity_fn_name = trained_similarity(objective) or net.similarity_fn_name
        prompts = _prompts(query_prompt, document_prompt)
        if prompts:
            net.prompts = {**net.prompts, "query": query_prompt or "", "document": document_prompt or ""}
        collator = PairCollator(net.tokenizer, max_length=net.max_seq_length, prompts=prompts,
                                allow_repeated_queries=allow_repeated_queries, rank=rank, world_size=world)
        settings = {"loss": loss, "scale": scale, "symmetric": symmetric, "mini_batch_size": mini_batch_size,
                    "matryoshka_dims": list(matryoshka_dims or []), "pooling": list(net.pooling.modes),
                    "prompts": prompts, "columns": columns, "sampling": sampling, "batch_size": batch_size,
                    "max_seq_length": net.max_seq_length, "allow_repeated_queries": allow_repeated_queries,
                    "similarity_fn_name": net.similarity_fn_name,
                    **({"guide": os.fspath(guide)} if guide is not None else {}),
                    **({"encoding": encoding} if encoding != "utf-8" else {})}  # older runs still resume
        run.check("model", {"source": os.fspath(model)})
        run.check("data", {"train": file_fingerprint(files)})
        run.check("embedding", json.loads(json.dumps(settings)))
        run.save()

        evaluation = None
        if eval_data:
            evaluation = EvalSchedule(functools.partial(evaluate_embeddings, net, eval_beir, eval_sts, eval_split,
                                                        eval_k), eval_every)
        trainer, results = train_batches(run, BiEncoder(net, objective), dataset, BatchCollator(collator),
                                         epochs=epochs, max_steps=max_steps, save_every=save_every,
                                         evaluation=evaluation, callbacks=callbacks, learning_rate=learning_rate,
                                         warmup_ratio=warmup_ratio, weight_decay=weight_decay,
                                         max_grad_norm=max_grad_norm, seed=seed, precision=precision, device=device,
                                         progress_bar=progress, threads=threads, report_to=report_to,
                                         gradient_accumulation_steps=gradient_accumulation_steps,
                                         apply_changes=apply_changes)
        if not trainer.ctx.is_main:
            return EmbeddingTrainingResult(run.path, run.path / MODEL_DIR, results, run.path / "metrics.jsonl")
        details = [f"max sequence length: {net.max_seq_length}, pooling: {', '.join(net.pooling.modes)}, "
                   f"similarity: {net.similarity_fn_name}"]
        if prompts:
            details.append(f"prompts: query {query_prompt or ''!r}, document {document_prompt or ''!r}")
        card = model_card("A bi-encoder fine-tuned with bertkit", ["sentence-transformers", "bertkit"], model, dataset,
                          loss, objective, {k: settings.get(k) for k in ("scale", "symmetric", "mini_batch_size",
                                                                         "matryoshka_dims", "guide")},
                          details, trainer.config, results, evaluation=evaluation_card(eval_data, evaluation))
        net.eval()
        model_dir = net.save(run.path / MODEL_DIR, model_card=card)
        return finish(trainer, model_dir, results, start)


def data_parallel() -> tuple[int, int]:
    """``(rank, world_size)`` of this process under torchrun, ``(0, 1)`` otherwise (read from the environment,
    as :func:`~bertkit.training.distributed.init_distributed` reads it, before the Trainer joins the group)."""
    from bertkit.training.distributed import launched_by_torchrun

    if not launched_by_torchrun():
        return 0, 1
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def global_batches(files: Sequence[str | os.PathLike], batch_size: int, world_size: int,
                   **options: Any) -> EmbeddingDataset:
    """The dataset of the global batches: ``batch_size`` rows per process times ``world_size`` processes, whole
    batches only when ``world_size > 1`` (each rank then holds exactly ``batch_size`` rows; module docstring)."""
    return EmbeddingDataset(files, batch_size * world_size, drop_last=world_size > 1, **options)


def train_batches(run, module: nn.Module, dataset: EmbeddingDataset, collate_fn, *, epochs: float,
                  max_steps: int | None, save_every: int | None, callbacks: Mapping[str, Any] | None,
                  evaluation: EvalSchedule | None = None, apply_changes: bool = False, **training: Any):
    """Train ``module`` (``training_step``) on ``dataset`` 's batches (each through ``collate_fn``) with the
    :class:`~bertkit.training.Trainer` into the open run directory ``run`` (resumed when the run is), evaluated
    on ``evaluation`` 's schedule (default: every epoch; ``apply_changes``: a resumed run takes changed
    hyperparameters instead of refusing them); ``training``: further
    :class:`~bertkit.training.TrainingConfig` fields. Returns the trainer and the results (steps, epochs, final
    training loss, the files and their rows, and with ``evaluation`` its steps, the base and the final
    scores)."""
    from bertkit.modeling.fast import GemmChoice
    from bertkit.tasks.run_settings import follow_run
    from bertkit.training import Trainer, TrainingConfig

    accumulation = training.get("gradient_accumulation_steps", 1)
    if isinstance(accumulation, bool) or not isinstance(accumulation, int) or accumulation < 1:
        raise ValueError(f"--gradient-accumulation-steps must be a positive integer, got {accumulation!r}.")
    per_epoch = len(dataset) // accumulation  # optimizer steps per epoch
    if per_epoch == 0:
        raise ValueError(f"--gradient-accumulation-steps {accumulation} is more than the {len(dataset)} batches of an "
                         "epoch; accumulate fewer batches, or give more rows.")
    if accumulation > 1 and _in_batch(getattr(module, "loss", None)):
        logger.warning("--gradient-accumulation-steps %d: each batch's in-batch negatives stay its own rows; for "
                       "the negatives of the whole step use --loss cached-mnrl with --mini-batch-size", accumulation)
    steps = max_steps if max_steps is not None else max(1, round(epochs * per_epoch))
    world = data_parallel()[1]  # every rank's micro-batch is one global batch (its share of it, collated)
    config = TrainingConfig(max_steps=steps, batch_size=world * accumulation, num_workers=0,
                            log_every=max(1, min(50, per_epoch // 4)), save_every=save_every or per_epoch,
                            keep_last=1, output_dir=str(run.path),
                            find_unused_parameters=world > 1, **training)  # e.g. a pooler no loss reads
    schedule = BatchSchedule(dataset)
    trainer = Trainer(module, schedule, config=config, collate_fn=collate_fn, sampler=schedule, callbacks=callbacks,
                      stateful={"gemm": GemmChoice()},  # a resumed run keeps its float32 product backend
                      apply_changes=apply_changes)
    replayed = _gradcache_loss(getattr(module, "loss", None))
    if trainer.ddp is not None and replayed is not None:
        # the cached loss runs several forwards per backward, which DDP's reducer refuses: train outside DDP
        # and average the gradients over the ranks once the replay has accumulated them
        trainer.ddp = None
        replayed.on_replayed = functools.partial(average_gradients, list(module.parameters()))

    if evaluation is not None:
        evaluation.attach(trainer, default_every=per_epoch)
    follow_run(trainer, run)
    trainer.train(resume_from="latest" if run.resumed else None)
    last = last_train_record(trainer.metrics_path)
    results = {"steps": trainer.state.step, "epochs": trainer.state.step / per_epoch,
               "final_train_loss": last.get("loss"), "final_train_loss_step": last.get("step"),
               "log_every": config.log_every,
               "data": [{"file": f, "rows": n} for f, n in zip(dataset.files, dataset.sizes)]}
    if trainer.warnings:  # e.g. zero gradients, a run that trained nothing
        results["warnings"] = list(trainer.warnings)
    if evaluation is not None and evaluation.history:
        results["evaluation"] = {"every": evaluation.every, "steps": [h["step"] for h in evaluation.history],
                                 "base": json_metrics(evaluation.first["metrics"]) if evaluation.first["step"] == 0
                                 else None, "final_step": evaluation.last["step"],
                                 "final": json_metrics(evaluation.last["metrics"])}
    return trainer, results


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


def average_gradients(parameters: Sequence[torch.Tensor]) -> None:
    """Replace each gradient by its mean over the ranks (what DDP does), in one all-reduce. Every rank must hold
    gradients for the same parameters (the same model and loss do); a parameter without one is left alone."""
    import torch.distributed as dist

    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    for grad, mean in zip(grads, flat.split([g.numel() for g in grads])):
        grad.copy_(mean.view_as(grad))


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


def finish(trainer, model_dir: Path, results: dict[str, Any], start: float) -> EmbeddingTrainingResult:
    """Write ``results.json`` and the plot beside the saved model in ``trainer`` 's run directory, hand the
    results to its trackers (:func:`~bertkit.training.reporting.report_final`); the run's result."""
    from bertkit.io import atomic_write_text
    from bertkit.training.metrics import plot_metrics
    from bertkit.training.reporting import report_final

    output = trainer.output_dir
    atomic_write_text(output / RESULTS_FILE, json.dumps(results, indent=2) + "\n")
    report_final(trainer, results)
    result = EmbeddingTrainingResult(output, Path(model_dir), results, output / "metrics.jsonl")
    result.plot_path = plot_metrics(result.metrics_path, output / "metrics.png")
    result.seconds = time.perf_counter() - start
    return result


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
    (:func:`~bertkit.embedding.evaluate.beir_report`'s: ``ndcg@10``, ``mrr@10``, ...) and on the STS file
    (:func:`~bertkit.embedding.evaluate.sts_report`'s: ``pearson_cosine``, ``spearman_cosine``, ...)."""
    from bertkit.sentence.evaluation.evaluate import beir_report, sts_report

    metrics: dict[str, float] = {}
    if beir is not None:
        metrics.update(beir_report(net, beir, split=split, k_values=k_values)["metrics"])
    if sts is not None:
        metrics.update(sts_report(net, sts)["metrics"])
    return metrics


def evaluation_card(described: Mapping[str, str], evaluation: EvalSchedule | None) -> list[str]:
    """The model card's "Evaluation" lines: the data, then :func:`~bertkit.embedding.eval_schedule.evaluation_table`
    of the evaluations; ``[]`` without any."""
    if evaluation is None or not evaluation.history:
        return []
    return ["Scored during training on", "", *(f"- {line}" for line in described.values()), "",
            *evaluation_table(evaluation.history), "",
            f"Every evaluation (every {evaluation.every} steps) is an `eval` record of `metrics.jsonl`."]
