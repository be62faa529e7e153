"""sentence-transformers on bertkit, one package: the model kinds side by side, the bi-encoder
:class:`SentenceTransformer` (``encode``, ``similarity``), the cross-encoder :class:`CrossEncoder` (``predict``,
``rank``), the sparse (SPLADE) :class:`SparseEncoder` (``encode_query``, ``decode``) and the multi-vector (ColBERT)
:class:`MultiVectorEncoder` (token vectors scored by :func:`maxsim_scores`), static models (a token table:
:class:`StaticModel`, :class:`StaticEmbedding`, :func:`load_static`, :func:`save_static`), with :func:`semantic_search`,
:func:`similarity`, :func:`quantize_embeddings`; BGE-M3's dense, lexical and multi-vector outputs (:class:`BGEM3`,
:class:`BGEM3Lexical`, :func:`lexical_matching_score`, :func:`colbert_score`, :func:`fused_scores`); their losses
(:mod:`bertkit.sentence.losses`, one table), evaluation (:mod:`bertkit.sentence.evaluation`), training data, mining
and the training recipes (:mod:`bertkit.sentence.training`, :mod:`bertkit.sentence.rerank_training`)."""

from bertkit.sentence.bge_m3 import BGEM3, BGEM3Lexical, colbert_score, fused_scores, lexical_matching_score
from bertkit.sentence.cross_encoder import CrossEncoder
from bertkit.sentence.maxsim import maxsim_rank, maxsim_scores
from bertkit.sentence.model import SentenceTransformer
from bertkit.sentence.modules import Dense, Pooling, SpladePooling, is_sentence_transformer, read_layout
from bertkit.sentence.multi_vector import MultiVectorEncoder
from bertkit.sentence.sparse import SparseEncoder
from bertkit.sentence.static import StaticEmbedding, load_static, save_static
from bertkit.sentence.static_model import StaticModel
from bertkit.sentence.util import cos_sim, dot_score, quantize_embeddings, semantic_search, similarity

__all__ = ["BGEM3", "BGEM3Lexical", "CrossEncoder", "Dense", "MultiVectorEncoder", "Pooling", "SentenceTransformer",
           "SparseEncoder", "SpladePooling", "StaticEmbedding", "StaticModel", "colbert_score", "cos_sim", "dot_score",
           "fused_scores", "is_sentence_transformer", "lexical_matching_score", "load_static", "maxsim_rank",
           "maxsim_scores", "quantize_embeddings", "read_layout", "save_static", "semantic_search", "similarity"]
