"""The losses of the sentence-transformers models, and the one table that names them: :data:`LOSS_TABLE`.

A bi-encoder loss is called as ``loss(embed, batch)``: ``embed`` maps one column's tokenized inputs to its
embeddings ``[n, d]`` (with gradients), ``batch`` is a :class:`~bertkit.sentence.batch.PairBatch`; a loss that
runs the encoder itself (the cached, GradCache form) calls ``embed`` as often as it needs. A cross-encoder
(reranker) loss is called as ``loss(score, batch)`` on a :class:`~bertkit.sentence.losses.rerank.RerankBatch`.
A learned-sparse model (``bertkit finetune sparse``) trains with a bi-encoder loss of the ``sparse`` rows (their
defaults: sentence-transformers' sparse losses') inside :class:`~bertkit.sentence.losses.sparse.SpladeLoss`.
A multi-vector (ColBERT) model (``bertkit finetune colbert``) trains with the ``multi-vector`` rows
(:mod:`bertkit.sentence.losses.multi_vector`: the same calls, on token vectors scored by MaxSim).

Each row of the table is one loss by its ``--loss`` name: the model kind it trains, its class, and the options it
takes (each option's name, and the class's argument it sets). :func:`build` reads it, for ``bertkit finetune
embed`` through :func:`build_loss` (which wraps any bi-encoder loss in Matryoshka when asked) and for ``bertkit
finetune rerank`` through :func:`build_rerank_loss`. Adding a loss is one row.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

#: the kind of model a bi-encoder loss trains (``bertkit finetune embed``)
BI_ENCODER = "bi-encoder"
#: the kind of model a cross-encoder (reranker) loss trains (``bertkit finetune rerank``)
CROSS_ENCODER = "cross-encoder"
#: the kind of model a learned-sparse loss trains, inside SpladeLoss (``bertkit finetune sparse``)
SPARSE = "sparse-encoder"
#: the kind of model a multi-vector (ColBERT) loss trains, on MaxSim scores (``bertkit finetune colbert``)
MULTI_VECTOR = "multi-vector"
# how an unknown --loss is told for each kind
_TRAINS = {BI_ENCODER: "a loss bertkit trains with", CROSS_ENCODER: "a loss bertkit trains rerankers with",
           SPARSE: "a loss bertkit trains sparse encoders with",
           MULTI_VECTOR: "a loss bertkit trains ColBERT models with"}


@dataclass(frozen=True)
class LossEntry:
    """One loss: ``name`` (what ``--loss`` takes), the model ``kind`` it trains, ``target`` (``"module:Class"``
    under :mod:`bertkit.sentence.losses`) and ``options``: option name (the flag without ``--``, ``_`` for ``-``)
    -> the argument of the class it sets, or ``(argument, conversion)``. An option given to a loss that does not
    take it is refused; ``needs``: option -> why the loss cannot do without it."""

    name: str
    kind: str
    target: str
    options: Mapping[str, str | tuple[str, Callable[[Any], Any]]] = field(default_factory=dict)
    needs: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def cls(self) -> type[nn.Module]:
        """The loss class (its module imported on first use)."""
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)


_IN_BATCH = {"scale": "scale", "symmetric": "symmetric"}
_RERANK = {"mini_batch_size": "mini_batch_size"}
_DOT = {"similarity": "dot"}  # sparse vectors are scored by their dot product
#: every loss bertkit trains with: the bi-encoder losses (``finetune embed``), then the cross-encoder ones
#: (``finetune rerank``)
LOSS_TABLE: tuple[LossEntry, ...] = (
    LossEntry("mnrl", BI_ENCODER, "contrastive:MultipleNegativesRankingLoss", _IN_BATCH),
    LossEntry("cached-mnrl", BI_ENCODER, "cached:CachedMultipleNegativesRankingLoss",
              {**_IN_BATCH, "mini_batch_size": "mini_batch_size"}),
    LossEntry("cosent", BI_ENCODER, "pairwise:CoSENTLoss", {"scale": "scale"}),
    LossEntry("angle", BI_ENCODER, "pairwise:AnglELoss", {"scale": "scale"}),
    LossEntry("cosine", BI_ENCODER, "pairwise:CosineSimilarityLoss"),
    LossEntry("triplet", BI_ENCODER, "pairwise:TripletLoss"),
    LossEntry("contrastive", BI_ENCODER, "pairwise:ContrastiveLoss"),
    LossEntry("online-contrastive", BI_ENCODER, "pairwise:OnlineContrastiveLoss"),
    LossEntry("margin-mse", BI_ENCODER, "distillation:MarginMSELoss"),
    LossEntry("kl", BI_ENCODER, "distillation:DistillKLDivLoss"),
    # --scale is 1 / GIST's temperature, as it is for the in-batch losses' softmax
    LossEntry("gist", BI_ENCODER, "distillation:GISTEmbedLoss",
              {"scale": ("temperature", lambda scale: 1 / scale), "guide": "guide_embed"},
              needs={"guide": "--loss gist needs --guide MODEL: the embedding model whose similarities filter the "
                              "false negatives out of each row's candidates."}),
    LossEntry("bce", CROSS_ENCODER, "rerank:BinaryCrossEntropyLoss", _RERANK),
    LossEntry("listnet", CROSS_ENCODER, "rerank:ListNetLoss", _RERANK),
    LossEntry("lambda", CROSS_ENCODER, "rerank:LambdaLoss", _RERANK),
    LossEntry("mnrl", CROSS_ENCODER, "rerank:CrossEncoderMultipleNegativesRankingLoss",
              {**_RERANK, "num_negatives": "num_negatives"}),
    LossEntry("mnrl", SPARSE, "contrastive:MultipleNegativesRankingLoss", {"scale": "scale"},
              defaults={"scale": 1.0, **_DOT}),
    LossEntry("margin-mse", SPARSE, "distillation:MarginMSELoss", defaults=_DOT),
    LossEntry("kl", SPARSE, "distillation:DistillKLDivLoss", {"temperature": "temperature"},
              defaults={"temperature": 2.0, **_DOT}),
    LossEntry("cosent", SPARSE, "pairwise:CoSENTLoss", {"scale": "scale"}, defaults={"scale": 20.0}),
    LossEntry("mnrl", MULTI_VECTOR, "multi_vector:MultiVectorMultipleNegativesRankingLoss", {"scale": "scale"}),
    LossEntry("cached-mnrl", MULTI_VECTOR, "multi_vector:CachedMultiVectorMultipleNegativesRankingLoss",
              {"scale": "scale", "mini_batch_size": "mini_batch_size"}),
    LossEntry("margin-mse", MULTI_VECTOR, "multi_vector:MultiVectorMarginMSELoss"),
    LossEntry("kl", MULTI_VECTOR, "multi_vector:MultiVectorDistillKLDivLoss",
              {"temperature": "temperature", "student_temperature": "student_temperature",
               "teacher_temperature": "teacher_temperature"}),
)


def loss_names(kind: str) -> tuple[str, ...]:
    """The ``--loss`` names of the losses that train ``kind`` models, in table order."""
    return tuple(entry.name for entry in LOSS_TABLE if entry.kind == kind)


def loss_entry(kind: str, name: str) -> LossEntry:
    """The table's row of the ``kind`` loss ``name``; a one-line ``ValueError`` naming ``--loss`` and the choices."""
    for entry in LOSS_TABLE:
        if entry.kind == kind and entry.name == name:
            return entry
    raise ValueError(f"--loss {name!r} is not {_TRAINS[kind]}; choose one of {', '.join(loss_names(kind))}.")


