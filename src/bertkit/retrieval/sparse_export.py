"""A sparse index exported for the engines people run: Elasticsearch / OpenSearch ``rank_features`` documents
(a bulk NDJSON file and the index's mapping) and Qdrant sparse vectors (points and the collection's config).

The index is read back document by document (:func:`document_vectors`: its posting lists turned around, holding
16 bytes per posting while it runs). Elasticsearch and OpenSearch keep a ``rank_features`` field as an object of
feature name -> strictly positive value; a name may not contain a dot (a dot makes a sub-object) nor be empty.
:func:`rank_feature_names` makes each vocabulary entry such a name, one to one: ``%``, ``.``, whitespace and a
leading ``_`` are percent-escaped (``"."`` -> ``"%2E"``, ``"%"`` -> ``"%25"``, ``"_x"`` -> ``"%5Fx"``), every
other character is kept, so ``##ing`` stays ``##ing`` and two tokens never share a name; or the term ids
(``names="ids"``), the choice for a vocabulary without tokens (CSR). A weight that is not a positive normal float
(Lucene's ``FeatureField`` refuses the rest) is refused naming the document. Qdrant's sparse vectors take the
term ids and weights as they are, under a numeric point id (the document's position); the document id is in the
payload.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.io import atomic_path, atomic_write_text
from bertkit.retrieval.sparse import SparseIndex

TARGETS = ("elasticsearch", "opensearch", "qdrant")
#: the smallest weight a rank_features field takes (Lucene's FeatureField: a positive normal float)
MIN_FEATURE = float(np.finfo(np.float32).tiny)
ESCAPED = {"%", "."}


def document_vectors(index: SparseIndex, chunk_documents: int = 10_000
                     ) -> Iterator[tuple[range, list[tuple[np.ndarray, np.ndarray]]]]:
    """``(positions, [(term ids, weights), ...])`` for consecutive chunks of the index's documents, each vector's
    terms ascending: the documents as they were added (up to float32 rounding: none, weights are stored as
    float32)."""
    order = np.argsort(np.asarray(index.docs), kind="stable")  # postings by document; terms stay ascending
    terms = np.repeat(np.arange(index.vocab_size, dtype=np.int32), np.diff(np.asarray(index.offsets)))[order]
    weights = np.asarray(index.weights)[order]
    bounds = np.searchsorted(np.asarray(index.docs)[order], np.arange(index.documents + 1))
    for start in range(0, index.documents, chunk_documents):
        stop = min(start + chunk_documents, index.documents)
        yield range(start, stop), [(terms[bounds[d]:bounds[d + 1]], weights[bounds[d]:bounds[d + 1]])
                                   for d in range(start, stop)]


def rank_feature_names(tokens: Sequence[str], vocab_size: int | None = None) -> list[str]:
    """One ``rank_features`` feature name per term id (see the module docstring): ``tokens[i]`` escaped; a term
    id past the tokens (up to ``vocab_size``: an MLM head padded beyond its tokenizer) is ``%00`` and its id,
    which no escaped token can be (a literal ``%`` is always escaped). ``ValueError`` if two tokens are the same
    string (pass ``names="ids"`` then)."""
    names = ["".join(f"%{ord(c):02X}" if c in ESCAPED or c.isspace() or (c == "_" and i == 0) else c
                     for i, c in enumerate(token)) or "%" for token in tokens]
    names += [f"%00{t}" for t in range(len(names), vocab_size or 0)]
    if len(set(names)) != len(names):
        twice = Counter(tokens).most_common(1)[0][0]
        raise ValueError(f"the vocabulary holds the token {twice!r} twice: rank_features names would collide; "
                         f"export with --names ids.")
    return names


def elasticsearch_mapping(field: str = "sparse") -> dict[str, Any]:
    """The create-index body of Elasticsearch / OpenSearch for the documents: ``field`` a ``rank_features``."""
    if not field or "." in field:
        raise ValueError(f"--field {field!r}: a field name must be non-empty, without dots.")
    return {"mappings": {"properties": {field: {"type": "rank_features"}}}}


def elasticsearch_actions(index: SparseIndex, index_name: str, names: Sequence[str], field: str = "sparse"
                          ) -> Iterator[dict[str, Any]]:
    """The bulk helpers' index actions (``{"_index", "_id", "_source": {field: {name: weight}}}``), one per
    document of ``index``, ``names`` naming each term id (:func:`rank_feature_names`, or the ids as strings)."""
    if len(names) != index.vocab_size:
        raise ValueError(f"{len(names)} feature names for an index of {index.vocab_size} terms; pass the names of "
                         f"the model that built it.")
    for positions, vectors in document_vectors(index):
        ids = _ids(index, positions)
        for doc_id, (terms, weights) in zip(ids, vectors):
            if len(weights) and weights.min() < MIN_FEATURE:
                raise ValueError(f"document {doc_id!r} has the weight {float(weights.min())!r}: a rank_features field "
                                 f"holds positive values (at least {MIN_FEATURE:.3g}) only; export to Qdrant, or "
                                 f"index vectors of a model with positive weights (SPLADE's are).")
            yield {"_index": index_name, "_id": doc_id,
                   "_source": {field: {names[t]: float(w) for t, w in zip(terms.tolist(), weights.tolist())}}}


def elasticsearch_query(terms: Sequence[int], weights: Sequence[float], names: Sequence[str],
                        field: str = "sparse") -> dict[str, Any]:
    """A search body whose score is the dot product of a query vector with each document's ``field``: a
    ``rank_feature`` query (``linear``) per query term, boosted by its weight."""
    return {"query": {"bool": {"should": [
        {"rank_feature": {"field": f"{field}.{names[t]}", "linear": {}, "boost": float(w)}}
        for t, w in zip(terms, weights)]}}}


def qdrant_collection(vector_name: str = "sparse", on_disk: bool = False) -> dict[str, Any]:
    """Qdrant's create-collection body for the points: one sparse vector ``vector_name``, no dense one."""
    return {"sparse_vectors": {vector_name: {"index": {"on_disk": on_disk}}}}


