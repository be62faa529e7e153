"""Multiple-negatives ranking, its cached (GradCache) and Matryoshka forms, and the cross-rank gather.

Parity with sentence-transformers 6.2.0 runs its losses and ours on one shared encoder: a linear map over
random features ("x"), which ST calls as its model (a stub returning ``sentence_embedding``) and we call as
``embed``; loss and encoder gradients must agree. The cached loss is checked against the plain one on a
tiny bertkit BERT with mean pooling, dropout on.
"""

from __future__ import annotations

import os
import socket
import tempfile

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.sentence.batch import PairBatch
from bertkit.sentence.losses.cached import CachedMultipleNegativesRankingLoss
from bertkit.sentence.losses.contrastive import MultipleNegativesRankingLoss
from bertkit.sentence.losses.matryoshka import MatryoshkaLoss


def feature_batch(rows: int, negatives: int, features: int = 7, seed: int = 0, ids=None) -> PairBatch:
    """Random features per column; every text distinct unless ``ids`` (one list per column) says otherwise."""
    g = torch.Generator().manual_seed(seed)
    columns = ["anchor", "positive"] + [f"negative_{i}" for i in range(1, negatives + 1)]
    inputs = [{"x": torch.randn(rows, features, generator=g)} for _ in columns]
    if ids is None:
        ids = [list(range(c * rows, (c + 1) * rows)) for c in range(len(columns))]
    return PairBatch(columns, inputs, [torch.tensor(i) for i in ids])


def linear_encoder(seed: int = 1, features: int = 7, dim: int = 12) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(features, dim)


def value_and_grads(loss_fn, encoder: nn.Module, batch: PairBatch):
    encoder.zero_grad()
    loss = loss_fn(lambda inputs: encoder(inputs["x"]), batch)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in encoder.parameters()]


class STStub(nn.Sequential):
    """ST's view of the same encoder: ``model(features)["sentence_embedding"]``."""

    def __init__(self, encoder: nn.Linear):
        super().__init__(encoder)

    def forward(self, features):
        return {"sentence_embedding": self[0](features["x"])}

    def get_embedding_dimension(self) -> int:
        return self[0].out_features


def st_value_and_grads(st_loss, encoder: nn.Module, batch: PairBatch):
    encoder.zero_grad()
    loss = st_loss([dict(inputs) for inputs in batch.inputs], None)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in encoder.parameters()]


CASES = [(kind, negatives) for kind in ("mnrl", "symmetric", "cached", "cached-symmetric", "matryoshka",
                                        "cached-matryoshka") for negatives in (0, 2)]


def loss_pair(kind: str, model: nn.Module):
    """(ours, sentence-transformers') for ``kind``, with the same settings."""
    st = pytest.importorskip("sentence_transformers.sentence_transformer.losses")
    from sentence_transformers.util import dot_score

    if kind == "mnrl":
        return MultipleNegativesRankingLoss(scale=20.0), st.MultipleNegativesRankingLoss(model, scale=20.0)
    if kind == "symmetric":
        return MultipleNegativesRankingLoss(symmetric=True), st.MultipleNegativesSymmetricRankingLoss(model)
    if kind == "cached-symmetric":
        return (CachedMultipleNegativesRankingLoss(symmetric=True, mini_batch_size=4),
                st.CachedMultipleNegativesSymmetricRankingLoss(model, mini_batch_size=4))
    if kind == "cached":
        return (CachedMultipleNegativesRankingLoss(mini_batch_size=4),
                st.CachedMultipleNegativesRankingLoss(model, mini_batch_size=4))
    if kind == "matryoshka":  # dot product: the truncations are re-normalised, as ST does
        inner = st.MultipleNegativesRankingLoss(model, scale=5.0, similarity_fct=dot_score)
        return (MatryoshkaLoss(MultipleNegativesRankingLoss(similarity="dot", scale=5.0), [4, 12, 8]),
                st.MatryoshkaLoss(model, inner, [4, 12, 8]))
    inner = st.CachedMultipleNegativesRankingLoss(model, mini_batch_size=4)
    return (MatryoshkaLoss(CachedMultipleNegativesRankingLoss(mini_batch_size=4), [12, 6], [1.0, 0.5]),
            st.MatryoshkaLoss(model, inner, [12, 6], [1.0, 0.5]))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("kind,negatives", CASES)
