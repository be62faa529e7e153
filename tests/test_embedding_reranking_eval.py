"""Reranking evaluation of a cross-encoder: rows equal sentence-transformers' CrossEncoderRerankingEvaluator,
a first stage's top k reranked on BEIR equals pytrec_eval on the reranked run, and ``bertkit evaluate --rerank``
/ ``--beir --first-stage`` end to end with their one-line errors."""

from __future__ import annotations

import functools
import json
import random
import re

import numpy as np
import pytest
import torch

st = pytest.importorskip("sentence_transformers")
transformers = pytest.importorskip("transformers")

import bertkit  # noqa: E402
from bertkit.retrieval.dense import retrieve  # noqa: E402
from bertkit.sentence.cross_encoder import is_cross_encoder  # noqa: E402
from bertkit.sentence.evaluation import reranking  # noqa: E402
from bertkit.sentence.evaluation.beir import load_beir  # noqa: E402
from bertkit.sentence.evaluation.ir_metrics import rank  # noqa: E402
from conftest import without_dtype_line  # noqa: E402
from test_embedding_eval import WORDS, pytrec_eval, tiny_sentence_transformer, write_beir  # noqa: E402

K_VALUES = (1, 3, 10)
NAMES = {"ndcg": "ndcg_cut", "map": "map_cut", "recall": "recall", "precision": "P", "accuracy": "success"}


@pytest.fixture(scope="module")
def reranker_dir(tmp_path_factory):
    """bertkit's save of a tiny random one-label reranker whose vocabulary is the BEIR fixture's words."""
    directory = tmp_path_factory.mktemp("reranker")
    torch.manual_seed(3)
    config = transformers.BertConfig(vocab_size=5 + len(WORDS), hidden_size=36, num_hidden_layers=2,
                                     num_attention_heads=3, intermediate_size=37, max_position_embeddings=64,
                                     num_labels=1, initializer_range=0.2)
    transformers.BertForSequenceClassification(config).save_pretrained(directory / "hf")
    (directory / "hf" / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]))
    bertkit.CrossEncoder(directory / "hf").save(directory / "model")
    return directory / "model"


@pytest.fixture(scope="module")
def models(reranker_dir):
    return bertkit.CrossEncoder(reranker_dir), st.CrossEncoder(str(reranker_dir), device="cpu")


def _text(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(2, 8)))


def _samples(form: str, count: int = 9, seed: int = 0) -> list[dict]:
    """Rows of distinct texts: negatives (one positive as text or several as a list), or ranked documents
    (positives among them, one row lacking a positive, one holding only some)."""
    rng = random.Random(seed)
    texts = iter(dict.fromkeys(_text(rng) for _ in range(2000)))
    rows = []
    for i in range(count):
        positives = [next(texts) for _ in range(1 + i % 3)]
        others = [next(texts) for _ in range(2 + i % 5)]
        if form == "negative":
            rows.append({"query": next(texts), "positive": positives[0] if i % 2 else positives, "negative": others})
            continue
        documents = others + positives[: (i % 3)]  # row 0, 3, 6: no positive among the documents
        rng.shuffle(documents)
        rows.append({"query": next(texts), "positive": positives, "documents": documents})
    return rows


def _write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


@pytest.mark.parametrize("form, always", [("negative", True), ("documents", True), ("documents", False)])
@pytest.mark.parametrize("at_k", [3, 10])
def test_rows_equal_sentence_transformers_reranking_evaluator(models, tmp_path, form, always, at_k):
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator

    ours, reference = models
    samples = _samples(form)
    for sample in samples:  # distinct scores in each row: the ranking is not a matter of float rounding
        documents = list(dict.fromkeys([*np.atleast_1d(sample["positive"]),
                                        *sample.get("negative", sample.get("documents", []))]))
        scores = np.sort(reference.predict([(sample["query"], d) for d in documents]))
        assert np.diff(scores).min() > 1e-5
    evaluator = reranking.RowsRerankEvaluator(_write_jsonl(tmp_path / "rows.jsonl", samples), k_values=(at_k,),
                                              always_rerank_positives=always, batch_size=5)
    got = evaluator(ours)
    in_memory = reranking.RowsRerankEvaluator(samples, k_values=(at_k,), always_rerank_positives=always)
    assert in_memory(ours) == pytest.approx(got, abs=1e-12)  # sentence-transformers' samples, as they are
    want = CrossEncoderRerankingEvaluator(samples, at_k=at_k, always_rerank_positives=always, batch_size=5,
                                          write_csv=False)(reference)
    assert set(got) == set(want) == {"map", f"mrr@{at_k}", f"ndcg@{at_k}"} | (
        {"base_map", f"base_mrr@{at_k}", f"base_ndcg@{at_k}"} if form == "documents" else set())
    for name in want:
        assert got[name] == pytest.approx(float(want[name]), abs=1e-6), name


