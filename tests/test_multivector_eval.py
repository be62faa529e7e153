"""Evaluation of multi-vector (ColBERT) models: ``evaluate_multivector_retrieval`` equals sentence-transformers
6.2's ``MultiVectorInformationRetrievalEvaluator`` on every metric it reports (tiny random ColBERT directories that
sentence-transformers itself writes, no downloads), exactly and through a kept exact or PLAID index."""

from __future__ import annotations

import json
import random
import re
import shutil

import pytest
import torch

st = pytest.importorskip("sentence_transformers")
pytest.importorskip("transformers")

from sentence_transformers.multi_vector_encoder.evaluation import (  # noqa: E402
    MultiVectorInformationRetrievalEvaluator,
)

import bertkit  # noqa: E402
from bertkit.retrieval.multivector import MultiVectorIndex  # noqa: E402
from bertkit.retrieval.plaid import build_plaid_index  # noqa: E402
from bertkit.sentence.evaluation.multi_vector import evaluate_multivector_retrieval, multivector_run  # noqa: E402
from test_multi_vector import WORDS, bert_dir, colbert_dir  # noqa: E402
from test_sparse_eval import _assert_parity  # noqa: E402

TERMS = [w for w in WORDS[7:] if w.isalpha()]  # real words, no special tokens or punctuation
K_VALUES = (1, 3, 5, 10, 100)


def _data(seed: int = 0, documents: int = 41, queries: int = 9):
    rng = random.Random(seed)
    corpus = {f"d{i:02d}": " ".join(rng.choices(TERMS, k=rng.randint(3, 16))) for i in range(documents)}
    texts = {f"q{i}": " ".join(rng.choices(TERMS, k=rng.randint(1, 4))) for i in range(queries)}
    relevant = {q: set(rng.sample(sorted(corpus), rng.randint(1, 4))) for q in texts}
    return corpus, texts, relevant


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> str:
    return bert_dir(tmp_path_factory.mktemp("bert"))


@pytest.fixture(scope="module", params=["fixed", "min-attend"])
def colbert(request, base, tmp_path_factory) -> str:
    return colbert_dir(base, tmp_path_factory.mktemp(request.param), request.param)


@pytest.fixture(scope="module")
def even(base, tmp_path_factory) -> str:
    """A ColBERT of 16-dimensional vectors (a PLAID index packs 2- or 4-bit residuals into whole bytes)."""
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    torch.manual_seed(2)
    out = tmp_path_factory.mktemp("even")
    modules = [Transformer(base, query_length=12), Dense(36, 16, bias=False, activation_function=torch.nn.Identity(),
                                                         module_input_name="token_embeddings",
                                                         module_output_name="token_embeddings"),
               MultiVectorMask(skiplist_words=[",", "."]),
               Normalize(module_input_name="token_embeddings", module_output_name="token_embeddings")]
    st.MultiVectorEncoder(modules=modules, device="cpu").save(str(out))
    return str(out)


def _reference(path: str, corpus, queries, relevant) -> dict[str, float]:
    """sentence-transformers' metrics by bertkit's names (its similarity prefix dropped)."""
    evaluator = MultiVectorInformationRetrievalEvaluator(
        queries, corpus, relevant, mrr_at_k=list(K_VALUES), ndcg_at_k=list(K_VALUES), accuracy_at_k=list(K_VALUES),
        precision_recall_at_k=list(K_VALUES), map_at_k=list(K_VALUES), batch_size=4, corpus_chunk_size=10,
        write_csv=False)
    got = evaluator(st.MultiVectorEncoder(path, device="cpu"))
    return {name.removeprefix("maxsim_"): value for name, value in got.items()}


def test_exact_equals_sentence_transformers(colbert):
    corpus, queries, relevant = _data()
    theirs = _reference(colbert, corpus, queries, relevant)
    model = bertkit.MultiVectorEncoder(colbert, dtype="fp32")
    ours = evaluate_multivector_retrieval(model, queries, corpus, relevant, k_values=K_VALUES, batch_size=3,
                                          chunk_size=8, max_scores=500, max_tokens=40)
    assert len(theirs) == 6 * len(K_VALUES)
    assert 0 < ours["metrics"]["ndcg@10"] < 1 and ours["queries"] == len(queries)  # neither trivial nor perfect
    _assert_parity(ours, theirs, relevant)


