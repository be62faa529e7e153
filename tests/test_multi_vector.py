"""bertkit.MultiVectorEncoder against sentence-transformers 6.2's MultiVectorEncoder (the reference): ColBERT
directories that sentence-transformers writes from a tiny random odd-sized BERT (no downloads), loaded by both;
MaxSim against its definition written out here."""

from __future__ import annotations

import string
import warnings

import pytest
import torch

st = pytest.importorskip("sentence_transformers")
transformers = pytest.importorskip("transformers")

from sentence_transformers.base.modules import Normalize, Transformer  # noqa: E402
from sentence_transformers.base.modules.dense import Dense  # noqa: E402
from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask  # noqa: E402

import bertkit  # noqa: E402
from bertkit.sentence.maxsim import maxsim_rank, maxsim_scores  # noqa: E402

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]", *"abcdefghijklmnopqrstuvwxyz",
         ",", ".", "?", "!",
         "the", "cat", "dog", "sat", "on", "mat", "berlin", "city", "river", "how", "many", "people", "live", "in",
         "is", "big", "##s", "##ed", "what", "old", "new", "town", "query", "passage", ":"]
QUERIES = ["how many people live in berlin?", "what is the big river", "cat", "the old town, the new town, the city",
           "dog!"]
DOCS = ["berlin is a big city on a river.", "the cat sat on the mat, the dog sat on the cat.", "many dogs live in "
        "the new town", "what river?", "the old town of berlin is big, and the river is old. " * 3, "cats"]
TOL = {"atol": 1e-5, "rtol": 1e-5}
SETTINGS = {  # name -> (Transformer settings, MultiVectorMask settings, Normalize, prompts)
    "fixed": ({"document_length": 20, "query_expansion": {"strategy": "fixed", "length": 9}},
              {"skiplist_words": list(string.punctuation)}, True, {"query": "query: ", "document": "passage: "}),
    "min-attend": ({"query_length": 12, "query_expansion": {"strategy": "min", "length": 8, "attend": True}},
                   {"skiplist_words": [",", ".", "?"], "skiplist_tasks": ["query", "document"]}, False, None),
    "plain": ({"query_length": 7}, {}, True, None),
}


def bert_dir(directory) -> str:
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(WORDS), hidden_size=36, num_hidden_layers=2,
                                     num_attention_heads=3, intermediate_size=37, max_position_embeddings=64,
                                     initializer_range=0.3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    transformers.BertModel(config).save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    transformers.BertTokenizerFast(str(directory / "vocab.txt")).save_pretrained(directory)
    return str(directory)


def colbert_dir(base: str, out, name: str) -> str:
    transformer, mask, norm, prompts = SETTINGS[name]
    torch.manual_seed(1)
    modules = [Transformer(base, **transformer),
               Dense(36, 13, bias=False, activation_function=torch.nn.Identity(),
                     module_input_name="token_embeddings", module_output_name="token_embeddings"),
               MultiVectorMask(**mask)]
    if norm:
        modules.append(Normalize(module_input_name="token_embeddings", module_output_name="token_embeddings"))
    st.MultiVectorEncoder(modules=modules, device="cpu", prompts=prompts).save(str(out))
    return str(out)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> str:
    return bert_dir(tmp_path_factory.mktemp("bert"))


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def pair(request, base, tmp_path_factory):
    path = colbert_dir(base, tmp_path_factory.mktemp(request.param), request.param)
    return bertkit.MultiVectorEncoder(path, dtype="fp32"), st.MultiVectorEncoder(path, device="cpu"), path


def _call(model, method, texts, **options):
    """``model.method(texts)`` as sentence-transformers encodes: bertkit cuts an over-long query when asked to."""
    if isinstance(model, bertkit.MultiVectorEncoder) and method == "encode_query":
        options["truncate"] = True
    return getattr(model, method)(texts, **options)


def _same(ours, ref):
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b.float(), **TOL)


def test_token_vectors_equal_sentence_transformers(pair):
    ours, ref, _ = pair
    for method in ("encode_query", "encode_document", "encode"):
        for texts in (QUERIES, DOCS):
            _same(_call(ours, method, texts, batch_size=2), getattr(ref, method)(texts, batch_size=2))
    torch.testing.assert_close(ours.encode_query("cat"), ref.encode_query("cat"), **TOL)


