"""bertkit.CrossEncoder and the reranking losses against sentence-transformers 6.2 (the reference), on a tiny
random HF BertForSequenceClassification saved with a vocab.txt (no downloads)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

st = pytest.importorskip("sentence_transformers")
transformers = pytest.importorskip("transformers")

from sentence_transformers.cross_encoder import losses as st_losses  # noqa: E402

import bertkit  # noqa: E402
from bertkit.sentence.losses import rerank as ours  # noqa: E402

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz",
         "the", "cat", "dog", "sat", "on", "mat", "berlin", "city", "river", "how", "many", "people", "live", "in",
         "is", "big", "##s", "##ed", "what", "old", "new", "town"]
QUERIES = ["how many people live in berlin", "what is the big river", "the cat", "old town", "dog"]
DOCS = ["berlin is a big city on a river", "the cat sat on the mat", "many dogs live in the new town",
        "what river", "the old town of berlin is big and the river is old and the people are many", "cats",
        "the dog sat", "a big mat"]
PAIRS = [(q, d) for q in QUERIES for d in DOCS[:4]] + [("berlin " * 30, "the river " * 30), ("cat", "mat " * 50)]
TOL = {"atol": 1e-5, "rtol": 1e-5}


def _checkpoint(directory, num_labels: int) -> str:
    torch.manual_seed(num_labels)
    config = transformers.BertConfig(vocab_size=len(WORDS), hidden_size=36, num_hidden_layers=2,
                                     num_attention_heads=3, intermediate_size=37, max_position_embeddings=48,
                                     num_labels=num_labels, initializer_range=0.3, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    transformers.BertForSequenceClassification(config).save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    return str(directory)


@pytest.fixture(scope="module")
def one_label(tmp_path_factory) -> str:
    return _checkpoint(tmp_path_factory.mktemp("ce1"), 1)


@pytest.fixture(scope="module")
def models(one_label):
    return bertkit.CrossEncoder(one_label), st.CrossEncoder(one_label, device="cpu")


def test_predict_equals_sentence_transformers(models):
    ours_ce, ref = models
    scores = ours_ce.predict(PAIRS, batch_size=3)
    assert scores.dtype == np.float32 and scores.shape == (len(PAIRS),)
    assert np.ptp(scores) > 0.05  # the random head tells the pairs apart: the comparison means something
    torch.testing.assert_close(torch.from_numpy(scores), torch.from_numpy(ref.predict(PAIRS, batch_size=3)), **TOL)
    identity = ours_ce.predict(PAIRS, activation="identity")
    torch.testing.assert_close(torch.from_numpy(identity),
                               torch.from_numpy(ref.predict(PAIRS, activation_fn=torch.nn.Identity())), **TOL)
    single = ours_ce.predict(PAIRS[0])
    assert np.ndim(single) == 0 and abs(float(single) - float(ref.predict(PAIRS[0]))) < 1e-5


def test_max_length_cuts_as_sentence_transformers(one_label):
    ours_ce, ref = bertkit.CrossEncoder(one_label, max_length=9), st.CrossEncoder(one_label, max_length=9)
    torch.testing.assert_close(torch.from_numpy(ours_ce.predict(PAIRS)), torch.from_numpy(ref.predict(PAIRS)), **TOL)


def test_several_labels_equal_sentence_transformers(tmp_path):
    directory = _checkpoint(tmp_path, 3)
    ours_ce, ref = bertkit.CrossEncoder(directory), st.CrossEncoder(directory, device="cpu")
    for softmax in (False, True):
        torch.testing.assert_close(torch.from_numpy(ours_ce.predict(PAIRS, apply_softmax=softmax)),
                                   torch.from_numpy(ref.predict(PAIRS, apply_softmax=softmax)), **TOL)
    with pytest.raises(ValueError, match="one-label"):
        ours_ce.rank("q", ["d"])


@pytest.mark.parametrize("top_k, documents", [(None, False), (3, True)])
def test_rank_equals_sentence_transformers(models, top_k, documents):
    ours_ce, ref = models
    got = ours_ce.rank(QUERIES[0], DOCS, top_k=top_k, return_documents=documents, batch_size=2)
    want = ref.rank(QUERIES[0], DOCS, top_k=top_k, return_documents=documents, batch_size=2)
    assert [r["corpus_id"] for r in got] == [r["corpus_id"] for r in want]
    assert [r.get("text") for r in got] == [r.get("text") for r in want]
    np.testing.assert_allclose([r["score"] for r in got], [r["score"] for r in want], atol=1e-5)


def test_save_is_loaded_by_sentence_transformers_and_served_as_rerank(one_label, tmp_path):
    from bertkit.serving.settings import resolve_task

    for activation, function in (("sigmoid", torch.nn.Sigmoid()), ("identity", torch.nn.Identity())):
        out = tmp_path / activation
        bertkit.CrossEncoder(one_label, activation=activation, max_length=20).save(out)
        loaded = st.CrossEncoder(str(out), device="cpu")
        assert loaded.max_seq_length == 20 and type(loaded.activation_fn) is type(function)
        want = st.CrossEncoder(one_label, device="cpu", max_length=20, activation_fn=function).predict(PAIRS)
        torch.testing.assert_close(torch.from_numpy(loaded.predict(PAIRS)), torch.from_numpy(want), **TOL)
        assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForSequenceClassification"]
        assert resolve_task(out) == "rerank"
        again = bertkit.CrossEncoder(out)  # and bertkit reads back what it wrote
        torch.testing.assert_close(torch.from_numpy(again.predict(PAIRS)), torch.from_numpy(want), **TOL)


def test_a_sentence_transformers_6_directory_is_served_on_rerank_at_its_saved_length(one_label, tmp_path):
    """sentence-transformers 6 saves a cross-encoder as a modules.json of one Transformer module: ``auto`` serves
    it (and a ``bertkit finetune rerank``-style save) on /rerank, cut at the length it was saved with (not the
    model's 48 positions), with bertkit.CrossEncoder.predict's scores."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from bertkit.serving import create_app
    from bertkit.serving.settings import resolve_task

    st.CrossEncoder(one_label, device="cpu", max_length=20).save(str(tmp_path / "st6"))
    bertkit.CrossEncoder(one_label, max_length=18).save(tmp_path / "ours")
    assert (tmp_path / "st6" / "modules.json").is_file() and not (tmp_path / "ours" / "modules.json").exists()
    query, texts = QUERIES[0], [*DOCS[:3], "berlin " * 30]  # the last one is cut
    for folder, length in (("st6", 20), ("ours", 18)):
        assert resolve_task(tmp_path / folder) == "rerank", folder
        with TestClient(create_app(str(tmp_path / folder), auto_truncate=True)) as client:
            info = client.get("/info").json()
            assert info["task"] == "rerank" and info["max_input_length"] == length, (folder, info)
            ranked = client.post("/rerank", json={"query": query, "texts": texts}).json()
        want = bertkit.CrossEncoder(tmp_path / folder).predict([(query, t) for t in texts[:3]])
        got = {r["index"]: r["score"] for r in ranked}
        torch.testing.assert_close(torch.tensor([got[i] for i in range(3)]), torch.from_numpy(want), **TOL)
        assert 3 in got  # the long text is cut to the saved length, not refused


def test_loads_a_sentence_transformers_saved_cross_encoder(one_label, tmp_path):
    saved = st.CrossEncoder(one_label, device="cpu", max_length=16,
                            activation_fn=torch.nn.Identity())
    saved.save(str(tmp_path / "st"))
    loaded = bertkit.CrossEncoder(tmp_path / "st")
    assert loaded.max_length == 16 and isinstance(loaded.activation, torch.nn.Identity)
    torch.testing.assert_close(torch.from_numpy(loaded.predict(PAIRS)), torch.from_numpy(saved.predict(PAIRS)),
                               **TOL)


@pytest.mark.parametrize("family", ["roberta", "mpnet", "modernbert"])
def test_other_families_equal_sentence_transformers(tmp_path, family):
    """A family's own tokenizer and head: scores as sentence-transformers' on the checkpoint, and on what save()
    writes, long pairs cut included (the tiny checkpoints record no model_max_length, so sentence-transformers
    would read past the positions on the original; bertkit caps, and save() records the cap)."""
    from family_dirs import family_dir

    directory = family_dir(tmp_path, family, "AutoModelForSequenceClassification", num_labels=1,
                           initializer_range=0.3)
    pairs = [("It was a truth universally acknowledged", "that a single man in possession of a good fortune"),
             ("Captain Wentworth", "the navy"), ("Anne", "Elliot")]
    ours_ce = bertkit.CrossEncoder(directory)
    want = st.CrossEncoder(str(directory), device="cpu").predict(pairs)
    torch.testing.assert_close(torch.from_numpy(ours_ce.predict(pairs)), torch.from_numpy(want), **TOL)
    ours_ce.save(tmp_path / "saved")
    long = [*pairs, ("Anne " * 30, "Elliot walked " * 40)]
    torch.testing.assert_close(torch.from_numpy(ours_ce.predict(long)),
                               torch.from_numpy(st.CrossEncoder(str(tmp_path / "saved"), device="cpu").predict(long)),
                               **TOL)


def test_bad_inputs_are_named(models, one_label):
    ours_ce, _ = models
    with pytest.raises(ValueError, match="pairs of two strings"):
        ours_ce.predict([("only one",)])
    with pytest.raises(ValueError, match="activation"):
        bertkit.CrossEncoder(one_label, activation="os.system")


# ------------------------------------------------------------------------------------------------- losses
ROWS = [  # (query, documents, labels): ragged lists
    (QUERIES[0], DOCS[:4], [1.0, 0.0, 0.0, 2.0]),
    (QUERIES[1], DOCS[4:6], [0.0, 1.0]),
    (QUERIES[2], DOCS[1:6], [3.0, 0.0, 1.0, 0.0, 1.0]),
    (QUERIES[3], DOCS[6:7], [1.0]),
]
NEGATIVES = ["the town", "old cats", "a new dog", "river city", "how big", "the people live", "what mat", "in town"]
#: (query, positive, hard negatives): every text distinct
TRIPLETS = [(QUERIES[i], DOCS[i], NEGATIVES[2 * i:2 * i + 2]) for i in range(4)]
#: a positive is another row's hard negative (and one the other way round): false negatives unless masked
SHARED = [(QUERIES[i], DOCS[i], [DOCS[(i + 3) % 8], DOCS[(i + 5) % 8]]) for i in range(4)]


class _Table:
    """A logit for every (query, document) pair: leaf tensors both sides score with (gradients compared on it)."""

    def __init__(self):
        self.index = {}
        generator = torch.Generator().manual_seed(7)
        self.logits = (torch.randn(200, generator=generator) * 0.5).requires_grad_()

    def ids(self, pairs) -> torch.Tensor:
        return torch.tensor([self.index.setdefault(tuple(p), len(self.index)) for p in pairs])

    def tokenize(self, pairs):
        return {"pair": self.ids(pairs)}

    def score(self, inputs):
        return self.logits[inputs["pair"]][:, None]  # [m, 1], as a one-label model answers


def _stub_reference(one_label, table: _Table):
    """sentence-transformers' CrossEncoder whose scores are the table's logits for the pairs it is given."""
    model = st.CrossEncoder(one_label, device="cpu")
    model.preprocess = lambda pairs, **_: {"pair": table.ids(pairs)}
    model.forward = lambda features, **_: {"scores": table.logits[features["pair"]][:, None]}
    return model


def _gradient(loss: torch.Tensor, table: _Table) -> torch.Tensor:
    (grad,) = torch.autograd.grad(loss, table.logits)
    return grad


LIST_LOSSES = {
    "bce": (lambda m: st_losses.BinaryCrossEntropyLoss(m, pos_weight=torch.tensor(2.5)),
            lambda: ours.BinaryCrossEntropyLoss(pos_weight=2.5)),
    "listnet": (lambda m: st_losses.ListNetLoss(m), lambda: ours.ListNetLoss()),
    "lambda": (lambda m: st_losses.LambdaLoss(m), lambda: ours.LambdaLoss()),
    "lambda-k2-natural": (lambda m: st_losses.LambdaLoss(m, k=2, sigma=0.7, reduction_log="natural"),
                          lambda: ours.LambdaLoss(k=2, sigma=0.7, reduction_log="natural")),
    "lambdarank": (lambda m: st_losses.LambdaLoss(m, weighting_scheme=st_losses.LambdaRankScheme()),
                   lambda: ours.LambdaLoss(weighting="lambdarank")),
    "ndcg1": (lambda m: st_losses.LambdaLoss(m, weighting_scheme=st_losses.NDCGLoss1Scheme()),
              lambda: ours.LambdaLoss(weighting="ndcg_loss1")),
    "ndcg2": (lambda m: st_losses.LambdaLoss(m, weighting_scheme=st_losses.NDCGLoss2Scheme()),
              lambda: ours.LambdaLoss(weighting="ndcg_loss2", mini_batch_size=3)),
    "unweighted-mu3": (lambda m: st_losses.LambdaLoss(m, weighting_scheme=st_losses.NoWeightingScheme()),
                       lambda: ours.LambdaLoss(weighting="none", mu=3.0)),
    "ndcg2pp-mu3": (lambda m: st_losses.LambdaLoss(m, weighting_scheme=st_losses.NDCGLoss2PPScheme(mu=3.0)),
                    lambda: ours.LambdaLoss(mu=3.0)),
}


def _list_inputs(name):
    """sentence-transformers' inputs and labels for a loss, and our batch's texts and labels."""
    if name == "bce":  # (query, passage, label) rows; labels in [0, 1]
        rows = [(q, [d], [min(label, 1.0) * 0.9]) for q, docs, labels in ROWS for d, label in zip(docs, labels)]
        return ([[q for q, _, _ in rows], [d[0] for _, d, _ in rows]],
                torch.tensor([label[0] for _, _, label in rows]), rows)
    return [[q for q, _, _ in ROWS], [d for _, d, _ in ROWS]], [torch.tensor(label) for _, _, label in ROWS], ROWS


@pytest.mark.parametrize("name", sorted(LIST_LOSSES))
def test_pointwise_and_listwise_losses_equal_sentence_transformers(one_label, name):
    table = _Table()
    reference, loss = LIST_LOSSES[name]
    st_inputs, st_labels, rows = _list_inputs(name)
    want = reference(_stub_reference(one_label, table))(st_inputs, st_labels)
    batch = ours.RerankBatch([q for q, _, _ in rows], [list(d) for _, d, _ in rows], table.tokenize,
                             [label for _, _, label in rows])
    got = loss()(table.score, batch)
    torch.testing.assert_close(got, want, **TOL)
    torch.testing.assert_close(_gradient(got, table), _gradient(want, table), **TOL)


@pytest.mark.parametrize("num_negatives, hard", [(None, 2), (3, 2), (2, 0), (None, 0)])
@pytest.mark.parametrize("rows", ["distinct", "shared"])
def test_multiple_negatives_ranking_equals_sentence_transformers(one_label, num_negatives, hard, rows):
    """Distinct texts: the default equals sentence-transformers; texts shared between rows: mask_duplicates=False
    does (sentence-transformers scores a duplicate of the positive as a negative)."""
    table, triplets = _Table(), TRIPLETS if rows == "distinct" else SHARED
    st_inputs = [[q for q, _, _ in triplets], [p for _, p, _ in triplets],
                 *([n[i] for _, _, n in triplets] for i in range(hard))]
    torch.manual_seed(11)  # the in-batch draw: both draw from torch's generator, the same way
    reference = st_losses.MultipleNegativesRankingLoss(_stub_reference(one_label, table), num_negatives=num_negatives)
    want = reference(st_inputs, None)
    torch.manual_seed(11)
    batch = ours.RerankBatch([q for q, _, _ in triplets], [[p, *n[:hard]] for _, p, n in triplets], table.tokenize)
    loss = ours.CrossEncoderMultipleNegativesRankingLoss(num_negatives=num_negatives,
                                                         mask_duplicates=rows == "distinct")
    got = loss(table.score, batch)
    torch.testing.assert_close(got, want, **TOL)
    torch.testing.assert_close(_gradient(got, table), _gradient(want, table), **TOL)
    if rows == "shared" and hard:  # masked, the duplicates change the loss
        masked = ours.CrossEncoderMultipleNegativesRankingLoss(num_negatives=None)(table.score, batch)
        plain = ours.CrossEncoderMultipleNegativesRankingLoss(num_negatives=None, mask_duplicates=False)(table.score,
                                                                                                          batch)
        assert abs(float(masked.detach()) - float(plain.detach())) > 1e-3


@pytest.mark.parametrize("positives, num_negatives, negatives", [
    # q1, q2 share their positive: each has only "o" as a negative; q3 has "s" once per other row
    (["s", "s", "o"], None, [["o"], ["o"], ["s", "s"]]),
    (["s", "s", "o"], 1, [["o"], ["o"], ["s"]]),
    # a draw of 2 where q1..q3 have one negative left ("o"): they take it, q4 draws 2 of its 3 "s"
    (["s", "s", "s", "o"], 2, [["o"], ["o"], ["o"], ["s", "s"]]),
])
def test_multiple_negatives_masks_a_duplicate_positive_by_text(positives, num_negatives, negatives):
    table = _Table()
    queries = [f"q{i}" for i in range(len(positives))]
    batch = ours.RerankBatch(queries, [[p] for p in positives], table.tokenize)
    loss = ours.CrossEncoderMultipleNegativesRankingLoss(num_negatives=num_negatives)(table.score, batch)
    logits = table.logits.detach()

    def row_loss(query, positive, texts):
        row = torch.stack([logits[table.index[(query, t)]] for t in [positive, *texts]])
        return -torch.log_softmax(10 * torch.sigmoid(row), 0)[0]

    expected = torch.stack([row_loss(*row) for row in zip(queries, positives, negatives)]).mean()
    torch.testing.assert_close(loss.detach(), expected, **TOL)


@pytest.mark.parametrize("name", ["bce", "listnet", "lambda", "mnrl"])
def test_losses_on_the_models_equal_sentence_transformers(models, name):
    """End to end: our loss on bertkit's model and tokenization equals sentence-transformers' on its own, and so do
    the gradients of the head, the pooler and the embeddings."""
    ours_ce, ref = models
    if name == "mnrl":
        st_inputs = [[q for q, _, _ in TRIPLETS], [p for _, p, _ in TRIPLETS], [n[0] for _, _, n in TRIPLETS]]
        want = st_losses.MultipleNegativesRankingLoss(ref, num_negatives=None)(st_inputs, None)
        batch = ours.RerankBatch(st_inputs[0], [[p, n] for p, n in zip(*st_inputs[1:])], ours_ce.tokenize)
        got = ours.CrossEncoderMultipleNegativesRankingLoss(num_negatives=None)(ours_ce.score, batch)
    else:
        reference, loss = LIST_LOSSES[name]
        st_inputs, st_labels, rows = _list_inputs(name)
        want = reference(ref)(st_inputs, st_labels)
        batch = ours.RerankBatch([q for q, _, _ in rows], [list(d) for _, d, _ in rows], ours_ce.tokenize,
                                 [label for _, _, label in rows])
        got = loss()(ours_ce.score, batch)
    torch.testing.assert_close(got, want, **TOL)
    for name in ("classifier.weight", "bert.pooler.dense.weight", "bert.embeddings.word_embeddings.weight"):
        ours_grad = torch.autograd.grad(got, ours_ce.model.get_parameter(name), retain_graph=True)[0]
        ref_grad = torch.autograd.grad(want, ref.model.get_parameter(name), retain_graph=True)[0]
        torch.testing.assert_close(ours_grad, ref_grad, **TOL)


def test_bad_batches_are_named():
    table = _Table()
    with pytest.raises(ValueError, match="row 1 has 2 documents and 1 labels"):
        ours.RerankBatch(["a", "b"], [["x"], ["y", "z"]], table.tokenize, [[1.0], [0.0]])
    with pytest.raises(ValueError, match=r"labels in \[0, 1\]; row 0"):
        ours.BinaryCrossEntropyLoss()(table.score, ours.RerankBatch(["a"], [["x"]], table.tokenize, [[3.0]]))
    with pytest.raises(ValueError, match="same number of documents"):
        ours.CrossEncoderMultipleNegativesRankingLoss()(table.score, ours.RerankBatch(["a", "b"], [["x"], ["y", "z"]],
                                                                            table.tokenize))
    with pytest.raises(ValueError, match="needs a label"):
        ours.ListNetLoss()(table.score, ours.RerankBatch(["a"], [["x"]], table.tokenize))
