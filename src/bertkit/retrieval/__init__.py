"""Search over vectors, model-agnostic: whatever made the vectors (an encoder is any callable from texts to
``[n, d]`` vectors), this package ranks them; it imports no model code.

:func:`search`: the best rows of a corpus for each query, exact, in bounded memory; :func:`retrieve`: a corpus
encoded once and searched for every query, by ids; :func:`encode_sorted`: texts encoded in length-sorted batches;
:func:`pairwise` / :func:`rowwise`: the similarity functions they rank by (:data:`SIMILARITIES`).

Sparse vectors (term id -> weight): :class:`SparseIndexWriter` / :func:`build_sparse_index` build an inverted
index in bounded memory, :class:`SparseIndex` loads and searches it exactly; :func:`retrieve_sparse`: a corpus
encoded once into one and searched for every query, by ids, with :func:`sparsity_figures`.
:func:`build_sparse_corpus_index`: a corpus on disk (:func:`read_corpus`: BEIR's corpus.jsonl, Parquet) indexed
with its ids, resumable; :func:`export_index` writes an index for Elasticsearch / OpenSearch (``rank_features``:
:func:`elasticsearch_actions`, :func:`elasticsearch_mapping`, :func:`elasticsearch_query`,
:func:`rank_feature_names`) or Qdrant (:func:`qdrant_points`, :func:`qdrant_collection`).
:func:`reciprocal_rank_fusion` and :func:`weighted_sum_fusion` fuse ranked lists (dense + sparse: hybrid),
:func:`fuse_runs` every query's; :func:`hybrid_search`: dense vectors and a sparse index of one corpus searched
together, fused.

Multi-vector (late interaction, token vectors ``[n_i, d]`` per document): :class:`MultiVectorIndexWriter` /
:func:`build_multivector_index` build an exact index in bounded memory, :class:`MultiVectorIndex` loads it and
searches it by MaxSim, exactly; :func:`build_multivector_corpus_index` builds one from a corpus on disk with an
encoder (resumable); :func:`build_plaid_index` compresses one in the PLAID manner (k-means centroids, residuals in
2 or 4 bits; resumable) into a :class:`PlaidIndex`, searched by candidate generation from the centroids and MaxSim
on the short list; :func:`append_multivector_index` / :func:`append_plaid_index` add documents to either (the
compressed one with its existing codec), swapped in at once.
"""

from bertkit.retrieval.dense import encode_sorted, retrieve, search
from bertkit.retrieval.fusion import fuse_runs, reciprocal_rank_fusion, weighted_sum_fusion
from bertkit.retrieval.hybrid import hybrid_search
from bertkit.retrieval.multivector import (
    MultiVectorIndex,
    MultiVectorIndexWriter,
    append_multivector_index,
    build_multivector_index,
)
from bertkit.retrieval.multivector_corpus import build_multivector_corpus_index
from bertkit.retrieval.plaid import PlaidIndex, append_plaid_index, build_plaid_index
from bertkit.retrieval.similarity import SIMILARITIES, pairwise, rowwise
from bertkit.retrieval.sparse import SparseIndex, SparseIndexWriter, build_sparse_index
from bertkit.retrieval.sparse_corpus import CorpusFields, build_sparse_corpus_index, model_fingerprint, read_corpus
from bertkit.retrieval.sparse_export import (
    document_vectors,
    elasticsearch_actions,
    elasticsearch_mapping,
    elasticsearch_query,
    export_index,
    qdrant_collection,
    qdrant_points,
    rank_feature_names,
)
from bertkit.retrieval.sparse_retrieve import encode_sparse_sorted, retrieve_sparse, sparsity_figures

__all__ = ["SIMILARITIES", "CorpusFields", "MultiVectorIndex", "MultiVectorIndexWriter", "PlaidIndex", "SparseIndex",
           "SparseIndexWriter", "append_multivector_index", "append_plaid_index", "build_multivector_corpus_index",
           "build_multivector_index", "build_plaid_index", "build_sparse_corpus_index",
           "build_sparse_index", "document_vectors", "elasticsearch_actions", "elasticsearch_mapping",
           "elasticsearch_query", "encode_sorted", "encode_sparse_sorted", "export_index", "fuse_runs",
           "hybrid_search", "model_fingerprint", "pairwise", "qdrant_collection", "qdrant_points",
           "rank_feature_names", "read_corpus", "reciprocal_rank_fusion", "retrieve", "retrieve_sparse",
           "rowwise", "search", "sparsity_figures", "weighted_sum_fusion"]
