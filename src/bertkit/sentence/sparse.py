"""sentence-transformers' sparse encoder on bertkit's engine: ``SparseEncoder(path).encode_document(texts)``.

A SPLADE directory (``MLMTransformer`` + ``SpladePooling``, :mod:`.modules`) runs its masked-LM head
(:class:`bertkit.BERTForMaskedLM`, any family whose MLM head bertkit loads) on the fast inference path, on the real
tokens only and a chunk at a time (:meth:`~bertkit.sentence.modules.SpladePooling.project`), pooled into one weight
per vocabulary entry; a masked-LM checkpoint without ``modules.json`` is read as SPLADE with max pooling, as
sentence-transformers reads it. An inference-free directory (a ``Router``:
``SparseStaticEmbedding`` for queries, SPLADE for documents) weighs a query's tokens with one learned weight per
vocabulary entry, without a forward pass. A CSR directory runs a dense :class:`bertkit.SentenceTransformer`
under a ``SparseAutoEncoder`` (top-k latents). :meth:`SparseEncoder.encode` and its query/document
forms take sentence-transformers' arguments and return what its ``SparseEncoder`` returns (a sparse COO tensor
by default); with ``dtype="fp32"`` the vectors equal sentence-transformers' to 1e-5.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.inference.batching import check_batch_size, pad, run_sorted
from bertkit.inference.precision import prepare, resolve
from bertkit.sentence.model import SentenceTransformer, prompt_tokens
from bertkit.sentence.modules import Layout, is_sentence_transformer, masked_lm_layout, read_layout
from bertkit.sentence.sides import QueryDocumentSides
from bertkit.sentence.splade_max import max_logits
from bertkit.sentence.util import similarity


class SparseEncoder(QueryDocumentSides, nn.Module):
    """SPLADE (masked-LM logits -> SpladePooling), a Router of a static query side and a SPLADE document side, or
    CSR (dense embedding -> SparseAutoEncoder), loaded from a sentence-transformers sparse encoder directory.

    ``forward(input_ids, attention_mask, token_type_ids=None)`` returns the dense ``[B, V]`` weights (before
    ``max_active_dims``) of the default route. ``max_active_dims`` (the directory's, or the argument): the largest
    weights kept per vector; :meth:`similarity` is the dot product unless the directory names another.
    """

    def __init__(self, model_name_or_path: str | os.PathLike, device: str | torch.device | None = None, *,
                 dtype: Any = "auto", optimize: bool = True, max_active_dims: int | None = None):
        """``dtype`` and ``optimize`` as :class:`bertkit.SentenceTransformer`'s (``"fp32"``: exact)."""
        super().__init__()
        from bertkit.modeling.text import resolve_device

        path = Path(model_name_or_path)
        self.layout = layout = read_layout(path) if is_sentence_transformer(path) else masked_lm_layout(path)
        routes = layout.routes or {"": layout}
        device = resolve_device(device) if device is not None else torch.device("cpu")
        self.routes = nn.ModuleDict({name or "main": _route(sub, path, device, dtype, optimize)
                                     for name, sub in routes.items()})
        self.default_route = layout.default_route if layout.routes else "main"
        main = self.routes[self.default_route or next(iter(self.routes))]
        self.tokenizer = main.tokenizer
        sizes = {name: route.vocab_size for name, route in self.routes.items()}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"{path}: the Router's routes weigh vocabularies of different sizes {sizes}; the query "
                             "side must use the document side's tokenizer.")
        self.prompts, self.default_prompt_name = layout.prompts, layout.default_prompt_name
        self.similarity_fn_name = layout.similarity_fn_name or "dot"
        if max_active_dims is None:  # CSR's default: its autoencoder's k
            max_active_dims = layout.max_active_dims or (layout.autoencoder.k if layout.autoencoder else None)
        self.max_active_dims = _check_dims(max_active_dims, "max_active_dims")
        self.to(device).eval()
        self.dtype_choice = None
        for route in self.routes.values():
            if isinstance(route, _CSR):
                self.dtype_choice = route.dense.dtype_choice
            elif isinstance(route, _Splade) and optimize:
                self.dtype_choice = prepare(route.mlm, dtype, "sparse-embeddings")
            elif isinstance(route, _Splade) and dtype not in (None, "auto"):
                route.to(resolve(dtype, self.device, "sparse-embeddings").torch_dtype)

    prompt = SentenceTransformer.prompt  # one implementation of prompts with the dense model kind

    def save(self, path: str | os.PathLike, model_card: str | None = None) -> Path:
        """Write a sentence-transformers sparse encoder directory
        (:func:`bertkit.sentence.saving.save_sparse_encoder`) that sentence-transformers and bertkit load with
        the same vectors; returns its path."""
        from bertkit.sentence.saving import save_sparse_encoder

        return save_sparse_encoder(self, path, model_card=model_card)

    save_pretrained = save

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def get_sentence_embedding_dimension(self) -> int:
        return next(iter(self.routes.values())).vocab_size

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.route()(input_ids, attention_mask, token_type_ids, self.max_active_dims)

    def route(self, task: str | None = None) -> nn.Module:
        """The pipeline that encodes ``task``'s texts: a Router's route of that name (its default for None);
        a SPLADE model's one pipeline for any task."""
        if not self.layout.routes:
            return self.routes["main"]
        name = task if task is not None else self.default_route
        if name not in self.routes:
            raise ValueError(f"task {task!r} has no route in this model; pass one of {sorted(self.routes)}.")
        return self.routes[name]

    # ------------------------------------------------------------------------------------------ encode
    def encode(self, sentences: str | Sequence[str], prompt_name: str | None = None, prompt: str | None = None,
               batch_size: int = 32, show_progress_bar: bool | None = None, convert_to_tensor: bool = True,
               convert_to_sparse_tensor: bool = True, save_to_cpu: bool = False, device: str | None = None,
               max_active_dims: int | None = None, task: str | None = None,
               batch_tokens: int | None = None) -> Any:
        """SPLADE vectors ``[N, V]`` of ``sentences`` (one string: one ``[V]`` vector), in input order.

        Arguments as sentence-transformers' ``SparseEncoder.encode``: ``prompt`` (or ``prompt_name``, else the
        model's ``default_prompt_name``) is put before each text; ``max_active_dims`` keeps that many largest
        weights per vector (default: the model's); ``convert_to_sparse_tensor`` gives sparse COO tensors, else
        dense; ``convert_to_tensor`` stacks them, else a list of rows. Results are on the CPU (``save_to_cpu``
        is accepted for compatibility); ``device`` must be the model's own. ``task`` (``"query"`` /
        ``"document"``) picks a Router's route (None: its default route); a SPLADE model runs every task alike.
        ``batch_tokens`` as :meth:`bertkit.SentenceTransformer.encode`'s.
        """
        check_batch_size(batch_size)
        route = self.route(task)
        if device is not None and torch.device(device) != self.device:
            raise ValueError(f"encode(device={device!r}) but the model is on {self.device}; call "
                             f"model.to({device!r}) first.")
        dims = _check_dims(max_active_dims, "max_active_dims") or self.max_active_dims
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        progress = show_progress_bar if show_progress_bar is not None else len(texts) >= 8 * batch_size
        prefix = self.prompt(prompt_name, prompt)
        rows = route.features(texts, prefix)
        runner = self._batch_runner(route, dims, prefix, sparse=convert_to_sparse_tensor)
        vectors = run_sorted(rows, [len(row["input_ids"]) for row in rows], batch_size, runner,
                             max_tokens=batch_tokens, progress=progress, description="encode")
        size = self.get_sentence_embedding_dimension()
        if not convert_to_tensor:
            out = [_sparse_row(ids, values, size) for ids, values in vectors] if convert_to_sparse_tensor else vectors
        elif convert_to_sparse_tensor:
            out = _sparse_rows(vectors, size)
        else:
            out = torch.stack(vectors) if vectors else torch.empty(0, size)
        return out[0] if single else out

    def _batch_runner(self, route: nn.Module, dims: int | None, prefix: str, sparse: bool):
        """Each batch's vectors with ``dims`` kept, as dense CPU rows or (``sparse``) ``(ids, weights)`` pairs:
        a corpus is never held as dense ``[N, V]``."""
        pad_values = {"input_ids": route.tokenizer.pad_token_id, "token_type_ids": 0, "attention_mask": 0}
        prompt_length = prompt_tokens(route.tokenizer, prefix)  # CSR's pooling may leave the prompt out

        @torch.inference_mode()
        def run(rows: list[dict]) -> list:
            batch = pad(rows, pad_values, self.device)
            vectors = route(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], dims,
                            prompt_length=prompt_length).float()
            if dims is not None:
                vectors = keep_largest(vectors, dims)
            vectors = vectors.cpu()
            if not sparse:
                return list(vectors)
            return [(ids, row[ids]) for row in vectors for ids in [row.nonzero().squeeze(1)]]

        return run

    # ------------------------------------------------------------------------------------------ reading vectors
    def similarity(self, a: Any, b: Any) -> torch.Tensor:
        """``[len(a), len(b)]`` scores under the model's similarity (dot unless its config names another);
        sparse or dense tensors."""
        return similarity(_dense(a), _dense(b), self.similarity_fn_name)

    def decode(self, embeddings: torch.Tensor, top_k: int | None = None) -> list:
        """``(token, weight)`` pairs of each vector's non-zero weights, largest first (at most ``top_k``); a
        ``[V]`` vector gives one list, ``[N, V]`` a list per row."""
        if top_k is not None and top_k <= 0:
            raise ValueError(f"top_k must be a positive integer, got {top_k}.")
        if not isinstance(embeddings, torch.Tensor) or embeddings.ndim not in (1, 2):
            raise ValueError("decode(embeddings) takes a [V] or [N, V] tensor (sparse or dense) from encode.")
        dense = _dense(embeddings)
        out = []
        for row in dense.reshape(-1, dense.shape[-1]):
            ids = row.nonzero().flatten()
            weights, order = row[ids].sort(descending=True, stable=True)
            ids, weights = ids[order][:top_k], weights[:top_k]
            out.append(list(zip(self.tokenizer.convert_ids_to_tokens(ids.tolist()), weights.tolist())))
        return out[0] if embeddings.ndim == 1 else out

    @staticmethod
    def sparsity(embeddings: torch.Tensor) -> dict[str, float]:
        """Mean active (non-zero) dimensions per vector and the mean fraction of zeros, as sentence-transformers
        reports them."""
        dense = _dense(embeddings)
        dense = dense.reshape(-1, dense.shape[-1])
        active = (dense != 0).sum(dim=1).float().mean().item() if len(dense) else 0.0
        return {"active_dims": active, "sparsity_ratio": 1.0 - active / dense.shape[-1]}


