"""The multi-vector (ColBERT) losses against sentence-transformers 6.2's ``multi_vector_encoder.losses``.

One ColBERT directory, written by sentence-transformers from a tiny random odd-sized BERT (query expansion, a
punctuation skiplist, prompts, a 13-wide projection, normalised), is loaded by both libraries; each batch is
tokenized by bertkit's collator and by sentence-transformers' ``preprocess`` with the same prompts; the loss value
and the gradient of every parameter (the BERT's, by its HF name, and the projection's) must agree.
"""

from __future__ import annotations

import pytest
import torch

st = pytest.importorskip("sentence_transformers")
transformers = pytest.importorskip("transformers")

from sentence_transformers.multi_vector_encoder import losses as st_losses  # noqa: E402

import bertkit  # noqa: E402
from bertkit.sentence.data import RowBatch  # noqa: E402
from bertkit.sentence.losses import build_multi_vector_loss  # noqa: E402
from bertkit.sentence.losses.multi_vector import maxsim_matrix, maxsim_pairs  # noqa: E402
from bertkit.sentence.multi_vector_training import MultiVectorBiEncoder, MultiVectorCollator  # noqa: E402
from bertkit.weights.tables import bertkit_to_hf_family  # noqa: E402
from test_multi_vector import bert_dir, colbert_dir  # noqa: E402

QUERIES = ["how many people live in berlin?", "what is the big river", "cat", "the old town, the new town",
           "dog!"]
POSITIVES = ["berlin is a big city on a river.", "the river is big", "the cat sat on the mat.", "old town, new town",
             "the dog sat"]
NEGATIVES = [["many dogs live in the new town", "what river?"], ["cats", "the city"], ["a dog", "the mat is old"],
             ["berlin", "how big is the city"], ["cat sat on a dog", "people live in towns"]]
PROMPTS = {"query": "query: ", "document": "passage: "}
TOL = {"atol": 2e-5, "rtol": 2e-5}


@pytest.fixture(scope="module")
def colbert(tmp_path_factory) -> str:
    base = bert_dir(tmp_path_factory.mktemp("bert"))
    return colbert_dir(base, tmp_path_factory.mktemp("fixed"), "fixed")  # expansion, skiplist, prompts


def rows(negatives: int, labels=None) -> RowBatch:
    out = []
    for i, (query, positive) in enumerate(zip(QUERIES, POSITIVES)):
        row = {"anchor": query, "positive": positive}
        if negatives:
            row["negatives"] = NEGATIVES[i][:negatives]
        if labels is not None:
            row["label"] = labels[i]
        out.append(row)
    return RowBatch("test", out, [f"line {i}" for i in range(len(out))])


def ours_value_and_grads(path: str, loss, batch: RowBatch):
    net = bertkit.MultiVectorEncoder(path, dtype="fp32", optimize=False).train()
    prompts = {"anchor": PROMPTS["query"], "positive": PROMPTS["document"], "negative": PROMPTS["document"]}
    pairs = MultiVectorCollator(net, prompts=prompts)(batch)
    value = MultiVectorBiEncoder(net, loss).training_step({"pairs": pairs})[0]
    value.backward()
    grads = {name: p.grad for name, p in net.named_parameters() if p.grad is not None}
    bert = bertkit_to_hf_family({n[len("bert."):]: g for n, g in grads.items() if n.startswith("bert.")}, "bert")
    return value.detach(), bert, grads["dense.0.linear.weight"]


def st_value_and_grads(path: str, make_loss, batch: RowBatch):
    model = st.MultiVectorEncoder(path, device="cpu")
    model.train()
    loss = make_loss(model)
    columns = {"anchor": [r["anchor"] for r in batch.rows], "positive": [r["positive"] for r in batch.rows]}
    for k in range(len(batch.rows[0].get("negatives", []))):
        columns[f"negative_{k}"] = [r["negatives"][k] for r in batch.rows]
    features = []
    for name, texts in columns.items():
        task = "query" if name == "anchor" else "document"
        features.append({**model.preprocess(texts, prompt=PROMPTS[task], task=task), "task": task})
    labels = torch.tensor([r["label"] for r in batch.rows]) if "label" in batch.rows[0] else None
    value = loss(features, labels)
    value.backward()
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    prefix = "0.model."
    bert = {n[len(prefix):]: g for n, g in grads.items() if n.startswith(prefix)}
    return value.detach(), bert, grads["1.linear.weight"]