def test_kept_exact_and_plaid_indexes_and_training_mode(even, tmp_path):
    corpus, queries, relevant = _data(seed=1)
    model = bertkit.MultiVectorEncoder(even, dtype="fp32")
    model.train()  # as during training: evaluated without dropout, left in training mode
    exact = evaluate_multivector_retrieval(model, queries, corpus, relevant, k_values=(1, 10),
                                           index_directory=tmp_path / "exact", model_name="tiny")
    assert model.training
    kept = evaluate_multivector_retrieval(model, queries, corpus, relevant, k_values=(1, 10), index=tmp_path / "exact")
    assert kept == exact
    index = MultiVectorIndex.load(tmp_path / "exact", model="tiny")
    plaid = build_plaid_index(index, tmp_path / "plaid", nbits=4, centroids=16)
    # every document a candidate and its short list scored on the stored vectors: PLAID answers as exact
    full = evaluate_multivector_retrieval(model, queries, corpus, relevant, k_values=(1, 10), index=plaid,
                                          exact=index, nprobe=16, candidates=len(corpus))
    assert full["metrics"] == pytest.approx(exact["metrics"])
    compressed = evaluate_multivector_retrieval(model, queries, corpus, relevant, k_values=(1, 10),
                                                index=tmp_path / "plaid", nprobe=2, candidates=16)
    assert set(compressed["metrics"]) == set(exact["metrics"])


def test_bad_input_is_one_line(colbert, tmp_path, monkeypatch):
    corpus, queries, relevant = _data(seed=2)
    model = bertkit.MultiVectorEncoder(colbert, dtype="fp32")

    def refused(match, **changes):
        options = {"queries": queries, "corpus": corpus, "relevant_docs": relevant, **changes}
        with pytest.raises(ValueError, match=match) as caught:
            evaluate_multivector_retrieval(model, **options)
        assert "\n" not in str(caught.value)

    refused("judged queries have no text", queries={})
    refused("the corpus is empty", corpus={})
    encode_document = model.encode_document

    def skipping(texts, **options):  # keep_only_token_ids can leave a document nothing: its vectors are empty
        vectors = encode_document(texts, **options)
        return [v[:0] if text == "?" else v for text, v in zip(texts, vectors)]

    monkeypatch.setattr(model, "encode_document", skipping)
    refused("corpus document 'd00' has no token vectors", corpus={**corpus, "d00": "?"})
    monkeypatch.undo()
    evaluate_multivector_retrieval(model, queries, corpus, relevant, index_directory=tmp_path / "index")
    smaller = {d: t for d, t in corpus.items() if d != "d03"}
    refused("holds 41 documents and the corpus 40; build the index from this corpus", corpus=smaller,
            index=tmp_path / "index")
    refused("index_directory keeps the index", index=tmp_path / "index", index_directory=tmp_path / "other")
    refused("no such file|manifest", index=tmp_path / "nowhere")


def test_graded_judgements_and_identical_ids(colbert):
    corpus, queries, relevant = _data(seed=3)
    model = bertkit.MultiVectorEncoder(colbert, dtype="fp32")
    graded = {q: {d: 2 for d in docs} for q, docs in relevant.items()}
    a = evaluate_multivector_retrieval(model, queries, corpus, relevant, k_values=[10])
    b = evaluate_multivector_retrieval(model, queries, corpus, graded, k_values=[10])
    assert a["metrics"] == pytest.approx(b["metrics"])  # one grade throughout: the same ndcg
    corpus = {**corpus, **queries}  # each query is also a document: ranked unless ignored
    every = multivector_run(model, corpus, queries, depth=len(corpus))
    ignored = multivector_run(model, corpus, queries, depth=len(corpus), ignore_identical_ids=True)
    for query in queries:
        assert [d for d, _ in every[query] if d != query] == [d for d, _ in ignored[query]]
        assert len(every[query]) == len(corpus)
        scores = [s for _, s in every[query]]
        assert scores == sorted(scores, reverse=True)


# ------------------------------------------------------------------------------------------ bertkit evaluate --beir
def _write_beir(directory, seed: int = 4):
    """A BEIR directory of random word documents, each query judging 1-4 documents relevant (1) and one not (0)."""
    corpus, texts, relevant = _data(seed, documents=29, queries=7)
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