class _Splade(nn.Module):
    """One SPLADE pipeline: the masked-LM head's logits, pooled (:class:`~bertkit.sentence.modules.SpladePooling`)."""

    def __init__(self, layout: Layout):
        super().__init__()
        from bertkit.modeling.lm_heads import BERTForMaskedLM
        from bertkit.tasks.sources import load_model_and_tokenizer

        self.layout, self.splade = layout, layout.splade
        self.mlm, self.tokenizer = load_model_and_tokenizer(layout.transformer, BERTForMaskedLM, warn=False)
        fresh = [key for key in self.mlm.load_report.initialized if key.startswith("cls.")]
        if fresh:  # a random head would give noise, not term weights
            raise ValueError(f"{layout.transformer} has no masked-LM head (its checkpoint lacks {fresh[0]}); SPLADE "
                             "weighs terms with that head: pass a checkpoint with its MLM head (a ...ForMaskedLM or "
                             "pretraining checkpoint) or a sentence-transformers sparse encoder directory.")
        limit = self.mlm.config.max_tokens
        self.max_seq_length = min(layout.max_seq_length or limit, limit)
        self.vocab_size = self.mlm.config.vocab_size

    features = SentenceTransformer.features  # one tokenization with the dense model kind (the same attributes)

    def forward(self, input_ids, attention_mask, token_type_ids=None, max_active_dims=None,
                prompt_length: int = 0) -> torch.Tensor:
        """Float32 ``[B, V]``: the encoder, then the MLM head on the real tokens alone, pooled chunk by chunk
        (:meth:`~bertkit.sentence.modules.SpladePooling.project`)."""
        hidden = self.mlm.bert(input_ids, attention_mask, token_type_ids)[0]
        return self.pool(hidden, attention_mask)

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """SPLADE vectors of the encoder's hidden states ``[B, L, H]``. Training by max pools through
        :func:`~bertkit.sentence.splade_max.max_logits`, whose backward is sparse (one token per row and term)."""
        head = self.mlm.cls.predictions
        if self.splade.strategy == "max" and torch.is_grad_enabled():
            return self.splade.activate(max_logits(head, hidden, attention_mask).float())
        return self.splade.project(hidden, attention_mask, head, self.vocab_size)