def test_rows_read_from_named_negative_columns_equal_a_list(models, tmp_path):
    ours, _ = models
    samples = [{**s, "positive": np.atleast_1d(s["positive"])[0]} for s in _samples("negative", count=5, seed=2)]
    for sample in samples:
        sample["negative"] = sample["negative"][:2]
    listed = reranking.rows_report(ours, _write_jsonl(tmp_path / "rows.jsonl", samples), k_values=(1, 3))
    header = "question\tanswer\tnegative_1\tneg_2\n"
    (tmp_path / "rows.tsv").write_text(header + "".join(
        "\t".join([s["query"], s["positive"], *s["negative"]]) + "\n" for s in samples))
    named = reranking.rows_report(ours, tmp_path / "rows.tsv", k_values=(1, 3))
    assert named["metrics"] == listed["metrics"] and named["rows"] == 5 and named["pairs"] == 15
    assert set(named["metrics"]) == {"map", "mrr@1", "mrr@3", "ndcg@1", "ndcg@3"}


@pytest.mark.parametrize("content, message", [
    ("", r"rows.jsonl: the file holds no rows"),
    ('{"query": "a", "positive": "b", "negative": ["c"], "documents": ["d"]}\n',
     r"both a 'documents' column and negatives \['negative'\]"),
    ('{"query": "a", "positive": "b", "negative": ["c"]}\n{"query": "a", "positive": " ", "negative": ["c"]}\n',
     r"rows.jsonl, line 2: the positive holds ' ', not a text or a list of texts"),
    ('{"query": "a", "positive": "b", "negative": ["c"]}\n{"query": "a", "positive": "b", "negative": []}\n',
     r"rows.jsonl, line 2: 'negative' \(a negative\) holds \[\], not"),
    ('{"query": "a", "positive": "b", "documents": "c"}\n', r"line 1: 'documents' holds 'c', not a non-empty list"),
    ('{"query": "a", "positive": "b", "label": 1}\n', r"the column 'label' is a label"),
    ('{"query": "a", "positive": "b"}\n', r"rows.jsonl: no negatives or documents; give each row either"),
    ('{"query": 3, "positive": "b", "negative": ["c"]}\n', r"line 1: the query holds 3, not a non-blank text"),
    ([{"query": "a", "positive": "b"}], r"sample 0: a reranking sample is .*exactly one of the last two"),
    ([{"query": "a", "positive": ["b", 2], "negative": ["c"]}], r"sample 0: the positive holds \['b', 2\], not"),
])
def test_bad_rows_are_one_line_errors(tmp_path, content, message):
    if isinstance(content, str):
        (tmp_path / "rows.jsonl").write_text(content)
    with pytest.raises(ValueError, match=message) as error:
        reranking.RowsRerankEvaluator(tmp_path / "rows.jsonl" if isinstance(content, str) else content)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=r"--rerank .*missing.jsonl: no such file"):
        reranking.RowsRerankEvaluator(tmp_path / "missing.jsonl")


def _beir(tmp_path):
    directory = write_beir(tmp_path / "beir", documents=24, queries=8, seed=1)
    data = load_beir(directory)
    assert len(set(data.corpus.values())) == len(data.corpus)
    return directory, data


def _first_stage_run(data, seed: int = 5) -> dict[str, dict[str, float]]:
    """A run ranking every document for every judged query and for an unjudged one, with tied scores."""
    rng = random.Random(seed)
    return {query: {doc: rng.randint(0, 40) / 8 for doc in data.corpus} for query in [*data.qrels, "q9"]}