SCORES = [[3.0, 1.0, 0.5], [2.0, 2.5, -1.0], [0.0, -2.0, -3.0], [1.5, 1.0, 1.2], [4.0, 0.0, 2.0]]
MARGINS = [[s[0] - s[1], s[0] - s[2]] for s in SCORES]
CASES = {  # name -> (our loss, sentence-transformers' loss factory, negatives, labels)
    "mnrl": ("mnrl", {}, lambda m: st_losses.MultiVectorMultipleNegativesRankingLoss(m), 0, None),
    "mnrl-hard-negatives-scaled": ("mnrl", {"scale": 2.5},
                                   lambda m: st_losses.MultiVectorMultipleNegativesRankingLoss(m, scale=2.5), 2, None),
    "cached-mnrl": ("cached-mnrl", {"mini_batch_size": 2},
                    lambda m: st_losses.CachedMultiVectorMultipleNegativesRankingLoss(m, mini_batch_size=2), 1, None),
    "margin-mse-scores": ("margin-mse", {}, lambda m: st_losses.MultiVectorMarginMSELoss(m), 2, SCORES),
    "margin-mse-margins": ("margin-mse", {}, lambda m: st_losses.MultiVectorMarginMSELoss(m), 2, MARGINS),
    "kl": ("kl", {}, lambda m: st_losses.MultiVectorDistillKLDivLoss(m), 2, SCORES),
    "kl-two-temperatures": ("kl", {"student_temperature": 0.5, "teacher_temperature": 2.0},
                            lambda m: st_losses.MultiVectorDistillKLDivLoss(m, student_temperature=0.5,
                                                                            teacher_temperature=2.0), 2, SCORES),
}


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_and_every_gradient_equal_sentence_transformers(colbert, case):
    name, options, make, negatives, labels = CASES[case]
    batch = rows(negatives, labels)
    value, bert, projection = ours_value_and_grads(colbert, build_multi_vector_loss(name, **options), batch)
    ref, st_bert, st_projection = st_value_and_grads(colbert, make, batch)
    torch.testing.assert_close(value, ref, **TOL)
    torch.testing.assert_close(projection, st_projection, **TOL)
    assert set(st_bert) <= set(bert) and len(st_bert) > 20, sorted(set(st_bert) - set(bert))
    for hf_name, grad in st_bert.items():
        torch.testing.assert_close(bert[hf_name], grad, **TOL, msg=lambda m, n=hf_name: f"{n}: {m}")


def _definition(q, qm, d, dm) -> float:
    """MaxSim written out: over the query's scored vectors, the best scored document vector's product."""
    return sum(max(float(q[i] @ d[j]) for j in range(len(d)) if dm[j]) for i in range(len(q)) if qm[i])


def test_padded_maxsim_is_its_definition_and_an_empty_document_ranks_last(monkeypatch):
    import bertkit.sentence.losses.multi_vector as mv

    g = torch.Generator().manual_seed(3)
    q, d = torch.randn(3, 5, 4, generator=g), torch.randn(7, 6, 4, generator=g)
    qm, dm = torch.rand(3, 5, generator=g) > 0.3, torch.rand(7, 6, generator=g) > 0.4
    qm[:, 0], dm[:, 0], dm[6] = True, True, False  # document 6: nothing scored
    monkeypatch.setattr(mv, "CHUNK_ELEMENTS", 50)  # several document blocks
    scores = maxsim_matrix(q, qm, d, dm)
    for i in range(3):
        for j in range(6):
            assert scores[i, j].item() == pytest.approx(_definition(q[i], qm[i], d[j], dm[j]), abs=1e-5)
    assert (scores[:, 6] == mv.EMPTY_DOCUMENT_SCORE).all()
    torch.testing.assert_close(maxsim_pairs(q, qm, d[:3], dm[:3]), scores[:, :3].diagonal())


def test_duplicates_are_masked_and_bad_options_name_their_flag(colbert):
    with pytest.raises(ValueError, match="--temperature does not apply to --loss mnrl"):
        build_multi_vector_loss("mnrl", temperature=2.0)
    with pytest.raises(ValueError, match="--student-temperature must be a positive"):
        build_multi_vector_loss("kl", student_temperature=0.0)
    with pytest.raises(ValueError, match="--loss 'triplet' is not a loss bertkit trains ColBERT models with"):
        build_multi_vector_loss("triplet")
    net = bertkit.MultiVectorEncoder(colbert, dtype="fp32", optimize=False)
    batch = rows(1)
    batch.rows[2]["negatives"] = [batch.rows[0]["positive"]]  # row 2's negative is row 0's positive: one text
    pairs = MultiVectorCollator(net)(batch)
    loss = build_multi_vector_loss("mnrl")
    with torch.no_grad():
        embed = MultiVectorBiEncoder(net, loss).embed
        vectors = [embed(inputs) for inputs in pairs.inputs]
        masked = loss.from_embeddings(vectors, pairs)
        pairs.text_ids[2] = torch.arange(100, 105)  # the same vectors, the texts told apart: no longer masked
        unmasked = loss.from_embeddings(vectors, pairs)
    assert masked < unmasked
