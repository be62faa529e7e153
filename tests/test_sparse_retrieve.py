"""Sparse retrieval by ids (bertkit.retrieval.sparse_retrieve): the ranking of a brute-force dense dot product
with trec_eval's tie order, the corpus encoded once in length-sorted batches, and sentence-transformers' sparsity
figures."""

import pytest
import torch

from bertkit.retrieval.sparse import SparseIndex
from bertkit.retrieval.sparse_retrieve import encode_sparse_sorted, retrieve_sparse, sparsity_figures

V = 29


def vectors_of(texts, seed):
    """A fixed random sparse vector per text, weights multiples of 0.5 (so ties are exact)."""
    g = torch.Generator().manual_seed(seed)
    dense = torch.randint(1, 4, (len(texts), V), generator=g) / 2 * (torch.rand(len(texts), V, generator=g) < 0.2)
    return dict(zip(texts, dense))


def make_encoder(table, calls):
    def encode(texts):
        calls.append(list(texts))
        return torch.stack([table[t] for t in texts]).to_sparse_coo()
    return encode


def test_encode_sparse_sorted_orders_batches_and_restores_input_order():
    texts = ["a", "ccc", "bb", "dddd", "e"]
    table, calls = vectors_of(texts, 0), []
    out = encode_sparse_sorted(make_encoder(table, calls), texts, 2, V)
    assert calls == [["dddd", "ccc"], ["bb", "a"], ["e"]]
    torch.testing.assert_close(out.to_dense(), torch.stack([table[t] for t in texts]))
    with pytest.raises(ValueError, match="returned 1 vectors for 2 texts"):
        encode_sparse_sorted(lambda batch: [([1], [1.0])], texts, 2, V, "the corpus")


def test_retrieve_sparse_equals_brute_force_with_trec_eval_ties(tmp_path):
    doc_texts = {f"d{i:02d}": "x" * (i % 7 + 1) + str(i) for i in range(41)}
    query_texts = {f"q{i}": "query " + str(i) for i in range(6)}
    query_texts["d05"] = "a query that is also a document id"
    table = vectors_of(list(doc_texts.values()) + list(query_texts.values()), 1)
    table["query 2"] = torch.zeros(V)  # an empty query
    doc_calls, query_calls = [], []
    hits, figures = retrieve_sparse(make_encoder(table, query_calls), make_encoder(table, doc_calls), doc_texts,
                                    query_texts, depth=8, vocab_size=V, model="m", batch_size=4, chunk_size=10,
                                    max_postings=30, index_directory=tmp_path / "idx")
    assert sum(len(c) for c in doc_calls) == 41  # the corpus encoded once
    corpus = torch.stack([table[doc_texts[d]] for d in doc_texts])
    for query, text in query_texts.items():
        q = table[text]
        scores, shares = corpus @ q, (corpus != 0).float() @ (q != 0).float() > 0
        expected = sorted(((d, s.item()) for d, s, m in zip(doc_texts, scores, shares) if m),
                          key=lambda item: (-item[1], [-ord(c) for c in item[0]]))[:8]  # ties: greater id first
        assert [d for d, _ in hits[query]] == [d for d, _ in expected], query
        assert [s for _, s in hits[query]] == pytest.approx([s for _, s in expected])
    assert hits["q2"] == []
    index = SparseIndex.load(tmp_path / "idx", vocab_size=V, model="m")  # kept, loadable
    assert len(index) == 41

    everything, _ = retrieve_sparse(make_encoder(table, []), make_encoder(table, []), doc_texts, query_texts,
                                    depth=41, vocab_size=V, model="m")
    hits_ignoring, _ = retrieve_sparse(make_encoder(table, []), make_encoder(table, []), doc_texts, query_texts,
                                       depth=8, vocab_size=V, model="m", ignore_identical_ids=True)
    assert "d05" in dict(everything["d05"])  # the case the option is for
    assert hits_ignoring["d05"] == [(d, s) for d, s in everything["d05"] if d != "d05"][:8]
    assert hits_ignoring["q1"] == hits["q1"]
    assert set(figures) == {"query_active_dims", "query_sparsity_ratio", "corpus_active_dims",
                            "corpus_sparsity_ratio", "avg_flops"}
    with pytest.raises(ValueError, match="the corpus is empty"):
        retrieve_sparse(make_encoder(table, []), make_encoder(table, []), {}, query_texts, depth=3, vocab_size=V,
                        model="m")


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_sparsity_matches_sentence_transformers(tmp_path):
    st_model = pytest.importorskip("sentence_transformers.sparse_encoder.model")
    st_tensor = pytest.importorskip("sentence_transformers.util.tensor")
    from bertkit.retrieval.sparse import build_sparse_index

    g = torch.Generator().manual_seed(2)
    queries = torch.rand(7, V, generator=g) * (torch.rand(7, V, generator=g) < 0.15)
    corpus = torch.rand(23, V, generator=g) * (torch.rand(23, V, generator=g) < 0.3)
    index = build_sparse_index([corpus[:10], corpus[10:]], tmp_path / "idx", V, "m", max_postings=20)
    figures = sparsity_figures(queries.to_sparse_coo(), index)
    q_stats = st_model.SparseEncoder.sparsity(queries.to_sparse_coo())
    c_stats = st_model.SparseEncoder.sparsity(corpus.to_sparse_coo())
    # the evaluator's avg_flops: the dot product of the mean query and mean document count vectors
    flops = torch.dot(st_tensor.compute_count_vector(queries.to_sparse_coo()) / 7.0,
                      st_tensor.compute_count_vector(corpus.to_sparse_coo()) / 23.0).item()
    assert figures == pytest.approx({"query_active_dims": q_stats["active_dims"],
                                     "query_sparsity_ratio": q_stats["sparsity_ratio"],
                                     "corpus_active_dims": c_stats["active_dims"],
                                     "corpus_sparsity_ratio": c_stats["sparsity_ratio"], "avg_flops": flops})
