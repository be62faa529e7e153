"""sentence-transformers' multi-vector (ColBERT) encoder on bertkit's engine: ``MultiVectorEncoder(path)``.

A sentence-transformers 6 ``MultiVectorEncoder`` directory, a PyLate one or a Stanford ColBERT checkpoint
(:mod:`.colbert_layouts`), read as sentence-transformers 6 reads it (:mod:`.modules`: a ``Transformer`` with
``query_length`` / ``document_length`` / ``query_expansion``, a projection ``Dense`` applied to every token, a
``MultiVectorMask`` and a token ``Normalize``) gives one vector per scored token:

- queries (``task="query"``): with ``query_expansion``, each query is padded to ``length`` tokens with ``[MASK]``
  (or the configured token); the encoder does not attend to those positions unless ``attend``, but their output
  vectors are scored (ColBERT's query augmentation). ``"fixed"`` also truncates to ``length``, ``"min"`` only pads.
- documents (``task="document"``, and no task): the tokens of the mask's ``skiplist_words`` (punctuation, as
  usual) are dropped, and with ``keep_only_token_ids`` only those ids are kept.

With ``dtype="fp32"`` the vectors equal sentence-transformers 6.2's ``encode_query`` / ``encode_document`` to
1e-5. Scores are MaxSim (:mod:`bertkit.sentence.maxsim`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.inference.batching import check_batch_size, pad_lists, run_sorted
from bertkit.inference.precision import prepare, resolve
from bertkit.sentence.colbert_layouts import read_colbert_layout
from bertkit.sentence.maxsim import maxsim_rank, maxsim_scores
from bertkit.sentence.model import SentenceTransformer
from bertkit.sentence.modules import is_multi_vector, normalize
from bertkit.sentence.sides import QueryDocumentSides
from bertkit.sentence.token_pooling import HierarchicalTokenPooling
from bertkit.tokenization.cut import cut_texts

TASKS = ("query", "document", None)
STRATEGIES = ("fixed", "min")
RERANK_DOCUMENTS = 8192  # candidate documents whose vectors :meth:`MultiVectorEncoder.score_lists` holds at once


class MultiVectorEncoder(QueryDocumentSides, nn.Module):
    """BERT -> projection ``Dense`` layers (per token) -> optional normalisation, with ColBERT's query expansion
    and document skiplist, loaded from a sentence-transformers ``MultiVectorEncoder`` directory.

    ``forward(input_ids, attention_mask, token_type_ids=None, every_position=False)`` returns ``[B, L, D]`` token
    vectors.
    """

    def __init__(self, model_name_or_path: str | os.PathLike, device: str | torch.device | None = None, *,
                 dtype: Any = "auto", optimize: bool = True):
        """``dtype`` and ``optimize`` as :class:`bertkit.SentenceTransformer`'s (``"fp32"``: exact)."""
        super().__init__()
        from bertkit.modeling.backbone import BERT
        from bertkit.modeling.text import resolve_device
        from bertkit.tasks.sources import load_model_and_tokenizer

        path = Path(model_name_or_path)
        self.layout = layout = read_colbert_layout(path)
        if not is_multi_vector(layout):
            raise ValueError(f"{path} is not a multi-vector model (config_sentence_transformers.json's model_type is "
                             f"{layout.model_type!r} and it has no MultiVectorMask module); load it with "
                             "bertkit.SentenceTransformer or bertkit.SparseEncoder.")
        if layout.masked_lm or layout.routes or layout.static or layout.autoencoder is not None:
            raise ValueError(f"{path}: a multi-vector model's pipeline is Transformer, Dense, MultiVectorMask, "
                             "Normalize; this one has a masked-LM, Router, static or autoencoder module.")
        # a Stanford checkpoint holds its projection (read with the layout) beside the BERT's weights
        self.bert, self.tokenizer = load_model_and_tokenizer(layout.transformer, BERT, warn=False,
                                                             strict=layout.model_type != "HF_ColBERT")
        self.dense = nn.ModuleList(layout.dense)
        self.normalize_output = layout.normalize
        limit = self.bert.config.max_tokens
        self.max_seq_length = min(layout.max_seq_length or limit, limit)
        self.query_length = min(layout.query_length or self.max_seq_length, limit)
        self.document_length = min(layout.document_length or self.max_seq_length, limit)
        self.query_expansion = _expansion(layout.query_expansion, path)
        self.expansion_id = self._expansion_id(path)
        mask = layout.token_mask or {}
        tasks = mask.get("skiplist_tasks", ["document"])
        self.skiplist_tasks = [tasks] if isinstance(tasks, str) else list(tasks)
        self.skiplist_words = list(mask.get("skiplist_words") or [])
        self.skiplist_ids = self._token_ids(self.skiplist_words)
        self.keep_only_token_ids = mask.get("keep_only_token_ids")
        pooling = layout.token_pooling
        self.token_pooling = HierarchicalTokenPooling.from_config(pooling) if pooling is not None else None
        vocab = self.tokenizer.get_vocab()  # a marker outside the vocabulary stays text, as in sentence-transformers
        self.marker_ids = {marker: vocab[marker] for marker in layout.markers.values() if marker in vocab}
        self.prompts, self.default_prompt_name = layout.prompts, layout.default_prompt_name
        # another name (PyLate's "MaxSim", a dense model's "cosine") falls back to MaxSim, as in sentence-transformers
        saved = layout.similarity_fn_name
        self.similarity_fn_name = saved if saved in ("maxsim", "meanmaxsim") else "maxsim"
        self.to(resolve_device(device) if device is not None else "cpu").eval()
        self.dtype_choice = None
        if optimize:
            self.dtype_choice = prepare(self, dtype, "embeddings")
        elif dtype not in (None, "auto"):
            self.to(resolve(dtype, next(self.parameters()).device, "embeddings").torch_dtype)

    prompt = SentenceTransformer.prompt  # one implementation of prompts with the dense model kind

    def save(self, path: str | os.PathLike, model_card: str | None = None) -> Path:
        """Write a sentence-transformers 6 ``MultiVectorEncoder`` directory
        (:func:`bertkit.sentence.saving.save_multi_vector_encoder`) that sentence-transformers and bertkit load
        with the same token vectors; returns its path."""
        from bertkit.sentence.saving import save_multi_vector_encoder

        return save_multi_vector_encoder(self, path, model_card=model_card)

    save_pretrained = save

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def get_sentence_embedding_dimension(self) -> int:
        """The size of each token vector (after the projection)."""
        return self.dense[-1].linear.out_features if len(self.dense) else self.bert.config.hidden_size

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None, every_position: bool = False) -> torch.Tensor:
        """``[B, L, D]`` vectors; positions attend to the tokens of ``attention_mask``. ``every_position``: the
        positions outside the mask get their vectors too (a query's expansion, scored but not attended to)."""
        return self.project(self._hidden(input_ids, attention_mask, token_type_ids, every_position))

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """The projection (and normalisation) of token states ``[..., H]`` -> ``[..., D]``, any leading shape."""
        for layer in self.dense:
            hidden = layer(hidden)
        return normalize(hidden) if self.normalize_output else hidden

    def _hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None,
                every_position: bool) -> torch.Tensor:
        mask = attention_mask.bool()
        if every_position:  # a [B, L, S] mask: unpadded execution (which drops unattended positions) stays off
            mask = mask[:, None, :].expand(-1, mask.shape[1], -1)
        return self.bert(input_ids, mask, token_type_ids)[0]

    # ------------------------------------------------------------------------------------------ encode
    def encode(self, sentences: str | Sequence[str], prompt_name: str | None = None, prompt: str | None = None,
               batch_size: int = 32, show_progress_bar: bool | None = None,
               output_value: str | None = "token_embeddings", convert_to_numpy: bool = False,
               device: str | None = None, normalize_embeddings: bool = False, task: str | None = None,
               batch_tokens: int | None = None, truncate: bool = False) -> Any:
        """Each text's ``[n_i, D]`` scored token vectors (float32 CPU tensors; arrays with ``convert_to_numpy``),
        in input order; one string gives one ``[n, D]``.

        Arguments as sentence-transformers' ``MultiVectorEncoder.encode``: ``task`` (``"query"``, ``"document"``,
        None as a document) picks the length, the query expansion and the skiplist; ``prompt`` / ``prompt_name``
        (else the model's default prompt) goes before each text; ``normalize_embeddings`` L2-normalises each
        vector; ``output_value=None`` gives dicts with the ``input_ids`` and the scored ``attention_mask`` too.
        ``batch_tokens`` bounds each forward pass by padded tokens.

        Documents are cut to the document length, as in every ColBERT. A query longer than the query length is a
        ValueError naming it unless ``truncate`` (then it is cut, with a warning, as sentence-transformers cuts it):
        the words past the length would silently not count. A document left with no vector to score (every token
        outside ``keep_only_token_ids`` or on the skiplist, special tokens included) is a ValueError naming it; one
        of punctuation alone keeps its ``[CLS]`` / ``[SEP]`` vectors, as in sentence-transformers.
        """
        check_batch_size(batch_size)
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}.")
        if output_value not in ("token_embeddings", None):
            raise ValueError(f"output_value must be 'token_embeddings' or None, got {output_value!r}.")
        if device is not None and torch.device(device) != self.device:
            raise ValueError(f"encode(device={device!r}) but the model is on {self.device}; call "
                             f"model.to({device!r}) first.")
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        progress = show_progress_bar if show_progress_bar is not None else len(texts) >= 8 * batch_size
        rows = self.features(texts, self.prompt(prompt_name, prompt), task, truncate=truncate)
        if task != "query":
            empty = next((i for i, row in enumerate(rows) if not any(row["scored"])), None)
            if empty is not None:
                raise ValueError(f"sentences[{empty}] {texts[empty][:60]!r} leaves no token vector to score (every "
                                 "token is on the model's skiplist or outside its keep_only_token_ids): drop it or "
                                 "give it words to score.")
        pooling = self.token_pooling if self.token_pooling is not None and self.token_pooling.applies_to(task) \
            else None
        out = run_sorted(rows, [len(row["input_ids"]) for row in rows], batch_size,
                         self._batch_runner(output_value, normalize_embeddings, pooling), max_tokens=batch_tokens,
                         progress=progress, description="encode")
        if convert_to_numpy and output_value is not None:
            out = [vectors.numpy() for vectors in out]
        return out[0] if single else out

    def features(self, texts: list[str], prefix: str = "", task: str | None = None, *,
                 truncate: bool = True) -> list[dict]:
        """Token rows for ``texts`` after ``prefix``: ``input_ids``, ``token_type_ids``, ``attention_mask`` (the
        tokens attended to) and ``scored`` (the tokens whose vectors are kept), each a list. Documents are cut to
        the document length; a query longer than the query length is cut with a warning (``truncate``) or is a
        ValueError naming ``sentences[i]`` (``truncate=False``, what :meth:`encode` asks by default)."""
        expansion = self.query_expansion if task == "query" else None
        length = self.text_length(task)
        marker = next((m for m in self.marker_ids if prefix.startswith(m)), None)
        if marker is not None:  # one token after [CLS], counted in the length
            prefix, length = prefix[len(marker):], length - 1
        lower = self.layout.do_lower_case
        limit = length + 1 if task == "query" else length  # a query's one token more tells that it was cut
        texts = cut_texts(self.tokenizer, texts, limit, "right", prefix=prefix, lower=lower)
        texts = [(prefix + t).lower() if lower else prefix + t for t in texts]
        rows = self._tokenize(texts, limit)
        if task == "query":
            rows = self._cut_queries(texts, rows, length, truncate, length + (marker is not None))
        for row in rows:
            if marker is not None:
                row["input_ids"].insert(1, self.marker_ids[marker])
                row["token_type_ids"].insert(1, 0)
                row["attention_mask"].insert(1, 1)
            row["scored"] = self._scored(row["input_ids"], task)
            if expansion is not None:
                self._expand(row, expansion)
        return rows

    def text_length(self, task: str | None) -> int:
        """The most tokens a text of ``task`` keeps (markers included): the query length (the expansion's under
        ``"fixed"``, at least the expansion's under ``"min"``), the document length, or ``max_seq_length``."""
        expansion = self.query_expansion if task == "query" else None
        length = {"query": self.query_length, "document": self.document_length}.get(task, self.max_seq_length)
        if expansion is not None and expansion["strategy"] == "fixed":
            return expansion["length"]
        if expansion is not None:  # "min": the expansion length is a floor, the query length still a ceiling
            return max(length, expansion["length"])
        return length

    def _tokenize(self, texts: list[str], length: int) -> list[dict]:
        if not texts:
            return []
        encoding = self.tokenizer(texts, truncation=True, max_length=length, return_token_type_ids=True)
        keys = ("input_ids", "token_type_ids", "attention_mask")
        return [{key: list(encoding[key][i]) for key in keys} for i in range(len(texts))]

    def _cut_queries(self, texts: list[str], rows: list[dict], length: int, truncate: bool,
                     query_length: int) -> list[dict]:
        """Rows tokenized to one token over ``length``: the longer ones are over-long queries, cut to ``length``
        (with a warning, as sentence-transformers cuts them) or, without ``truncate``, a ValueError."""
        long = [i for i, row in enumerate(rows) if len(row["input_ids"]) > length]
        if not long:
            return rows
        if not truncate:
            raise ValueError(f"sentences[{long[0]}] is a query longer than the model's query length ({query_length} "
                             f"tokens; {len(long)} of {len(rows)} queries are): shorten it, or have it cut to that "
                             "length as sentence-transformers does (truncate=True; bertkit search --truncate).")
        warnings.warn(f"queries longer than the model's query length ({query_length} tokens) were cut ({len(long)} of "
                      f"{len(rows)}): what follows is not scored; shorten them or use a model with a longer query "
                      "length.",
                      stacklevel=5)
        for i, row in zip(long, self._tokenize([texts[i] for i in long], length)):
            rows[i] = row
        return rows

    def _scored(self, ids: list[int], task: str | None) -> list[int]:
        """1 for each token whose vector is kept: not a skiplist token (on the skiplist's tasks), and one of
        ``keep_only_token_ids`` where they are set (documents)."""
        skip = self.skiplist_ids if (task or "document") in self.skiplist_tasks else set()
        keep = set(self.keep_only_token_ids) if self.keep_only_token_ids and task != "query" else None
        return [int(t not in skip and (keep is None or t in keep)) for t in ids]

    def _expand(self, row: dict, expansion: dict) -> None:
        """Pad a query row to the expansion length with the expansion token: scored, attended only with
        ``attend`` (the skiplist, on queries, applies to the expansion token as to any other)."""
        missing = expansion["length"] - len(row["input_ids"])
        if missing <= 0:
            return
        row["input_ids"] += [self.expansion_id] * missing
        row["token_type_ids"] += [0] * missing
        row["attention_mask"] += [int(expansion["attend"])] * missing
        row["scored"] += self._scored([self.expansion_id], "query") * missing

    def _batch_runner(self, output_value: str | None, normalize_embeddings: bool,
                      pooling: HierarchicalTokenPooling | None = None):
        @torch.inference_mode()
        def run(rows: list[dict]) -> list[Any]:
            ids = pad_lists([row["input_ids"] for row in rows], self.tokenizer.pad_token_id)
            types = pad_lists([row["token_type_ids"] for row in rows], 0)
            attended = pad_lists([row["attention_mask"] for row in rows], 0)
            scored = pad_lists([row["scored"] for row in rows], 0).bool()
            # a position computed but not attended (a query's expansion): every position gets its own vector
            every = bool((attended.sum(1) < torch.tensor([len(row["input_ids"]) for row in rows])).any())
            hidden = self._hidden(ids.to(self.device), attended.to(self.device), types.to(self.device), every)
            # only the scored tokens are projected: padding and skiplist positions never reach the Dense layers
            flat = self.project(hidden[scored.to(self.device)]).float()
            if normalize_embeddings and pooling is None:
                flat = normalize(flat)
            counts = scored.sum(1).tolist()
            out = list(flat.cpu().split(counts))
            if pooling is not None:  # a pooled vector stands for several tokens: no ids then
                out = [normalize(v) if normalize_embeddings else v for v in map(pooling.pool, out)]
            if output_value is not None:
                return out
            token_ids = ids[scored].split(counts) if pooling is None else [None] * len(rows)
            return [{"token_embeddings": v, "input_ids": t, "attention_mask": scored[i, :len(row["input_ids"])]}
                    for i, (v, t, row) in enumerate(zip(out, token_ids, rows))]

        return run

    # ------------------------------------------------------------------------------------------ scores
    def similarity(self, queries: Any, documents: Any, *, chunk_elements: int | None = None) -> torch.Tensor:
        """``[len(queries), len(documents)]`` MaxSim scores of token-vector lists (as :meth:`encode_query` /
        :meth:`encode_document` give them); ``meanmaxsim`` models divide by each query's vector count."""
        return maxsim_scores(queries, documents, chunk_elements=chunk_elements,
                             length_normalize=self.similarity_fn_name == "meanmaxsim")

    def rank(self, query: str, documents: Sequence[str], top_k: int | None = None, return_documents: bool = False,
             batch_size: int = 32, truncate: bool = False) -> list[dict]:
        """``documents`` ranked for ``query`` by MaxSim: ``{"corpus_id", "score"}`` (and ``"text"``) dicts, best
        first, at most ``top_k``; ``truncate`` as :meth:`encode`'s."""
        q = self.encode_query(query, batch_size=batch_size, truncate=truncate)
        d = self.encode_document(list(documents), batch_size=batch_size)
        return maxsim_rank(q, d, top_k=top_k, texts=documents if return_documents else None,
                           length_normalize=self.similarity_fn_name == "meanmaxsim")

    def score_lists(self, lists: Sequence[tuple[str, Sequence[str]]], batch_size: int = 32) -> list[list[float]]:
        """MaxSim of each ``(query, [document, ...])`` pair, list by list: a first stage's candidates reranked
        (what :mod:`bertkit.sentence.evaluation.reranking` asks of a reranker). Lists are encoded a block of at
        most :data:`RERANK_DOCUMENTS` documents at a time, each distinct text once per block. Long queries are cut
        (``truncate=True``), as sentence-transformers' evaluators cut them, so the numbers are comparable."""
        scores: list[list[float]] = []
        start = 0
        while start < len(lists):
            end, count = start, 0
            while end < len(lists) and (end == start or count + len(lists[end][1]) <= RERANK_DOCUMENTS):
                count += len(lists[end][1])
                end += 1
            block = lists[start:end]
            texts = list(dict.fromkeys(doc for _, documents in block for doc in documents))
            vectors = dict(zip(texts, self.encode_document(texts, batch_size=batch_size)))
            queries = self.encode_query([query for query, _ in block], batch_size=batch_size, truncate=True)
            for query, (_, documents) in zip(queries, block):
                row = self.similarity([query], [vectors[doc] for doc in documents])[0] if documents else []
                scores.append([float(x) for x in row])
            start = end
        return scores

    # ------------------------------------------------------------------------------------------ settings
    def _expansion_id(self, path: Path) -> int | None:
        if self.query_expansion is None:
            return None
        token = self.query_expansion.get("token")
        if token is not None:
            found = self.tokenizer.get_vocab().get(token)
            if found is None:
                raise ValueError(f"{path}: query_expansion's token {token!r} is not in the tokenizer's vocabulary; "
                                 "set it to a vocabulary token (or null for the mask token).")
            return found
        found = self.tokenizer.mask_token_id
        found = found if found is not None else self.tokenizer.eos_token_id
        if found is None:
            raise ValueError(f"{path}: query_expansion needs a mask (or eos) token and the tokenizer has neither; "
                             "name one as query_expansion's token.")
        return found

    def _token_ids(self, words: list[str]) -> set[int]:
        """The ids of the skiplist words that are single vocabulary tokens (the others never match a token, so
        are left out, as sentence-transformers leaves them out)."""
        vocab = self.tokenizer.get_vocab()
        return {vocab[word] for word in words if word in vocab}


def _expansion(config: dict | None, path: Path) -> dict | None:
    """``query_expansion`` checked and with its defaults (``attend`` False, ``token`` None); None: off."""
    if config is None:
        return None
    strategy, length = config.get("strategy"), config.get("length")
    if strategy not in STRATEGIES or not isinstance(length, int) or isinstance(length, bool) or length < 1:
        raise ValueError(f"{path / 'sentence_bert_config.json'}: query_expansion needs a strategy in {STRATEGIES} and "
                         f"a positive length, got {config}.")
    return {"strategy": strategy, "attend": bool(config.get("attend", False)), "token": config.get("token"),
            "length": length}

