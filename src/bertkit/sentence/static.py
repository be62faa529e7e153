"""Static embeddings: a tokenizer and a table of one vector per token, averaged over a text's tokens.

A Model2Vec directory (``config.json``, ``model.safetensors`` holding ``embeddings`` and, when the vocabulary is
quantized, ``weights`` and ``mapping``, ``tokenizer.json``) and a sentence-transformers ``StaticEmbedding`` directory
(``modules.json`` naming it, ``model.safetensors`` holding ``embedding.weight``, ``tokenizer.json``, optionally a
``Normalize``) both load with :func:`load_static`; :func:`save_static` writes one directory that model2vec,
sentence-transformers and bertkit all load. The two peers read the same directory slightly differently, and
:class:`StaticEmbedding` can follow either (``like``): model2vec cuts each text to ``max_length`` tokens (its
config's, 512 by default) and leaves unknown tokens out of the mean; sentence-transformers keeps the tokenizer's
own truncation and averages unknown tokens in.
"""

from __future__ import annotations

import itertools
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from bertkit.tasks.sources import static_kind

#: the two readers of a static directory whose behaviour :class:`StaticEmbedding` can follow
LIKE = ("model2vec", "sentence-transformers")
#: model2vec's default ``max_length`` (tokens) when its config names none
MODEL2VEC_MAX_LENGTH = 512


