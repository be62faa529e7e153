"""SPLADE's max pooling for training, without the ``[B, L, V]`` logits or their dense gradient.

A SPLADE vector with max pooling is ``w_bv = f(max_t logit_btv)`` over the real tokens t of row b, where ``f`` is
``log1p(relu(.))`` (or a second ``log1p``): ``f`` never decreases, so the max can be taken on the logits before
``f``, giving the same vector. :class:`MaxLogits` computes ``max_t`` over whole rows a chunk of tokens at a time
(only the real tokens are projected onto the vocabulary: no padding, and a bounded ``[n, V]`` of logits alive)
and keeps which token won each vocabulary entry (the bias, the same for every token, is added after the max).
Its backward is then sparse: the gradient of ``w_bv`` reaches one token's logit, so the logits' gradient is a
sparse (CSR) matrix of ``B * V`` entries and both products with it (the decoder weight's and the hidden states'
gradients) cost ``O(B V H)`` instead of the dense ``O(B L V H)``. Gradients equal the plain path's (``amax`` over
``f(logits)``) except on exact ties between two tokens' logits, where ``amax`` splits the gradient and this gives
it to one of them.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn


class MaxLogits(torch.autograd.Function):
    """``[B, V]``: per row, the max over its real tokens (``mask``) of ``hidden @ weight.T + bias``."""

    #: the real tokens projected onto the vocabulary at once (bounds the ``[n, V]`` logits alive)
    chunk_tokens = 2048

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, mask: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
        rows, length = mask.shape
        flat = mask.reshape(-1).bool().nonzero().squeeze(1)  # the real tokens, row by row, as [B * L] positions
        counts = mask.bool().sum(dim=1).tolist()
        packed = hidden.reshape(rows * length, -1).index_select(0, flat)
        values, winners, begin = [], [], 0
        while begin < rows:  # whole rows, about chunk_tokens tokens at a time
            end, tokens = begin, 0
            while end < rows and (end == begin or tokens + counts[end] <= MaxLogits.chunk_tokens):
                tokens, end = tokens + counts[end], end + 1
            first = sum(counts[:begin])
            logits = packed[first:first + tokens] @ weight.t()  # [tokens, V]
            for part, offset in zip(logits.split(counts[begin:end]), torch.tensor(counts[begin:end]).cumsum(0)):
                value, index = part.max(dim=0)
                values.append(value)
                winners.append(flat[first + offset - part.shape[0] + index])
            begin = end
        winners = torch.stack(winners)  # [B, V]: the flat position of each row's winning token
        ctx.save_for_backward(hidden, weight, winners)
        ctx.has_bias = bias is not None
        values = torch.stack(values)
        return values + bias if bias is not None else values

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        hidden, weight, winners = ctx.saved_tensors
        grad = grad.to(hidden.dtype)
        # the logits' gradient G [B * L, V] holds grad[b, v] at (winners[b, v], v) and zeros elsewhere: built as CSR
        # matrices directly (no sort of the B * V entries), once by vocabulary entry and once by token
        with warnings.catch_warnings():  # torch calls its CSR tensors beta; these two products are all we ask of them
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
            return MaxLogits._backward(ctx, grad, hidden, weight, winners)

    @staticmethod
    def _backward(ctx, grad, hidden, weight, winners):
        rows, length, width = hidden.shape
        vocab = weight.shape[0]
        d_hidden = d_weight = d_bias = None
        if ctx.needs_input_grad[2]:  # G^T: vocabulary entry v's B entries lie in rows' order, as CSR wants them
            by_entry = torch.sparse_csr_tensor(torch.arange(0, vocab * rows + 1, rows, device=grad.device),
                                               winners.t().reshape(-1), grad.t().reshape(-1), (vocab, rows * length),
                                               check_invariants=False)
            d_weight = (by_entry @ hidden.reshape(rows * length, width)).to(weight.dtype)
        if ctx.needs_input_grad[0]:  # G: each row's entries ordered by their token
            order = winners.argsort(dim=1, stable=True)
            tokens = winners.gather(1, order).reshape(-1)
            starts = torch.zeros(rows * length + 1, dtype=torch.long, device=grad.device)
            starts[1:] = torch.bincount(tokens, minlength=rows * length).cumsum(0)
            by_token = torch.sparse_csr_tensor(starts, order.reshape(-1), grad.gather(1, order).reshape(-1),
                                               (rows * length, vocab), check_invariants=False)
            d_hidden = (by_token @ weight.to(hidden.dtype)).reshape(rows, length, width)
        if ctx.has_bias and ctx.needs_input_grad[3]:
            d_bias = grad.sum(dim=0)
        return d_hidden, None, d_weight, d_bias


def splade_max(mlm: nn.Module, splade: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
    """``[B, V]`` SPLADE vectors of a :class:`~bertkit.BERTForMaskedLM` ``mlm`` under a max-pooling
    :class:`~bertkit.sentence.modules.SpladePooling` ``splade``: equal to the pooling of the full logits, at the
    cost the module docstring says."""
    if splade.strategy != "max":
        raise ValueError(f"splade_max pools by max; this SpladePooling sums ({splade.strategy!r}).")
    sequence, _ = mlm.bert(input_ids, attention_mask, token_type_ids)
    head = mlm.cls.predictions
    pooled = MaxLogits.apply(head.transform(sequence), attention_mask, head.decoder.weight, head.decoder.bias)
    weights = torch.log1p(torch.relu(pooled.float()))
    return torch.log1p(weights) if splade.activation == "log1p_relu" else weights
