"""sentence-transformers on bertkit, one package: the model kinds side by side, the bi-encoder
:class:`SentenceTransformer` (``encode``, ``similarity``), the cross-encoder :class:`CrossEncoder` (``predict``,
``rank``) and the sparse (SPLADE) :class:`SparseEncoder` (``encode_query``, ``decode``), the multi-vector (ColBERT)
:class:`MultiVectorEncoder` (token vectors scored by :func:`maxsim_scores`), with :func:`semantic_search`,
:func:`similarity`, :func:`quantize_embeddings`; BGE-M3's lexical weights (:class:`BGEM3Lexical`,
:func:`lexical_matching_score`); their losses (:mod:`bertkit.sentence.losses`, one table), evaluation
(:mod:`bertkit.sentence.evaluation`), training data, mining and the training recipes
(:mod:`bertkit.sentence.training`, :mod:`bertkit.sentence.rerank_training`)."""

from bertkit.sentence.bge_m3 import BGEM3Lexical, lexical_matching_score
from bertkit.sentence.cross_encoder import CrossEncoder
from bertkit.sentence.maxsim import maxsim_rank, maxsim_scores
from bertkit.sentence.model import SentenceTransformer
from bertkit.sentence.modules import Dense, Pooling, SpladePooling, is_sentence_transformer, read_layout
from bertkit.sentence.multi_vector import MultiVectorEncoder
from bertkit.sentence.sparse import SparseEncoder
from bertkit.sentence.util import cos_sim, dot_score, quantize_embeddings, semantic_search, similarity

__all__ = ["BGEM3Lexical", "CrossEncoder", "Dense", "MultiVectorEncoder", "Pooling", "SentenceTransformer",
           "SparseEncoder", "SpladePooling", "cos_sim", "dot_score", "is_sentence_transformer",
           "lexical_matching_score", "maxsim_rank", "maxsim_scores", "quantize_embeddings", "read_layout",
           "semantic_search", "similarity"]
