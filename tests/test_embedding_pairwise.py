"""The score, pair and distillation losses equal sentence-transformers 6.2.0's losses of the same name.

Each reference is ST's own loss class around a stub model whose forward looks the embedding of each row up
in a table (``input_ids[:, 0]`` is the row of the table), so both sides see the same embeddings; the
gradients compared are those with respect to that table. Then the bad batches each loss refuses.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bertkit.sentence.batch import PairBatch, same_text
from bertkit.sentence.losses.distillation import DistillKLDivLoss, GISTEmbedLoss, MarginMSELoss
from bertkit.sentence.losses.pairwise import (
    AnglELoss,
    ContrastiveLoss,
    CoSENTLoss,
    CosineSimilarityLoss,
    OnlineContrastiveLoss,
    TripletLoss,
)

st_losses = pytest.importorskip("sentence_transformers.sentence_transformer.losses")
st_util = pytest.importorskip("sentence_transformers.util")

N, D = 7, 12  # odd sizes: AnglE pads an odd width


class TableModel(nn.Module):
    """ST's view of a model: features -> {"sentence_embedding": the table's rows named by input_ids[:, 0]}."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        from tokenizers import Tokenizer, models
        from transformers import PreTrainedTokenizerFast

        self.table = table
        # GISTEmbedLoss reads the tokenizers only to decide whether the guide must retokenize (it must not)
        self.tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, "[UNK]")))
        self.max_seq_length = 8

    def forward(self, features):
        return {"sentence_embedding": self.table[features["input_ids"][:, 0]]}


def make_batch(columns, labels=None, same=(), seed=0, width=D):
    """A batch of N rows whose text (column c, row i) is row c * N + i of a random table; ``same`` lists
    ((c, i), (c2, i2)) pairs whose texts are identical (one table row, one text id)."""
    generator = torch.Generator().manual_seed(seed)
    table = torch.randn(len(columns) * N, width, generator=generator).requires_grad_()
    ids = [torch.arange(c * N, (c + 1) * N) for c in range(len(columns))]
    for (c, i), (c2, i2) in same:
        ids[c2][i2] = ids[c][i]
    inputs = [{"input_ids": column_ids[:, None], "attention_mask": torch.ones(N, 1, dtype=torch.long)}
              for column_ids in ids]
    return PairBatch(list(columns), inputs, [column_ids.clone() for column_ids in ids], labels), table


def lookup(table):
    return lambda inputs: table[inputs["input_ids"][:, 0]]


def assert_equal_to_st(loss, st_loss_class, batch, table, **st_kwargs):
    """Our loss and ST's, value and gradient with respect to the table, to 1e-5."""
    value = loss(lookup(table), batch)
    (grad,) = torch.autograd.grad(value, table)
    reference = st_loss_class(TableModel(table), **st_kwargs)
    expected = reference([dict(inputs) for inputs in batch.inputs], batch.labels)
    (expected_grad,) = torch.autograd.grad(expected, table)
    torch.testing.assert_close(value, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grad, expected_grad, atol=1e-5, rtol=1e-5)
    assert grad.abs().sum() > 0


def stacked(batch, pairs, labels=None):
    """ST's view of ``batch`` as one batch of pairs or triplets: each tuple of ``pairs`` names a column per
    role, and the rows of those columns are stacked (what ours reads as k negatives, ST reads as k rows)."""
    inputs = [{key: torch.cat([batch.inputs[batch.columns.index(c)][key] for c in column])
               for key in batch.inputs[0]} for column in zip(*pairs)]
    return inputs, labels


def assert_stacked_equal_to_st(loss, st_loss_class, batch, table, pairs, labels=None, **st_kwargs):
    """Our loss on ``batch`` and ST's on :func:`stacked`, value and gradient, to 1e-5."""
    value = loss(lookup(table), batch)
    (grad,) = torch.autograd.grad(value, table)
    expected = st_loss_class(TableModel(table), **st_kwargs)(*stacked(batch, pairs, labels))
    (expected_grad,) = torch.autograd.grad(expected, table)
    torch.testing.assert_close(value, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grad, expected_grad, atol=1e-5, rtol=1e-5)


def scores(seed=1, ties=False):
    labels = torch.rand(N, generator=torch.Generator().manual_seed(seed))
    return (labels * 3).round() / 3 if ties else labels


def binary(seed=1):
    return torch.tensor([1.0, 0, 1, 1, 0, 0, 1])[torch.randperm(N, generator=torch.Generator().manual_seed(seed))]


PAIR = ("anchor", "positive")
TRIPLET = ("anchor", "positive", "negative_1")
FIVE = ("anchor", "positive", "negative_1", "negative_2", "negative_3")


@pytest.mark.parametrize("similarity, st_fct", [("cosine", "pairwise_cos_sim"), ("dot", "pairwise_dot_score"),
                                                ("euclidean", "pairwise_euclidean_sim")])
@pytest.mark.parametrize("ties", [False, True])
def test_cosent(similarity, st_fct, ties):
    batch, table = make_batch(PAIR, scores(ties=ties))
    scale = 20.0 if similarity == "cosine" else 0.5
    assert_equal_to_st(CoSENTLoss(scale, similarity), st_losses.CoSENTLoss, batch, table,
                       scale=scale, similarity_fct=getattr(st_util, st_fct))


