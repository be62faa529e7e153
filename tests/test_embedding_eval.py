"""Evaluation of embedding models: retrieval metrics equal pytrec_eval's, BEIR directories, chunked retrieval
equals brute force, STS correlations equal scipy's, and ``bertkit evaluate --beir / --sts`` end to end."""

from __future__ import annotations

import json
import random
import warnings
import zlib

import numpy as np
import pytest
import torch

from bertkit.retrieval.dense import retrieve, search
from bertkit.sentence.evaluation.beir import load_beir
from bertkit.sentence.evaluation.evaluate import evaluate_retrieval
from bertkit.sentence.evaluation.ir_metrics import evaluate_run, rank
from bertkit.sentence.evaluation.sts import evaluate_sts, read_sts

pytrec_eval = pytest.importorskip("pytrec_eval")

K_VALUES = (1, 3, 5, 10, 100)


def _random_run_and_qrels(seed: int = 0, queries: int = 50, docs: int = 150):
    rng = random.Random(seed)
    doc_ids = [f"d{i}" for i in range(docs)]  # d9 > d10 > d1 as strings: the tie order is not numeric
    run, qrels = {}, {}
    for q in range(queries):
        retrieved = rng.sample(doc_ids, rng.randint(5, 130))
        run[f"q{q}"] = {d: rng.randint(0, 12) / 4 for d in retrieved}  # few distinct scores: many ties
        judged = rng.sample(doc_ids, rng.randint(1, 12))
        qrels[f"q{q}"] = {d: rng.choice([-1, 0, 0, 1, 1, 2, 3]) for d in judged}
    qrels["q0"] = {d: 0 for d in qrels["q0"]}  # a query without a relevant document
    return run, qrels


def test_pytrec_eval_breaks_ties_by_greater_doc_id():
    run = {"q": {"a": 1.0, "c": 1.0, "b": 1.0, "z": 0.5}}
    for relevant, expected_rank in (("c", 1), ("b", 2), ("a", 3)):
        got = pytrec_eval.RelevanceEvaluator({"q": {relevant: 1}}, {"recip_rank"}).evaluate(run)
        assert got["q"]["recip_rank"] == pytest.approx(1 / expected_rank)
    assert rank(run["q"]) == ["c", "b", "a", "z"]
    assert rank(run["q"], depth=2) == ["c", "b"]


def test_metrics_equal_pytrec_eval_per_query():
    run, qrels = _random_run_and_qrels()
    ours = evaluate_run(run, qrels, K_VALUES)
    measures = {"ndcg_cut", "map_cut", "recall", "P", "success"}
    cuts = ",".join(map(str, K_VALUES))
    reference = pytrec_eval.RelevanceEvaluator(qrels, {f"{m}.{cuts}" for m in measures}).evaluate(run)
    names = {"ndcg": "ndcg_cut_{}", "map": "map_cut_{}", "recall": "recall_{}", "precision": "P_{}",
             "accuracy": "success_{}"}
    assert ours["queries"] == len(qrels) == len(reference)
    for query, values in reference.items():
        for k in K_VALUES:
            for metric, theirs in names.items():
                assert ours["per_query"][query][f"{metric}@{k}"] == pytest.approx(values[theirs.format(k)], abs=1e-9), (
                    query, metric, k)
            # pytrec_eval's recip_rank has no cut-off: MRR@k is its recip_rank of the run cut to the top k
            cut = {query: {d: run[query][d] for d in rank(run[query], k)}}
            mrr = pytrec_eval.RelevanceEvaluator({query: qrels[query]}, {"recip_rank"}).evaluate(cut)
            assert ours["per_query"][query][f"mrr@{k}"] == pytest.approx(mrr[query]["recip_rank"], abs=1e-9)
    for name, mean in ours["metrics"].items():
        assert mean == pytest.approx(sum(v[name] for v in ours["per_query"].values()) / len(qrels), abs=1e-12)


def test_a_query_missing_from_the_run_scores_zero_and_extra_run_queries_are_ignored():
    got = evaluate_run({"q1": {"a": 1.0}, "other": {"a": 1.0}}, {"q1": {"a": 1}, "q2": {"a": 2}}, (1,))
    assert got["queries"] == 2 and got["per_query"]["q2"]["ndcg@1"] == 0.0
    assert got["metrics"]["ndcg@1"] == 0.5 and "other" not in got["per_query"]
    with pytest.raises(ValueError, match="k_values must be positive"):
        evaluate_run({}, {}, (0, 3))


