"""The users of a static directory (:mod:`bertkit.sentence.static`): :class:`StaticModel`, model2vec's class of the
same name (``from_pretrained``, ``encode``, ``save_pretrained``, ``dim``, ``tokenizer``) with its vectors, and
:class:`StaticSentenceTransformer`, what ``bertkit.SentenceTransformer(static_dir)`` becomes: sentence-transformers'
``encode`` with sentence-transformers' vectors. Both read the directory with :func:`load_static` and save with
:func:`save_static`, so what either saves loads in model2vec, sentence-transformers and bertkit.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from bertkit.inference.batching import check_batch_size
from bertkit.io import read_json
from bertkit.sentence.model import SentenceTransformer
from bertkit.sentence.modules import normalize as l2_normalize
from bertkit.sentence.static import StaticEmbedding, load_static, offsets_of, save_static
from bertkit.sentence.util import PRECISIONS


class StaticModel:
    """A Model2Vec model: ``StaticModel(path)`` or ``StaticModel.from_pretrained(path)`` reads a static directory
    as model2vec reads it (texts cut at the config's ``max_length``, unknown tokens left out); :meth:`encode` equals
    model2vec's ``StaticModel.encode`` on the same directory. ``module``: the :class:`StaticEmbedding` (trainable)."""

    def __init__(self, path: str | os.PathLike | StaticEmbedding, normalize: bool | None = None):
        """``path``: a directory, or a :class:`StaticEmbedding` already built (then ``normalize`` defaults to
        False). ``normalize`` overrides the directory's setting."""
        if isinstance(path, StaticEmbedding):
            self.module, stored, self.config = path, False, {}
        else:
            self.module, stored, meta = load_static(path, like="model2vec")
            self.config = meta["config"]
        self.normalize = stored if normalize is None else bool(normalize)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, normalize: bool | None = None) -> StaticModel:
        """A local directory only: bertkit downloads nothing."""
        return cls(path, normalize=normalize)

    @property
    def dim(self) -> int:
        return self.module.dim

    @property
    def tokenizer(self) -> Tokenizer:
        return self.module.tokenizer

    @property
    def embedding(self) -> np.ndarray:
        """The table ``[K, D]`` (float32), as model2vec names it."""
        return self.module.embedding.weight.detach().numpy()

    @property
    def max_length(self) -> int | None:
        return self.module.max_length

    def tokenize(self, sentences: Sequence[str]) -> list[list[int]]:
        """Each sentence's token ids as the model reads them (no special tokens, no unknown token)."""
        flat, lengths = self.module.token_ids(list(sentences))
        return [part.tolist() for part in np.split(flat, np.cumsum(lengths)[:-1])] if len(lengths) else []

    def encode(self, sentences: str | Sequence[str], *, show_progress_bar: bool = False,
               normalize: bool | None = None, batch_size: int = 1024, **ignored: Any) -> np.ndarray:
        """Float32 ``[N, D]`` vectors (one string: ``[D]``); ``normalize`` None uses the model's. model2vec's other
        arguments (``use_multiprocessing``, ...) are accepted and change nothing: the tokenizer runs in parallel on
        its own. ``max_length`` is the directory's (set it in its config.json)."""
        if "max_length" in ignored and ignored["max_length"] != self.max_length:
            raise ValueError(f"encode(max_length={ignored['max_length']}) but this model cuts texts at "
                             f"{self.max_length} tokens; set max_length in the directory's config.json instead.")
        return self.module.encode(sentences, batch_size=check_batch_size(batch_size),
                                  normalize=self.normalize if normalize is None else normalize)

    def save_pretrained(self, path: str | os.PathLike) -> Path:
        """A directory model2vec, sentence-transformers and bertkit load (:func:`save_static`)."""
        return save_static(self.module, path, normalize=self.normalize, config=self.config)