@pytest.mark.parametrize("columns, labels, width", [(PAIR, scores(ties=True), D), (PAIR, scores(), D - 1),
                                                    (TRIPLET, None, D), (FIVE, scores(), D)])
def test_angle(columns, labels, width):
    batch, table = make_batch(columns, labels, width=width)
    assert_equal_to_st(AnglELoss(scale=10.0), st_losses.AnglELoss, batch, table, scale=10.0)


def test_cosent_with_negatives_scores_each_pair():
    # ST's CoSENTLoss ignores a third column; ours reads (anchor, negative_j) as a pair scored 1 - label
    labels = scores()
    batch, table = make_batch(FIVE, labels)
    pairs = [("anchor", "positive"), ("anchor", "negative_1"), ("anchor", "negative_2"), ("anchor", "negative_3")]
    assert_stacked_equal_to_st(CoSENTLoss(), st_losses.CoSENTLoss, batch, table, pairs,
                               torch.cat([labels, (1 - labels).repeat(3)]))


def test_cosine_similarity():
    batch, table = make_batch(PAIR, scores() * 2 - 1)
    assert_equal_to_st(CosineSimilarityLoss(), st_losses.CosineSimilarityLoss, batch, table)


@pytest.mark.parametrize("distance, margin", [("euclidean", 5.0), ("cosine", 0.3), ("manhattan", 13.0)])
def test_triplet(distance, margin):
    metric = getattr(st_losses.TripletDistanceMetric, distance.upper())
    batch, table = make_batch(TRIPLET)
    assert_equal_to_st(TripletLoss(margin, distance), st_losses.TripletLoss, batch, table,
                       distance_metric=metric, triplet_margin=margin)


def test_triplet_with_negatives_averages_every_triplet():
    batch, table = make_batch(FIVE)
    pairs = [("anchor", "positive", f"negative_{j}") for j in (1, 2, 3)]
    assert_stacked_equal_to_st(TripletLoss(), st_losses.TripletLoss, batch, table, pairs)


@pytest.mark.parametrize("distance, margin", [("cosine", 0.5), ("euclidean", 5.0), ("manhattan", 14.0)])
@pytest.mark.parametrize("size_average", [True, False])
def test_contrastive(distance, margin, size_average):
    metric = getattr(st_losses.SiameseDistanceMetric, "COSINE_DISTANCE" if distance == "cosine" else distance.upper())
    batch, table = make_batch(PAIR, binary())
    assert_equal_to_st(ContrastiveLoss(margin, distance, size_average), st_losses.ContrastiveLoss, batch, table,
                       distance_metric=metric, margin=margin, size_average=size_average)


@pytest.mark.parametrize("labels", [binary(1), binary(2), torch.ones(N), torch.zeros(N)])
def test_online_contrastive(labels):
    batch, table = make_batch(PAIR, labels)
    assert_equal_to_st(OnlineContrastiveLoss(margin=1.0), st_losses.OnlineContrastiveLoss, batch, table, margin=1.0)


@pytest.mark.parametrize("columns, width", [(TRIPLET, None), (TRIPLET, 1), (TRIPLET, 2), (FIVE, 3), (FIVE, 4)])
def test_margin_mse(columns, width):
    teacher = torch.randn(N, width or 1, generator=torch.Generator().manual_seed(3)) * 4
    batch, table = make_batch(columns, teacher[:, 0] if width is None else teacher)
    assert_equal_to_st(MarginMSELoss(), st_losses.MarginMSELoss, batch, table)


@pytest.mark.parametrize("columns, temperature, similarity, st_fct", [
    (TRIPLET, 1.0, "dot", "pairwise_dot_score"), (FIVE, 2.5, "dot", "pairwise_dot_score"),
    (FIVE, 0.05, "cosine", "pairwise_cos_sim")])
def test_distill_kl_div(columns, temperature, similarity, st_fct):
    teacher = torch.randn(N, len(columns) - 1, generator=torch.Generator().manual_seed(4)) * 3
    teacher[2, -1] = float("-inf")  # a candidate the teacher rules out
    batch, table = make_batch(columns, teacher)
    assert_equal_to_st(DistillKLDivLoss(temperature, similarity), st_losses.DistillKLDivLoss, batch, table,
                       temperature=temperature, similarity_fct=getattr(st_util, st_fct))


@pytest.mark.parametrize("columns", [PAIR, TRIPLET])
@pytest.mark.parametrize("guide", ["same", "other"])
@pytest.mark.parametrize("strategy, margin, contrast", [("absolute", 0.0, True), ("absolute", 0.1, False),
                                                        ("relative", 0.2, True)])
