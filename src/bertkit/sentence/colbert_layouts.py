"""The directory layouts a ColBERT model comes in, read into one :class:`~bertkit.sentence.modules.Layout`.

- sentence-transformers 6 ``MultiVectorEncoder``: ``modules.json`` with ``MultiVectorMask``; settings on the
  ``Transformer`` (``query_length``, ``document_length``, ``query_expansion``).
- PyLate (``config_sentence_transformers.json``'s ``model_type`` is ``"ColBERT"``): ``Transformer`` and a PyLate
  ``Dense`` only; the markers (``query_prefix`` / ``document_prefix``), lengths, ``do_query_expansion``,
  ``attend_to_expansion_tokens`` and ``skiplist_words`` (default: punctuation) at the top level of that file;
  token vectors always normalised.
  bertkit's saves of a model with markers carry the same ``query_prefix`` / ``document_prefix`` keys.
- Stanford ColBERT (``config.json``'s ``architectures`` holds ``HF_ColBERT``, no ``modules.json``): the BERT and
  the projection ``linear.weight`` in one checkpoint, ``artifact.metadata`` (``query_maxlen``, ``doc_maxlen``,
  ``query_token_id`` / ``doc_token_id`` markers, ``attend_to_mask_tokens``, ``mask_punctuation``); queries always
  expanded, vectors normalised.
- BGE-M3 (an XLM-R checkpoint with FlagEmbedding's ``colbert_linear.pt`` beside it; its dense ``modules.json``, if
  any, is not read): FlagEmbedding's ``colbert_vecs`` as :class:`bertkit.BGEM3` gives them, i.e. the projection
  (with its bias) and normalisation of every token but the first (``<s>``, whose state is the dense vector, is the
  skiplist of both tasks), 512 tokens per text (FlagEmbedding's ``encode`` default), no markers or expansion,
  scored by MeanMaxSim (FlagEmbedding's ``colbert_score``).

A marker (``[unused0]``, ``[Q]``) is one vocabulary token put after ``[CLS]``, never split into characters: the
layout keeps it in the prompt and names it in ``markers``, as sentence-transformers 6 reads these layouts.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

from bertkit.sentence.modules import Dense, Layout, _transformer_settings, is_sentence_transformer, read_layout
from bertkit.tasks.sources import COLBERT_LINEAR

PUNCTUATION = list(string.punctuation)  # the skiplist PyLate and Stanford ColBERT apply unless told otherwise
STANFORD_MARKERS = {"query": "[unused0]", "document": "[unused1]"}
M3_LENGTH = 512  # the tokens FlagEmbedding's BGE-M3 encode keeps per text by default (BGEM3's max_length)


def read_colbert_layout(path: str | Path) -> Layout:
    """The :class:`Layout` of a ColBERT directory in any of the three layouts; ValueError naming the directory
    when it is none of them."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path} is not a directory: pass a ColBERT model's directory (download it first, e.g. with "
                         "huggingface_hub.snapshot_download).")
    if (path / COLBERT_LINEAR).is_file():
        return _bge_m3(path)
    if is_sentence_transformer(path):
        layout, settings = read_layout(path), _settings(path)
        _markers(layout, settings)
        if layout.model_type == "ColBERT":
            _pylate(layout, settings)
        return layout
    config = path / "config.json"
    if config.is_file() and "HF_ColBERT" in (_json(config).get("architectures") or []):
        return _stanford(path)
    raise ValueError(f"{path} is not a ColBERT directory bertkit reads: a sentence-transformers MultiVectorEncoder "
                     "or PyLate directory (modules.json), a Stanford ColBERT checkpoint (config.json naming "
                     f"HF_ColBERT, with artifact.metadata) or a BGE-M3 directory ({COLBERT_LINEAR}).")


def is_colbert_directory(path: str | Path) -> bool:
    """Whether ``path`` is a ColBERT directory in one of the three layouts (read, nothing loaded)."""
    from bertkit.sentence.modules import is_multi_vector

    try:
        return is_multi_vector(read_colbert_layout(path))
    except (ValueError, OSError):
        return False


def _markers(layout: Layout, settings: dict[str, Any]) -> None:
    """The top-level ``query_prefix`` / ``document_prefix`` (PyLate's, and bertkit's saves of a model with markers):
    put before the task's prompt, as one token."""
    for role in ("query", "document"):
        marker = settings.get(f"{role}_prefix")
        if marker:
            layout.prompts[role] = marker + (layout.prompts.get(role) or "").removeprefix(marker)
            layout.markers[role] = marker


