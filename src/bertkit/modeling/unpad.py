"""Unpadded execution: the encoder runs on a batch's real tokens only.

With a padding mask ``[B, L]``, the embeddings and every position-wise part of a layer (the
projections, the feed-forward block, LayerNorms, dropout) run on the packed real tokens ``[N, H]``
(``N`` = number of real tokens); attention alone needs the sequences apart, so each layer scatters
its queries, keys and values back to ``[B, L, ...]`` for one masked SDPA call and gathers the context
again: exact, and cheap where attention is a small share of the work (below ~512 tokens). Per-length
buckets or jagged tensors would skip the padded keys too; they are not measured yet. Outputs at real positions
equal the padded path's; at padding positions they are 0 (the padded path computes values there
that carry no meaning). Gradients flow through the gathers, so training uses it too.

The packed row count is rounded up (:func:`~bertkit.modeling.fast.bucket_rows`, at most 1/32 more) by
carrying some padding positions along as rows that :meth:`Packing.unpack` drops: every activation of a
step is then one of a few sizes, which the memory allocator reuses step after step. Sized by each batch's
own token count, training's resident set grew by its freed-and-fragmented heap (issue 28).

:func:`plan` decides: a 2-D boolean mask, enough padding (``settings().min_padding``), the fast
path on. The backbone calls it; layers receive the :class:`Packing` and ask it to ``pack``/``unpack``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from bertkit.modeling.fast import bucket_rows, settings, tracing


@dataclass
class Packing:
    """Where a batch's real tokens sit.

    ``index [N']``: the real tokens' positions in the flattened ``[B * L]`` batch, in order, then
    ``N' - N`` padding positions carried along to round the row count (``real`` = N);
    ``keys [B, 1, 1, L]``: the attention mask (True = a real key) for the padded attention call;
    ``first [B]``: each row's position-0 token in the packed order (valid when every row starts
    with a real token, ``starts_real``).
    """

    index: torch.Tensor
    batch: int
    length: int
    keys: torch.Tensor
    first: torch.Tensor
    starts_real: bool
    real: int
    _sources: torch.Tensor | None = field(default=None, repr=False, compare=False)

    @property
    def tokens(self) -> int:
        """Rows of a packed tensor (real tokens and the padding carried along)."""
        return self.index.numel()

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, L, ...]`` (or ids broadcastable to ``[B, L]``) -> ``[N, ...]``."""
        if x.shape[:2] != (self.batch, self.length):
            x = x.expand(self.batch, self.length, *x.shape[2:])
        return x.reshape(self.batch * self.length, *x.shape[2:]).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """``[N', ...]`` -> ``[B, L, ...]`` with zeros at padding positions (differentiable)."""
        out = x.new_zeros(self.batch * self.length, *x.shape[1:])
        index = self.index
        if self.real != x.shape[0]:
            index, x = index[: self.real], x[: self.real]
        # in place: the out-of-place index_copy clones the zeros first, a third pass over [B, L, ...]
        return out.index_copy_(0, index, x).view(self.batch, self.length, *x.shape[1:])

    def spread(self, x: torch.Tensor) -> torch.Tensor:
        """``[N', ...]`` -> ``[B, L, ...]`` for the masked attention call: real positions hold their rows, padding
        positions some real row (finite, never zeroed): one gather, where :meth:`unpack` writes zeros first.
        Masked keys get probability 0 and padding queries' outputs are dropped (:meth:`pack`), so attention's
        results at real positions, and every gradient, are those of :meth:`unpack`'s zeros (differentiable)."""
        if x.shape[0] != self.tokens:
            raise ValueError(f"spread takes the packed rows [{self.tokens}, ...], got {tuple(x.shape)}.")
        if self._sources is None:  # [B * L]: each position's packed row; padding positions row 0
            sources = torch.zeros(self.batch * self.length, dtype=torch.long, device=self.index.device)
            self._sources = sources.index_copy_(0, self.index, torch.arange(self.tokens, device=sources.device))
        return x.index_select(0, self._sources).view(self.batch, self.length, *x.shape[1:])

    def first_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, H]`` -> ``[B, 1, H]``: each row's position-0 token."""
        return x.index_select(0, self.first).unsqueeze(1)


def plan(mask: torch.Tensor | None, keys: torch.Tensor, *, need_first: bool = False) -> Packing | None:
    """A :class:`Packing` for a boolean padding mask ``[B, L]``, or None to stay padded.

    ``keys [B, 1, 1, L]`` is the attention mask the backbone built from ``mask``
    (:func:`~bertkit.modeling.backbone.build_attention_mask`: rows with no real token open to every key).
    None when the fast path is off, the mask is not 2-D, or less than ``settings().min_padding``
    of the tokens is padding; also when ``need_first`` (the caller reads position 0 of each row
    alone) and some row starts with padding.
    """
    config = settings()  # data-dependent shapes stay out of graphs (traced, exported, compiled): padded there
    if not config.enabled or mask is None or mask.dim() != 2 or mask.dtype != torch.bool or tracing():
        return None
    b, length = mask.shape
    lengths = mask.sum(1)
    real = int(lengths.sum())
    if real in (0, b * length) or b * length - real < config.min_padding * b * length:
        return None
    starts_real = bool(mask[:, 0].all())
    if need_first and not starts_real:
        return None
    first = torch.cumsum(lengths, 0) - lengths  # with starts_real, position 0 is each row's first real token
    flat = mask.reshape(-1)
    index = flat.nonzero().squeeze(1)
    rows = min(bucket_rows(real), b * length)
    if rows > real:  # the first padding positions, carried along
        index = torch.cat([index, (~flat).nonzero().squeeze(1)[: rows - real]])
    return Packing(index=index, batch=b, length=length, keys=keys, first=first, starts_real=starts_real, real=real)


def query_rows(x: torch.Tensor, positions: slice, packing: Packing | None) -> torch.Tensor:
    """A pre-norm layer's residual rows at its query positions: ``x [B, L, H]`` at ``positions`` -> ``[B, n, H]``;
    packed ``x [N, H]`` -> each row's first token ``[B, 1, H]`` (the only positions a packed layer takes)."""
    if packing is None:
        return x[:, positions]
    if positions != slice(0, 1):
        raise ValueError("with unpadded execution only query_positions=slice(0, 1) is supported.")
    return packing.first_tokens(x)
