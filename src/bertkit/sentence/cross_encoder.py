"""Cross-encoders (rerankers): a sequence classifier that reads a (query, passage) pair as one input.

:class:`CrossEncoder` scores pairs as sentence-transformers' ``CrossEncoder`` does (``predict``, ``rank``) on
bertkit's fast inference path: each pair tokenized together (``[CLS] query [SEP] passage [SEP]``, the longer
text cut first past ``max_length``, as sentence-transformers cuts), then the classifier over length-sorted
batches. This is the one scoring path: the ``rerank`` pipeline (what ``bertkit serve`` answers ``/rerank`` with)
wraps a :class:`CrossEncoder` as the ``embeddings`` pipeline wraps a ``SentenceTransformer``.

The activation applied to the logits is sentence-transformers' rule: the one the checkpoint names
(``config_sentence_transformers.json``'s ``activation_fn`` in a sentence-transformers 6 directory, else
``config.json``'s ``sentence_transformers.activation_fn``, else the pre-4.0 ``sbert_ce_default_activation_function``),
else sigmoid for one label and identity for several. Only ``torch.*`` activations are loaded (sentence-transformers
loads others only with ``trust_remote_code``).

:meth:`CrossEncoder.save` writes an HF directory (``config.json`` with the architecture, labels and the
activation under ``sentence_transformers``, ``model.safetensors``, the tokenizer files with ``model_max_length``)
and no ``modules.json``: sentence-transformers' ``CrossEncoder`` loads it as a sequence classifier with the same
scores, and ``bertkit serve`` (which takes a ``modules.json`` directory for an embedding model) serves it on
``/rerank``.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.checks import check_int
from bertkit.inference.batching import check_batch_size, pad, run_sorted
from bertkit.inference.precision import prepare
from bertkit.io import atomic_write_text, read_json_object
from bertkit.modeling.text import resolve_device
from bertkit.tasks.sources import inspect_source
from bertkit.tokenization.cut import cut_pairs

#: short names ``activation`` takes, and the torch classes sentence-transformers records for them
ACTIVATIONS = {"sigmoid": "torch.nn.modules.activation.Sigmoid", "identity": "torch.nn.modules.linear.Identity",
               "tanh": "torch.nn.modules.activation.Tanh"}
#: how a pair past ``max_length`` is cut: the passage only, or the longer text first (sentence-transformers'
#: ``truncation=True``, this class's own cut)
PAIR_CUTS = ("only_second", "longest_first")
_PAIR_CUT = "longest_first"
_ST_CONFIG = "config_sentence_transformers.json"


def resolve_activation(activation: str | nn.Module) -> nn.Module:
    """An activation module from a short name (:data:`ACTIVATIONS`), a ``torch.*`` class path as
    sentence-transformers records it (``"torch.nn.modules.activation.Sigmoid"``), or a ``torch.nn`` module."""
    if isinstance(activation, nn.Module):
        if not type(activation).__module__.startswith("torch."):
            raise ValueError(f"activation must be a torch.nn module (sentence-transformers loads no other); got "
                             f"{type(activation).__module__}.{type(activation).__qualname__}.")
        return activation
    if not isinstance(activation, str):
        raise ValueError(f"activation must be a name ({', '.join(ACTIVATIONS)}), a torch class path or a torch.nn "
                         f"module; got {activation!r}.")
    path = ACTIVATIONS.get(activation.lower(), activation)
    module, _, name = path.rpartition(".")
    if not module.startswith("torch."):
        raise ValueError(f"activation {activation!r} is neither one of {sorted(ACTIVATIONS)} nor a torch class path "
                         f"such as {ACTIVATIONS['sigmoid']!r}.")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise ValueError(f"activation {activation!r} names no torch class.") from None
    return cls()


def activation_path(activation: nn.Module) -> str:
    """The class path sentence-transformers records for ``activation``."""
    return f"{type(activation).__module__}.{type(activation).__qualname__}"


class CrossEncoder:
    """A cross-encoder from ``model_name_or_path`` (anything bertkit loads: an HF or sentence-transformers
    cross-encoder directory, a base checkpoint whose new head is then random and said in a ``LoadWarning``).

    ``num_labels``: the classifier's outputs (default: the checkpoint's); ``max_length``: where a pair is cut
    (default: a sentence-transformers directory's ``max_seq_length``, else the tokenizer's ``model_max_length``,
    capped by the model's positions); ``device``: where it runs (default CPU); ``activation``: see the module doc.
    ``dtype``: ``"auto"`` (bf16 where the hardware computes it natively and the measured classification quality
    allows, else fp32: :mod:`bertkit.inference.precision`), ``"fp32"`` (exact, and what training needs),
    ``"bf16"``, ``"int8"``, a torch dtype or None; what it became is :attr:`dtype_choice`.
    ``from_bi_encoder``: a sentence-transformers bi-encoder directory gives its Transformer module (the encoder;
    the head is new), where fine-tuning a reranker from an embedding model starts; otherwise it is refused.
    """

    def __init__(self, model_name_or_path: str | os.PathLike, num_labels: int | None = None,
                 max_length: int | None = None, device: str | torch.device | None = None,
                 activation: str | nn.Module | None = None, *, from_bi_encoder: bool = False, dtype: Any = "auto"):
        from bertkit.modeling.heads import BERTForSequenceClassification
        from bertkit.tasks.sources import load_model_and_tokenizer

        check_int("num_labels", num_labels, 1, none_means="the checkpoint's")
        check_int("max_length", max_length, 1, none_means="the checkpoint's")
        source, settings = _read_sentence_transformers(model_name_or_path, bi_encoder=from_bi_encoder)
        overrides = {"num_labels": num_labels} if num_labels is not None else {}
        model, tokenizer = load_model_and_tokenizer(source, BERTForSequenceClassification, **overrides)
        self._place(model, tokenizer, max_length or _saved_length(settings, tokenizer), device, dtype)
        tokenizer.model_max_length = self.max_length  # what save() records
        recorded = settings.get("activation_fn") or _config_activation(source)
        self._activate(activation if activation is not None else recorded)

    @classmethod
    def from_model(cls, model: nn.Module, tokenizer: Any, *, max_length: int | None = None,
                   device: str | torch.device | None = None, dtype: Any = "auto",
                   activation: str | nn.Module | None = None) -> CrossEncoder:
        """A cross-encoder over a loaded sequence classifier ``model`` (a ``BERTForSequenceClassification`` of any
        family) and its ``tokenizer``, put on ``device`` in ``dtype`` as :class:`CrossEncoder` puts a loaded one;
        ``max_length`` (default: the model's positions) and ``activation`` as there (default: sigmoid for one
        label, identity for several). The ``rerank`` pipeline scores through one."""
        check_int("max_length", max_length, 1, none_means="the model's positions")
        cross = cls.__new__(cls)
        cross._place(model, tokenizer, max_length, device, dtype)
        cross._activate(activation)
        return cross

    def _place(self, model: nn.Module, tokenizer: Any, max_length: int | None, device: Any, dtype: Any) -> None:
        """Eval mode, on ``device``, in ``dtype`` on the fast path; pairs cut at ``max_length`` within the model."""
        self.model, self.tokenizer = model.eval(), tokenizer
        if device is not None:
            model.to(resolve_device(device))
        self.dtype_choice = prepare(model, dtype, "rerank")
        limit = getattr(getattr(model, "config", None), "max_tokens", 512)
        self.max_length = min(max_length or limit, limit)
        self.pad_values = {"input_ids": tokenizer.pad_token_id, "token_type_ids": 0, "attention_mask": 0}

    def _activate(self, activation: str | nn.Module | None) -> None:
        self.activation = resolve_activation(activation if activation is not None else
                                             "sigmoid" if self.num_labels == 1 else "identity")

    @property
    def num_labels(self) -> int:
        return self.model.config.num_labels

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # --------------------------------------------------------------------------------- the scoring path
    def features(self, pairs: Sequence[tuple[str, str]], truncation: str = _PAIR_CUT,
                 truncation_side: str = "right") -> list[dict[str, list]]:
        """The unpadded token rows (``input_ids``, ``token_type_ids``, ``attention_mask`` lists) of ``pairs``, each
        pair tokenized together and cut past :attr:`max_length` by ``truncation`` (one of :data:`PAIR_CUTS`) at
        ``truncation_side``; each text is first cut to the part truncation keeps
        (:func:`~bertkit.tokenization.cut.cut_pairs`: the same tokens, at a cost bounded by ``max_length``)."""
        for pair in pairs:
            if not (isinstance(pair, list | tuple) and len(pair) == 2 and all(isinstance(t, str) for t in pair)):
                raise ValueError(f"a cross-encoder scores (query, passage) pairs of two strings; got {pair!r}.")
        if truncation not in PAIR_CUTS:
            raise ValueError(f"truncation must be one of {PAIR_CUTS}, got {truncation!r}.")
        rows = []
        for query, passage in pairs:
            (first,), (second,) = cut_pairs(self.tokenizer, [query], [passage], self.max_length, truncation_side,
                                            truncation)
            encoding = self.tokenizer(first, second, truncation=truncation, max_length=self.max_length,
                                      truncation_side=truncation_side, return_token_type_ids=True)
            rows.append(dict(encoding))
        return rows

    def tokenize(self, pairs: Sequence[tuple[str, str]]) -> dict[str, torch.Tensor]:
        """``pairs`` tokenized together and padded: ``input_ids``, ``token_type_ids``, ``attention_mask``, each
        ``[n, L]`` on the model's device (the inputs of :meth:`score`)."""
        return pad(self.features(pairs), self.pad_values, self.device)

    def score(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The classifier's logits ``[n, num_labels]`` for :meth:`tokenize`'s ``inputs``; with gradients unless
        called under ``torch.no_grad`` (the ``score`` the reranking losses call)."""
        return self.model(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])

    @torch.inference_mode()
    def forward(self, rows: list[dict[str, list]]) -> list[np.ndarray]:
        """float32 logits ``[num_labels]`` of each of :meth:`features`' ``rows``, run as one padded batch."""
        logits = self.score(pad(rows, self.pad_values, self.device)).float().cpu().numpy()
        return list(logits)

    def logits(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        """float32 ``[n, num_labels]`` logits of ``pairs``, in length-sorted batches of ``batch_size``."""
        check_batch_size(batch_size)
        features = self.features(pairs)
        if not features:
            return np.zeros((0, self.num_labels), dtype=np.float32)
        rows = run_sorted(features, [len(f["input_ids"]) for f in features], batch_size, self.forward)
        return np.stack(rows)

    # ------------------------------------------------------------------------------- sentence-transformers' API
    def predict(self, pairs: Sequence[tuple[str, str]] | tuple[str, str], batch_size: int = 32,
                activation: str | nn.Module | None = None, apply_softmax: bool = False) -> np.ndarray | np.float32:
        """Scores of ``pairs`` as sentence-transformers' ``CrossEncoder.predict`` returns them: the activation
        (default: this model's, see the module doc) on the logits, float32 ``[n]`` for one label, ``[n, num_labels]``
        otherwise (softmax-normalised per row with ``apply_softmax``); one pair gives one score (or row)."""
        single = isinstance(pairs, list | tuple) and len(pairs) == 2 and all(isinstance(t, str) for t in pairs)
        rows = [pairs] if single else list(pairs)
        function = self.activation if activation is None else resolve_activation(activation)
        with torch.inference_mode():
            scores = function(torch.from_numpy(self.logits(rows, batch_size)))
            if self.num_labels == 1:
                scores = scores.squeeze(-1)
            elif apply_softmax:
                scores = scores.softmax(dim=-1)
        scores = scores.float().numpy()
        return scores[0] if single else scores

    def rank(self, query: str, documents: Sequence[str], top_k: int | None = None, return_documents: bool = False,
             batch_size: int = 32, activation: str | nn.Module | None = None) -> list[dict[str, Any]]:
        """``[{"corpus_id", "score"(, "text")}]`` for ``documents`` against ``query``, best first (ties in input
        order), the first ``top_k`` (all for None): sentence-transformers' ``CrossEncoder.rank``. One-label models."""
        if self.num_labels != 1:
            raise ValueError(f"rank() needs a one-label cross-encoder; this one has {self.num_labels} labels: use "
                             "predict() on (query, document) pairs instead.")
        if not isinstance(query, str) or isinstance(documents, str) or not all(isinstance(d, str) for d in documents):
            raise ValueError("rank takes a query string and a list of document strings: rank(query, documents).")
        check_int("top_k", top_k, 0, none_means="every document")
        scores = self.predict([(query, d) for d in documents], batch_size=batch_size, activation=activation)
        ranked = [{"corpus_id": i, "score": float(s), **({"text": d} if return_documents else {})}
                  for i, (s, d) in enumerate(zip(scores, documents))]
        return sorted(ranked, key=lambda r: r["score"], reverse=True)[:top_k]

    # ------------------------------------------------------------------------------------------------ saving
    def save(self, path: str | os.PathLike) -> None:
        """Write the cross-encoder to the directory ``path`` (see the module doc); each file atomically."""
        path = Path(path)
        if (path / "modules.json").is_file():
            raise ValueError(f"{path} holds a sentence-transformers modules.json, whose settings would override "
                             "what save() writes: save into a new directory.")
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        config = read_json_object(path / "config.json", "the model config")
        config["sentence_transformers"] = {"activation_fn": activation_path(self.activation)}
        atomic_write_text(path / "config.json", json.dumps(config, indent=2, sort_keys=True) + "\n")


def _read_sentence_transformers(source: str | os.PathLike,
                                bi_encoder: bool = False) -> tuple[str | os.PathLike, dict[str, Any]]:
    """``(where the model is, settings)`` of a sentence-transformers 6 cross-encoder directory (``modules.json``):
    the Transformer module's folder, and its ``max_seq_length`` and ``activation_fn`` where recorded; any other
    source as it is, with no settings. ``bi_encoder``: a bi-encoder directory (a Transformer, then pooling and
    more) is read for its Transformer module too, instead of being refused."""
    root = Path(source)
    info = inspect_source(root) if root.is_dir() else None
    if info is None or not info.sentence_transformers:
        return source, {}
    kinds = list(info.modules)
    if kinds != ["Transformer"] and not (bi_encoder and kinds[:1] == ["Transformer"]):
        raise ValueError(f"{root}/modules.json holds the modules {kinds}; bertkit.CrossEncoder runs a cross-encoder "
                         "of one Transformer module (a sequence classifier).")
    folder = info.model_path
    settings: dict[str, Any] = {}
    if info.max_length is not None:
        settings["max_seq_length"] = info.max_length
    if (root / _ST_CONFIG).is_file():
        settings["activation_fn"] = read_json_object(root / _ST_CONFIG, "sentence-transformers settings") \
            .get("activation_fn")
    return folder, settings


def is_cross_encoder(model_dir: str | os.PathLike) -> bool:
    """Whether the directory ``model_dir`` holds a cross-encoder: a sequence classifier (its ``config.json``
    names a ``*ForSequenceClassification`` architecture), alone (as :meth:`CrossEncoder.save` and
    sentence-transformers 4-5 write one) or as the one Transformer module of a sentence-transformers 6
    directory (:func:`bertkit.tasks.sources.inspect_source`'s ``cross_encoder``). An embedding model (a
    ``modules.json`` with pooling, a bare encoder) or a directory without a checkpoint is not one."""
    if not Path(model_dir).is_dir():
        return False
    try:
        return inspect_source(model_dir).cross_encoder
    except FileNotFoundError:  # no checkpoint in it
        return False
def saved_max_length(source: str | os.PathLike, tokenizer: Any) -> int | None:
    """The pair length the cross-encoder directory ``source`` was saved with (``tokenizer``: its loaded tokenizer):
    a sentence-transformers 6 Transformer module's ``max_seq_length``, else the tokenizer's ``model_max_length``
    (what :meth:`CrossEncoder.save` and sentence-transformers record); None where neither is set."""
    return _saved_length(_read_sentence_transformers(source)[1], tokenizer)


def _saved_length(settings: Mapping[str, Any], tokenizer: Any) -> int | None:
    from bertkit.tokenization.base import UNLIMITED_ABOVE

    saved = settings.get("max_seq_length") or tokenizer.model_max_length
    return saved if saved <= UNLIMITED_ABOVE else None


def _config_activation(source: str | os.PathLike) -> str | None:
    """The activation ``config.json`` records (sentence-transformers 4-5, or before 4.0), or None."""
    from bertkit.weights.download import resolve_source

    resolved = Path(resolve_source(source))
    config_path = (resolved if resolved.is_dir() else resolved.parent) / "config.json"
    if not config_path.is_file():
        return None
    config = read_json_object(config_path, "the model config")
    recorded = config.get("sentence_transformers") or {}
    return recorded.get("activation_fn") or config.get("sbert_ce_default_activation_function")
