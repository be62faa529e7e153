"""``embeddings`` on a static model: a Model2Vec or sentence-transformers ``StaticEmbedding`` directory.

A static model is a token table (:class:`bertkit.sentence.static.StaticEmbedding`): a text's vector is the mean of
its tokens' vectors (Model2Vec's per-token weights and vocabulary mapping applied), then L2-normalised where the
directory says so. No transformer runs, so there are no positions, no special tokens and no pooling choice (a
sentence-transformers directory's prompts apply, as there); the number format is float32 (a mean of table rows
has no products to make cheaper).

The pipeline's tokenizer is the model's own ``tokenizer.json`` without its post-processor: the tokens it counts,
truncates at ``max_length`` (the model's own limit: Model2Vec's ``max_length``, the tokenizer's saved truncation,
else :data:`UNRECORDED_LENGTH`) and shows on ``/tokenize`` are the ones the model averages (Model2Vec's reading
leaves unknown tokens out of the mean: they are counted, not averaged). Texts cut where the model cuts them are
read by the model itself (:meth:`~bertkit.sentence.static.StaticEmbedding.token_ids`: its vectors exactly).
``output="tokens"`` answers each token's vector (the row the mean takes, weighted where the model weighs); an input
may also be a list of token ids.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.inference.precision import DtypeChoice
from bertkit.inference.precision import normalize as dtype_name
from bertkit.pipelines.embeddings import EmbeddingsPipeline
from bertkit.sentence.model import SentenceTransformer
from bertkit.sentence.modules import normalize
from bertkit.sentence.static import offsets_of
from bertkit.tokenization.general import TokenizerFast

#: the length limit of a static directory that records none (sentence-transformers' StaticEmbedding truncates
#: nothing): a static model has no positions, so this only bounds one input's work, as a long-context model's does
UNRECORDED_LENGTH = 8192
#: texts per table lookup: the cost per text is a few microseconds, so large slices keep the Python overhead small
SLICE = 4096


class StaticEmbeddingsPipeline(EmbeddingsPipeline):
    """See the module doc. :meth:`EmbeddingsPipeline.from_source` builds one for a static directory
    (:func:`bertkit.tasks.sources.static_kind`)."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any = None, *, normalizes: bool = False,
                 prompts: dict[str, str] | None = None, default_prompt_name: str | None = None, **options: Any):
        """``model``: a loaded :class:`~bertkit.sentence.static.StaticEmbedding`; ``tokenizer`` None: its own
        (:func:`counting_tokenizer`); ``normalizes``: whether the model's own vectors are L2-normalised (Model2Vec's
        ``normalize``, a ``Normalize`` module); ``prompts`` / ``default_prompt_name``: sentence-transformers' (a text
        put before each input); ``options`` as :class:`~bertkit.pipelines.base.Pipeline` takes them."""
        self.normalizes, self.prompts, self.default_prompt_name = normalizes, dict(prompts or {}), default_prompt_name
        super().__init__(model, tokenizer or counting_tokenizer(model.tokenizer), **options)

    @classmethod
    def from_source(cls, source: str | os.PathLike, **options: Any) -> StaticEmbeddingsPipeline:
        """The directory read by :func:`~bertkit.sentence.static.load_static` (as its format's own library reads
        it), its prompts from ``config_sentence_transformers.json`` where it has one."""
        from bertkit.io import read_json_object
        from bertkit.sentence.static import load_static

        module, normalizes, _ = load_static(source)
        settings = Path(source) / "config_sentence_transformers.json"
        extra = read_json_object(settings, "sentence-transformers' settings") if settings.is_file() else {}
        return cls(module, normalizes=normalizes, prompts=extra.get("prompts"),
                   default_prompt_name=extra.get("default_prompt_name"), **options)

    def prompt(self, prompt_name: str | None) -> str:
        """The text put before each input text: ``prompt_name``'s (the default prompt's when None; ValueError
        naming the prompts there are), as :meth:`bertkit.SentenceTransformer.prompt` picks it."""
        return SentenceTransformer.prompt(self, prompt_name)

    @property
    def own_length(self) -> int | None:
        """The token limit the model reads texts with: Model2Vec's ``max_length``, else its tokenizer's saved
        truncation; None: none."""
        return self.model.max_length or (self.model.tokenizer.truncation or {}).get("max_length")

    def place(self, device: str | torch.device | None, dtype: Any, max_length: int | None) -> tuple[Any, int]:
        """Float32 on the CPU: ``dtype`` auto/fp32/None and ``device`` cpu/None only (a ValueError naming the
        argument otherwise); the length: ``max_length``, at most :attr:`own_length` (else
        :data:`UNRECORDED_LENGTH`)."""
        asked = dtype_name(dtype)
        if asked not in (None, "auto", "fp32"):
            raise ValueError(f"dtype={asked!r}: a static model runs in float32 (its vectors are means of table rows: "
                             "no products for bf16 or int8 to speed up). Give dtype 'fp32' or 'auto'.")
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"device={device!r}: a static model runs on the CPU (a table lookup, microseconds per "
                             "text); leave device out or give 'cpu'.")
        self.model.eval()
        choice = DtypeChoice("fp32", asked or "auto", "a static model's token table is float32")
        limit = self.own_length or UNRECORDED_LENGTH
        return choice, min(max_length or limit, limit)

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("pooling") is not None:
            raise ValueError(f"pooling={params['pooling']!r}: a static model averages its tokens' vectors; it has no "
                             "pooling to choose. Leave pooling out.")
        return super().check(params)

    @property
    def dimension(self) -> int:
        return self.model.dim

    def run(self, items: list[Any], params: dict[str, Any]) -> list[Any]:
        """Texts tokenised as the model reads them (no special tokens; cut at ``max_length`` on
        ``truncation_side``) and token-id lists (checked against the vocabulary) averaged through the table. Texts
        alone, cut where the model cuts them, go through the model's own ``encode`` (its batches on threads);
        anything else :data:`SLICE` inputs per lookup."""
        prefix = self.prompt(params["prompt_name"])
        if params["output"] == "sentence" and self._own_reading(params["truncation_side"]) and \
                all(isinstance(item, str) for item in items):
            vectors = torch.from_numpy(self.model.encode([prefix + item for item in items], normalize=self.normalizes))
            self.finite(vectors.numpy())
            return [self._finish(v, params) for v in vectors]
        answers: list[Any] = []
        for start in range(0, len(items), SLICE):
            answers += self._answers(items[start:start + SLICE], prefix, params)
        return answers

    def _own_reading(self, side: str) -> bool:
        """Whether texts are cut where the model itself cuts them (so its own tokenization answers)."""
        return side == "right" and self.max_length == (self.own_length or UNRECORDED_LENGTH)

    def _answers(self, items: list[Any], prefix: str, params: dict[str, Any]) -> list[Any]:
        rows: list[np.ndarray] = [None] * len(items)  # type: ignore[list-item]
        texts = [i for i, item in enumerate(items) if isinstance(item, str)]
        if texts:
            flat, lengths = self._token_ids([prefix + items[i] for i in texts], params["truncation_side"])
            for i, row in zip(texts, np.split(flat, np.cumsum(lengths)[:-1])):
                rows[i] = row
        for i, item in enumerate(items):
            if rows[i] is None:
                rows[i] = np.asarray(self.id_row(item)["input_ids"], dtype=np.int64)
        if params["output"] == "tokens":  # each token alone: the vector the mean takes for it
            return [self._means([row[j:j + 1] for j in range(len(row))]).tolist() for row in rows]
        vectors = torch.from_numpy(self._means(rows))
        if self.normalizes:
            vectors = normalize(vectors)
        self.finite(vectors.numpy())
        return [self._finish(v, params) for v in vectors]

    def _token_ids(self, texts: list[str], side: str) -> tuple[np.ndarray, np.ndarray]:
        """The ids the model averages for ``texts``, flat, and each text's count: the model's own reading when it
        cuts where this pipeline does (at its own length, on the right), else this pipeline's tokenizer cut at
        ``max_length`` on ``side``, unknown tokens left out where the model leaves them out."""
        model = self.model
        if self._own_reading(side):
            return model.token_ids(texts)
        encoded = self.tokenizer(texts, add_special_tokens=False, truncation=True, max_length=self.max_length,
                                 truncation_side=side, return_attention_mask=False)["input_ids"]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        flat = np.fromiter((t for row in encoded for t in row), dtype=np.int64, count=int(lengths.sum()))
        if model.skip_unknown and model.unknown_id is not None:
            known = flat != model.unknown_id
            lengths = np.bincount(np.repeat(np.arange(len(encoded)), lengths)[known], minlength=len(encoded))
            flat = flat[known]
        return flat, lengths.astype(np.int64)

    @torch.inference_mode()
    def _means(self, rows: list[np.ndarray]) -> np.ndarray:
        """The model's mean of each id array (an empty one: zeros) as float32 ``[N, D]``, before normalisation."""
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        flat = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        return self.model.pool(torch.from_numpy(flat.astype(np.int64)),
                               torch.from_numpy(offsets_of(lengths))).float().numpy()


def counting_tokenizer(backend: Any) -> TokenizerFast:
    """A static model's ``tokenizers.Tokenizer`` as bertkit's tokenizer API, adding no special tokens (its
    post-processor dropped) and cutting nothing unless asked (its saved truncation and padding dropped): it counts,
    cuts and shows exactly the tokens the model averages."""
    from tokenizers import Tokenizer

    copy = Tokenizer.from_str(backend.to_str())
    copy.post_processor = None
    copy.no_truncation()
    copy.no_padding()
    vocabulary = copy.get_vocab()
    unk = getattr(copy.model, "unk_token", None)
    pad = (backend.padding or {}).get("pad_token") or next((t for t in ("[PAD]", "<pad>") if t in vocabulary), None)
    return TokenizerFast(tokenizer_object=copy, unk_token=unk if unk in vocabulary else None,
                         pad_token=pad if pad in vocabulary else None)