def qdrant_points(index: SparseIndex, vector_name: str = "sparse") -> Iterator[dict[str, Any]]:
    """One Qdrant point per document: ``id`` its position, ``vector`` ``{vector_name: {indices, values}}``,
    ``payload`` ``{"doc_id": ...}``."""
    for positions, vectors in document_vectors(index):
        for position, doc_id, (terms, weights) in zip(positions, _ids(index, positions), vectors):
            yield {"id": position, "vector": {vector_name: {"indices": terms.tolist(), "values": weights.tolist()}},
                   "payload": {"doc_id": doc_id}}


def export_index(index: SparseIndex, target: str, output: str | os.PathLike, *, names: Sequence[str] | None = None,
                 field: str = "sparse", index_name: str = "documents") -> list[Path]:
    """Writes ``target``'s files into the directory ``output`` (each atomically) and returns their paths:
    Elasticsearch / OpenSearch ``mapping.json`` and ``bulk.ndjson`` (``names``: the feature name of each term
    id); Qdrant ``collection.json`` and ``points.jsonl`` (``field`` names the sparse vector)."""
    if target not in TARGETS:
        raise ValueError(f"--to {target}: choose one of {', '.join(TARGETS)}.")
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    if target == "qdrant":
        files = {"collection.json": json.dumps(qdrant_collection(field), indent=2)}
        lines: Iterator[str] = (json.dumps(point) for point in qdrant_points(index, field))
        data = "points.jsonl"
    else:
        files = {"mapping.json": json.dumps(elasticsearch_mapping(field), indent=2)}
        actions = elasticsearch_actions(index, index_name, names or [str(t) for t in range(index.vocab_size)], field)
        lines = (line for action in actions for line in (
            json.dumps({"index": {"_index": action["_index"], "_id": action["_id"]}}),
            json.dumps(action["_source"], ensure_ascii=False)))
        data = "bulk.ndjson"
    with atomic_path(output / data) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
    for name, text in files.items():
        atomic_write_text(output / name, text + "\n")
    return [output / name for name in (*files, data)]


def _ids(index: SparseIndex, positions: range) -> list[str]:
    return index.ids(np.arange(positions.start, positions.stop)) if index.manifest.get("ids") else \
        [str(p) for p in positions]
