"""Embedding a corpus at scale: ``bertkit embed MODEL --input CORPUS -o OUT`` writes an embedding store (sharded
Parquet or npy, ids beside vectors, an ``index.json``), restartable and spread over processes or a Dask cluster.
:func:`open_store` reads one back."""

from bertkit.embed_job.store import EmbeddingStore, open_store

__all__ = ["EmbeddingStore", "open_store"]
