"""The losses of the sentence-transformers models: the bi-encoder losses (in-batch negatives, cached, pairwise
scores, distillation, Matryoshka) and the cross-encoder (reranker) losses.

A bi-encoder loss is called as ``loss(embed, batch)``: ``embed`` maps one column's tokenized inputs to its
embeddings ``[n, d]`` (with gradients), ``batch`` is a :class:`~bertkit.sentence.batch.PairBatch`; a loss that
runs the encoder itself (the cached, GradCache form) calls ``embed`` as often as it needs. A reranker loss is
called as ``loss(score, batch)`` on a :class:`~bertkit.sentence.losses.rerank.RerankBatch`.
"""
