"""Evaluation of sparse encoders: ``evaluate_sparse_retrieval`` equals sentence-transformers 6.2's
``SparseInformationRetrievalEvaluator`` on every metric it reports (tiny random SPLADE and inference-free
directories that sentence-transformers itself writes, no downloads)."""

from __future__ import annotations

import random

import pytest
import torch

st = pytest.importorskip("sentence_transformers")
pytest.importorskip("transformers")

from sentence_transformers.sparse_encoder.evaluation import SparseInformationRetrievalEvaluator  # noqa: E402

import bertkit  # noqa: E402
from bertkit.sentence.evaluation.sparse import SPARSITY_FIGURES, as_qrels, evaluate_sparse_retrieval  # noqa: E402
from test_sparse_encoder import WORDS, _mlm, _router_dir, _sparse_dir  # noqa: E402

TERMS = WORDS[5:]  # real words, no special tokens
K_VALUES = (1, 3, 5, 10, 100)


def _data(seed: int = 0, documents: int = 37, queries: int = 11):
    rng = random.Random(seed)
    corpus = {f"d{i}": " ".join(rng.choices(TERMS, k=rng.randint(3, 14))) for i in range(documents)}
    texts = {f"q{i}": " ".join(rng.choices(TERMS, k=rng.randint(1, 5))) for i in range(queries)}
    relevant = {q: set(rng.sample(sorted(corpus), rng.randint(1, 4))) for q in texts}
    return corpus, texts, relevant


@pytest.fixture(scope="module")
def mlm(tmp_path_factory) -> str:
    return _mlm(tmp_path_factory.mktemp("mlm"))


@pytest.fixture(scope="module")
def splade_dir(mlm, tmp_path_factory) -> str:
    return _sparse_dir(mlm, tmp_path_factory.mktemp("splade"), prompts={"query": "query: "})


def _reference(path: str, corpus, queries, relevant, **options) -> dict[str, float]:
    """sentence-transformers' metrics by bertkit's names (its similarity prefix dropped)."""
    evaluator = SparseInformationRetrievalEvaluator(
        queries, corpus, relevant, mrr_at_k=list(K_VALUES), ndcg_at_k=list(K_VALUES), accuracy_at_k=list(K_VALUES),
        precision_recall_at_k=list(K_VALUES), map_at_k=list(K_VALUES), batch_size=4, corpus_chunk_size=10,
        write_csv=False, **options)
    got = evaluator(st.SparseEncoder(path, device="cpu"))
    return {name.removeprefix("dot_").removeprefix("cosine_"): value for name, value in got.items()}


def _assert_parity(ours: dict, theirs: dict, relevant: dict) -> None:
    """Every metric sentence-transformers reports, to 1e-5. Its map@k divides by min(k, relevant documents),
    trec_eval's (bertkit's) by all relevant documents: equal where k covers them, else rescaled per query."""
    assert set(theirs) <= set(ours["metrics"]), set(theirs) - set(ours["metrics"])
    for name, value in theirs.items():
        mine = ours["metrics"][name]
        if name.startswith("map@"):
            k = int(name.split("@")[1])
            per_query = [ours["per_query"][q][name] * len(docs) / min(k, len(docs)) for q, docs in relevant.items()]
            mine = sum(per_query) / len(per_query)
            if k >= max(map(len, relevant.values())):
                assert mine == pytest.approx(ours["metrics"][name])
        torch.testing.assert_close(torch.tensor(mine, dtype=torch.float64),
                                   torch.tensor(value, dtype=torch.float64), atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("max_active_dims", [None, 6])
def test_equals_sentence_transformers_splade(splade_dir, max_active_dims):
    corpus, queries, relevant = _data()
    theirs = _reference(splade_dir, corpus, queries, relevant, max_active_dims=max_active_dims)
    model = bertkit.SparseEncoder(splade_dir, dtype="fp32")
    ours = evaluate_sparse_retrieval(model, queries, corpus, relevant, k_values=K_VALUES, batch_size=3,
                                     chunk_size=8, max_postings=50, max_active_dims=max_active_dims)
    assert len(theirs) == 6 * len(K_VALUES) + len(SPARSITY_FIGURES)
    assert 0 < ours["metrics"]["ndcg@10"] < 1 and ours["queries"] == len(queries)  # neither trivial nor perfect
    if max_active_dims:
        assert ours["metrics"]["corpus_active_dims"] <= max_active_dims
    _assert_parity(ours, theirs, relevant)


def test_equals_sentence_transformers_inference_free(mlm, tmp_path):
    """A Router: the static query side (no forward pass) against the SPLADE document side."""
    path = _router_dir(mlm, tmp_path / "router")
    corpus, queries, relevant = _data(seed=1)
    # the static query side weighs only a query's own tokens: a shared word lets every document score above 0, as
    # sentence-transformers ranks the zero-scored ones too (an inverted index never lists them)
    corpus, queries = ({i: f"{text} city" for i, text in texts.items()} for texts in (corpus, queries))
    theirs = _reference(path, corpus, queries, relevant)
    ours = evaluate_sparse_retrieval(bertkit.SparseEncoder(path, dtype="fp32"), queries, corpus, relevant,
                                     k_values=K_VALUES, chunk_size=5)
    assert ours["metrics"]["query_active_dims"] != ours["metrics"]["corpus_active_dims"]
    assert all(v["precision@100"] * 100 == pytest.approx(len(relevant[q])) for q, v in ours["per_query"].items())
    _assert_parity(ours, theirs, relevant)


def test_graded_qrels_kept_index_and_errors(splade_dir, tmp_path):
    corpus, queries, relevant = _data(seed=2)
    model = bertkit.SparseEncoder(splade_dir, dtype="fp32")
    graded = {q: {d: 2 for d in docs} for q, docs in relevant.items()}
    assert as_qrels(relevant) == {q: {d: 1 for d in docs} for q, docs in relevant.items()}
    a = evaluate_sparse_retrieval(model, queries, corpus, relevant, k_values=[10])
    b = evaluate_sparse_retrieval(model, queries, corpus, graded, k_values=[10], index_directory=tmp_path / "index")
    assert a["metrics"] == pytest.approx(b["metrics"])  # one grade throughout: the same ndcg
    assert (tmp_path / "index" / "manifest.json").is_file()
    with pytest.raises(ValueError, match="judged queries have no text"):
        evaluate_sparse_retrieval(model, {}, corpus, relevant)
    with pytest.raises(ValueError, match="the corpus is empty"):
        evaluate_sparse_retrieval(model, queries, {}, relevant)
    model.similarity_fn_name = "euclidean"
    with pytest.raises(ValueError, match="similarity_fn_name is 'euclidean'"):
        evaluate_sparse_retrieval(model, queries, corpus, relevant)


def test_cosine_similarity_equals_sentence_transformers(mlm, tmp_path):
    path = _sparse_dir(mlm, tmp_path / "cos", similarity_fn_name="cosine")
    corpus, queries, relevant = _data(seed=3)
    theirs = _reference(path, corpus, queries, relevant)
    ours = evaluate_sparse_retrieval(bertkit.SparseEncoder(path, dtype="fp32"), queries, corpus, relevant,
                                     k_values=K_VALUES)
    _assert_parity(ours, theirs, relevant)