def test_losses_equal_sentence_transformers(kind, negatives):
    batch = feature_batch(rows=6, negatives=negatives)
    encoder = linear_encoder()
    ours, theirs = loss_pair(kind, STStub(encoder))
    loss, grads = value_and_grads(ours, encoder, batch)
    st_loss, st_grads = st_value_and_grads(theirs, encoder, batch)
    torch.testing.assert_close(loss, st_loss, atol=1e-5, rtol=1e-5)
    for grad, st_grad in zip(grads, st_grads):
        torch.testing.assert_close(grad, st_grad, atol=1e-5, rtol=1e-5)


def test_duplicate_texts_are_masked_out_of_the_negatives():
    # row 3's hard negative is row 1's positive (one text twice), and row 0's anchor is row 2's positive
    n = 4
    ids = [[0, 1, 2, 3], [10, 11, 0, 13], [20, 21, 22, 11]]
    batch = feature_batch(rows=n, negatives=1, ids=ids)
    batch.inputs[2]["x"][3] = batch.inputs[1]["x"][1]  # the same text embeds the same
    batch.inputs[1]["x"][2] = batch.inputs[0]["x"][0]
    encoder = linear_encoder()
    embed = lambda inputs: encoder(inputs["x"])  # noqa: E731
    loss = MultipleNegativesRankingLoss(scale=20.0)(embed, batch)

    with torch.no_grad():
        a, p, neg = (encoder(inputs["x"]) for inputs in batch.inputs)
        logits = 20.0 * F.normalize(a, dim=-1) @ F.normalize(torch.cat([p, neg]), dim=-1).T  # [4, 8]
    unmasked = F.cross_entropy(logits, torch.arange(n))
    by_hand = logits.clone()
    by_hand[1, n + 3] = float("-inf")  # row 1: the copy of its positive, as row 3's negative
    by_hand[0, 2] = float("-inf")  # row 0: its anchor's text, as row 2's positive
    torch.testing.assert_close(loss.detach(), F.cross_entropy(by_hand, torch.arange(n)))
    assert not torch.isclose(loss.detach(), unmasked)
    # the row's own positive is never masked, even when its hard negative repeats it
    same = feature_batch(rows=2, negatives=1, ids=[[0, 1], [2, 3], [2, 3]])
    assert torch.isfinite(MultipleNegativesRankingLoss()(embed, same))


def test_symmetric_masks_duplicate_anchors():
    batch = feature_batch(rows=3, negatives=0, ids=[[0, 0, 2], [10, 11, 12]])
    batch.inputs[0]["x"][1] = batch.inputs[0]["x"][0]
    encoder = linear_encoder()
    loss = MultipleNegativesRankingLoss(symmetric=True)(lambda inputs: encoder(inputs["x"]), batch)
    with torch.no_grad():
        a, p = (F.normalize(encoder(inputs["x"]), dim=-1) for inputs in batch.inputs)
        forward, backward = 20.0 * a @ p.T, 20.0 * p @ a.T
    backward[0, 1] = backward[1, 0] = float("-inf")  # positives 0 and 1 share an anchor text
    target = torch.arange(3)
    expected = (F.cross_entropy(forward, target) + F.cross_entropy(backward, target)) / 2
    torch.testing.assert_close(loss.detach(), expected)


