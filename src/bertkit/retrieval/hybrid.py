"""Hybrid search: one corpus searched by dense vectors and by a sparse index, the two rankings fused into one.

Each side retrieves its best ``candidates`` documents for a query (:func:`~bertkit.retrieval.dense.search` over
the corpus's dense vectors; :meth:`~bertkit.retrieval.sparse.SparseIndex.search` over its sparse index, which
lists only documents sharing a term with the query); :mod:`~bertkit.retrieval.fusion` fuses the two lists:
``"rrf"`` (reciprocal-rank fusion: only the ranks count) or ``"weighted-sum"`` (each list's scores min-max
normalised, then weighted and summed). Both sides must hold the same documents at the same positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bertkit.retrieval.dense import Encode, encode_sorted, search
from bertkit.retrieval.fusion import FUSIONS, NORMALIZATIONS, fuse_runs
from bertkit.retrieval.sparse import SparseIndex
from bertkit.retrieval.sparse_retrieve import EncodeSparse, encode_sparse_sorted

#: the runs a hybrid evaluation reports, in this order: each side alone, then their fusion
RUNS = ("dense", "sparse", "fused")


def fusion_options(fusion: str, *, weights: Sequence[float] | None = None, rrf_k: int = 60,
                   normalize: str = "minmax", flag: str = "fusion") -> dict[str, Any]:
    """The options :func:`~bertkit.retrieval.fusion.fuse_runs` takes for ``fusion`` over a dense and a sparse
    run: ``weights`` (two: the dense run's, the sparse run's; default 1 and 1), ``rrf_k`` for ``"rrf"``,
    ``normalize`` for ``"weighted-sum"``. ``ValueError`` naming the argument (``flag`` for ``fusion``) otherwise."""
    if fusion not in FUSIONS:
        raise ValueError(f"{flag} must be one of {', '.join(FUSIONS)}, got {fusion!r}.")
    if weights is not None and (len(weights) != 2 or any(w < 0 for w in weights) or not any(weights)):
        raise ValueError(f"the fusion weights are two numbers at least 0, not both 0 (the dense run's, then the "
                         f"sparse run's), got {list(weights)}.")
    if rrf_k < 0:
        raise ValueError(f"rrf_k must be at least 0 (RRF's constant, 60 by default), got {rrf_k}.")
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {', '.join(NORMALIZATIONS)}, got {normalize!r}.")
    weights = list(weights) if weights is not None else [1.0, 1.0]
    return {"k": rrf_k, "weights": weights} if fusion == "rrf" else {"weights": weights, "normalize": normalize}


def hybrid_search(queries: Sequence[str], *, dense: tuple[Encode, torch.Tensor],
                  sparse: tuple[EncodeSparse, SparseIndex], ids: Sequence[Any] | None = None, fusion: str = "rrf",
                  depth: int = 10, candidates: int = 100, weights: Sequence[float] | None = None, rrf_k: int = 60,
                  normalize: str = "minmax", similarity: str = "cosine", sparse_model: str | None = None,
                  batch_size: int = 32) -> list[list[tuple[Any, float]]]:
    """For each of ``queries`` (texts): the best ``depth`` documents, ``[(doc id, fused score), ...]``, best first.

    ``dense`` is ``(encode, vectors)``: an encoder of query texts (say ``model.encode_query``) and the corpus's
    vectors ``[N, d]``, ranked by ``similarity``; ``sparse`` is ``(encode, index)``: a sparse encoder of query texts
    (say ``sparse_model.encode_query``) and the corpus's :class:`~bertkit.retrieval.sparse.SparseIndex` (with
    ``sparse_model``, ``ValueError`` unless the index names that model). ``ids`` names the N documents (their
    positions without it; a fused tie goes to the greater id). ``fusion``, ``weights``, ``rrf_k`` and
    ``normalize``: see :func:`fusion_options`; each side retrieves ``candidates`` documents before fusing."""
    options = fusion_options(fusion, weights=weights, rrf_k=rrf_k, normalize=normalize)
    encode_dense, vectors = dense
    encode_sparse, index = sparse
    documents = _check_sides(vectors, index, ids, sparse_model)
    if depth < 1 or candidates < 1:
        raise ValueError(f"depth and candidates must be at least 1, got {depth} and {candidates}.")
    texts = list(queries)
    names = list(ids) if ids is not None else list(range(documents))
    scores, positions = search(encode_sorted(encode_dense, texts, batch_size, "the queries (dense)"), vectors,
                               max(candidates, depth), similarity=similarity)
    dense_run = {i: [(names[p], s) for p, s in zip(row_positions, row_scores)]
                 for i, (row_scores, row_positions) in enumerate(zip(scores.tolist(), positions.tolist()))}
    sparse_vectors = encode_sparse_sorted(encode_sparse, texts, batch_size, index.vocab_size, "the queries (sparse)")
    sparse_run = {i: [(names[p], s) for p, s in zip(row_positions.tolist(), row_scores.tolist())]
                  for i, (row_scores, row_positions) in enumerate(index.search(sparse_vectors, max(candidates, depth)))}
    fused = fuse_runs([dense_run, sparse_run], fusion, depth=depth, **options)
    return [fused.get(i, []) for i in range(len(texts))]


def _check_sides(vectors: Any, index: Any, ids: Sequence[Any] | None, sparse_model: str | None) -> int:
    """The number of documents both sides hold; ``ValueError`` naming the argument when they do not agree."""
    if not isinstance(vectors, torch.Tensor) or vectors.layout != torch.strided or vectors.ndim != 2:
        raise ValueError("dense must be (encode, vectors) with the corpus's dense vectors as a [N, d] tensor, got "
                         f"{type(vectors).__name__}{' (sparse)' if isinstance(vectors, torch.Tensor) else ''}; the "
                         "sparse side's index goes in sparse=(encode, index).")
    if not isinstance(index, SparseIndex):
        raise ValueError(f"sparse must be (encode, index) with a SparseIndex (SparseIndex.load(DIR)), got "
                         f"{type(index).__name__}; dense vectors go in dense=(encode, vectors).")
    if sparse_model is not None and index.model != sparse_model:
        raise ValueError(f"sparse: the index in {str(index.directory)!r} was built by {index.model!r}, not "
                         f"{sparse_model!r}; search it with the model that built it or build another.")
    if vectors.shape[0] == 0 or index.documents == 0:
        raise ValueError("the corpus is empty: dense and sparse need at least one document.")
    if vectors.shape[0] != index.documents:
        raise ValueError(f"dense holds {vectors.shape[0]} documents but the sparse index {index.documents}; both must "
                         "hold the same corpus in the same order.")
    if ids is not None and len(ids) != index.documents:
        raise ValueError(f"ids names {len(ids)} documents but the corpus holds {index.documents}; give one id per "
                         "document, in the index's order.")
    return index.documents