WORDS = ["truth", "universally", "acknowledged", "single", "man", "possession", "good", "fortune", "want", "wife",
         "emma", "handsome", "clever", "rich"]


def write_beir(directory, documents: int = 20, queries: int = 6, seed: int = 0):
    """A BEIR directory of random word documents; query i asks for document 3i's words (relevance 2) and judges
    document 3i+1 relevant (1) and 3i+2 not (0)."""
    rng = random.Random(seed)
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(2, 9))) for _ in range(documents)]
    (directory / "qrels").mkdir(parents=True)
    with open(directory / "corpus.jsonl", "w") as f:
        for i, text in enumerate(texts):
            title = WORDS[i % len(WORDS)] if i % 2 else ""
            f.write(json.dumps({"_id": f"doc{i}", "title": title, "text": text}) + "\n")
    with open(directory / "queries.jsonl", "w") as f:
        for q in range(queries + 2):  # two queries without judgements
            f.write(json.dumps({"_id": f"q{q}", "text": texts[(3 * q) % documents]}) + "\n")
    rows = ["query-id\tcorpus-id\tscore"]
    for q in range(queries):
        rows += [f"q{q}\tdoc{3 * q % documents}\t2", f"q{q}\tdoc{(3 * q + 1) % documents}\t1",
                 f"q{q}\tdoc{(3 * q + 2) % documents}\t0"]
    (directory / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n")
    return directory


def test_load_beir_joins_titles_and_keeps_the_judged_queries(tmp_path):
    data = load_beir(write_beir(tmp_path / "beir"))
    assert len(data.corpus) == 20 and sorted(data.queries) == [f"q{i}" for i in range(6)]
    assert data.corpus["doc1"].startswith(WORDS[1] + " ") and not data.corpus["doc0"].startswith(" ")
    assert data.qrels["q1"] == {"doc3": 2, "doc4": 1, "doc5": 0}
    (tmp_path / "beir" / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq7\tdoc2\t1\n")
    assert load_beir(tmp_path / "beir", split="dev").qrels == {"q7": {"doc2": 1}}


def test_qrels_that_mark_nothing_relevant_are_said(tmp_path):
    """All-zero qrels give all-zero metrics whatever the ranking: said once, at load, as are queries without a
    relevant document (each scores 0); qrels with a relevant document per query load silently."""
    directory = write_beir(tmp_path / "beir")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_beir(directory)
    qrels = directory / "qrels" / "test.tsv"
    header, *rows = qrels.read_text().splitlines()
    zeroed = [row.rsplit("\t", 1)[0] + "\t0" for row in rows]
    qrels.write_text("\n".join([header, *zeroed]) + "\n")
    with pytest.warns(UserWarning, match=r"test.tsv: no judgement marks a document relevant \(every score is 0 or "
                                         r"less\), so every metric will be 0"):
        data = load_beir(directory)
    assert evaluate_run({q: {d: 1.0 for d in judged} for q, judged in data.qrels.items()}, data.qrels)["metrics"][
        "ndcg@10"] == 0.0
    qrels.write_text("\n".join([header, *zeroed[:6], *rows[6:]]) + "\n")  # q0 and q1 judged, nothing relevant
    with pytest.warns(UserWarning, match=r"2 of 6 judged queries have no relevant document \(every score 0 or less: "
                                         r"'q0', 'q1'\)"):
        load_beir(directory)


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "queries.jsonl").unlink(), r"queries.jsonl: no such file"),
    (lambda d: (d / "qrels" / "test.tsv").rename(d / "qrels" / "dev.tsv"), r"qrels/test.tsv: no such file"),
    (lambda d: _append(d / "corpus.jsonl", '{"_id": "x", "text": '), r"corpus.jsonl, line 21: not valid JSON"),
    (lambda d: _append(d / "queries.jsonl", '{"_id": "q0", "text": "again"}'),
     r"queries.jsonl, line 9: _id 'q0' again"),
    (lambda d: _append(d / "corpus.jsonl", '{"_id": "y"}'), r"corpus.jsonl, line 21: \"text\" must be a string"),
    (lambda d: (d / "corpus.jsonl").write_text("\n"), r"corpus.jsonl: no documents"),
    (lambda d: _append(d / "qrels" / "test.tsv", "q1\tdoc1\thigh"), r"test.tsv, line 20: the score 'high' is not"),
    (lambda d: _append(d / "qrels" / "test.tsv", "q1\tdoc1"), r"test.tsv, line 20: expected 3 tab-separated"),
    (lambda d: _append(d / "qrels" / "test.tsv", "q1\tnope\t1\nq2\tmissing\t1\nq3\tgone\t1\nq4\tlost\t1"),
     r"test.tsv: 4 corpus ids not in corpus.jsonl \('nope', 'missing', 'gone', ...\)"),
    (lambda d: _append(d / "qrels" / "test.tsv", "q99\tdoc1\t1"),
     r"test.tsv: 1 query ids not in queries.jsonl \('q99'\)"),
])
def test_bad_beir_directories_are_one_line_errors(tmp_path, damage, message):
    directory = write_beir(tmp_path / "beir")
    damage(directory)
    with pytest.raises(ValueError, match=message) as error:
        load_beir(directory)
    assert "\n" not in str(error.value)


