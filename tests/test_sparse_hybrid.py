"""Hybrid search (dense vectors + a sparse index, fused) on hand-made vectors whose fused rankings are worked out
below, and its one-line errors."""

from __future__ import annotations

import pytest
import torch

from bertkit.retrieval import hybrid_search
from bertkit.retrieval.sparse import SparseIndex, build_sparse_index

IDS = ["a", "b", "c", "d"]
# dense, one query [1, 0]: cosines a 1, b 0.8, c 0, d -1 -> a b c d
DOCS = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-1.0, 0.0]])
# sparse, one query {term 0: 1}: a holds no term 0 (not listed), b 0.5, c 2, d 1 -> c d b
SPARSE_DOCS = [([1], [3.0]), ([0, 2], [0.5, 1.0]), ([0], [2.0]), ([0, 1], [1.0, 1.0])]


def dense_query(texts):
    return torch.tensor([[1.0, 0.0]] * len(texts))


def sparse_query(texts):
    return [([0], [1.0])] * len(texts)


@pytest.fixture
def index(tmp_path) -> SparseIndex:
    return build_sparse_index([SPARSE_DOCS], tmp_path / "index", vocab_size=3, model="tiny-splade")


def _search(index, **options):
    return hybrid_search(["q", "q again"], dense=(dense_query, DOCS), sparse=(sparse_query, index), ids=IDS,
                         **options)


def test_reciprocal_rank_fusion_by_hand(index):
    got = _search(index, fusion="rrf", depth=4)
    # a 1/61; b 1/62 + 1/63; c 1/63 + 1/61; d 1/64 + 1/62
    want = [("c", 1 / 63 + 1 / 61), ("b", 1 / 62 + 1 / 63), ("d", 1 / 64 + 1 / 62), ("a", 1 / 61)]
    assert len(got) == 2 and got[0] == got[1]
    assert [doc for doc, _ in got[0]] == [doc for doc, _ in want]
    assert [score for _, score in got[0]] == pytest.approx([score for _, score in want])
    assert [doc for doc, _ in _search(index, fusion="rrf", depth=2, rrf_k=0)[0]] == ["c", "a"]  # 1 + 1/3 vs 1
    assert [doc for doc, _ in _search(index, depth=4, weights=[1, 0])[0]] == ["a", "b", "c", "d"]  # dense alone


def test_weighted_sum_fusion_by_hand(index):
    got = _search(index, fusion="weighted-sum", depth=4)[0]
    # min-max: dense a 1, b 0.9, c 0.5, d 0; sparse c 1, d 1/3, b 0 -> c 1.5, a 1, b 0.9, d 1/3
    assert [doc for doc, _ in got] == ["c", "a", "b", "d"]
    assert [score for _, score in got] == pytest.approx([1.5, 1.0, 0.9, 1 / 3])
    weighted = _search(index, fusion="weighted-sum", depth=2, weights=[0.2, 1.0])[0]
    assert [doc for doc, _ in weighted] == ["c", "d"]  # c 0.1 + 1, d 0 + 1/3, a 0.2, b 0.18
    assert weighted[1][1] == pytest.approx(1 / 3)
    positions = hybrid_search(["q"], dense=(dense_query, DOCS), sparse=(sparse_query, index), fusion="weighted-sum",
                              depth=1)
    assert positions == [[(2, pytest.approx(1.5))]]  # without ids: the documents' positions


def test_one_line_errors_name_the_argument(index):
    with pytest.raises(ValueError, match="fusion must be one of rrf, weighted-sum, got 'max'"):
        _search(index, fusion="max")
    with pytest.raises(ValueError, match=r"the fusion weights are two numbers"):
        _search(index, weights=[1.0])
    with pytest.raises(ValueError, match=r"sparse: the index in .* was built by 'tiny-splade', not 'other'"):
        _search(index, sparse_model="other")
    with pytest.raises(ValueError, match=r"dense must be .* got Tensor \(sparse\)"):
        hybrid_search(["q"], dense=(dense_query, DOCS.to_sparse()), sparse=(sparse_query, index))
    with pytest.raises(ValueError, match=r"sparse must be .*SparseIndex.* got Tensor"):
        hybrid_search(["q"], dense=(dense_query, DOCS), sparse=(sparse_query, DOCS))
    with pytest.raises(ValueError, match="dense holds 3 documents but the sparse index 4"):
        hybrid_search(["q"], dense=(dense_query, DOCS[:3]), sparse=(sparse_query, index))
    with pytest.raises(ValueError, match="ids names 2 documents but the corpus holds 4"):
        hybrid_search(["q"], dense=(dense_query, DOCS), sparse=(sparse_query, index), ids=IDS[:2])
    with pytest.raises(ValueError, match="the corpus is empty"):  # (an index of no documents is never written)
        hybrid_search(["q"], dense=(dense_query, DOCS[:0]), sparse=(sparse_query, index))
    with pytest.raises(ValueError, match=r"expected sparse vectors \[n, 3\].*encode with the model the index"):
        hybrid_search(["q"], dense=(dense_query, DOCS), sparse=(lambda t: torch.ones(len(t), 5), index))