class StaticEmbedding(nn.Module):
    """Mean of per-token vectors: ``embedding`` (an ``nn.EmbeddingBag`` ``[K, D]``, float32, trainable), optional
    ``mapping`` ``[V]`` (token id -> table row: model2vec's vocabulary quantization) and ``weights`` ``[V]`` (one
    factor per token id). No special tokens are added. ``max_length`` set: model2vec's reading (each text cut to
    ``max_length x`` the median token length in characters, then to ``max_length`` tokens; unknown tokens dropped);
    None: sentence-transformers' (the tokenizer's own truncation; unknown tokens counted).

    ``forward(features)`` takes sentence-transformers' layout (flat ``input_ids``, ``offsets`` of each text) and
    adds ``sentence_embedding`` ``[B, D]``; :meth:`encode` is the fast path to a float32 array.
    """

    def __init__(self, tokenizer: Tokenizer, embedding_weights: torch.Tensor | np.ndarray | None = None, *,
                 embedding_dim: int | None = None, weights: torch.Tensor | np.ndarray | None = None,
                 mapping: torch.Tensor | np.ndarray | None = None, max_length: int | None = None,
                 skip_unknown: bool | None = None):
        """``embedding_weights`` ``[K, D]`` (else a fresh ``[V, embedding_dim]`` table as
        ``nn.EmbeddingBag`` initialises it); ``skip_unknown`` defaults to ``max_length is not None``."""
        super().__init__()
        if not isinstance(tokenizer, Tokenizer):
            raise TypeError(f"StaticEmbedding takes a tokenizers.Tokenizer, got {type(tokenizer).__name__}; load one "
                            "with tokenizers.Tokenizer.from_file('tokenizer.json').")
        self.tokenizer = Tokenizer.from_str(tokenizer.to_str())  # a copy: padding and truncation are set below
        self.tokenizer.no_padding()
        vocab = self.tokenizer.get_vocab_size()
        if embedding_weights is not None:
            table = torch.as_tensor(embedding_weights).detach().float().contiguous()
            self.embedding = nn.EmbeddingBag.from_pretrained(table, freeze=False, mode="mean")
        elif embedding_dim is not None:
            self.embedding = nn.EmbeddingBag(vocab, embedding_dim, mode="mean")
        else:
            raise ValueError("StaticEmbedding needs embedding_weights ([K, D]) or embedding_dim.")
        self.register_buffer("mapping", None if mapping is None else torch.as_tensor(mapping).long())
        self.register_buffer("weights", None if weights is None else torch.as_tensor(weights).detach().float())
        check_vocabulary(vocab, self.embedding.num_embeddings, self.mapping, self.weights, "the table")
        self.max_length = max_length
        self.skip_unknown = max_length is not None if skip_unknown is None else skip_unknown
        self.unknown_id = _unknown_id(self.tokenizer)
        if max_length is not None:
            self.tokenizer.enable_truncation(max_length)
            lengths = [len(token) for token in self.tokenizer.get_vocab()]
            self.text_cut = max_length * int(np.median(lengths))  # characters: model2vec's bound on work per text

    @property
    def dim(self) -> int:
        return self.embedding.embedding_dim

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def get_sentence_embedding_dimension(self) -> int:
        return self.dim

    # ------------------------------------------------------------------------------------------ tokens
    def token_ids(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The token ids of ``texts``, flat (int64), and each text's count, as this module reads them."""
        if self.max_length is not None:
            texts = [text[:self.text_cut] for text in texts]
        rows = [encoding.ids for encoding in self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
        if self.skip_unknown and self.unknown_id is not None:
            known = flat != self.unknown_id
            if not known.all():
                owner = np.repeat(np.arange(len(rows)), lengths)
                lengths = np.bincount(owner[known], minlength=len(rows)).astype(np.int64)
                flat = flat[known]
        return flat, lengths

    def tokenize(self, texts: list[str]) -> dict[str, torch.Tensor]:
        """sentence-transformers' features of ``texts``: flat ``input_ids`` and the ``offsets`` where each starts."""
        flat, lengths = self.token_ids(list(texts))
        return {"input_ids": torch.from_numpy(flat), "offsets": torch.from_numpy(offsets_of(lengths))}

    # ------------------------------------------------------------------------------------------ vectors
    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        features["sentence_embedding"] = self.pool(features["input_ids"], features["offsets"])
        return features

    def pool(self, input_ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """``[B, D]``: each text's mean token vector (zeros for a text without tokens). Differentiable."""
        rows = input_ids if self.mapping is None else self.mapping[input_ids]
        if self.weights is None:
            return F.embedding_bag(rows, self.embedding.weight, offsets, mode="mean")
        summed = F.embedding_bag(rows, self.embedding.weight, offsets, mode="sum",
                                 per_sample_weights=self.weights[input_ids])
        ends = torch.cat([offsets[1:], offsets.new_tensor([len(input_ids)])])
        return summed / (ends - offsets).clamp(min=1)[:, None].to(summed.dtype)

    def encode(self, texts: str | list[str], batch_size: int = 1024, normalize: bool = False,
               threads: int | None = None) -> np.ndarray:
        """Float32 ``[N, D]`` vectors of ``texts`` in order (one string: ``[D]``), L2-normalised if asked.

        Batches of ``batch_size`` texts run on ``threads`` threads (default: torch's thread count, at most 4; a
        worker process of an embedding job sets it to its share of the cores): the tokenizer works outside Python's
        lock, so one batch's tokens are cut while another's become vectors. The vectors depend on neither."""
        if batch_size <= 0 or (threads is not None and threads <= 0):
            raise ValueError(f"batch_size and threads must be positive integers, got {batch_size} and {threads}.")
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        starts = range(0, len(texts), batch_size)
        threads = min(threads or min(torch.get_num_threads(), 4), len(starts))
        if threads <= 1:
            for start in starts:
                self._encode_into(out, start, texts[start:start + batch_size], normalize)
        else:
            with ThreadPoolExecutor(threads) as pool:  # list(): a worker's error is raised here
                list(pool.map(lambda start: self._encode_into(out, start, texts[start:start + batch_size], normalize),
                              starts))
        return out[0] if single else out

    @torch.inference_mode()
    def _encode_into(self, out: np.ndarray, start: int, texts: list[str], normalize: bool) -> None:
        flat, lengths = self.token_ids(texts)
        device = self.embedding.weight.device
        vectors = self.pool(torch.from_numpy(flat).to(device), torch.from_numpy(offsets_of(lengths)).to(device))
        if normalize:  # in place: the batch's vectors are a fresh tensor
            vectors.div_(torch.linalg.vector_norm(vectors, dim=-1, keepdim=True).clamp_(min=1e-12))
        out[start:start + len(texts)] = vectors.cpu().numpy()


def check_vocabulary(vocab: int, rows: int, mapping: torch.Tensor | None, weights: torch.Tensor | None,
                     where: str) -> None:
    """ValueError naming ``where`` unless every token id of a ``vocab``-entry tokenizer has a table row."""
    if mapping is None and rows != vocab:
        raise ValueError(f"{where}: the tokenizer has {vocab} tokens but the table has {rows} rows; save the table "
                         "with the tokenizer it was built for (one row per token id).")
    if mapping is not None and (mapping.ndim != 1 or len(mapping) != vocab
                                or (len(mapping) and not 0 <= int(mapping.min()) <= int(mapping.max()) < rows)):
        raise ValueError(f"{where}: the mapping has {len(mapping)} entries for a tokenizer of {vocab} tokens (each a "
                         f"row below {rows}); save the mapping with the tokenizer it was built for.")
    if weights is not None and (weights.ndim != 1 or len(weights) != vocab):
        raise ValueError(f"{where}: the token weights have shape {tuple(weights.shape)} for a tokenizer of {vocab} "
                         "tokens; save one weight per token id.")


def offsets_of(lengths: np.ndarray) -> np.ndarray:
    """Where each of consecutive runs of ``lengths`` items starts (int64): sentence-transformers' ``offsets``."""
    offsets = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    return offsets


def _unknown_id(tokenizer: Tokenizer) -> int | None:
    """The unknown token's id (WordPiece, BPE and WordLevel name it; Unigram numbers it), None without one."""
    token = getattr(tokenizer.model, "unk_token", None)
    if token is not None:
        return tokenizer.token_to_id(token)
    return json.loads(tokenizer.to_str())["model"].get("unk_id")


# ---------------------------------------------------------------------------------------------- directories
def load_static(path: str | os.PathLike, like: str | None = None) -> tuple[StaticEmbedding, bool, dict[str, Any]]:
    """``(module, normalize, meta)`` of a Model2Vec or sentence-transformers ``StaticEmbedding`` directory.

    ``like`` (``"model2vec"`` / ``"sentence-transformers"``): whose reading of the directory to follow (see
    :class:`StaticEmbedding`); None follows the format of its weights. ``normalize``: a ``Normalize`` module in
    ``modules.json``, else model2vec's config flag. ``meta``: ``format``, ``like``, ``config`` (model2vec's
    ``config.json``, ``{}`` without one), ``path``. Every missing or damaged file is a ValueError naming it.
    """
    from bertkit.weights.hf import load_safetensors

    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"{root} is not a directory; pass a Model2Vec or sentence-transformers static model's "
                         "directory.")
    folder, normalize_module = _static_folder(root)
    tokenizer = _read_tokenizer(folder / "tokenizer.json")
    tensors = load_safetensors(_need(folder / "model.safetensors"))
    config_file = folder / "config.json"
    config = _read_json(config_file) if config_file.is_file() else {}
    if "embedding.weight" in tensors:
        fmt, table = "sentence-transformers", tensors["embedding.weight"]
    elif "embeddings" in tensors:
        fmt, table = "model2vec", tensors["embeddings"]
    else:
        raise ValueError(f"{folder / 'model.safetensors'} holds {sorted(tensors)}, neither model2vec's 'embeddings' "
                         "nor sentence-transformers' 'embedding.weight'; it is not a static model's table.")
    like = like or fmt
    if like not in LIKE:
        raise ValueError(f"like must be one of {LIKE}, got {like!r}.")
    if table.ndim != 2:
        raise ValueError(f"{folder / 'model.safetensors'}: the table has shape {tuple(table.shape)}; a static model "
                         "holds a [vocabulary, dim] matrix.")
    mapping, weights = tensors.get("mapping"), tensors.get("weights")
    check_vocabulary(tokenizer.get_vocab_size(), table.shape[0], mapping, weights,
                     f"{folder / 'model.safetensors'} with {folder / 'tokenizer.json'}")
    max_length = config.get("max_length", MODEL2VEC_MAX_LENGTH) if like == "model2vec" else None
    if like == "model2vec" and max_length is None:
        tokenizer.no_truncation()  # model2vec's config said: no limit
    module = StaticEmbedding(tokenizer, table, weights=weights, mapping=mapping, max_length=max_length,
                             skip_unknown=like == "model2vec")
    normalize = normalize_module if normalize_module is not None else bool(config.get("normalize", False))
    return module, normalize, {"format": fmt, "like": like, "config": config, "path": str(root)}


def is_static_directory(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a static model (Model2Vec's files, or a ``StaticEmbedding`` module first in its
    ``modules.json``): :func:`bertkit.tasks.sources.static_kind`, the one reading of that, answered."""
    return static_kind(path) is not None


def _static_folder(root: Path) -> tuple[Path, bool | None]:
    """The folder holding the table, and whether a ``Normalize`` follows it (None: no ``modules.json``)."""
    listing = root / "modules.json"
    if not listing.is_file():
        return root, None
    entries = sorted(_read_json(listing), key=lambda entry: entry.get("idx", 0))
    kinds = [entry.get("type", "").rsplit(".", 1)[-1] for entry in entries]
    if not kinds or kinds[0] != "StaticEmbedding" or any(kind != "Normalize" for kind in kinds[1:]):
        raise ValueError(f"{listing} lists {kinds}; a static model is a StaticEmbedding, optionally followed by a "
                         "Normalize.")
    return root / entries[0].get("path", ""), len(kinds) > 1


def _need(path: Path) -> Path:
    if not path.is_file():
        raise ValueError(f"{path} is missing; a static model's directory holds tokenizer.json and model.safetensors "
                         "(save it again with save_static or its own library).")
    return path


def _read_json(path: Path) -> Any:
    from bertkit.io import read_json

    return read_json(path, "a static model's settings")


def _read_tokenizer(path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(_need(path)))
    except Exception as error:  # the Rust tokenizer raises a bare Exception for a damaged file
        if isinstance(error, ValueError) and str(path) in str(error):
            raise
        raise ValueError(f"{path} is not a readable tokenizer.json ({error}); save the tokenizer again.") from error


def save_static(module: StaticEmbedding, path: str | os.PathLike, normalize: bool = False,
                config: dict[str, Any] | None = None, prompts: dict[str, str] | None = None,
                default_prompt_name: str | None = None) -> Path:
    """Write ``module`` to the directory ``path`` so that model2vec (``StaticModel.from_pretrained``),
    sentence-transformers (``SentenceTransformer``) and bertkit load it with the same vectors; returns ``path``.

    The layout is model2vec's (``model.safetensors`` with ``embeddings`` [+ ``weights``, ``mapping``],
    ``config.json``, ``tokenizer.json`` truncating at ``max_length``) plus sentence-transformers' ``modules.json``
    (the table at the root, then ``1_Normalize`` when ``normalize``) and ``config_sentence_transformers.json``
    (``prompts``, cosine similarity). ``config``: extra model2vec settings kept (e.g. the distillation's). Each file
    is written atomically, the listing files last.
    """
    from safetensors.torch import save_file

    from bertkit.io import atomic_write, atomic_write_text

    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    tensors = {"embeddings": module.embedding.weight.detach().float().contiguous().cpu()}
    if module.weights is not None:
        tensors["weights"] = module.weights.detach().float().contiguous().cpu()
    if module.mapping is not None:
        tensors["mapping"] = module.mapping.detach().long().contiguous().cpu()
    tokenizer = Tokenizer.from_str(module.tokenizer.to_str())
    truncation = module.tokenizer.truncation
    max_length = module.max_length if module.max_length is not None else (truncation or {}).get("max_length")
    if max_length is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length)  # sentence-transformers reads the limit here, model2vec in config
    settings = {**(config or {}), "model_type": "model2vec", "architectures": ["StaticModel"],
                "hidden_dim": module.dim, "normalize": bool(normalize), "max_length": max_length,
                "embedding_dtype": "float32"}
    if module.mapping is not None:
        settings["vocabulary_quantization"] = module.embedding.num_embeddings
    else:
        settings.pop("vocabulary_quantization", None)
    atomic_write(root / "model.safetensors", lambda target: save_file(tensors, target))
    atomic_write_text(root / "tokenizer.json", tokenizer.to_str())
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.StaticEmbedding"}]
    if normalize:
        modules.append({"idx": 1, "name": "1", "path": "1_Normalize", "type": "sentence_transformers.models.Normalize"})
        (root / "1_Normalize").mkdir(exist_ok=True)
        atomic_write_text(root / "1_Normalize" / "config.json", "{}\n")
    sentence = {"model_type": "SentenceTransformer", "prompts": dict(prompts or {}),
                "default_prompt_name": default_prompt_name, "similarity_fn_name": "cosine"}
    atomic_write_text(root / "config_sentence_transformers.json", json.dumps(sentence, indent=2) + "\n")
    atomic_write_text(root / "config.json", json.dumps(settings, indent=2) + "\n")
    atomic_write_text(root / "modules.json", json.dumps(modules, indent=2) + "\n")
    return root