class _Static(nn.Module):
    """An inference-free side (``SparseStaticEmbedding``): each distinct token of a text (no special tokens) weighs
    its learned weight; no model runs."""

    def __init__(self, layout: Layout):
        super().__init__()
        from bertkit.tokenization import load_tokenizer
        from bertkit.weights.hf import read_state_dict

        self.tokenizer = load_tokenizer(layout.transformer)
        weights = read_state_dict(layout.transformer)
        if set(weights) != {"weight"} or weights["weight"].ndim != 1:
            raise ValueError(f"{layout.transformer}: a SparseStaticEmbedding holds one 1-D 'weight' tensor, found "
                             f"{sorted(weights)}.")
        self.weight = nn.Parameter(weights["weight"].float(), requires_grad=False)
        self.vocab_size = self.weight.shape[0]
        if len(self.tokenizer) > self.vocab_size:
            raise ValueError(f"{layout.transformer}: the tokenizer has {len(self.tokenizer)} tokens but the static "
                             f"weights cover {self.vocab_size}; save the weights with that tokenizer's vocabulary.")

    def features(self, texts: list[str], prefix: str = "") -> list[dict]:
        if not texts:
            return []
        encoding = self.tokenizer([prefix + text for text in texts], add_special_tokens=False, truncation=True,
                                  return_token_type_ids=True)
        return [{key: encoding[key][i] for key in ("input_ids", "token_type_ids", "attention_mask")}
                for i in range(len(texts))]

    def forward(self, input_ids, attention_mask, token_type_ids=None, max_active_dims=None,
                prompt_length: int = 0) -> torch.Tensor:
        present = torch.zeros(input_ids.shape[0], self.vocab_size, dtype=self.weight.dtype, device=input_ids.device)
        present.scatter_reduce_(1, input_ids, attention_mask.to(present.dtype), "amax")  # padding marks nothing
        return present * self.weight