def test_query_expansion_and_skiplist_shapes(pair):
    ours, _, path = pair
    transformer, mask, _, _ = SETTINGS[path.rsplit("/", 1)[-1].rstrip("0123456789")]
    expansion = transformer.get("query_expansion")
    queries = ours.encode_query(QUERIES, truncate=True)
    if expansion and expansion["strategy"] == "fixed":
        assert {len(q) for q in queries} == {expansion["length"]}
    docs = ours.encode_document(DOCS, output_value=None)
    if mask.get("skiplist_words"):
        comma = WORDS.index(",")
        assert all(comma not in d["input_ids"].tolist() for d in docs)


def _maxsim(q, d):  # the definition: sum over query vectors of the best document vector
    return (q @ d.T).max(dim=1).values.sum()


def test_maxsim_is_its_definition_in_any_chunking():
    torch.manual_seed(0)
    queries = [torch.randn(n, 5) for n in (3, 1, 7, 0)]
    docs = [torch.randn(n, 5) for n in (4, 11, 1, 30, 2)]
    expected = torch.tensor([[_maxsim(q, d) if len(q) else 0.0 for d in docs] for q in queries])
    for chunk in (None, 1, 5, 17, 64):
        torch.testing.assert_close(maxsim_scores(queries, docs, chunk_elements=chunk), expected, **TOL)
    normalised = maxsim_scores(queries, docs, length_normalize=True)
    torch.testing.assert_close(normalised[:3], expected[:3] / torch.tensor([3.0, 1.0, 7.0])[:, None], **TOL)
    ranked = maxsim_rank(queries[0], docs, top_k=2)
    assert [r["corpus_id"] for r in ranked] == expected[0].argsort(descending=True)[:2].tolist()


def test_similarity_and_rank_equal_sentence_transformers(pair):
    ours, ref, _ = pair
    q, d = ref.encode_query(QUERIES), ref.encode_document(DOCS)
    torch.testing.assert_close(ours.similarity(q, d), ref.similarity(q, d).float(), **TOL)
    ranked = ours.rank(QUERIES[0], DOCS, top_k=3, return_documents=True, truncate=True)
    scores = ref.similarity([ref.encode_query(QUERIES[0])], d)[0]
    assert [r["corpus_id"] for r in ranked] == scores.argsort(descending=True)[:3].tolist()
    assert ranked[0]["text"] == DOCS[ranked[0]["corpus_id"]]


def test_bad_input_is_one_clear_line(pair, tmp_path, base):
    ours, _, _ = pair
    with pytest.raises(ValueError, match=r"documents\[1\] has no token vectors"):
        maxsim_scores([torch.ones(2, 3)], [torch.ones(1, 3), torch.ones(0, 3)])
    with pytest.raises(ValueError, match="different sizes"):
        maxsim_scores([torch.ones(2, 3)], [torch.ones(1, 4)])
    with pytest.raises(ValueError, match="task must be one of"):
        ours.encode(["x"], task="passage")
    with pytest.raises(ValueError, match=r"bertkit\.MultiVectorEncoder"):
        bertkit.SentenceTransformer(pair[2])
    with pytest.raises(ValueError, match="not a ColBERT directory"):
        bertkit.MultiVectorEncoder(base)
    with pytest.raises(ValueError, match=r"missing is not a directory: pass a ColBERT model's directory"):
        bertkit.MultiVectorEncoder(tmp_path / "missing")


def test_saved_directory_loads_in_sentence_transformers_with_the_same_vectors(pair, tmp_path):
    ours, ref, _ = pair
    saved = ours.save(tmp_path / "saved")
    again = st.MultiVectorEncoder(str(saved), device="cpu")
    for method in ("encode_query", "encode_document"):
        for texts in (QUERIES, DOCS):
            _same(_call(again, method, texts), getattr(ref, method)(texts))
    ours_again = bertkit.MultiVectorEncoder(saved, dtype="fp32")
    _same(ours_again.encode_query(QUERIES, truncate=True), ref.encode_query(QUERIES))
    assert ours_again.similarity_fn_name == ours.similarity_fn_name