def _write_trec(path, run) -> str:
    lines = [f"{query} Q0 {doc} {i} {score} tag" for query, scores in run.items()
             for i, (doc, score) in enumerate(sorted(scores.items(), key=lambda item: -item[1]), 1)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _pytrec_means(qrels, run, k_values=K_VALUES) -> dict[str, float]:
    """pytrec_eval's means of ``run``, under our names; MRR@k is its recip_rank of the run cut to the top k."""
    cuts = ",".join(map(str, k_values))
    measured = pytrec_eval.RelevanceEvaluator(qrels, {f"{m}.{cuts}" for m in NAMES.values()}).evaluate(run)
    means = {f"{ours}@{k}": sum(v[f"{theirs}_{k}"] for v in measured.values()) / len(qrels)
             for ours, theirs in NAMES.items() for k in k_values}
    for k in k_values:
        cut = {query: {doc: scores[doc] for doc in rank(scores, k)} for query, scores in run.items()}
        reciprocal = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut)
        means[f"mrr@{k}"] = sum(v["recip_rank"] for v in reciprocal.values()) / len(qrels)
    return means


@pytest.mark.parametrize("top_k", [2, 5, 30])
def test_reranking_a_run_file_equals_pytrec_eval_on_the_reranked_run(models, tmp_path, top_k):
    ours, reference = models
    directory, data = _beir(tmp_path)
    run = _first_stage_run(data)
    report = reranking.rerank_report(ours, directory, _write_trec(tmp_path / "run.trec", run), top_k=top_k,
                                     k_values=K_VALUES, batch_size=3)
    cut = {query: {doc: run[query][doc] for doc in rank(run[query], top_k)} for query in data.qrels}
    pairs = [(query, doc) for query in cut for doc in cut[query]]
    scores = reference.predict([(data.queries[q], data.corpus[d]) for q, d in pairs])
    reranked: dict[str, dict[str, float]] = {}
    for (query, doc), score in zip(pairs, scores.tolist()):
        reranked.setdefault(query, {})[doc] = score
    for query_scores in reranked.values():
        assert len(query_scores) < 2 or np.diff(np.sort(list(query_scores.values()))).min() > 1e-5
    assert report["first_stage"] == pytest.approx(_pytrec_means(data.qrels, cut), abs=1e-9)
    assert report["reranked"] == pytest.approx(_pytrec_means(data.qrels, reranked), abs=1e-9)
    assert report["queries"] == 8 and report["pairs"] == 8 * min(top_k, 24) and report["top_k"] == top_k
    assert report["first_stage_source"] == {"run": str(tmp_path / "run.trec")}
    for k in (k for k in K_VALUES if k >= top_k):  # nothing below the top k: the reranker cannot add recall
        assert report["reranked"][f"recall@{k}"] == pytest.approx(report["first_stage"][f"recall@{k}"], abs=1e-12)
    assert set(report["per_query"]) == {"first_stage", "reranked"}
    as_json = tmp_path / "run.json"
    as_json.write_text(json.dumps(run))
    again = reranking.rerank_report(ours, directory, as_json, top_k=top_k, k_values=K_VALUES)
    assert again["reranked"] == report["reranked"] and again["first_stage"] == report["first_stage"]


def test_always_rerank_positives_adds_the_missed_relevant_documents(models, tmp_path):
    ours, reference = models
    directory, data = _beir(tmp_path)
    run = _first_stage_run(data, seed=9)
    path = _write_trec(tmp_path / "run.trec", run)
    plain = reranking.BeirRerankEvaluator(directory, path, top_k=2, k_values=K_VALUES)
    added = reranking.BeirRerankEvaluator(directory, path, top_k=2, k_values=K_VALUES, always_rerank_positives=True)
    assert plain.first_stage_result == added.first_stage_result  # the first stage itself is not changed
    for query, relevance in data.qrels.items():
        top = rank(run[query], 2)
        assert added.candidates[query] == top + sorted(d for d, r in relevance.items() if r > 0 and d not in top)
    got = added.report(ours)
    reranked = {query: dict(zip(docs, reference.predict([(data.queries[query], data.corpus[d]) for d in docs])
                                .tolist())) for query, docs in added.candidates.items()}
    assert got["reranked"] == pytest.approx(_pytrec_means(data.qrels, reranked), abs=1e-9)
    assert got["reranked"]["recall@10"] == 1.0 and plain.report(ours)["reranked"]["recall@10"] < 1.0