def _run(argv, capsys) -> dict:
    from bertkit.cli import main

    assert main(["evaluate", *argv, "--dtype", "fp32"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_exact_kept_and_plaid_beir(even, tmp_path, capsys):
    corpus, queries, relevant = _write_beir(tmp_path / "beir")
    beir = ["--beir", str(tmp_path / "beir"), "--k", "1,3,10", "--batch-size", "3"]
    output = tmp_path / "exact.json"
    printed = _run([even, *beir, "--chunk-size", "5", "--save-index", str(tmp_path / "exact"), "-o", str(output)],
                   capsys)
    report = json.loads(output.read_text())
    assert printed == {key: value for key, value in report.items() if key != "per_query"}
    assert report["kind"] == "multi-vector" and report["model"] == even and report["dtype"] == "fp32"
    assert report["similarity"] == "maxsim" and report["documents"] == len(corpus)
    assert report["queries"] == len(queries) and report["k"] == [1, 3, 10]
    assert report["search"]["method"] == "exact" and report["search"]["index"] == str(tmp_path / "exact")
    theirs = _reference(even, corpus, queries, relevant)
    for name, value in report["metrics"].items():  # map@k: trec_eval's (see _assert_parity)
        if not name.startswith("map@"):
            assert value == pytest.approx(theirs[name], abs=1e-5), name
    kept = _run([even, *beir, "--index", str(tmp_path / "exact"), "-o", str(tmp_path / "kept.json")], capsys)
    assert kept["search"]["method"] == "exact index" and kept["metrics"] == report["metrics"]
    build_plaid_index(MultiVectorIndex.load(tmp_path / "exact"), tmp_path / "plaid", nbits=2, centroids=8)
    plaid = _run([even, *beir, "--index", str(tmp_path / "plaid"), "--exact-index", str(tmp_path / "exact"),
                  "--nprobe", "8", "--candidates", str(len(corpus)), "-o", str(tmp_path / "plaid.json")], capsys)
    assert plaid["search"]["method"] == "plaid" and plaid["search"]["nprobe"] == 8
    assert plaid["metrics"] == pytest.approx(report["metrics"])  # every document a candidate, scored exactly


def test_cli_bad_input_is_one_line(even, colbert, tmp_path, capsys):
    from bertkit.cli import main

    _write_beir(tmp_path / "beir")
    beir = ["--beir", str(tmp_path / "beir")]
    _run([even, *beir, "--save-index", str(tmp_path / "exact"), "-o", str(tmp_path / "a.json")], capsys)

    def refused(match, *argv):
        capsys.readouterr()
        assert main(["evaluate", *argv, "-o", str(tmp_path / "out.json")]) == 1
        err = capsys.readouterr().err.splitlines()[-1]
        assert err.startswith("bertkit: error: ") and re.search(match, err), err

    shutil.copytree(even, tmp_path / "other")  # the same weights under another name: another model to an index
    refused(r"was built by 'even\S* sha256:\w+', not 'other sha256:\w+'; search it with that model",
            str(tmp_path / "other"), *beir, "--index", str(tmp_path / "exact"))
    refused("holds vectors of 16 dimensions, not 13", colbert, *beir, "--index", str(tmp_path / "exact"))
    refused("--nprobe sets how a PLAID index is searched; add --index", even, *beir, "--nprobe", "3")
    refused("--similarity scores a dense model", even, *beir, "--similarity", "dot")
    refused("--save-index keeps the index an evaluation builds", even, *beir, "--index", str(tmp_path / "exact"),
            "--save-index", str(tmp_path / "again"))
    refused("--index goes with --beir DIR alone", even, "--sts", str(tmp_path / "sts.tsv"), "--index",
            str(tmp_path / "exact"))
    refused("is not a ColBERT directory", str(tmp_path / "beir"), *beir, "--index", str(tmp_path / "exact"))
    refused("--exact-index scores a PLAID index's short list", even, *beir, "--index", str(tmp_path / "exact"),
            "--exact-index", str(tmp_path / "exact"))
    refused("--candidates must be at least 1", even, *beir, "--index", str(tmp_path / "exact"), "--candidates", "0")