def _pylate(layout: Layout, settings: dict[str, Any]) -> None:
    """PyLate's top-level settings, as sentence-transformers 6 translates them."""
    layout.query_length = settings.get("query_length") or layout.query_length
    layout.document_length = settings.get("document_length") or layout.document_length
    if settings.get("do_query_expansion") is not False:
        attend = settings.get("attend_to_expansion_tokens", settings.get("attend_to_mask_tokens"))
        layout.query_expansion = {"strategy": "fixed", "attend": bool(attend), "length": layout.query_length or 32}
        layout.query_length = None  # the expansion length is the query's width
    skiplist = settings.get("skiplist_words")
    layout.token_mask = {"skiplist_words": PUNCTUATION if skiplist is None else list(skiplist)}
    layout.normalize = True


def _stanford(path: Path) -> Layout:
    """A Stanford ColBERT checkpoint: the BERT, its ``linear`` projection and ``artifact.metadata``."""
    from bertkit.weights.hf import read_state_dict

    metadata_file = path / "artifact.metadata"
    metadata = _json(metadata_file) if metadata_file.is_file() else {}
    weights = read_state_dict(path)
    if "linear.weight" not in weights:
        raise ValueError(f"{path}: a Stanford ColBERT checkpoint holds its projection as 'linear.weight' beside the "
                         "BERT's weights, and this one has none.")
    out_features, in_features = weights["linear.weight"].shape
    dense = Dense(in_features, out_features, bias=False, activation="Identity")
    dense.linear.weight.data.copy_(weights["linear.weight"])
    layout = Layout(transformer=path, **_transformer_settings(path, path))
    layout.dense, layout.normalize, layout.model_type = [dense], True, "HF_ColBERT"  # the projection read here
    for role, default in STANFORD_MARKERS.items():
        marker = metadata.get("query_token_id" if role == "query" else "doc_token_id") or default
        layout.prompts[role], layout.markers[role] = marker + " ", marker
    layout.document_length = metadata.get("doc_maxlen")
    layout.query_expansion = {"strategy": "fixed", "attend": bool(metadata.get("attend_to_mask_tokens")),
                              "length": metadata.get("query_maxlen") or 32}
    layout.token_mask = {"skiplist_words": PUNCTUATION if metadata.get("mask_punctuation", True) else []}
    return layout


def _bge_m3(path: Path) -> Layout:
    """A BGE-M3 directory's multi-vector head: ``colbert_linear.pt`` (tensors only) after the XLM-R encoder."""
    from bertkit.sentence.bge_m3 import load_linear

    config = _json(path / "config.json") if (path / "config.json").is_file() else {}
    hidden = config.get("hidden_size")
    if not isinstance(hidden, int):
        raise ValueError(f"{path / 'config.json'}: a BGE-M3 directory's encoder config needs hidden_size.")
    linear = load_linear(path, COLBERT_LINEAR, hidden)
    dense = Dense(hidden, linear.out_features, bias=linear.bias is not None, activation="Identity")
    dense.linear.load_state_dict(linear.state_dict())
    layout = Layout(transformer=path, **_transformer_settings(path, path))
    layout.max_seq_length = min(layout.max_seq_length or M3_LENGTH, M3_LENGTH)
    layout.dense, layout.normalize, layout.model_type = [dense], True, "BGE-M3"
    layout.token_mask = {"skiplist_words": [_cls_token(path)], "skiplist_tasks": ["query", "document"]}
    layout.similarity_fn_name = "meanmaxsim"
    return layout


def _cls_token(path: Path) -> str:
    """The tokenizer's first token (XLM-R's ``<s>``) from its saved settings."""
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        token = _json(path / name).get("cls_token") if (path / name).is_file() else None
        token = token.get("content") if isinstance(token, dict) else token
        if isinstance(token, str):
            return token
    return "<s>"


def _settings(path: Path) -> dict[str, Any]:
    file = path / "config_sentence_transformers.json"
    return _json(file) if file.is_file() else {}


def _json(path: Path) -> Any:
    from bertkit.io import read_json

    return read_json(path, f"the ColBERT settings file {path.name}")
