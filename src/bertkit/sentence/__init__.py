"""sentence-transformers models on bertkit: :class:`SentenceTransformer` (``encode``, ``similarity``),
:func:`semantic_search`, :func:`similarity`, :func:`quantize_embeddings`."""

from bertkit.sentence.model import SentenceTransformer
from bertkit.sentence.modules import Dense, Pooling, is_sentence_transformer, read_layout
from bertkit.sentence.util import cos_sim, dot_score, quantize_embeddings, semantic_search, similarity

__all__ = ["Dense", "Pooling", "SentenceTransformer", "cos_sim", "dot_score", "is_sentence_transformer",
           "quantize_embeddings", "read_layout", "semantic_search", "similarity"]
