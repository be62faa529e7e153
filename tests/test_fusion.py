"""Fusion of ranked lists (bertkit.retrieval.fusion) against hand-computed examples."""

import pytest

from bertkit.retrieval.fusion import fuse_runs, reciprocal_rank_fusion, weighted_sum_fusion

DENSE = [("a", 0.9), ("b", 0.8), ("c", 0.5)]
SPARSE = [("c", 12.0), ("d", 10.0), ("a", 4.0)]


def test_reciprocal_rank_fusion_by_hand():
    fused = dict(reciprocal_rank_fusion([DENSE, SPARSE], k=60))
    # a: 1/61 + 1/63; b: 1/62; c: 1/63 + 1/61; d: 1/62
    assert fused == pytest.approx({"a": 1 / 61 + 1 / 63, "b": 1 / 62, "c": 1 / 63 + 1 / 61, "d": 1 / 62})
    ranked = reciprocal_rank_fusion([DENSE, SPARSE], k=60)
    assert [doc for doc, _ in ranked] == ["c", "a", "d", "b"]  # ties go to the greater id
    weighted = reciprocal_rank_fusion([DENSE, SPARSE], k=0, weights=[2.0, 1.0], depth=2)
    # k=0: a: 2/1 + 1/3, b: 2/2, c: 2/3 + 1/1, d: 1/2
    assert [doc for doc, _ in weighted] == ["a", "c"]
    assert [score for _, score in weighted] == pytest.approx([7 / 3, 5 / 3])


def test_weighted_sum_fusion_by_hand():
    # min-max: dense a 1, b 0.75, c 0; sparse c 1, d 0.75, a 0
    ranked = weighted_sum_fusion([DENSE, SPARSE], weights=[0.7, 0.3])
    assert [doc for doc, _ in ranked] == ["a", "b", "c", "d"]
    assert dict(ranked) == pytest.approx({"a": 0.7, "b": 0.525, "c": 0.3, "d": 0.225})
    raw = weighted_sum_fusion([DENSE, SPARSE], normalize="none", depth=2)
    assert raw == [("c", 12.5), ("d", 10.0)]
    assert weighted_sum_fusion([[("x", 2.0), ("y", 2.0)], []]) == [("y", 1.0), ("x", 1.0)]  # equal: all 1


def test_fuse_runs_per_query():
    dense_run, sparse_run = {"q1": DENSE, "q2": [("z", 1.0)]}, {"q1": SPARSE, "q3": [("y", 5.0)]}
    fused = fuse_runs([dense_run, sparse_run], "rrf", k=60, depth=3)
    assert list(fused) == ["q1", "q2", "q3"]
    assert fused["q1"] == reciprocal_rank_fusion([DENSE, SPARSE], k=60, depth=3)
    assert fused["q2"] == [("z", 1 / 61)] and fused["q3"] == [("y", 1 / 61)]
    weighted = fuse_runs([dense_run, sparse_run], "weighted-sum", weights=[0.7, 0.3])
    assert weighted["q1"] == weighted_sum_fusion([DENSE, SPARSE], weights=[0.7, 0.3])
    assert weighted["q3"] == [("y", 0.3)]


def test_fusion_errors():
    with pytest.raises(ValueError, match="method must be one of"):
        fuse_runs([], "max")
    with pytest.raises(ValueError, match="one weight per ranked list: 1 weights for 2 lists"):
        reciprocal_rank_fusion([DENSE, SPARSE], weights=[1.0])
    with pytest.raises(ValueError, match="normalize must be one of"):
        weighted_sum_fusion([DENSE], normalize="z")
    with pytest.raises(ValueError, match="depth must be at least 1"):
        weighted_sum_fusion([DENSE], depth=0)