def build(kind: str, name: str, **options: Any) -> nn.Module:
    """The ``kind`` loss ``name`` with ``options`` (option name -> value; None or False: not given). An option the
    loss does not take, or one it needs and lacks, is a one-line ``ValueError`` naming the flag."""
    entry = loss_entry(kind, name)
    given = {option: value for option, value in options.items() if value is not None and value is not False}
    for option in given:
        if option not in entry.options:
            takers = [e.name for e in LOSS_TABLE if e.kind == kind and option in e.options]
            raise ValueError(f"--{option.replace('_', '-')} does not apply to --loss {name}; it applies to "
                             f"{', '.join(takers)}.")
    for option, why in entry.needs.items():
        if option not in given:
            raise ValueError(why)
    arguments = dict(entry.defaults)
    for option, value in given.items():
        argument, convert = entry.options[option] if isinstance(entry.options[option], tuple) else \
            (entry.options[option], None)
        arguments[argument] = convert(value) if convert else value
    return entry.cls(**arguments)


#: the ``--loss`` names of ``bertkit finetune embed``
LOSSES = loss_names(BI_ENCODER)
#: the ``--loss`` names of ``bertkit finetune rerank``
RERANK_LOSSES = loss_names(CROSS_ENCODER)
#: the ``--loss`` names of ``bertkit finetune sparse`` (each inside SpladeLoss)
SPARSE_LOSSES = loss_names(SPARSE)
#: the ``--loss`` names of ``bertkit finetune colbert``
MULTI_VECTOR_LOSSES = loss_names(MULTI_VECTOR)


