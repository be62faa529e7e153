"""The cached (GradCache) form of multiple-negatives ranking: a large batch's negatives in a small batch's memory.

``loss = cached(embed, batch)`` then ``loss.backward()``, as with any loss:

1. every column is embedded in mini-batches of ``mini_batch_size`` rows without gradient, saving the RNG
   state (CPU, and CUDA where the inputs are there) before each mini-batch;
2. the loss is computed on those embeddings and differentiated down to them (the cached gradients);
3. the returned scalar's backward re-embeds each mini-batch with gradient, under its saved RNG state (so
   dropout draws the same masks), and back-propagates the cached gradient times the incoming gradient.

Contract: only one mini-batch's activations are alive at a time. The parameter gradients after
``backward()`` are the plain loss's on the same embeddings: with dropout off, the plain loss's; with dropout
on, the plain loss's when its ``embed`` draws the same dropout masks, i.e. embeds each column in the same
mini-batches in the same order (a whole-column forward draws different masks). The gradient reaching the
returned tensor (gradient accumulation's ``1/k``, a loss scaler's factor) scales every replayed mini-batch.
The replay calls ``embed`` inside ``backward()``; DDP's reducer refuses a parameter that receives its
gradient several times in one backward, so under data parallelism run the model outside DDP (or in its
``no_sync()``) and average the gradients over the ranks after the backward: the Trainer does it with
``grad_sync="manual"``, which :class:`~bertkit.sentence.training.BiEncoder` declares for this loss. A loop of
your own may instead set ``on_replayed`` (an attribute of :class:`CachedMultipleNegativesRankingLoss`, called at
the end of the replay, inside ``backward()``). Each backward replays every mini-batch again, so call backward
once per forward.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from bertkit.sentence.batch import Embed, PairBatch
from bertkit.sentence.losses.contrastive import MultipleNegativesRankingLoss

#: ``objective(embeddings, batch) -> scalar``: a loss on one ``[n, d]`` tensor per column
Objective = Callable[[Sequence[torch.Tensor], PairBatch], torch.Tensor]


class RngState:
    """The CPU RNG state, and the CUDA one of ``device`` when it is a CUDA device, captured now and
    restored inside ``with state:`` (the RNG outside the block is left as it was)."""

    def __init__(self, device: torch.device):
        self.cuda = [device] if device.type == "cuda" else []
        self.cpu = torch.get_rng_state()
        self.gpu = [torch.cuda.get_rng_state(d) for d in self.cuda]

    def __enter__(self):
        self._fork = torch.random.fork_rng(devices=self.cuda)
        self._fork.__enter__()
        torch.set_rng_state(self.cpu)
        for device, state in zip(self.cuda, self.gpu):
            torch.cuda.set_rng_state(state, device)

    def __exit__(self, *exc):
        return self._fork.__exit__(*exc)


def _rows(inputs: Mapping[str, torch.Tensor], begin: int, end: int) -> dict[str, torch.Tensor]:
    return {key: value[begin:end] for key, value in inputs.items()}


class _ReplayOnBackward(torch.autograd.Function):
    """Returns ``value``; its backward calls ``replay(grad)`` (which back-propagates into the model itself)."""

    @staticmethod
    def forward(ctx, handle: torch.Tensor, value: torch.Tensor, replay: Callable[[torch.Tensor], None]):
        ctx.replay = replay
        return value.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        ctx.replay(grad)
        return None, None, None


def gradcache(embed: Embed, batch: PairBatch, objective: Objective, mini_batch_size: int,
              on_replayed: Callable[[], None] | None = None) -> torch.Tensor:
    """``objective`` on the embeddings of every column of ``batch``, computed as the module docstring says;
    ``on_replayed()`` is called once the backward's replay has back-propagated every mini-batch.

    Without gradients enabled (evaluation) it only embeds in mini-batches and returns the objective.
    """
    ranges = [(b, min(b + mini_batch_size, batch.rows)) for b in range(0, batch.rows, mini_batch_size)]
    states: list[RngState] = []
    columns = []
    with torch.no_grad():
        for inputs in batch.inputs:
            device = next(iter(inputs.values())).device
            parts = []
            for begin, end in ranges:
                states.append(RngState(device))
                parts.append(embed(_rows(inputs, begin, end)))
            columns.append(torch.cat(parts))
    if not torch.is_grad_enabled():
        return objective(columns, batch)
    leaves = [column.detach().requires_grad_() for column in columns]
    loss = objective(leaves, batch)
    cache = torch.autograd.grad(loss, leaves, allow_unused=True)

    def replay(grad: torch.Tensor) -> None:
        with torch.enable_grad():
            for c, (inputs, cached) in enumerate(zip(batch.inputs, cache)):
                if cached is None:  # the objective never read this column
                    continue
                for m, (begin, end) in enumerate(ranges):
                    with states[c * len(ranges) + m]:
                        part = embed(_rows(inputs, begin, end))
                    if part.requires_grad:  # a frozen encoder has nothing to back-propagate into
                        torch.autograd.backward(part, cached[begin:end] * grad)
        if on_replayed is not None:
            on_replayed()

    handle = torch.zeros((), requires_grad=True)  # gives the result a backward; never receives a gradient
    return _ReplayOnBackward.apply(handle, loss.detach(), replay)


class CachedMultipleNegativesRankingLoss(nn.Module):
    """:class:`~bertkit.sentence.losses.contrastive.MultipleNegativesRankingLoss` in GradCache form (module docstring):
    the same loss and gradients at the memory of ``mini_batch_size`` rows, for one more forward per row.

    ``mini_batch_size`` only bounds memory; the batch size (the number of in-batch negatives) is the batch's.
    ``on_replayed``: None, or a function called at the end of each backward's replay (module docstring).
    """

    def __init__(self, scale: float = 20.0, similarity: str = "cosine", symmetric: bool = False,
                 gather_across_ranks: bool = True, mini_batch_size: int = 32):
        super().__init__()
        if not (isinstance(mini_batch_size, int) and mini_batch_size > 0):
            raise ValueError(f"--mini-batch-size must be a positive integer, got {mini_batch_size!r}")
        self.plain = MultipleNegativesRankingLoss(scale, similarity, symmetric, gather_across_ranks)
        self.mini_batch_size = mini_batch_size
        self.on_replayed: Callable[[], None] | None = None

    def from_embeddings(self, embeddings: Sequence[torch.Tensor], batch: PairBatch) -> torch.Tensor:
        return self.plain.from_embeddings(embeddings, batch)

    def cached(self, embed: Embed, batch: PairBatch, objective: Objective) -> torch.Tensor:
        """Any ``objective`` on this loss's embeddings, cached (a wrapper such as Matryoshka passes its own)."""
        return gradcache(embed, batch, objective, self.mini_batch_size, self.on_replayed)

    def forward(self, embed: Embed, batch: PairBatch) -> torch.Tensor:
        return self.cached(embed, batch, self.from_embeddings)