def _append(path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text + "\n")


class HashedWords:
    """A deterministic encoder: each text's bag of words hashed into ``width`` integer counts (so dot products
    are exact, and repeated or reordered word bags tie); records each call's texts."""

    def __init__(self, width: int = 7, as_torch: bool = False):
        self.width, self.as_torch, self.calls = width, as_torch, []

    def __call__(self, texts: list[str]):
        self.calls.append(list(texts))
        vectors = np.zeros((len(texts), self.width), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.split():
                vectors[row, zlib.crc32(word.encode()) % self.width] += 1
            vectors[row, -1] += 1  # no zero vector (cosine of the empty text)
        return torch.from_numpy(vectors) if self.as_torch else vectors


def _brute_force_run(encode, corpus, queries, similarity):
    """Every query's score for every document, from the full matrix (float64)."""
    doc_ids, query_ids = list(corpus), list(queries)
    d = np.asarray(encode([corpus[i] for i in doc_ids]), dtype=np.float64)
    q = np.asarray(encode([queries[i] for i in query_ids]), dtype=np.float64)
    if similarity == "cosine":
        d, q = d / np.linalg.norm(d, axis=1, keepdims=True), q / np.linalg.norm(q, axis=1, keepdims=True)
    scores = q @ d.T
    return {query: dict(zip(doc_ids, row.tolist())) for query, row in zip(query_ids, scores)}


@pytest.mark.parametrize("similarity", ["dot", "cosine"])
@pytest.mark.parametrize("chunk_size, query_chunk_size", [(1, 1), (3, 2), (7, 100), (1000, 5)])
def test_chunked_retrieval_equals_brute_force(tmp_path, similarity, chunk_size, query_chunk_size):
    data = load_beir(write_beir(tmp_path / "beir", documents=40, queries=12))
    data.corpus.update({"doc40": data.corpus["doc0"], "doc5x": data.corpus["doc0"]})  # exact ties across chunks
    k_values = (1, 3, 10, 100)
    encoder = HashedWords()
    got = evaluate_retrieval(encoder, encoder, data.corpus, data.queries, data.qrels, k_values=k_values,
                             batch_size=4, chunk_size=chunk_size, query_chunk_size=query_chunk_size,
                             similarity=similarity)
    want = evaluate_run(_brute_force_run(HashedWords(), data.corpus, data.queries, similarity), data.qrels, k_values)
    assert got["queries"] == want["queries"] == 12
    for query, values in want["per_query"].items():
        for name, value in values.items():
            assert got["per_query"][query][name] == pytest.approx(value, abs=1e-9), (query, name)
    assert got["metrics"] == pytest.approx(want["metrics"], abs=1e-12)


def test_ignore_identical_ids_drops_the_query_itself_and_keeps_depth(tmp_path):
    data = load_beir(write_beir(tmp_path / "beir", documents=12, queries=4))
    data.corpus.update({query: text + " emma emma" for query, text in data.queries.items()})  # queries as documents
    hits = retrieve(HashedWords(), HashedWords(), data.corpus, data.queries, depth=3, chunk_size=5, similarity="dot")
    assert any(query in [doc for doc, _ in ranked] for query, ranked in hits.items())
    hits = retrieve(HashedWords(), HashedWords(), data.corpus, data.queries, depth=3, chunk_size=5, similarity="dot",
                    ignore_identical_ids=True)
    assert all(len(ranked) == 3 and query not in [doc for doc, _ in ranked] for query, ranked in hits.items())
    run = _brute_force_run(HashedWords(), data.corpus, data.queries, "dot")
    for query in run:
        del run[query][query]
    got = evaluate_retrieval(HashedWords(), HashedWords(), data.corpus, data.queries, data.qrels, k_values=(1, 3),
                             chunk_size=5, similarity="dot", ignore_identical_ids=True)
    want = evaluate_run(run, data.qrels, (1, 3))
    for query in want["per_query"]:
        assert got["per_query"][query] == pytest.approx(want["per_query"][query], abs=1e-12)


def test_search_breaks_ties_to_the_lower_index_and_keeps_the_scores():
    corpus = torch.tensor([[1.0, 0], [2, 0], [2, 0], [0, 1], [2, 0], [1, 0]])
    scores, indices = search(torch.tensor([[1.0, 0], [0, 1]]), corpus, 4, chunk_size=2, similarity="dot")
    assert indices.tolist() == [[1, 2, 4, 0], [3, 0, 1, 2]]
    assert scores.tolist() == [[2, 2, 2, 1], [1, 0, 0, 0]]
    assert search(torch.ones(1, 2), corpus, 100)[1].shape == (1, 6)  # depth above the corpus size


@pytest.mark.parametrize("seed", range(3))
def test_search_equals_sorting_every_score_under_heavy_ties(seed):
    generator = torch.Generator().manual_seed(seed)
    queries = torch.randint(0, 3, (9, 4), generator=generator).float()
    corpus = torch.randint(0, 3, (61, 4), generator=generator).float()  # few distinct dot products
    full = (queries @ corpus.T).tolist()
    want = [sorted(range(61), key=lambda i, row=row: (-row[i], i))[:10] for row in full]
    for chunk_size, query_chunk_size in ((1, 2), (4, 9), (10, 3), (61, 1), (100, 100)):
        scores, indices = search(queries, corpus, 10, chunk_size=chunk_size, query_chunk_size=query_chunk_size,
                                 similarity="dot")
        assert indices.tolist() == want, (chunk_size, query_chunk_size)
        assert scores.tolist() == [[row[i] for i in ranked] for row, ranked in zip(full, want)]


def test_the_corpus_is_encoded_once_in_length_sorted_batches(tmp_path):
    data = load_beir(write_beir(tmp_path / "beir"))
    corpus_encoder, query_encoder = HashedWords(as_torch=True), HashedWords()
    evaluate_retrieval(query_encoder, corpus_encoder, data.corpus, data.queries, data.qrels, batch_size=3,
                       chunk_size=5)
    texts = [t for call in corpus_encoder.calls for t in call]
    assert sorted(texts) == sorted(data.corpus.values())  # every document once
    assert all(len(call) <= 3 for call in corpus_encoder.calls)
    assert [len(t) for t in texts] == sorted((len(t) for t in texts), reverse=True)
    assert sorted(t for call in query_encoder.calls for t in call) == sorted(data.queries.values())


def test_a_bad_encoder_is_a_one_line_error(tmp_path):
    data = load_beir(write_beir(tmp_path / "beir"))
    with pytest.raises(ValueError, match=r"encoding the corpus: the encoder returned shape \(2, 7\) for 3 texts"):
        evaluate_retrieval(HashedWords(), lambda texts: HashedWords()(texts[:2]), data.corpus, data.queries,
                           data.qrels, batch_size=3)
    with pytest.raises(ValueError, match="queries are encoded to 5 dimensions but the corpus to 7"):
        evaluate_retrieval(HashedWords(5), HashedWords(7), data.corpus, data.queries, data.qrels)
    with pytest.raises(ValueError, match=r"1 judged queries have no text \('q0'\)"):
        evaluate_retrieval(HashedWords(), HashedWords(), data.corpus, {}, {"q0": {"doc1": 1}})


def _sts_pairs(count: int = 30, seed: int = 3):
    rng = random.Random(seed)
    pairs = [(" ".join(rng.choices(WORDS, k=rng.randint(1, 6))), " ".join(rng.choices(WORDS, k=rng.randint(1, 6))))
             for _ in range(count)]
    pairs[1] = pairs[0]  # a repeated pair: tied similarities
    return pairs, [rng.randint(0, 10) / 2 for _ in pairs]  # gold scores 0..5 in halves: tied ranks


def test_sts_correlations_equal_scipy():
    stats = pytest.importorskip("scipy.stats")
    pairs, gold = _sts_pairs()
    encoder = HashedWords()
    got = evaluate_sts(encoder, pairs, gold, batch_size=4)
    a, b = (torch.from_numpy(HashedWords()([p[i] for p in pairs])) for i in (0, 1))
    # the similarities in float32 as the evaluator has them: many cosines of these integer vectors tie exactly in
    # real numbers and not after rounding, which moves Spearman's ranks
    for name, similarities in (("cosine", torch.cosine_similarity(a, b)), ("dot", (a * b).sum(1))):
        similarities = similarities.double().numpy()
        assert got[f"pearson_{name}"] == pytest.approx(stats.pearsonr(similarities, gold)[0], abs=1e-6)
        assert got[f"spearman_{name}"] == pytest.approx(stats.spearmanr(similarities, gold)[0], abs=1e-6)
    assert got["pairs"] == 30
    encoded = [t for call in encoder.calls for t in call]
    assert sorted(encoded) == sorted({t for pair in pairs for t in pair})  # each distinct sentence once


@pytest.mark.parametrize("suffix", [".tsv", ".csv", ".jsonl"])
def test_read_sts_reads_every_format(tmp_path, suffix):
    path = tmp_path / f"sts{suffix}"
    rows = [("A man, smiling.", "A man\"s smile", 4.5), ("Rain", "Sun", 0)]
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(dict(zip(("sentence1", "sentence2", "score"), r))) + "\n" for r in rows))
    elif suffix == ".csv":
        path.write_text('sentence1,sentence2,score\n"A man, smiling.","A man""s smile",4.5\nRain,Sun,0\n')
    else:
        path.write_text("sentence1\tsentence2\tscore\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows))
    assert read_sts(path) == ([r[:2] for r in rows], [4.5, 0.0])


@pytest.mark.parametrize("content, message", [
    ("sentence1\tsentence2\tscore\na\tb\t1\nc\td\tgood\n", r"sts.tsv, line 3: the score 'good' is not a finite"),
    ("sentence1\tsentence2\tscore\na\tb\t1\nc\td\tnan\n", r"sts.tsv, line 3: the score 'nan' is not a finite"),
    ("sentence1\tsentence2\tlabel\na\tb\t1\n", r"sts.tsv, line 2: no score \(the row has"),
    ("sentence1\tsentence2\tscore\na\tb\n", r"sts.tsv, line 2: 2 fields, but the header has 3"),
    ("sentence1\tsentence2\tscore\n", r"sts.tsv: no pairs"),
])
def test_bad_sts_rows_are_one_line_errors(tmp_path, content, message):
    (tmp_path / "sts.tsv").write_text(content)
    with pytest.raises(ValueError, match=message):
        read_sts(tmp_path / "sts.tsv")
    with pytest.raises(ValueError, match="2 pairs but 1 scores"):
        evaluate_sts(HashedWords(), [("a", "b"), ("c", "d")], [1.0])


def tiny_sentence_transformer(directory, prompts=None):
    """A sentence-transformers directory around a tiny random HF BertModel whose vocabulary is :data:`WORDS`."""
    transformers = pytest.importorskip("transformers")
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer import modules

    bert_dir = directory.parent / f"{directory.name}-bert"
    bert_dir.mkdir()
    (bert_dir / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    transformers.BertTokenizerFast(vocab=str(bert_dir / "vocab.txt")).save_pretrained(bert_dir)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=5 + len(WORDS), hidden_size=36, num_hidden_layers=2,
                                     num_attention_heads=3, intermediate_size=37, max_position_embeddings=64)
    bert = transformers.BertModel(config)
    with torch.no_grad():  # spread sentences apart (at init, all embeddings have cosines near 1)
        for name, parameter in bert.named_parameters():
            if "position" in name or "token_type" in name:
                parameter.zero_()
            elif "LayerNorm" not in name and not name.endswith("bias"):
                parameter.normal_(std=0.1)
    bert.save_pretrained(bert_dir)
    transformer = modules.Transformer(str(bert_dir), max_seq_length=32)
    model = st.SentenceTransformer(modules=[transformer, modules.Pooling(36, pooling_mode="mean"), modules.Normalize()],
                                   prompts=prompts, device="cpu")
    model.save(str(directory))
    return directory


def test_cli_beir_equals_pytrec_eval_on_sentence_transformers_embeddings(tmp_path, capsys, monkeypatch):
    from sentence_transformers import SentenceTransformer as Reference

    from bertkit.cli import main

    model_dir = tiny_sentence_transformer(tmp_path / "model", prompts={"query": "emma ", "document": "wife "})
    data = load_beir(write_beir(tmp_path / "beir", documents=20, queries=6, seed=1))
    assert len(set(data.corpus.values())) == 20
    monkeypatch.chdir(tmp_path)
    argv = ["evaluate", str(model_dir), "--beir", str(tmp_path / "beir"), "--dtype", "fp32", "--k", "1,3,10",
            "--batch-size", "3", "--chunk-size", "7"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    report = json.loads((tmp_path / "evaluation_beir.json").read_text())
    assert printed == {key: value for key, value in report.items() if key != "per_query"}
    assert report["prompts"] == {"query": "query", "document": "document"} and report["documents"] == 20
    assert report["queries"] == 6 and report["k"] == [1, 3, 10] and report["similarity"] == "cosine"

    reference = Reference(str(model_dir), device="cpu")
    doc_ids, query_ids = list(data.corpus), list(data.queries)
    docs = reference.encode([data.corpus[d] for d in doc_ids], prompt_name="document").astype(np.float64)
    queries = reference.encode([data.queries[q] for q in query_ids], prompt_name="query").astype(np.float64)
    scores = queries @ docs.T  # normalised by the model's Normalize module: cosine
    gaps = np.diff(np.sort(scores, axis=1), axis=1)
    assert gaps.min() > 1e-4  # no near-ties: the ranking cannot depend on float rounding
    run = {q: dict(zip(doc_ids, row.tolist())) for q, row in zip(query_ids, scores)}
    measures = {"ndcg_cut.1,3,10", "map_cut.1,3,10", "recall.1,3,10", "P.1,3,10", "success.1,3,10"}
    want = pytrec_eval.RelevanceEvaluator(data.qrels, measures).evaluate(run)
    names = {"ndcg": "ndcg_cut", "map": "map_cut", "recall": "recall", "precision": "P", "accuracy": "success"}
    for query, values in want.items():
        for ours, theirs in names.items():
            for k in (1, 3, 10):
                assert report["per_query"][query][f"{ours}@{k}"] == pytest.approx(values[f"{theirs}_{k}"], abs=1e-9)
    for ours, theirs in names.items():
        mean = sum(v[f"{theirs}_10"] for v in want.values()) / len(want)
        assert report["metrics"][f"{ours}@10"] == pytest.approx(mean, abs=1e-9)


def test_cli_sts_equals_sentence_transformers_evaluator(tmp_path, capsys):
    from sentence_transformers import SentenceTransformer as Reference
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    from bertkit.cli import main

    model_dir = tiny_sentence_transformer(tmp_path / "model")
    pairs, gold = _sts_pairs(count=12)
    (tmp_path / "sts.jsonl").write_text("".join(json.dumps({"sentence1": a, "sentence2": b, "score": g}) + "\n"
                                                for (a, b), g in zip(pairs, gold)))
    output = tmp_path / "out" / "sts.json"
    output.parent.mkdir()
    assert main(["evaluate", str(model_dir), "--sts", str(tmp_path / "sts.jsonl"), "-o", str(output),
                 "--dtype", "fp32"]) == 0
    report = json.loads(output.read_text())
    assert json.loads(capsys.readouterr().out) == report and report["pairs"] == 12
    evaluator = EmbeddingSimilarityEvaluator([a for a, _ in pairs], [b for _, b in pairs], gold,
                                             similarity_fn_names=["cosine", "dot"], write_csv=False)
    want = evaluator(Reference(str(model_dir), device="cpu"))
    for name in ("pearson_cosine", "spearman_cosine", "pearson_dot", "spearman_dot"):
        assert report["metrics"][name] == pytest.approx(want[name], abs=1e-4), name


def test_cli_refuses_an_output_inside_the_model_and_bad_k(tmp_path, capsys):
    from bertkit.cli import main

    model_dir = tiny_sentence_transformer(tmp_path / "model")
    write_beir(tmp_path / "beir")
    argv = ["evaluate", str(model_dir), "--beir", str(tmp_path / "beir")]
    assert main([*argv, "-o", str(model_dir / "report.json")]) == 1
    assert "lies inside the directory MODEL_DIR" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*argv, "--k", "0,10"])
    assert "write positive whole numbers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*argv, "--sts", "x.tsv"])
    assert "not allowed with argument" in capsys.readouterr().err