def test_an_embedding_first_stage_is_its_retrieval(models, tmp_path):
    ours, _ = models
    directory, data = _beir(tmp_path)
    embedder = tiny_sentence_transformer(tmp_path / "embedder", prompts={"query": "emma ", "document": "wife "})
    evaluator = reranking.BeirRerankEvaluator(directory, embedder, top_k=4, k_values=K_VALUES, batch_size=5,
                                              chunk_size=7, precision="fp32")
    from bertkit.sentence.evaluation.evaluate import load_encoder, retrieval_encoders

    model, _ = load_encoder(embedder, dtype="fp32")
    encode_queries, encode_documents, prompts = retrieval_encoders(model, 5)
    want = retrieve(encode_queries, encode_documents, data.corpus, data.queries, depth=4)
    assert evaluator.hits == {query: [doc for doc, _ in ranked] for query, ranked in want.items()}
    assert evaluator.first_stage == {"model": str(embedder), "similarity": "cosine", "prompts": prompts,
                                     "precision": "fp32"}
    ranked_run = tmp_path / "first.json"
    ranked_run.write_text(json.dumps({q: dict(ranked) for q, ranked in want.items()}))
    from_run = reranking.BeirRerankEvaluator(directory, ranked_run, top_k=4, k_values=K_VALUES)
    assert evaluator.report(ours)["reranked"] == from_run.report(ours)["reranked"]


def test_an_evaluator_is_a_training_callback(models, tmp_path, monkeypatch):
    ours, _ = models
    directory, data = _beir(tmp_path)
    path = _write_trec(tmp_path / "run.trec", _first_stage_run(data))
    evaluator = reranking.BeirRerankEvaluator(directory, path, top_k=5, k_values=(10,))
    want = evaluator(ours)
    ours.model.train()  # as during training, with dropout
    evaluate = functools.partial(evaluator, ours)
    got = evaluate()
    assert ours.model.training  # given back as it was
    assert got == want and all(isinstance(v, float) for v in got.values()) and "ndcg@10" in got
    monkeypatch.setattr(reranking, "PAIR_CHUNK", 7)  # blocks of whole queries: the same scores
    assert evaluate() == pytest.approx(want, abs=1e-9)
    rows = reranking.RowsRerankEvaluator(_write_jsonl(tmp_path / "rows.jsonl", _samples("negative")))
    assert set(functools.partial(rows, ours)()) == {"map", "mrr@10", "ndcg@10"}


@pytest.mark.parametrize("run, message", [
    ("q1 Q0 doc1 1 2.5 tag\nq1 Q0 nope 2 1.0 tag\n", r"run.trec, line 2: doc id 'nope' is not in the BEIR"),
    ("q1 Q0 doc1 1 2.5 tag\nq99 Q0 doc1 1 1.0 tag\n", r"run.trec, line 2: query id 'q99' is not in"),
    ("q1 Q0 doc1 1 2.5\n", r"run.trec, line 1: expected 6 fields \(qid Q0 docid rank score tag\), got 5"),
    ("q1 Q0 doc1 1 high tag\n", r"run.trec, line 1: the score 'high' of 'doc1' is not a finite number"),
    ("q1 Q0 doc1 1 1 tag\nq1 Q0 doc1 2 0 tag\n", r"run.trec, line 2: query 'q1' ranks 'doc1' twice"),
    ("q9 Q0 doc1 1 1 tag\n", r"--first-stage .*run.trec: the run ranks none of the 8 judged queries"),
    ("\n", r"run.trec: the run ranks no documents"),
])
def test_bad_run_files_are_one_line_errors(tmp_path, run, message):
    directory, _ = _beir(tmp_path)
    (tmp_path / "run.trec").write_text(run)
    with pytest.raises(ValueError, match=message) as error:
        reranking.BeirRerankEvaluator(directory, tmp_path / "run.trec", top_k=3)
    assert "\n" not in str(error.value)
    for top_k in (0, -2):
        with pytest.raises(ValueError, match=r"--top-k must be a whole number of at least 1"):
            reranking.BeirRerankEvaluator(directory, tmp_path / "run.trec", top_k=top_k)


def test_is_cross_encoder(reranker_dir, tmp_path):
    assert is_cross_encoder(reranker_dir)
    saved = tmp_path / "st6"
    st.CrossEncoder(str(reranker_dir), device="cpu").save(str(saved))  # a sentence-transformers 6 directory
    assert is_cross_encoder(saved)
    assert not is_cross_encoder(tiny_sentence_transformer(tmp_path / "embedder"))
    assert not is_cross_encoder(tmp_path / "embedder-bert") and not is_cross_encoder(tmp_path)