class _CSR(nn.Module):
    """CSR: a dense sentence-transformers pipeline (:class:`bertkit.SentenceTransformer`) under a
    :class:`~bertkit.sentence.modules.SparseAutoEncoder`; ``max_active_dims`` is its ``k``."""

    def __init__(self, layout: Layout, root: Path, device: torch.device, dtype: Any, optimize: bool):
        super().__init__()
        self.autoencoder = layout.autoencoder
        self.dense = SentenceTransformer(root, device, dtype=dtype, optimize=optimize,
                                         layout=dataclasses.replace(layout, autoencoder=None))
        self.tokenizer, self.vocab_size = self.dense.tokenizer, self.autoencoder.hidden_dim

    def features(self, texts: list[str], prefix: str = "") -> list[dict]:
        return self.dense.features(texts, prefix)

    def forward(self, input_ids, attention_mask, token_type_ids=None, max_active_dims=None,
                prompt_length: int = 0) -> torch.Tensor:
        """``prompt_length``: the prompt's leading tokens, which a pooling with ``include_prompt=False`` leaves out
        (as sentence-transformers counts them: :func:`~bertkit.sentence.model.prompt_tokens`)."""
        pooled = self.dense(input_ids, attention_mask, token_type_ids, prompt_length)
        return self.autoencoder(pooled.float(), max_active_dims)


def _route(layout: Layout, root: Path, device: torch.device, dtype: Any, optimize: bool) -> nn.Module:
    if layout.autoencoder is not None:  # prepared on its device by SentenceTransformer
        return _CSR(layout, root, device, dtype, optimize).to(device)
    if layout.static:
        return _Static(layout)
    if layout.masked_lm and layout.splade is not None:
        return _Splade(layout)
    raise ValueError(f"{root} is not a sparse encoder (it needs an MLMTransformer and a SpladePooling module, or "
                     "a Router of them and a SparseStaticEmbedding); load a dense model with "
                     "bertkit.SentenceTransformer.")


def keep_largest(embeddings: torch.Tensor, k: int) -> torch.Tensor:
    """Each row with only its ``k`` largest weights by magnitude (the rest 0), a new tensor."""
    top = embeddings.abs().topk(min(k, embeddings.shape[-1]), dim=-1).indices
    return torch.zeros_like(embeddings).scatter(-1, top, embeddings.gather(-1, top))


def _sparse_row(ids: torch.Tensor, values: torch.Tensor, size: int) -> torch.Tensor:
    return torch.sparse_coo_tensor(ids[None], values, (size,), is_coalesced=True, check_invariants=False)


def _sparse_rows(rows: list[tuple[torch.Tensor, torch.Tensor]], size: int) -> torch.Tensor:
    """One coalesced sparse COO ``[N, size]`` tensor of rows given as ``(ids, weights)`` (ids ascending)."""
    if not rows:
        return torch.empty(0, size).to_sparse()
    ids = torch.cat([row_ids for row_ids, _ in rows])
    which = torch.repeat_interleave(torch.arange(len(rows)), torch.tensor([len(row_ids) for row_ids, _ in rows]))
    values = torch.cat([weights for _, weights in rows])
    return torch.sparse_coo_tensor(torch.stack([which, ids]), values, (len(rows), size), is_coalesced=True,
                                   check_invariants=False)


def _check_dims(value: int | None, name: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise ValueError(f"{name} must be a positive integer (or None for every dimension), got {value!r}.")
    return value


def _dense(x: Any) -> torch.Tensor:
    if isinstance(x, (list, tuple)):
        x = torch.stack([_dense(row) for row in x])
    x = torch.as_tensor(x)
    return x.to_dense() if x.is_sparse or x.layout != torch.strided else x
