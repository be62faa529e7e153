"""sentence-transformers' sparse encoder on bertkit's engine: ``SparseEncoder(path).encode_document(texts)``.

A SPLADE directory (``MLMTransformer`` + ``SpladePooling``, :mod:`.modules`) runs its masked-LM head
(:class:`bertkit.BERTForMaskedLM`, any family whose MLM head bertkit loads) on the fast inference path and
pools the logits into one weight per vocabulary entry. :meth:`SparseEncoder.encode` and its query/document
forms take sentence-transformers' arguments and return what its ``SparseEncoder`` returns (a sparse COO tensor
by default); with ``dtype="fp32"`` the vectors equal sentence-transformers' to 1e-5.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.inference.batching import check_batch_size, pad, run_sorted
from bertkit.inference.precision import prepare, resolve
from bertkit.sentence.model import SentenceTransformer
from bertkit.sentence.modules import is_sentence_transformer, read_layout
from bertkit.sentence.util import similarity

DOCUMENT_PROMPTS = ("document", "passage", "corpus")  # encode_document's default prompt names, in this order


class SparseEncoder(nn.Module):
    """Masked-LM logits -> SPLADE pooling, loaded from a sentence-transformers sparse encoder directory.

    ``forward(input_ids, attention_mask, token_type_ids=None)`` returns the dense ``[B, V]`` weights (before
    ``max_active_dims``). ``max_active_dims`` (the directory's, or the argument): the largest weights kept per
    vector; :meth:`similarity` is the dot product unless the directory names another.
    """

    def __init__(self, model_name_or_path: str | os.PathLike, device: str | torch.device | None = None, *,
                 dtype: Any = "auto", optimize: bool = True, max_active_dims: int | None = None):
        """``dtype`` and ``optimize`` as :class:`bertkit.SentenceTransformer`'s (``"fp32"``: exact)."""
        super().__init__()
        from bertkit.modeling.lm_heads import BERTForMaskedLM
        from bertkit.modeling.text import resolve_device
        from bertkit.tasks.sources import load_model_and_tokenizer

        path = Path(model_name_or_path)
        if not is_sentence_transformer(path):
            raise ValueError(f"{path} has no modules.json; SparseEncoder loads sentence-transformers' sparse "
                             "encoder directories (MLMTransformer + SpladePooling).")
        layout = read_layout(path)
        if not layout.masked_lm or layout.splade is None:
            raise ValueError(f"{path} is not a SPLADE directory (it needs an MLMTransformer and a SpladePooling "
                             "module); load a dense model with bertkit.SentenceTransformer.")
        self.layout = layout
        self.mlm, self.tokenizer = load_model_and_tokenizer(layout.transformer, BERTForMaskedLM, warn=False)
        self.splade = layout.splade
        limit = self.mlm.config.max_tokens
        self.max_seq_length = min(layout.max_seq_length or limit, limit)
        self.prompts, self.default_prompt_name = layout.prompts, layout.default_prompt_name
        self.similarity_fn_name = layout.similarity_fn_name or "dot"
        self.max_active_dims = _check_dims(max_active_dims if max_active_dims is not None
                                           else layout.max_active_dims, "max_active_dims")
        self.to(resolve_device(device) if device is not None else "cpu").eval()
        self.dtype_choice = None
        if optimize:
            self.dtype_choice = prepare(self.mlm, dtype, "sparse-embeddings")
        elif dtype not in (None, "auto"):
            self.to(resolve(dtype, self.device, "sparse-embeddings").torch_dtype)

    # one implementation of prompts and tokenization with the dense model kind (they read the same attributes)
    prompt = SentenceTransformer.prompt
    features = SentenceTransformer.features

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def get_sentence_embedding_dimension(self) -> int:
        return self.mlm.config.vocab_size

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.mlm(input_ids, attention_mask, token_type_ids)
        return self.splade(logits.float(), attention_mask)

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
        ``"document"``) routes a Router model; a SPLADE model runs both alike. ``batch_tokens`` as
        :meth:`bertkit.SentenceTransformer.encode`'s.
        """
        check_batch_size(batch_size)
        if task not in (None, "query", "document"):
            raise ValueError(f"task must be 'query', 'document' or None, got {task!r}.")
        if device is not None and torch.device(device) != self.device:
            raise ValueError(f"encode(device={device!r}) but the model is on {self.device}; call "
                             f"model.to({device!r}) first.")
        dims = _check_dims(max_active_dims, "max_active_dims") or self.max_active_dims
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        progress = show_progress_bar if show_progress_bar is not None else len(texts) >= 8 * batch_size
        rows = self.features(texts, self.prompt(prompt_name, prompt))
        vectors = run_sorted(rows, [len(row["input_ids"]) for row in rows], batch_size, self._batch_runner(),
                             max_tokens=batch_tokens, progress=progress, description="encode")
        embeddings = torch.stack(vectors) if vectors else torch.empty(0, self.get_sentence_embedding_dimension())
        if dims is not None:
            embeddings = keep_largest(embeddings, dims)
        if convert_to_tensor:
            embeddings = embeddings.to_sparse() if convert_to_sparse_tensor else embeddings
            return embeddings[0] if single else embeddings
        rows_out = [row.to_sparse() if convert_to_sparse_tensor else row for row in embeddings]
        return rows_out[0] if single else rows_out

    def encode_query(self, sentences: str | Sequence[str], prompt_name: str | None = None,
                     prompt: str | None = None, **options: Any) -> Any:
        """:meth:`encode` with ``task="query"`` and, unless a prompt is given, the model's ``query`` prompt."""
        if prompt_name is None and prompt is None and "query" in self.prompts:
            prompt_name = "query"
        return self.encode(sentences, prompt_name, prompt, task="query", **options)

    def encode_document(self, sentences: str | Sequence[str], prompt_name: str | None = None,
                        prompt: str | None = None, **options: Any) -> Any:
        """:meth:`encode` with ``task="document"`` and, unless a prompt is given, the first of the model's
        ``document``, ``passage``, ``corpus`` prompts it has."""
        if prompt_name is None and prompt is None:
            prompt_name = next((name for name in DOCUMENT_PROMPTS if name in self.prompts), None)
        return self.encode(sentences, prompt_name, prompt, task="document", **options)

    def _batch_runner(self):
        pad_values = {"input_ids": self.tokenizer.pad_token_id, "token_type_ids": 0, "attention_mask": 0}

        @torch.inference_mode()
        def run(rows: list[dict]) -> list[torch.Tensor]:
            batch = pad(rows, pad_values, self.device)
            return list(self(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).cpu())

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


def keep_largest(embeddings: torch.Tensor, k: int) -> torch.Tensor:
    """Each row with only its ``k`` largest weights by magnitude (the rest 0), a new tensor."""
    top = embeddings.abs().topk(min(k, embeddings.shape[-1]), dim=-1).indices
    return torch.zeros_like(embeddings).scatter(-1, top, embeddings.gather(-1, top))


def _check_dims(value: int | None, name: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise ValueError(f"{name} must be a positive integer (or None for every dimension), got {value!r}.")
    return value


def _dense(x: Any) -> torch.Tensor:
    if isinstance(x, (list, tuple)):
        x = torch.stack([_dense(row) for row in x])
    x = torch.as_tensor(x)
    return x.to_dense() if x.is_sparse or x.layout != torch.strided else x
