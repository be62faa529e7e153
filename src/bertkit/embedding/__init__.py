"""Training embedding models (bi-encoders) and rerankers (cross-encoders): batches, losses, evaluation, mining.

The pieces share one batch type, :class:`~bertkit.embedding.batch.PairBatch`: the rows of a training file
tokenized column by column (anchor, positive, negatives, ...), with the identity of every text (so a loss
can mask a duplicate out of the negatives by text, not by comparing embeddings) and the row's labels.
A loss is called as ``loss(embed, batch)``, where ``embed`` maps one column's tokenized inputs to its
embeddings ``[n, d]`` (with gradients); a loss that needs to run the encoder itself (the cached, GradCache
form) calls ``embed`` as often as it needs.
"""