def pylate_dir(base: str, out) -> str:
    """PyLate's layout (its documented save, written by hand: PyLate pins sentence-transformers < 6): Transformer
    and a PyLate Dense, the ColBERT settings at the top level of config_sentence_transformers.json."""
    import json
    import shutil

    colbert_dir(base, out, "plain")
    shutil.rmtree(out / "2_MultiVectorMask")
    shutil.rmtree(out / "3_Normalize")
    (out / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"}]))
    dense = json.loads((out / "1_Dense" / "config.json").read_text())
    for key in ("module_input_name", "module_output_name"):
        dense.pop(key)
    (out / "1_Dense" / "config.json").write_text(json.dumps(dense))
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 30, "do_lower_case": False}))
    (out / "config_sentence_transformers.json").write_text(json.dumps({
        "model_type": "ColBERT", "prompts": {}, "default_prompt_name": None, "similarity_fn_name": "MaxSim",
        "query_prefix": "[unused0]", "document_prefix": "[unused1]", "query_length": 10, "document_length": 17,
        "attend_to_expansion_tokens": False, "skiplist_words": [",", ".", "!"]}))
    return str(out)


def stanford_dir(base: str, out) -> str:
    """A Stanford ColBERT checkpoint from its documented format: the BERT's weights under ``bert.`` and the
    projection ``linear.weight`` in one file, config.json naming HF_ColBERT, artifact.metadata."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(base, out, dirs_exist_ok=True)
    weights = {"bert." + key: value for key, value in load_file(out / "model.safetensors").items()}
    torch.manual_seed(2)
    weights["linear.weight"] = torch.randn(11, 36) * 0.2
    save_file(weights, out / "model.safetensors")
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "architectures": ["HF_ColBERT"]}))
    (out / "artifact.metadata").write_text(json.dumps({
        "query_maxlen": 8, "doc_maxlen": 19, "query_token_id": "[unused0]", "doc_token_id": "[unused1]",
        "mask_punctuation": True, "attend_to_mask_tokens": False, "dim": 11, "similarity": "cosine"}))
    return str(out)


@pytest.mark.parametrize("make", [pylate_dir, stanford_dir], ids=["pylate", "stanford"])
def test_pylate_and_stanford_layouts_equal_sentence_transformers(make, base, tmp_path):
    path = make(base, tmp_path / "model")
    ours, ref = bertkit.MultiVectorEncoder(path, dtype="fp32"), st.MultiVectorEncoder(path, device="cpu")
    for method in ("encode_query", "encode_document"):
        for texts in (QUERIES, DOCS):
            _same(_call(ours, method, texts, batch_size=2), getattr(ref, method)(texts, batch_size=2))
    assert ours.encode_query("cat", output_value=None)["input_ids"][1] == WORDS.index("[unused0]")
    saved = ours.save(tmp_path / "saved")  # the markers stay one token in both libraries
    for again in (st.MultiVectorEncoder(str(saved), device="cpu"), bertkit.MultiVectorEncoder(saved, dtype="fp32")):
        _same(_call(again, "encode_query", QUERIES), ref.encode_query(QUERIES))
        _same(again.encode_document(DOCS), ref.encode_document(DOCS))


def test_reranks_a_run_file_by_maxsim_as_sentence_transformers_scores(pair, tmp_path):
    import json

    from bertkit.sentence.evaluation.reranking import BeirRerankEvaluator

    ours, ref, _ = pair
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": text}) + "\n"
                                                   for i, text in enumerate(DOCS)))
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": text}) + "\n"
                                                    for i, text in enumerate(QUERIES)))
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i}\t1\n" for i in range(len(QUERIES))))
    (tmp_path / "run.trec").write_text("".join(  # a BM25-like first stage: every document, some order
        f"q{i} Q0 d{j} {j} {float(len(DOCS) - (i + j) % len(DOCS))} bm25\n"
        for i in range(len(QUERIES)) for j in range(len(DOCS))))
    evaluator = BeirRerankEvaluator(tmp_path, tmp_path / "run.trec", top_k=4)
    run = evaluator.rerank(ours, batch_size=3)
    for query, scores in run.items():
        assert len(scores) == 4
        q = ref.encode_query(QUERIES[int(query[1:])])
        d = ref.encode_document([DOCS[int(doc[1:])] for doc in scores])
        torch.testing.assert_close(torch.tensor(list(scores.values())), ref.similarity([q], d)[0].float(), **TOL)
    report = evaluator.report(ours)
    assert set(report["reranked"]) >= {"ndcg@10", "mrr@10"}

    from bertkit.cli import main  # the same through `bertkit evaluate MODEL --beir DIR --first-stage RUN`

    output = tmp_path / "rerank.json"
    assert main(["evaluate", pair[2], "--beir", str(tmp_path), "--first-stage", str(tmp_path / "run.trec"),
                 "--top-k", "4", "-o", str(output)]) == 0
    assert json.loads(output.read_text())["reranked"] == pytest.approx(report["reranked"])



def test_token_pooling_equals_sentence_transformers(base, tmp_path):
    from sentence_transformers.multi_vector_encoder.modules import HierarchicalTokenPooling

    modules = [Transformer(base), Dense(36, 13, bias=False, activation_function=torch.nn.Identity(),
                                        module_input_name="token_embeddings", module_output_name="token_embeddings"),
               MultiVectorMask(), Normalize(module_input_name="token_embeddings"), HierarchicalTokenPooling(2.0)]
    st.MultiVectorEncoder(modules=modules, device="cpu").save(str(tmp_path / "pooled"))
    ours, ref = bertkit.MultiVectorEncoder(tmp_path / "pooled", dtype="fp32"), st.MultiVectorEncoder(
        str(tmp_path / "pooled"), device="cpu")
    _same(ours.encode_document(DOCS), ref.encode_document(DOCS))
    # documents only: queries keep every vector
    _same(ours.encode_query(QUERIES, truncate=True), ref.encode_query(QUERIES))
    assert len(ours.encode_document(DOCS[4])) < len(ours.encode_query(DOCS[4], truncate=True))
    again = st.MultiVectorEncoder(str(ours.save(tmp_path / "saved")), device="cpu")
    _same(again.encode_document(DOCS), ref.encode_document(DOCS))


def test_a_module_bertkit_does_not_run_is_named(base, tmp_path):
    import json

    path = colbert_dir(base, tmp_path / "odd", "plain")
    modules = json.loads((tmp_path / "odd" / "modules.json").read_text())
    modules.append({"idx": 4, "name": "4", "path": "4_Lambda", "type": "mylib.LambdaTokenPooling"})
    (tmp_path / "odd" / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match=r"names a mylib\.LambdaTokenPooling module"):
        bertkit.MultiVectorEncoder(path)


def test_a_query_longer_than_the_query_length_is_one_line_unless_truncate(pair):
    ours, ref, _ = pair
    fits = next(n for n in range(1, 60) if _too_long(ours, "cat " * (n + 1)))
    exact = "cat " * fits  # the longest query that fits: encoded whole, equal to sentence-transformers', no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(ours.encode_query(exact), ref.encode_query(exact), **TOL)
    with pytest.raises(ValueError, match=r"^sentences\[1\] is a query longer than the model's query length "
                                         r"\(\d+ tokens; 1 of 2 queries are\): .* \(truncate=True"):
        ours.encode_query(["cat", exact + "cat"])
    with pytest.warns(UserWarning, match="longer than the model.s query length .* were cut"):
        cut = ours.encode_query(exact + "dog dog", truncate=True)
    torch.testing.assert_close(cut, ref.encode_query(exact + "dog dog"), **TOL)
    assert ours.encode_document(exact + "dog dog").shape[0] > 0  # documents are cut to their own length, silently
    assert ours.encode_query([]) == [] and ours.encode_document([]) == []


def _too_long(model, text: str) -> bool:
    try:
        model.encode_query(text)
    except ValueError:
        return True
    return False


def test_a_document_with_nothing_to_score_is_one_line(base, tmp_path):
    ours_path = colbert_dir(base, tmp_path / "punct", "fixed")
    ours, ref = bertkit.MultiVectorEncoder(ours_path, dtype="fp32"), st.MultiVectorEncoder(ours_path, device="cpu")
    only_punctuation = ours.encode_document("?!, .")  # its [CLS] / [SEP] vectors stay, as sentence-transformers'
    torch.testing.assert_close(only_punctuation, ref.encode_document("?!, ."), **TOL)
    assert len(only_punctuation) > 0
    modules = [Transformer(base), Dense(36, 13, bias=False, activation_function=torch.nn.Identity(),
                                        module_input_name="token_embeddings", module_output_name="token_embeddings"),
               MultiVectorMask(keep_only_token_ids=[WORDS.index("cat")])]
    st.MultiVectorEncoder(modules=modules, device="cpu").save(str(tmp_path / "keep"))
    keep = bertkit.MultiVectorEncoder(tmp_path / "keep", dtype="fp32")
    assert len(keep.encode_document("the cat")) == 1
    with pytest.raises(ValueError, match=r"^sentences\[1\] '.*' leaves no token vector to score .*: drop it"):
        keep.encode_document(["the cat", "the dog"])
