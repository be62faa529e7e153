"""A sentence-transformers model on bertkit's engine: ``SentenceTransformer(path).encode(sentences)``.

The directory is read as it is (:mod:`.modules`); the BERT runs on bertkit's fast inference path (oneDNN
products on prepared weights, unpadded execution), sentences run in length-sorted batches with dynamic
padding (:mod:`bertkit.inference.batching`), and the results equal sentence-transformers' ``encode`` on
the same directory (``dtype="fp32"``: within 1e-5) in input order. The default ``dtype="auto"`` runs bf16
where the hardware computes it natively and the measured embedding quality allows it
(:mod:`bertkit.inference.precision`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.inference.batching import CHUNK_BATCHES, check_batch_size, chunks, pad, run_sorted
from bertkit.inference.precision import prepare, resolve
from bertkit.sentence.modules import Layout, Pooling, is_multi_vector, is_sentence_transformer, normalize, read_layout
from bertkit.sentence.util import PRECISIONS, quantize_embeddings, similarity
from bertkit.tokenization.cut import cut_texts

OUTPUT_VALUES = ("sentence_embedding", "token_embeddings", None)


class SentenceTransformer(nn.Module):
    """BERT -> pooling -> Dense layers -> optional normalisation, loaded from a sentence-transformers directory.

    ``forward(input_ids, attention_mask, token_type_ids=None)`` returns the sentence embeddings ``[B, D]``
    (traceable: this is what ``bertkit export`` puts in an ONNX graph). :meth:`encode` is
    sentence-transformers' method of the same name. A plain BERT directory (no ``modules.json``) loads too,
    with mean pooling and no normalisation, as sentence-transformers does.
    """

    def __new__(cls, model_name_or_path: str | os.PathLike | None = None, *args: Any, **kwargs: Any):
        """A static directory (Model2Vec or sentence-transformers' ``StaticEmbedding``) gives a
        :class:`~bertkit.sentence.static_model.StaticSentenceTransformer`: the same methods, no network."""
        if cls is SentenceTransformer and model_name_or_path is not None and kwargs.get("layout") is None:
            from bertkit.sentence.static import is_static_directory

            if is_static_directory(model_name_or_path):
                from bertkit.sentence.static_model import StaticSentenceTransformer

                return super().__new__(StaticSentenceTransformer)
        return super().__new__(cls)

    def __init__(self, model_name_or_path: str | os.PathLike, device: str | torch.device | None = None, *,
                 dtype: Any = "auto", optimize: bool = True, pooling: str | Sequence[str] | None = None,
                 layout: Layout | None = None, task: str | None = None):
        """``dtype``: ``"auto"`` (bf16 where the hardware computes it natively and the measured embedding
        quality allows, else fp32: :mod:`bertkit.inference.precision`), ``"fp32"`` (exact), ``"bf16"``,
        ``"int8"``, a torch dtype, or None (as loaded); what it became is :attr:`dtype_choice`.
        ``pooling``: the pooling mode(s) (``mean``, ``cls``, ``max``, ``lasttoken``, ...) in place of the
        directory's (a plain checkpoint has none: mean). ``layout``: the directory read already (the dense
        part of a sparse encoder's CSR directory, whose sparse head runs in :class:`bertkit.SparseEncoder`).
        ``optimize=False`` keeps the model trainable
        (``model.train()``; ``model(**inputs)`` gives embeddings with gradients), in float32 under ``"auto"``.
        ``task``: the task adapter of a Jina embeddings v3 checkpoint in its original layout, merged into the
        weights at load (:mod:`bertkit.weights.task_adapters`); that task's prompt (``prompts`` keyed by task, as
        jina-embeddings-v3's directory has them) becomes the default prompt unless the directory names one, as the
        original's ``encode(task=...)`` puts the task's instruction first."""
        super().__init__()
        from bertkit.modeling.backbone import BERT
        from bertkit.modeling.text import resolve_device
        from bertkit.tasks.sources import load_model_and_tokenizer

        path = Path(model_name_or_path)
        if layout is None:
            layout = read_layout(path) if is_sentence_transformer(path) else Layout(transformer=path)
        if layout.masked_lm or layout.routes or layout.static or layout.autoencoder is not None:
            raise ValueError(f"{path} is a sparse encoder's directory (a masked-LM, Router, static or autoencoder "
                             "module); load it with bertkit.SparseEncoder.")
        if layout.static_embedding:
            raise ValueError(f"{path} is a static model's directory; load it with bertkit.SentenceTransformer(path) "
                             "(without layout=) or bertkit.StaticModel(path).")
        if is_multi_vector(layout):
            raise ValueError(f"{path} is a multi-vector (ColBERT) model's directory; load it with "
                             "bertkit.MultiVectorEncoder.")
        if pooling is not None:
            layout.pooling = Pooling((pooling,) if isinstance(pooling, str) else tuple(pooling),
                                     include_prompt=layout.pooling.include_prompt)
        self.layout = layout
        self.bert, self.tokenizer = load_model_and_tokenizer(layout.transformer, BERT, warn=False,
                                                             **({"task": task} if task is not None else {}))
        self.pooling, self.dense = layout.pooling, nn.ModuleList(layout.dense)
        self.normalize_output = layout.normalize
        limit = self.bert.config.max_tokens
        self.max_seq_length = min(layout.max_seq_length or limit, limit)
        self.prompts, self.default_prompt_name = layout.prompts, layout.default_prompt_name
        self.task = task
        if task is not None and self.default_prompt_name is None and task in self.prompts:
            self.default_prompt_name = task
        self.similarity_fn_name = layout.similarity_fn_name or "cosine"
        self.to(resolve_device(device) if device is not None else "cpu").eval()
        self.dtype_choice = None
        if optimize:  # eval mode, prepared kernels, the number format dtype resolves to
            self.dtype_choice = prepare(self, dtype, "embeddings")
        elif dtype not in (None, "auto"):
            self.to(resolve(dtype, next(self.parameters()).device, "embeddings").torch_dtype)

    def optimize_for_inference(self, dtype: torch.dtype | str | None = None,
                               quantize: str | None = None) -> SentenceTransformer:
        """The BERT on bertkit's fast inference path (:func:`bertkit.optimize_for_inference`: ``dtype`` None
        keeps the model's, ``quantize="int8"``); returns self."""
        self.bert.optimize_for_inference(dtype=dtype, quantize=quantize)
        return self

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **kwargs: Any) -> SentenceTransformer:
        return cls(path, **kwargs)

    def save(self, path: str | os.PathLike, model_card: str | None = None) -> Path:
        """Write a sentence-transformers directory (:func:`bertkit.sentence.saving.save_sentence_transformer`)
        that sentence-transformers and bertkit load with the same vectors; returns its path."""
        from bertkit.sentence.saving import save_sentence_transformer

        return save_sentence_transformer(self, path, model_card=model_card)

    save_pretrained = save

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def get_sentence_embedding_dimension(self) -> int:
        with torch.no_grad():
            probe = torch.zeros(1, self.bert.config.hidden_size)
            pooled = probe.repeat(1, len(self.pooling.modes))
            for layer in self.dense:
                pooled = layer(pooled.to(layer.linear.weight.dtype))
        return pooled.shape[-1]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None, prompt_length: int = 0) -> torch.Tensor:
        tokens = self.bert(input_ids, attention_mask, token_type_ids)[0]
        return self.head(tokens, attention_mask, prompt_length)

    def head(self, tokens: torch.Tensor, attention_mask: torch.Tensor, prompt_length: int = 0) -> torch.Tensor:
        """Pooling, Dense layers and normalisation of token embeddings ``[B, L, H]``."""
        x = self.pooling(tokens, attention_mask, prompt_length)
        for layer in self.dense:
            x = layer(x)
        return normalize(x) if self.normalize_output else x

    # ------------------------------------------------------------------------------------------ encode
    def encode(self, sentences: str | Sequence[str], prompt_name: str | None = None, prompt: str | None = None,
               batch_size: int = 32, show_progress_bar: bool | None = None,
               output_value: str | None = "sentence_embedding", precision: str = "float32",
               convert_to_numpy: bool = True, convert_to_tensor: bool = False, device: str | None = None,
               normalize_embeddings: bool = False, truncate_dim: int | None = None,
               batch_tokens: int | None = None) -> Any:
        """Embeddings of ``sentences`` (one string: one vector; a list: ``[N, D]``), in input order.

        Arguments as sentence-transformers' ``encode``: ``prompt`` (or ``prompt_name`` from the model's
        ``config_sentence_transformers.json``; its ``default_prompt_name`` otherwise) is prepended to each
        sentence; ``output_value="token_embeddings"`` gives each sentence's token vectors ``[L_i, H]``, None
        both as dicts; ``precision`` quantizes the output embeddings (``int8``/``uint8`` ranges from these
        embeddings, ``binary``/``ubinary`` packed sign bits; the model's own number format is ``dtype``, set at
        load); ``truncate_dim`` keeps the first dimensions (Matryoshka models);
        ``convert_to_tensor`` stacks into a tensor, else ``convert_to_numpy`` an array, else a list of tensors.
        ``device`` must be the model's own (move the model with ``.to`` instead). bertkit's own
        ``batch_tokens`` also bounds each forward pass by padded tokens (see
        :func:`bertkit.inference.batching.sorted_batches`).
        """
        check_batch_size(batch_size)
        if output_value not in OUTPUT_VALUES:
            raise ValueError(f"output_value must be one of {OUTPUT_VALUES}, got {output_value!r}.")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}.")
        if device is not None and torch.device(device) != self.device:
            raise ValueError(f"encode(device={device!r}) but the model is on {self.device}; call "
                             f"model.to({device!r}) first.")
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        prefix = self.prompt(prompt_name, prompt)
        progress = show_progress_bar if show_progress_bar is not None else len(texts) >= 8 * batch_size
        rows = self.embed_features(self.features(texts, prefix), output_value, prefix, batch_size=batch_size,
                                   batch_tokens=batch_tokens, progress=progress)
        if output_value != "sentence_embedding":
            return rows[0] if single else rows
        embeddings = torch.stack(rows) if rows else torch.empty(0, self.get_sentence_embedding_dimension())
        if truncate_dim is not None:
            embeddings = embeddings[:, :truncate_dim]
        if normalize_embeddings:
            embeddings = normalize(embeddings)
        return self._convert(embeddings, precision, convert_to_numpy, convert_to_tensor, single)

    def encode_stream(self, sentences: Iterable[str], batch_size: int = 32, **options: Any) -> Iterator[np.ndarray]:
        """``[n, D]`` float32 arrays for consecutive chunks of any iterable (a file larger than memory), in
        order; each chunk of ``batch_size x 32`` sentences is length-sorted on its own."""
        for chunk in chunks(sentences, check_batch_size(batch_size) * CHUNK_BATCHES):
            yield self.encode(chunk, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True,
                              **options)

    def similarity(self, a: Any, b: Any) -> torch.Tensor:
        """Scores of every pair of ``a`` and ``b`` under the model's similarity (``cosine`` unless its config
        names another)."""
        return similarity(a, b, self.similarity_fn_name)

    def prompt(self, prompt_name: str | None = None, prompt: str | None = None) -> str:
        """The text put before each sentence: ``prompt``, else the model's ``prompt_name`` (or default) prompt."""
        if prompt is not None:
            return prompt
        name = prompt_name if prompt_name is not None else self.default_prompt_name
        if name is None:
            return ""
        if name not in self.prompts:
            raise ValueError(f"prompt_name {name!r} is not one of this model's prompts {sorted(self.prompts)}.")
        return self.prompts[name]

    def features(self, texts: list[str], prefix: str = "", truncation_side: str = "right") -> list[dict]:
        """The model's token rows (``input_ids``, ``token_type_ids``, ``attention_mask`` lists) for ``texts``, each
        after ``prefix`` (a prompt), lower-cased where the model says so, truncated to ``max_seq_length`` at
        ``truncation_side``; each text is first cut to the part truncation keeps (the same tokens, at a cost
        bounded by ``max_seq_length``: :func:`~bertkit.tokenization.cut.cut_texts`)."""
        lower = self.layout.do_lower_case
        texts = cut_texts(self.tokenizer, texts, self.max_seq_length, truncation_side, prefix=prefix, lower=lower)
        texts = [prefix + t for t in texts]
        if lower:
            texts = [t.lower() for t in texts]
        encoding = self.tokenizer(texts, truncation=True, max_length=self.max_seq_length,
                                  truncation_side=truncation_side, return_token_type_ids=True) if texts else {}
        return [{key: encoding[key][i] for key in ("input_ids", "token_type_ids", "attention_mask")}
                for i in range(len(texts))]

    def embed_features(self, rows: list[dict], output_value: str | None = "sentence_embedding", prefix: str = "", *,
                       batch_size: int = 32, batch_tokens: int | None = None, progress: bool = False) -> list[Any]:
        """``output_value`` per row of :meth:`features` (float32 CPU tensors, in row order), in length-sorted
        batches; ``prefix`` is the prompt the rows start with (pooling may leave it out)."""
        return run_sorted(rows, [len(row["input_ids"]) for row in rows], batch_size,
                          self._batch_runner(output_value, prefix), max_tokens=batch_tokens, progress=progress,
                          description="encode")

    def _batch_runner(self, output_value: str | None, prefix: str):
        prompt_length = prompt_tokens(self.tokenizer, prefix)
        pad_values = {"input_ids": self.tokenizer.pad_token_id, "token_type_ids": 0, "attention_mask": 0}

        @torch.inference_mode()
        def run(rows: list[dict]) -> list[Any]:
            batch = pad(rows, pad_values, self.device)
            mask = batch["attention_mask"]
            tokens = self.bert(batch["input_ids"], mask, batch["token_type_ids"])[0]
            if output_value == "token_embeddings":
                return [t[:n].float().cpu() for t, n in zip(tokens, mask.sum(1).tolist())]
            embeddings = self.head(tokens, mask, prompt_length).float().cpu()
            if output_value == "sentence_embedding":
                return list(embeddings)
            return [{"sentence_embedding": e, "token_embeddings": t[:n].float().cpu(), "input_ids": ids[:n].cpu(),
                     "attention_mask": m[:n].cpu()}
                    for e, t, ids, m, n in zip(embeddings, tokens, batch["input_ids"], mask, mask.sum(1).tolist())]

        return run

    @staticmethod
    def _convert(embeddings: torch.Tensor, precision: str, to_numpy: bool, to_tensor: bool, single: bool):
        if precision != "float32":
            quantized = quantize_embeddings(embeddings, precision)
            embeddings = torch.from_numpy(quantized) if to_tensor or not to_numpy else quantized
        elif to_numpy and not to_tensor:
            embeddings = embeddings.numpy()
        if to_tensor or to_numpy:
            return embeddings[0] if single else embeddings
        rows = list(embeddings)
        return rows[0] if single else rows


def prompt_tokens(tokenizer, prompt: str) -> int:
    """The leading tokens of a text that starts with ``prompt``: the prompt's tokens with ``[CLS]``, without its
    ``[SEP]`` (0 without a prompt): what pooling with ``include_prompt=False`` leaves out, as sentence-transformers
    counts them."""
    return len(tokenizer(prompt)["input_ids"]) - 1 if prompt else 0
