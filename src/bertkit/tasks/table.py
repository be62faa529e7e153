"""The task table: every task bertkit answers, once, with the name each part of bertkit knows it by.

One :class:`TaskRow` per task: its name and aliases (one vocabulary: ``pipeline()``, ``bertkit serve --task``,
``bertkit export --task``, ``bertkit predict TASK`` and ``bertkit finetune``'s task.json all look names up here),
the model class it runs, the HF architectures whose checkpoints hold it, its pipeline, its export signature, the
server's name for it and its routes, and the ``bertkit finetune`` task that trains it.
:func:`bertkit.tasks.sources.inspect_source` says which row a checkpoint holds.

Classes are named, not imported (``"bertkit.pipelines.fill_mask:FillMaskPipeline"``). The table sits in
``tasks/``, below the layers whose classes it names (``sentence/``, ``pipelines/``, ``serving/``), and must stay
importable without torch (``bertkit serve --help`` reads its choices here); each layer resolves its own column
with :func:`resolve` when it needs the class, so the dependencies still run one way. Registering the classes on
the rows from above was the other choice: a row would then be complete only after an import elsewhere ran.
The route *handlers* live in :mod:`bertkit.serving.routes`, one per route a row lists (a test checks both
sides agree).

Adding a task is one row here, plus the parts that are new code (its pipeline class, a route handler).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

TOKENS = ("batch", "sequence")
CHOICES = ("batch", "choices", "sequence")


@dataclass(frozen=True)
class Signature:
    """The axes of every input (all alike) and, per output in ``forward``'s order, its axes (a name for a dynamic
    axis, None for a fixed one): what ``bertkit export`` writes into the graph."""

    inputs: tuple[str, ...]
    outputs: dict[str, tuple[str | None, ...]]


@dataclass(frozen=True)
class Served:
    """How ``bertkit serve`` answers a task: ``name`` (its ``--task`` and ``/info``'s ``task``), the input run
    once at start (``probe``; ``[MASK]`` stands for the tokenizer's mask token), text-embeddings-inference's
    ``model_type`` key in ``/info``, and whether ``/info`` lists the labels."""

    name: str
    probe: Any
    info_key: str
    labels: bool = False


@dataclass(frozen=True)
class TaskRow:
    """One task. ``model``, ``pipeline`` and ``trainer`` are ``"module:Class"`` names (:func:`resolve`).

    ``architectures``: HF architecture names (BERT's spelling; every family's maps to it through
    :func:`bertkit.config.bert_architecture_name`) whose checkpoints this task answers when a source is asked what
    it holds; ``num_labels``: where two rows share an architecture, the one that claims a checkpoint with exactly
    this many labels (a sequence classifier with one label is a reranker). ``export``: the graph's signature
    (None: ``bertkit export --task`` does not take this task). ``routes``: the server routes that answer it;
    ``serve``: how the server runs it (None: no server runs this task on its own). ``finetune``: the ``bertkit
    finetune`` subcommand that trains it; ``trainer``: its :class:`~bertkit.tasks.base.Task` class where the
    generic fine-tuning runs it.
    """

    name: str
    model: str
    aliases: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    num_labels: int | None = None
    pipeline: str | None = None
    export: Signature | None = None
    routes: tuple[str, ...] = ()
    serve: Served | None = None
    finetune: str | None = None
    trainer: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


_HEADS = "bertkit.modeling.heads"
_LM = "bertkit.modeling.lm_heads"
_SENTENCE_SCORES = Signature(TOKENS, {"logits": ("batch", None)})
_TOKEN_SCORES = Signature(TOKENS, {"logits": ("batch", "sequence", None)})

#: the tasks, those a server runs first (in the order ``bertkit serve --task`` lists them)
TABLE: tuple[TaskRow, ...] = (
    TaskRow("embeddings", "bertkit.sentence:SentenceTransformer", ("sentence-embeddings", "sentence-embedding"),
            ("BertModel",), pipeline="bertkit.pipelines.embeddings:EmbeddingsPipeline",
            export=Signature(TOKENS, {"sentence_embedding": ("batch", None)}),
            routes=("/embed", "/embed_all", "/similarity", "/v1/embeddings", "/embeddings"),
            serve=Served("embeddings", "probe", "embedding"), finetune="embed"),
    TaskRow("text-classification", f"{_HEADS}:BERTForSequenceClassification",
            ("classify", "sentiment-analysis", "sequence-classification"), ("BertForSequenceClassification",),
            pipeline="bertkit.pipelines.classification:TextClassificationPipeline", export=_SENTENCE_SCORES,
            routes=("/predict",), serve=Served("classify", "probe", "classifier", labels=True), finetune="classify",
            trainer="bertkit.tasks.classification:Classification"),
    TaskRow("token-classification", f"{_HEADS}:BERTForTokenClassification", ("ner", "tag"),
            ("BertForTokenClassification",),
            pipeline="bertkit.pipelines.token_classification:TokenClassificationPipeline", export=_TOKEN_SCORES,
            routes=("/ner",), serve=Served("ner", "probe", "token_classifier", labels=True),
            finetune="tag", trainer="bertkit.tasks.token_classification:TokenClassification"),
    TaskRow("question-answering", f"{_HEADS}:BERTForQuestionAnswering", ("qa",), ("BertForQuestionAnswering",),
            pipeline="bertkit.pipelines.question_answering:QuestionAnsweringPipeline",
            export=Signature(TOKENS, {"start_logits": ("batch", "sequence"), "end_logits": ("batch", "sequence")}),
            routes=("/qa",), serve=Served("qa", {"question": "probe?", "context": "probe"}, "question_answering"),
            finetune="qa", trainer="bertkit.tasks.question_answering:QuestionAnswering"),
    # a pretraining checkpoint's masked-LM head answers fill-mask
    TaskRow("fill-mask", f"{_LM}:BERTForMaskedLM", ("masked-lm",), ("BertForMaskedLM", "BertForPreTraining"),
            pipeline="bertkit.pipelines.fill_mask:FillMaskPipeline", export=_TOKEN_SCORES, routes=("/fill-mask",),
            serve=Served("fill-mask", "probe [MASK]", "fill_mask")),
    TaskRow("rerank", f"{_HEADS}:BERTForSequenceClassification", (), ("BertForSequenceClassification",), 1,
            pipeline="bertkit.pipelines.classification:RerankPipeline", export=_SENTENCE_SCORES, routes=("/rerank",),
            serve=Served("rerank", ("probe", "probe"), "reranker", labels=True), finetune="rerank"),
    # a ColBERT directory: token vectors after the projection and skiplist, MaxSim reranking, an index's search
    TaskRow("multi-vector", "bertkit.sentence.multi_vector:MultiVectorEncoder", ("colbert", "late-interaction"),
            pipeline="bertkit.pipelines.multi_vector:MultiVectorPipeline", routes=("/embed_all", "/rerank", "/search"),
            serve=Served("colbert", "probe", "embedding")),
    # an NLI classifier scoring candidate labels; a classify server answers it on POST / (HF's Inference API)
    TaskRow("zero-shot-classification", f"{_HEADS}:BERTForSequenceClassification", ("zero-shot", "nli"),
            pipeline="bertkit.pipelines.zero_shot:ZeroShotClassificationPipeline"),
    TaskRow("sparse-embeddings", f"{_LM}:BERTForMaskedLM", ("splade",),
            pipeline="bertkit.pipelines.embeddings:SparseEmbeddingsPipeline", routes=("/embed_sparse",)),
    TaskRow("feature-extraction", "bertkit.modeling.backbone:BERT", ("backbone",),
            pipeline="bertkit.pipelines.embeddings:FeatureExtractionPipeline",
            export=Signature(TOKENS, {"last_hidden_state": ("batch", "sequence", None),
                                      "pooler_output": ("batch", None)})),
    TaskRow("multiple-choice", f"{_HEADS}:BERTForMultipleChoice", ("choice",), ("BertForMultipleChoice",),
            export=Signature(CHOICES, {"logits": ("batch", "choices")}), finetune="choice",
            trainer="bertkit.tasks.multiple_choice:MultipleChoice"),
    TaskRow("pretraining", f"{_LM}:BERTForPreTraining",
            export=Signature(TOKENS, {"prediction_logits": ("batch", "sequence", None),
                                      "seq_relationship_logits": ("batch", None)})),
    TaskRow("causal-lm", f"{_LM}:BERTForCausalLM", (), ("BertLMHeadModel",), export=_TOKEN_SCORES),
    TaskRow("next-sentence-prediction", f"{_HEADS}:BERTForNextSentencePrediction", (),
            ("BertForNextSentencePrediction",), export=_SENTENCE_SCORES),
    TaskRow("replaced-token-detection", "bertkit.modeling.electra:ELECTRAForPreTraining", (),
            ("ElectraForPreTraining",)),
)
_BY_NAME = {name: row for row in TABLE for name in row.names}


def task_names(column: str | None = None) -> list[str]:
    """Every name and alias of the rows that fill ``column`` (``"pipeline"``, ``"export"``, ``"serve"``, ...;
    None: every row), in table order."""
    return [name for row in TABLE if column is None or getattr(row, column) is not None for name in row.names]


def find_task(name: str, column: str | None = None, what: str = "task") -> TaskRow:
    """The row named ``name`` (or an alias); a ``ValueError`` listing the names (of the rows that fill
    ``column``) for anything else, or for a row whose ``column`` is empty."""
    row = _BY_NAME.get(name)
    if row is None or (column is not None and getattr(row, column) is None):
        known = task_names(column)
        named = name if row is None or name == row.name else f"{name} ({row.name})"
        why = f"the {what} {named} has no {column}" if row is not None else f"unknown {what} {name!r}"
        raise ValueError(f"{why}; choose one of {', '.join(known)}.")
    return row


def task_for_architecture(architecture: str | None, num_labels: int | None = None) -> TaskRow | None:
    """The row that answers a checkpoint of ``architecture`` (BERT's HF spelling) with ``num_labels``; None for an
    architecture no row claims."""
    claims = [row for row in TABLE if architecture in row.architectures and row.num_labels in (None, num_labels)]
    return min(claims, key=lambda row: row.num_labels is None, default=None)  # a row naming the count first


def served_tasks() -> dict[str, TaskRow]:
    """``bertkit serve``'s task names -> their rows, in table order."""
    return {row.serve.name: row for row in TABLE if row.serve is not None}


def table_routes() -> list[str]:
    """The server routes of every row, in table order."""
    return list(dict.fromkeys(route for row in TABLE for route in row.routes))


def rows_with_route(route: str) -> list[TaskRow]:
    """The rows that list the server route ``route``."""
    return [row for row in TABLE if route in row.routes]


def resolve(name: str) -> Any:
    """The object a ``"module:attribute"`` name of the table names, imported now."""
    module, _, attribute = name.partition(":")
    return getattr(importlib.import_module(module), attribute)


__all__ = ["CHOICES", "TABLE", "TOKENS", "Served", "Signature", "TaskRow", "find_task", "resolve", "rows_with_route",
           "served_tasks", "table_routes", "task_for_architecture", "task_names"]