class StaticSentenceTransformer(SentenceTransformer):
    """``bertkit.SentenceTransformer`` on a static directory, read as sentence-transformers reads it (the
    tokenizer's own truncation; unknown tokens counted; a ``Normalize`` module). :meth:`encode` takes
    sentence-transformers' arguments; ``forward(input_ids, offsets)`` gives the (normalised) sentence embeddings."""

    def __init__(self, model_name_or_path: str | os.PathLike, device: str | torch.device | None = None, *,
                 dtype: Any = "auto", optimize: bool = True, **ignored: Any):
        """``dtype``: the table is float32 (``"auto"``, ``"fp32"`` or None); ``optimize`` changes nothing (there is
        no network to prepare). ``pooling`` and ``layout`` do not apply to a static model."""
        torch.nn.Module.__init__(self)
        from bertkit.modeling.text import resolve_device

        if dtype not in ("auto", "fp32", None, torch.float32):
            raise ValueError(f"dtype={dtype!r}: a static model's table runs in float32; pass dtype='fp32'.")
        if any(value is not None for value in ignored.values()):
            raise ValueError(f"{sorted(ignored)} do not apply to a static model ({model_name_or_path}).")
        self.static, self.normalize_output, meta = load_static(model_name_or_path, like="sentence-transformers")
        self.config = meta["config"]
        self.tokenizer = self.static.tokenizer
        self.max_seq_length = (self.tokenizer.truncation or {}).get("max_length")  # None: texts are never cut
        settings = Path(model_name_or_path) / "config_sentence_transformers.json"
        extra = read_json(settings, "sentence-transformers' settings") if settings.is_file() else {}
        self.prompts, self.default_prompt_name = dict(extra.get("prompts") or {}), extra.get("default_prompt_name")
        self.similarity_fn_name = extra.get("similarity_fn_name") or "cosine"
        self.dtype_choice = None
        self.to(resolve_device(device) if device is not None else "cpu").eval()

    @classmethod
    def from_module(cls, module: StaticEmbedding, normalize: bool = False) -> StaticSentenceTransformer:
        """A model over a table already built (e.g. a new one to train): no prompts, cosine similarity."""
        with tempfile.TemporaryDirectory() as directory:  # the one reading of a directory, not a second one here
            return cls(save_static(module, directory, normalize=normalize), optimize=False)

    def optimize_for_inference(self, dtype: Any = None, quantize: str | None = None) -> StaticSentenceTransformer:
        return self  # a table lookup: nothing to prepare

    def save(self, path: str | os.PathLike, model_card: str | None = None) -> Path:
        """A directory model2vec, sentence-transformers and bertkit load (:func:`save_static`)."""
        return save_static(self.static, path, normalize=self.normalize_output, config=self.config,
                           prompts=self.prompts, default_prompt_name=self.default_prompt_name)

    save_pretrained = save

    def get_sentence_embedding_dimension(self) -> int:
        return self.static.dim

    def forward(self, input_ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        vectors = self.static.pool(input_ids, offsets)
        return l2_normalize(vectors) if self.normalize_output else vectors

    def features(self, texts: list[str], prefix: str = "", truncation_side: str = "right") -> list[dict]:
        """Each text's token ids (``{"input_ids": [...]}``) after ``prefix``, as :meth:`encode` reads them."""
        if truncation_side != "right":
            raise ValueError(f"truncation_side={truncation_side!r}: a static model's tokenizer cuts texts on the "
                             "right only.")
        flat, lengths = self.static.token_ids([prefix + text for text in texts])
        return [{"input_ids": ids.tolist()} for ids in np.split(flat, np.cumsum(lengths)[:-1])] if texts else []

    def embed_features(self, rows: list[dict], output_value: str | None = "sentence_embedding", prefix: str = "", *,
                       batch_size: int = 32, batch_tokens: int | None = None, progress: bool = False) -> list[Any]:
        """The sentence embedding (a float32 CPU tensor) of each row of :meth:`features`, in row order."""
        if output_value != "sentence_embedding":
            raise ValueError(f"output_value={output_value!r}: a static model gives sentence embeddings only.")
        if not rows:
            return []
        ids = [np.asarray(row["input_ids"], dtype=np.int64) for row in rows]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        device = self.static.embedding.weight.device
        with torch.inference_mode():
            vectors = self(torch.from_numpy(np.concatenate(ids)).to(device),
                           torch.from_numpy(offsets_of(lengths)).to(device))
        return list(vectors.float().cpu())

    def encode(self, sentences: str | Sequence[str], prompt_name: str | None = None, prompt: str | None = None,
               batch_size: int = 32, show_progress_bar: bool | None = None,
               output_value: str | None = "sentence_embedding", precision: str = "float32",
               convert_to_numpy: bool = True, convert_to_tensor: bool = False, device: str | None = None,
               normalize_embeddings: bool = False, truncate_dim: int | None = None, **ignored: Any) -> Any:
        """As :meth:`bertkit.SentenceTransformer.encode` for the sentence embeddings (a static model has no token
        embeddings: ``output_value`` must be ``"sentence_embedding"``). Texts run in batches of at least 1024
        (a lookup per token: larger batches cost nothing and the vectors do not depend on them)."""
        check_batch_size(batch_size)
        if output_value != "sentence_embedding":
            raise ValueError(f"output_value={output_value!r}: a static model gives sentence embeddings only.")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}.")
        single = isinstance(sentences, str)
        prefix = self.prompt(prompt_name, prompt)
        texts = [prefix + text for text in ([sentences] if single else sentences)]
        embeddings = torch.from_numpy(self.static.encode(texts, batch_size=max(batch_size, 1024),
                                                         normalize=self.normalize_output))
        if truncate_dim is not None:
            embeddings = embeddings[:, :truncate_dim]
        if normalize_embeddings:
            embeddings = l2_normalize(embeddings)
        return self._convert(embeddings, precision, convert_to_numpy, convert_to_tensor, single)