def test_cli_rerank_rows_and_beir_with_a_first_stage(models, reranker_dir, tmp_path, capsys, monkeypatch):
    from bertkit.cli import main

    ours, _ = models
    monkeypatch.chdir(tmp_path)
    rows = _write_jsonl(tmp_path / "rows.jsonl", _samples("documents"))
    assert main(["evaluate", str(reranker_dir), "--rerank", rows, "--k", "3,10", "--batch-size", "4"]) == 0
    report = json.loads((tmp_path / "evaluation_rerank.json").read_text())
    assert json.loads(capsys.readouterr().out) == report and report["model"] == str(reranker_dir)
    assert report["metrics"] == pytest.approx(reranking.rows_report(ours, rows, k_values=(3, 10))["metrics"])
    assert report["always_rerank_positives"] is True and report["rows"] == 9

    directory, data = _beir(tmp_path)
    run = _write_trec(tmp_path / "run.trec", _first_stage_run(data))
    output = tmp_path / "out" / "rerank.json"
    output.parent.mkdir()
    assert main(["evaluate", str(reranker_dir), "--beir", str(directory), "--first-stage", run, "--top-k", "5",
                 "--k", "1,3,10", "-o", str(output)]) == 0
    printed, report = json.loads(capsys.readouterr().out), json.loads(output.read_text())
    assert printed == {key: value for key, value in report.items() if key != "per_query"}
    want = reranking.rerank_report(ours, directory, run, top_k=5, k_values=K_VALUES)
    assert report["reranked"] == pytest.approx(want["reranked"]) and report["first_stage"] == want["first_stage"]


def test_cli_refuses_the_wrong_kind_of_model_and_bad_flags(reranker_dir, tmp_path, capsys, monkeypatch):
    from bertkit.cli import main

    monkeypatch.chdir(tmp_path)
    directory, data = _beir(tmp_path)
    rows = _write_jsonl(tmp_path / "rows.jsonl", _samples("negative", count=2))
    embedder = tiny_sentence_transformer(tmp_path / "embedder")
    run = _write_trec(tmp_path / "run.trec", _first_stage_run(data))
    (tmp_path / "bad.trec").write_text("q1 Q0 doc1 1 2 tag\nq1 Q0 ghost 2 1 tag\n")
    (tmp_path / "empty.jsonl").write_text("")
    cases = [
        (["evaluate", str(embedder), "--rerank", rows], r"--rerank evaluates a cross-encoder, but MODEL_DIR"),
        (["evaluate", str(reranker_dir), "--beir", str(directory)], r"is a cross-encoder: --beir needs --first-stage"),
        (["evaluate", str(embedder), "--beir", str(directory), "--first-stage", run], r"--first-stage evaluates a "),
        (["evaluate", str(reranker_dir), "--beir", str(directory), "--first-stage", run, "--top-k", "0"],
         r"--top-k must be at least 1"),
        (["evaluate", str(reranker_dir), "--beir", str(directory), "--first-stage", str(tmp_path / "bad.trec")],
         r"bad.trec, line 2: doc id 'ghost' is not in"),
        (["evaluate", str(reranker_dir), "--rerank", str(tmp_path / "empty.jsonl")],
         r"--rerank .*empty.jsonl: the file holds no rows"),
        (["evaluate", str(reranker_dir), "--sts", rows], r"is a cross-encoder: --sts evaluates an embedding model"),
    ]
    capsys.readouterr()
    for argv, message in cases:
        assert main(argv) == 1, argv
        err = without_dtype_line(capsys.readouterr().err).strip()
        assert len(err.splitlines()) == 1 and re.search(message, err), (argv, err)
    assert not (tmp_path / "evaluation_rerank.json").exists()


def test_ignore_identical_ids_drops_the_query_from_a_run(tmp_path):
    directory, data = _beir(tmp_path)
    with open(directory / "corpus.jsonl", "a") as f:
        f.write(json.dumps({"_id": "q1", "text": "emma"}) + "\n")  # a query that is also a document
    run = _first_stage_run(data)
    run["q1"]["q1"] = 99.0
    path = _write_trec(tmp_path / "run.trec", run)
    assert reranking.BeirRerankEvaluator(directory, path, top_k=3).hits["q1"][0] == "q1"
    dropped = reranking.BeirRerankEvaluator(directory, path, top_k=3, ignore_identical_ids=True).hits["q1"]
    assert dropped == rank({doc: s for doc, s in run["q1"].items() if doc != "q1"}, 3)
