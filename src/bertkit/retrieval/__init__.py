"""Search over vectors, model-agnostic: whatever made the vectors (an encoder is any callable from texts to
``[n, d]`` vectors), this package ranks them; it imports no model code.

:func:`search`: the best rows of a corpus for each query, exact, in bounded memory; :func:`retrieve`: a corpus
encoded once and searched for every query, by ids; :func:`encode_sorted`: texts encoded in length-sorted batches;
:func:`pairwise` / :func:`rowwise`: the similarity functions they rank by (:data:`SIMILARITIES`).
"""

from bertkit.retrieval.dense import encode_sorted, retrieve, search
from bertkit.retrieval.similarity import SIMILARITIES, pairwise, rowwise

__all__ = ["SIMILARITIES", "encode_sorted", "pairwise", "retrieve", "rowwise", "search"]