def build_loss(name: str, *, scale: float | None = None, symmetric: bool = False,
               mini_batch_size: int | None = None, matryoshka_dims: Sequence[int] | None = None,
               guide=None) -> nn.Module:
    """The bi-encoder loss ``name`` (one of :data:`LOSSES`) with its options (:func:`build`); Matryoshka wraps it
    when ``matryoshka_dims``. ``gist`` needs ``guide`` (an embed function:
    :class:`~bertkit.sentence.losses.guide.Guide`) and reads ``scale`` as 1 / its temperature."""
    from bertkit.sentence.losses.matryoshka import MatryoshkaLoss

    loss = build(BI_ENCODER, name, scale=scale, symmetric=symmetric, mini_batch_size=mini_batch_size, guide=guide)
    return MatryoshkaLoss(loss, list(matryoshka_dims)) if matryoshka_dims else loss


def build_rerank_loss(name: str, *, mini_batch_size: int | None = None,
                      num_negatives: int | None = None) -> nn.Module:
    """The cross-encoder loss ``name`` (one of :data:`RERANK_LOSSES`) with its options (:func:`build`);
    ``num_negatives`` (in-batch negatives per row) is mnrl's alone."""
    return build(CROSS_ENCODER, name, mini_batch_size=mini_batch_size, num_negatives=num_negatives)


def build_sparse_loss(name: str, *, scale: float | None = None, temperature: float | None = None,
                      mini_batch_size: int | None = None, **splade: Any) -> nn.Module:
    """The sparse loss ``name`` (one of :data:`SPARSE_LOSSES`, its options by :func:`build`) inside
    :class:`~bertkit.sentence.losses.sparse.SpladeLoss` with ``splade`` (weights, regularisers, warm-up), or inside
    its cached form :class:`~bertkit.sentence.losses.sparse.CachedSpladeLoss` with ``mini_batch_size``."""
    from bertkit.sentence.losses.sparse import CachedSpladeLoss, SpladeLoss

    base = build(SPARSE, name, scale=scale, temperature=temperature)
    if mini_batch_size is not None:
        return CachedSpladeLoss(base, mini_batch_size=mini_batch_size, **splade)
    return SpladeLoss(base, **splade)


def build_multi_vector_loss(name: str, **options: Any) -> nn.Module:
    """The multi-vector (ColBERT) loss ``name`` (one of :data:`MULTI_VECTOR_LOSSES`) with its options
    (:func:`build`: ``scale``, ``mini_batch_size``, ``temperature``, ``student_temperature``,
    ``teacher_temperature``)."""
    return build(MULTI_VECTOR, name, **options)


#: the loss classes this package exports (imported on first use): each row's, and the Matryoshka wrapper
_CLASSES = {entry.target.partition(":")[2]: entry.target.partition(":")[0] for entry in LOSS_TABLE} | \
    {"MatryoshkaLoss": "matryoshka", "SpladeLoss": "sparse", "CachedSpladeLoss": "sparse",
     "RegulariserWarmup": "sparse"}
__all__ = ["BI_ENCODER", "CROSS_ENCODER", "LOSSES", "LOSS_TABLE", "LossEntry", "MULTI_VECTOR", "MULTI_VECTOR_LOSSES",
           "RERANK_LOSSES", "SPARSE", "SPARSE_LOSSES", "build", "build_loss", "build_multi_vector_loss",
           "build_rerank_loss", "build_sparse_loss", "loss_entry", "loss_names", *sorted(_CLASSES)]


def __getattr__(name: str) -> Any:
    if name not in _CLASSES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_CLASSES[name]}"), name)