def tiny_bert_embed(dropout: float):
    from bertkit.config import BERTConfig
    from bertkit.modeling.backbone import BERT
    from bertkit.modeling.heads import pool_sequence

    torch.manual_seed(0)
    config = BERTConfig(vocab_size=99, hidden_size=36, num_hidden_layers=2, num_attention_heads=3,
                        intermediate_size=37, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    bert = BERT(config).train()
    return bert, lambda inputs: pool_sequence(bert, "mean", **inputs)


def token_batch(rows: int = 8, negatives: int = 1) -> PairBatch:
    g = torch.Generator().manual_seed(3)
    columns = ["anchor", "positive"] + [f"negative_{i}" for i in range(1, negatives + 1)]
    inputs = []
    for _ in columns:
        lengths = torch.randint(3, 11, (rows,), generator=g)
        mask = (torch.arange(10)[None, :] < lengths[:, None]).long()
        inputs.append({"input_ids": torch.randint(5, 99, (rows, 10), generator=g) * mask, "attention_mask": mask})
    ids = [list(range(c * rows, (c + 1) * rows)) for c in range(len(columns))]
    return PairBatch(columns, inputs, [torch.tensor(i) for i in ids])


def in_mini_batches(embed, size: int):
    """``embed`` run on ``size`` rows at a time: the dropout draws the cached loss makes and replays."""
    return lambda inputs: torch.cat([embed({k: v[b: b + size] for k, v in inputs.items()})
                                     for b in range(0, next(iter(inputs.values())).shape[0], size)])


@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("matryoshka", [False, True])
def test_cached_equals_plain_on_a_tiny_bert(dropout, matryoshka):
    batch = token_batch()
    bert, embed = tiny_bert_embed(dropout)
    plain, cached = MultipleNegativesRankingLoss(), CachedMultipleNegativesRankingLoss(mini_batch_size=3)
    if matryoshka:
        plain, cached = MatryoshkaLoss(plain, [36, 20, 8]), MatryoshkaLoss(cached, [36, 20, 8])
    results = []
    for loss_fn, embed_fn in ((plain, in_mini_batches(embed, 3) if dropout else embed), (cached, embed)):
        bert.zero_grad()
        torch.manual_seed(42)
        loss = loss_fn(embed_fn, batch)
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in bert.named_parameters() if p.grad is not None}))
    (loss, grads), (cached_loss, cached_grads) = results
    torch.testing.assert_close(cached_loss, loss, atol=1e-5, rtol=1e-5)
    assert grads.keys() == cached_grads.keys() and len(grads) > 10
    for name in grads:
        torch.testing.assert_close(cached_grads[name], grads[name], atol=1e-5, rtol=1e-5, msg=name)


def test_cached_scales_by_the_incoming_gradient_and_evaluates_without_grad():
    batch, encoder = feature_batch(rows=5, negatives=1), linear_encoder()
    embed = lambda inputs: encoder(inputs["x"])  # noqa: E731
    cached = CachedMultipleNegativesRankingLoss(mini_batch_size=2)
    (cached(embed, batch) * 0.25).backward()
    half = [p.grad.clone() for p in encoder.parameters()]
    _, full = value_and_grads(MultipleNegativesRankingLoss(), encoder, batch)
    for h, f in zip(half, full):
        torch.testing.assert_close(h, 0.25 * f)
    with torch.no_grad():
        torch.testing.assert_close(cached(embed, batch), MultipleNegativesRankingLoss()(embed, batch))