def test_gist(columns, guide, strategy, margin, contrast):
    batch, table = make_batch(columns)
    # a guide near the student (its own noise), so it filters some candidates and keeps others
    noise = torch.randn(table.shape, generator=torch.Generator().manual_seed(5))
    guide_table = table.detach() if guide == "same" else table.detach() + 0.8 * noise
    options = dict(temperature=0.05, margin_strategy=strategy, margin=margin, contrast_anchors=contrast,
                   contrast_positives=contrast)
    loss = GISTEmbedLoss(lookup(guide_table), **options)
    assert_equal_to_st(loss, st_losses.GISTEmbedLoss, batch, table, guide=TableModel(guide_table), **options)


def test_gist_with_negatives_adds_a_block_each():
    # ST takes one negative column; ours a block per negative column. Anchors given again as negative_2
    # (their own text ids) must then score as ST's anchor-anchor block does
    columns = ("anchor", "positive", "negative_1", "negative_2")
    batch, table = make_batch(columns, same=[((0, i), (3, i)) for i in range(N)])
    guide_table = table.detach() + 0.8 * torch.randn(table.shape, generator=torch.Generator().manual_seed(5))
    loss = GISTEmbedLoss(lookup(guide_table), temperature=0.05, margin=0.05, contrast_anchors=False)
    assert_stacked_equal_to_st(loss, st_losses.GISTEmbedLoss, batch, table, [("anchor", "positive", "negative_1")],
                               guide=TableModel(guide_table), temperature=0.05, margin=0.05)


def test_gist_masks_duplicates_by_text():
    # row 4's positive is row 1's text, row 5's anchor is row 2's positive text, and a negative is row 0's anchor
    same = [((1, 1), (1, 4)), ((1, 2), (0, 5)), ((0, 0), (2, 6))]
    batch, table = make_batch(TRIPLET, same=same)
    # ST (guide = student) drops a candidate the guide scores above the positive minus its margin: a margin of
    # 1e-6 drops the identical texts (which score exactly as the positive) and nothing else in this batch
    loss = GISTEmbedLoss(lookup(table.detach()), temperature=0.05, margin=0.0)
    assert_equal_to_st(loss, st_losses.GISTEmbedLoss, batch, table, guide=TableModel(table.detach()),
                       temperature=0.05, margin=1e-6)


def test_duplicate_mask():
    anchor, positive, candidates = torch.tensor([0, 1, 2]), torch.tensor([10, 11, 12]), torch.tensor([10, 11, 10, 2])
    expected = torch.tensor([[True, False, True, False], [False, True, False, False], [False, False, False, True]])
    assert torch.equal(same_text((anchor, positive), candidates), expected)


def refused(loss, batch) -> str:
    _, table = make_batch(batch.columns)
    with pytest.raises(ValueError) as info:
        loss(lookup(table), batch)
    message = str(info.value)
    assert "\n" not in message and type(loss).__name__ in message
    return message


@pytest.mark.parametrize("loss", [CoSENTLoss(), AnglELoss(), CosineSimilarityLoss(), ContrastiveLoss(),
                                  OnlineContrastiveLoss()])
def test_pair_losses_refuse_bad_labels(loss):
    assert "needs labels" in refused(loss, make_batch(PAIR)[0])
    assert "row 3" in refused(loss, make_batch(PAIR, binary().index_fill(0, torch.tensor([3]), float("nan")))[0])
    assert "row 3" in refused(loss, make_batch(PAIR, binary().index_fill(0, torch.tensor([3]), float("inf")))[0])
    assert f"[{N}, 2]" in refused(loss, make_batch(PAIR, torch.zeros(N, 2))[0])


def test_refusals():
    assert "labels 0 or 1" in refused(ContrastiveLoss(), make_batch(PAIR, scores())[0])
    assert "missing ['negative_1']" in refused(TripletLoss(), make_batch(PAIR)[0])
    assert "missing ['positive']" in refused(CoSENTLoss(), make_batch(("anchor", "negative_1"), scores())[0])
    assert "no negative column" in refused(MarginMSELoss(), make_batch(PAIR, scores())[0])
    assert "needs labels" in refused(MarginMSELoss(), make_batch(TRIPLET)[0])
    assert "[7, 3]" in refused(MarginMSELoss(), make_batch(TRIPLET, torch.zeros(N, 3))[0])
    assert "[7, 3]" in refused(MarginMSELoss(), make_batch(FIVE, torch.zeros(N))[0])
    assert "[7, 2]" in refused(DistillKLDivLoss(), make_batch(TRIPLET, torch.zeros(N))[0])
    assert "not all -inf" in refused(DistillKLDivLoss(), make_batch(TRIPLET, torch.full((N, 2), float("-inf")))[0])
    assert "row 0" in refused(DistillKLDivLoss(), make_batch(TRIPLET, torch.full((N, 2), float("nan")))[0])
    assert "needs labels" in refused(DistillKLDivLoss(), make_batch(TRIPLET)[0])
    with pytest.raises(ValueError, match="margin_strategy"):
        GISTEmbedLoss(lookup(torch.zeros(1, 1)), margin_strategy="cosine")
    with pytest.raises(ValueError, match="temperature must be a positive"):
        GISTEmbedLoss(lookup(torch.zeros(1, 1)), temperature=0.0)
    with pytest.raises(ValueError, match="distance must be one of"):
        TripletLoss(distance="dot")
