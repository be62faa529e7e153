"""Evaluation of sparse encoders: ``evaluate_sparse_retrieval`` equals sentence-transformers 6.2's
``SparseInformationRetrievalEvaluator`` on every metric it reports (tiny random SPLADE and inference-free
directories that sentence-transformers itself writes, no downloads)."""

from __future__ import annotations

import json
import random
import re

import pytest
import torch

st = pytest.importorskip("sentence_transformers")
pytest.importorskip("transformers")

from sentence_transformers.sparse_encoder.evaluation import SparseInformationRetrievalEvaluator  # noqa: E402

import bertkit  # noqa: E402
from bertkit.sentence.evaluation.sparse import SPARSITY_FIGURES, as_qrels, evaluate_sparse_retrieval  # noqa: E402
from sparse_dirs import WORDS, mlm_dir  # noqa: E402
from test_sparse_encoder import _router_dir, _sparse_dir  # noqa: E402

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
    return mlm_dir(tmp_path_factory.mktemp("mlm"))


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


# ------------------------------------------------------------------------------------------ bertkit evaluate --beir
def _write_beir(directory, seed: int = 4, documents: int = 23, queries: int = 7):
    """A BEIR directory of random word documents, each query judging 1-3 documents relevant (1) and one not (0)."""
    corpus, texts, relevant = _data(seed, documents, queries)
    (directory / "qrels").mkdir(parents=True)
    (directory / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": t}) + "\n"
                                                    for d, t in corpus.items()))
    (directory / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n"
                                                     for q, t in texts.items()))
    rows = ["query-id\tcorpus-id\tscore"]
    for q, docs in relevant.items():
        rows += [f"{q}\t{d}\t1" for d in sorted(docs)] + [f"{q}\t{next(d for d in corpus if d not in docs)}\t0"]
    (directory / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n")
    return corpus, texts, relevant


@pytest.fixture(scope="module")
def dense_dir(mlm, tmp_path_factory) -> str:
    """A dense sentence-transformers model (mean pooling, normalised) over the same random BERT."""
    from sentence_transformers.sentence_transformer import modules

    out = tmp_path_factory.mktemp("dense")
    transformer = modules.Transformer(mlm, max_seq_length=32)
    st.SentenceTransformer(modules=[transformer, modules.Pooling(36, pooling_mode="mean"), modules.Normalize()],
                           device="cpu").save(str(out))
    return str(out)


def _run(argv, capsys) -> tuple[dict, str]:
    from bertkit.cli import main

    assert main(["evaluate", *argv, "--dtype", "fp32"]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def test_cli_sparse_beir_equals_sentence_transformers(splade_dir, tmp_path, capsys):
    corpus, queries, relevant = _write_beir(tmp_path / "beir")
    output = tmp_path / "sparse.json"
    printed, _ = _run([splade_dir, "--beir", str(tmp_path / "beir"), "--k", "1,3,10", "--batch-size", "3",
                       "--chunk-size", "7", "-o", str(output)], capsys)
    report = json.loads(output.read_text())
    assert printed == {key: value for key, value in report.items() if key != "per_query"}
    assert report["kind"] == "sparse" and report["model"] == splade_dir and report["dtype"] == "fp32"
    assert report["prompts"] == {"query": "query", "document": "document"} and report["similarity"] == "dot"
    assert report["documents"] == len(corpus) and report["queries"] == len(queries) and report["k"] == [1, 3, 10]
    assert set(SPARSITY_FIGURES) <= set(report["metrics"]) and report["max_active_dims"] is None
    theirs = _reference(splade_dir, corpus, queries, relevant)
    for name, value in report["metrics"].items():  # map@k: see _assert_parity
        if not name.startswith("map@"):
            assert value == pytest.approx(theirs[name], abs=1e-5), name
    printed, _ = _run([splade_dir, "--beir", str(tmp_path / "beir"), "--max-active-dims", "3", "-o",
                       str(tmp_path / "pruned.json")], capsys)
    assert printed["max_active_dims"] == 3 and printed["metrics"]["corpus_active_dims"] <= 3


def test_cli_hybrid_reports_each_run_and_their_fusion(splade_dir, dense_dir, tmp_path, capsys):
    _write_beir(tmp_path / "beir")
    beir = ["--beir", str(tmp_path / "beir"), "--k", "1,3,10"]
    dense, _ = _run([dense_dir, *beir, "-o", str(tmp_path / "dense.json")], capsys)
    sparse, _ = _run([splade_dir, *beir, "-o", str(tmp_path / "sparse.json")], capsys)
    output = tmp_path / "hybrid.json"
    hybrid, table = _run([dense_dir, *beir, "--sparse-model", splade_dir, "--top-k", "50", "-o", str(output)], capsys)
    report = json.loads(output.read_text())
    assert hybrid == {key: value for key, value in report.items() if key != "per_query"}
    assert report["kind"] == "hybrid" and report["sparse_model"] == splade_dir
    assert report["fusion"] == {"method": "rrf", "k": 60, "weights": [1.0, 1.0], "candidates": 50}
    assert report["dense"]["similarity"] == "cosine" and report["sparse"]["similarity"] == "dot"
    assert set(report["per_query"]) == {"dense", "sparse", "fused"} and len(report["per_query"]["fused"]) == 7
    assert report["metrics"]["dense"] == pytest.approx(dense["metrics"])  # each alone, as evaluated alone
    assert report["metrics"]["sparse"] == pytest.approx(sparse["metrics"])
    assert report["metrics"]["fused"] != report["metrics"]["dense"]
    header = next(line for line in table.splitlines() if line.startswith("metric"))
    assert header.split() == ["metric", "dense", "sparse", "fused"] and "ndcg@10" in table
    retrieval = list(dense["metrics"])
    # one run weighted 0: the fusion ranks as the other alone (every document shares a term with every query)
    for weights, alone in (("1,0", dense), ("0,1", sparse)):
        for fusion in ("rrf", "weighted-sum"):
            got, _ = _run([dense_dir, *beir, "--sparse-model", splade_dir, "--fusion", fusion, "--fusion-weights",
                           weights, "-o", str(output)], capsys)
            assert {n: got["metrics"]["fused"][n] for n in retrieval} == pytest.approx(
                {n: alone["metrics"][n] for n in retrieval}), (weights, fusion)
            assert got["fusion"]["method"] == fusion


def test_cli_sparse_bad_input_is_one_line(splade_dir, dense_dir, tmp_path, capsys):
    from bertkit.cli import main

    _write_beir(tmp_path / "beir")
    beir = ["--beir", str(tmp_path / "beir"), "-o", str(tmp_path / "out.json")]
    cases = [
        ([dense_dir, *beir, "--sparse-model", dense_dir], f"--sparse-model {dense_dir} is not a sparse encoder"),
        ([splade_dir, *beir, "--sparse-model", splade_dir], f"MODEL_DIR {splade_dir} is a sparse encoder; hybrid"),
        ([dense_dir, *beir, "--max-active-dims", "4"], "--max-active-dims needs a sparse model, but MODEL_DIR"),
        ([splade_dir, *beir, "--fusion", "rrf"], "--fusion fuses a dense and a sparse run; add --sparse-model"),
        ([splade_dir, *beir, "--similarity", "cosine"], "--similarity scores a dense model"),
        ([splade_dir, *beir, "--max-active-dims", "0"], "--max-active-dims must be at least 1"),
        ([splade_dir, "--sts", "x.tsv"], "--sts evaluates a dense embedding model"),
        ([dense_dir, *beir, "--sparse-model", str(tmp_path / "none")], "--sparse-model .*none: no such directory"),
    ]
    for argv, message in cases:
        assert main(["evaluate", *argv]) == 1, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and re.search(message, err), (argv, err)
    for argv, message in (([*beir, "--fusion", "max"], "invalid choice: 'max'"),
                          ([*beir, "--fusion-weights", "1"], "write two weights")):
        with pytest.raises(SystemExit):
            main(["evaluate", dense_dir, "--sparse-model", splade_dir, *argv])
        assert message in capsys.readouterr().err
    (tmp_path / "beir" / "corpus.jsonl").write_text("")
    assert main(["evaluate", splade_dir, *beir]) == 1
    assert "corpus.jsonl: no documents" in capsys.readouterr().err
