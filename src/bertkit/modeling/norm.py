"""LayerNorm whose gradients do not depend on the number of threads.

torch's CPU LayerNorm backward sums the weight and bias gradients over rows in per-thread partial sums, so
the same batch gives gradients that differ in the last bits with 1 thread and with 2 (measured: the only
parameters of a BERT whose gradients did; the GEMMs, SDPA, the embeddings and every other reduction of a
training step gave the same bits). Weights then drift apart over steps, and a seeded run would depend on
the thread count, which a busy machine makes one want to change. :class:`LayerNorm` is ``nn.LayerNorm``
(same parameters, ``state_dict`` and forward) whose backward on CPU computes the input's gradient with
torch's kernel (row by row: invariant) and the weight's and bias's as column sums of ``[N, H]`` matrices,
which torch splits across threads by columns only, so each column is summed in one fixed order.

It applies on CPU, on the fast path, when a parameter needs a gradient; elsewhere (CUDA, inference, the
fast path off, tracing) it is ``F.layer_norm``. Under CPU autocast it runs in float32, as autocast runs
``layer_norm``.
"""

from __future__ import annotations

import torch
from torch import nn

from bertkit.modeling import fast


class _LayerNorm(torch.autograd.Function):
    """``F.layer_norm`` over the last dimension with thread-count-invariant parameter gradients."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
        y, mean, rstd = torch.native_layer_norm(x, (x.shape[-1],), weight, bias, eps)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        width = x.shape[-1]
        grad = grad.contiguous()
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.ops.aten.native_layer_norm_backward(grad, x, [width], mean, rstd, weight, bias,
                                                               [True, False, False])[0]
        g2 = grad.reshape(-1, width)  # [N, H]
        if ctx.needs_input_grad[1]:
            normalized = (x.reshape(-1, width) - mean.reshape(-1, 1)) * rstd.reshape(-1, 1)  # [N, H]
            grad_w = (g2 * normalized).sum(0)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_b = g2.sum(0)
        return grad_x, grad_w, grad_b, None


def applies(x: torch.Tensor, weight: torch.Tensor | None) -> bool:
    """Whether :class:`LayerNorm` takes its invariant backward for ``x`` (see the module docstring)."""
    return (weight is not None and weight.requires_grad and torch.is_grad_enabled() and x.device.type == "cpu"
            and weight.dtype == torch.float32 and fast.settings().enabled and not fast.tracing())


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` whose CPU training gradients do not depend on the thread count (module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if len(self.normalized_shape) != 1 or not applies(x, self.weight):
            return super().forward(x)
        if torch.is_autocast_enabled("cpu"):  # autocast runs layer_norm in float32
            with torch.autocast("cpu", enabled=False):
                return _LayerNorm.apply(x.float(), self.weight, self.bias, self.eps)
        return _LayerNorm.apply(x, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """Root-mean-square norm (Llama's, EuroBERT's): ``weight * x / sqrt(mean(x ** 2) + eps)`` over the last
    dimension, no centring and no bias. The statistics are taken in float32 and the normalised ``x`` cast back to
    its dtype before the weight multiplies it, as HF's ``LlamaRMSNorm`` does (so bf16 rounds where HF's does)."""

    def __init__(self, hidden_size: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normalised = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normalised.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"