def test_bad_arguments_are_refused_in_one_line():
    batch, encoder = feature_batch(rows=3, negatives=0), linear_encoder(dim=12)
    with pytest.raises(ValueError, match=r"--matryoshka-dims 16 is above the model's embedding dimension 12"):
        MatryoshkaLoss(MultipleNegativesRankingLoss(), [16, 8])(lambda inputs: encoder(inputs["x"]), batch)
    with pytest.raises(ValueError, match="--matryoshka-dims 16 is above"):
        MatryoshkaLoss(CachedMultipleNegativesRankingLoss(), [16])(lambda inputs: encoder(inputs["x"]), batch)
    for dims in ([], [0, 8], [8, 8], [8.5]):
        with pytest.raises(ValueError, match="--matryoshka-dims"):
            MatryoshkaLoss(MultipleNegativesRankingLoss(), dims)
    assert MatryoshkaLoss(MultipleNegativesRankingLoss(), [8, 32, 16], [1, 2, 3]).weights == [2.0, 3.0, 1.0]
    with pytest.raises(ValueError, match="--mini-batch-size"):
        CachedMultipleNegativesRankingLoss(mini_batch_size=0)
    with pytest.raises(ValueError, match="scale must be positive"):
        MultipleNegativesRankingLoss(scale=0)
    swapped = PairBatch(["positive", "anchor"], batch.inputs[:2], batch.text_ids[:2])
    with pytest.raises(ValueError, match=r"anchor, positive, then optional negative_1..k.*\['positive', 'anchor'\]"):
        MultipleNegativesRankingLoss()(lambda inputs: encoder(inputs["x"]), swapped)


# --- two gloo processes against one process with the combined batch --------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_slice(batch: PairBatch, rows: slice) -> PairBatch:
    return PairBatch(batch.columns, [{k: v[rows] for k, v in inputs.items()} for inputs in batch.inputs],
                     [ids[rows] for ids in batch.text_ids])


def _gather_check(rank: int, world: int) -> None:
    """Ranks holding different row counts: gathered in rank order, the local rows' gradient summed over ranks."""
    from bertkit.sentence.losses.gather import gather_with_grad

    counts = [3 + 2 * r for r in range(world)]
    mine = torch.full((counts[rank], 2), float(rank), requires_grad=True)
    gathered, start = gather_with_grad(mine)
    expected = torch.cat([torch.full((c, 2), float(r)) for r, c in enumerate(counts)])
    torch.testing.assert_close(gathered.detach(), expected)
    assert start == sum(counts[:rank])
    weights = torch.arange(expected.numel(), dtype=torch.float32).reshape(expected.shape)
    (gathered * weights * (rank + 1)).sum().backward()  # each rank's "loss" reads every rank's rows
    total = sum(r + 1 for r in range(world))
    torch.testing.assert_close(mine.grad, total * weights[start: start + counts[rank]])


def _worker(rank: int, world: int, port: int, out: str, symmetric: bool, cached: bool) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        _gather_check(rank, world)
        batch, encoder = feature_batch(rows=8, negatives=1), linear_encoder()
        per = batch.rows // world
        local = _rank_slice(batch, slice(rank * per, (rank + 1) * per))
        loss_fn = (CachedMultipleNegativesRankingLoss(symmetric=symmetric, mini_batch_size=3) if cached
                   else MultipleNegativesRankingLoss(symmetric=symmetric))
        loss, grads = value_and_grads(loss_fn, encoder, local)
        for g in [loss, *grads]:  # DDP: each rank's loss over its own anchors, gradients averaged
            dist.all_reduce(g)
            g /= world
        if rank == 0:
            torch.save([loss, *grads], out)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("symmetric,cached", [(False, False), (True, True)])
def test_two_gloo_ranks_equal_one_process_with_the_combined_batch(symmetric, cached):
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.pt")
        context = mp.start_processes(_worker, args=(2, _free_port(), out, symmetric, cached), nprocs=2,
                                     join=False, start_method="spawn")
        for _ in range(120):  # at most 120 s; a hung collective fails the test instead of the suite
            if context.join(timeout=1):
                break
        else:
            for process in context.processes:
                process.kill()
            pytest.fail("the 2-process gloo run did not finish in 120 s")
        loss, *grads = torch.load(out)
    batch, encoder = feature_batch(rows=8, negatives=1), linear_encoder()
    whole, whole_grads = value_and_grads(MultipleNegativesRankingLoss(symmetric=symmetric), encoder, batch)
    torch.testing.assert_close(loss, whole, atol=1e-5, rtol=1e-5)
    for grad, expected in zip(grads, whole_grads):
        torch.testing.assert_close(grad, expected, atol=1e-5, rtol=1e-5)
