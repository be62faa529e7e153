"""Gradient-norm clipping whose result does not depend on the number of threads.

``torch.nn.utils.clip_grad_norm_`` takes each gradient's norm as a reduction to one number, which torch's CPU
kernels split into per-thread partial sums once a tensor has 32,768 elements or more: the norm, hence the
clipping factor and every clipped step, then differs in the last bits between 1 and 2 threads. Here each
gradient is cut into rows of :data:`ROW` elements, whose squares torch sums one row per thread (a reduction
to many numbers is split across threads by rows only), and the rows' sums are added exactly
(``math.fsum``), so the total is the same whatever the thread count or the order. Off the CPU (CUDA), or with
gradients on several devices, torch's own function is used.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

#: elements per row: below torch's parallel grain (32,768), so one row is always summed by one thread
ROW = 8192


def _squares(grad: torch.Tensor) -> list[float]:
    """The sums of squares of ``grad``'s rows of :data:`ROW` elements (float32, as torch's norm), in order."""
    flat = grad.detach().reshape(-1).float()
    whole = flat.numel() - flat.numel() % ROW
    sums = [flat[:whole].view(-1, ROW).square().sum(1)] if whole else []
    if whole < flat.numel():
        sums.append(flat[whole:].square().sum().reshape(1))
    return torch.cat(sums).tolist() if sums else []


def clip_grad_norm(parameters: Iterable[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale the gradients of ``parameters`` in place so that their joint L2 norm is at most ``max_norm``, as
    ``torch.nn.utils.clip_grad_norm_`` (factor ``max_norm / (norm + 1e-6)``, clamped at 1; a non-finite norm
    makes the gradients non-finite too). Returns the norm before clipping, a float32 scalar tensor."""
    parameters = [p for p in parameters if p.grad is not None]
    if not parameters:
        return torch.zeros(())
    if any(p.grad.device.type != "cpu" for p in parameters):
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    grads = [p.grad for p in parameters]
    total = math.sqrt(math.fsum(s for g in grads for s in _squares(g)))
    factor = max_norm / (total + 1e-6)  # inf -> 0, nan -> nan: as torch's
    if not factor >= 1.0:
        torch._foreach_mul_(grads, factor)
    return torch.tensor(total, dtype=torch.float32)
