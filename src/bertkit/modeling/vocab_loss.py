"""Cross-entropy over a vocabulary projection, fused: the masked-LM loss without its four score-sized tensors.

The MLM loss projects the labelled positions ``[N, H]`` onto the vocabulary ``[N, V]`` (V = 30,522 for
BERT) and takes a softmax cross-entropy. Written as ``F.cross_entropy(F.linear(...))`` it allocates and
sweeps ``[N, V]`` five times (scores, log-softmax, its gradient, the one-hot scatter, the scores'
gradient) and spends ~35 % of a small model's pretraining step there. :func:`linear_cross_entropy`
computes the scores once, turns them in place into ``softmax - one_hot`` (the scores' gradient up to a
per-row factor) row block by row block while they are in cache, and keeps that one tensor for the
backward pass, where it feeds the two gradient products. The losses are ``logsumexp - target score``
(exact for any score range), the predictions the row argmax, both from the same sweep.

The GEMMs run where the rest of the engine runs them: oneDNN for float32 when :mod:`bertkit.modeling.fast`
chose it, ``F.linear`` otherwise, and bfloat16 products under CPU bf16 autocast (the scores are float32
either way, as autocast gives ``cross_entropy``). Graphs (tracing, export, compile), other devices and
empty inputs take the unfused expression, as does everything with the fast path off (``BERTKIT_FAST_PATH=0``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertkit.modeling import fast

#: Rows per block of the in-place softmax: 16 x 30,522 float32 = 2 MB, resident in L2/L3 across its sweeps.
BLOCK_ROWS = 16


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                         targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(losses [N], predictions [N])``: the float32 cross-entropy of ``F.linear(x, weight, bias)`` against
    ``targets`` per row (no reduction), and each row's argmax.

    ``x`` is ``[N, H]``, ``weight`` ``[V, H]``, ``targets`` ``[N]`` with every value in ``[0, V)`` (callers
    select the labelled rows and validate them first). Gradients flow to ``x``, ``weight`` and ``bias``.
    """
    dtype = _compute_dtype(x, weight)
    if dtype is None:
        scores = fast.linear(x, weight, bias).float()
        return F.cross_entropy(scores, targets, reduction="none"), scores.argmax(-1)
    rows = x.shape[0]
    padded = fast.bucket_rows(rows)  # few sizes of the [N, V] scores (fp32 and bf16 alike): see bucket_rows
    if padded != rows:
        x = torch.cat([x, x.new_zeros(padded - rows, x.shape[1])])
        targets = torch.cat([targets, targets.new_zeros(padded - rows)])
    losses, predictions = _LinearCrossEntropy.apply(x, weight, bias, targets, dtype)
    return losses[:rows], predictions[:rows]


def _compute_dtype(x: torch.Tensor, weight: torch.Tensor) -> torch.dtype | None:
    """The products' dtype on the fused path, or None where the unfused expression runs."""
    if (not fast.settings().enabled or x.device.type != "cpu" or x.dim() != 2 or x.shape[0] == 0
            or fast.tracing()):
        return None
    if torch.is_autocast_enabled("cpu"):
        dtype = torch.get_autocast_dtype("cpu")
        return dtype if dtype == torch.bfloat16 else None
    return torch.float32 if x.dtype == weight.dtype == torch.float32 else None


def _product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` without autograd, on oneDNN for float32 when chosen; strided views welcome."""
    if x.dtype == torch.float32 and fast.gemm_backend() == "onednn":
        return fast.onednn_linear(x, weight, bias)
    return F.linear(x, weight, bias)


def _sum_over_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``aᵀ b`` over the labelled rows (a weight gradient), on oneDNN for float32 when chosen."""
    if a.dtype == torch.float32 and fast.gemm_backend() == "onednn":
        return fast.onednn_sum_over_rows(a, b)
    return F.linear(a.t(), b.t())


def softmax_minus_one_hot_(scores: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Overwrite float32 ``scores [N, V]`` with ``softmax(scores) - one_hot(targets)``; return the per-row
    losses ``logsumexp - scores[target]`` and argmax predictions computed on the way."""
    n = scores.shape[0]
    losses = torch.empty(n, dtype=torch.float32, device=scores.device)
    predictions = torch.empty(n, dtype=torch.long, device=scores.device)
    for start in range(0, n, BLOCK_ROWS):
        block, rows = scores[start:start + BLOCK_ROWS], slice(start, start + BLOCK_ROWS)
        best, predictions[rows] = block.max(1)
        target = block.gather(1, targets[rows, None]).squeeze(1)
        block.sub_(best[:, None]).exp_()
        total = block.sum(1)
        block.div_(total[:, None])
        losses[rows] = total.log_() + best - target
    scores[torch.arange(n, device=scores.device), targets] -= 1
    return losses, predictions


class _LinearCrossEntropy(torch.autograd.Function):
    """Forward: scores, then ``softmax - one_hot`` in place. Backward, for upstream ``g [N]``:
    ``dx = g * (P W)``, ``dW = Pᵀ (g * x)``, ``db = Pᵀ g``, with ``P`` the kept tensor."""

    @staticmethod
    def forward(ctx, x, weight, bias, targets, dtype):
        with torch.autocast("cpu", enabled=False):
            xc, wc = x.to(dtype), weight.to(dtype)
            scores = _product(xc, wc, None if bias is None else bias.to(dtype)).float()
            losses, predictions = softmax_minus_one_hot_(scores, targets)
        ctx.save_for_backward(xc, wc, scores)
        ctx.has_bias, ctx.x_dtype, ctx.weight_dtype = bias is not None, x.dtype, weight.dtype
        ctx.mark_non_differentiable(predictions)
        return losses, predictions

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_losses, _grad_predictions):
        x, weight, probs = ctx.saved_tensors
        g = grad_losses.float()
        grad_x = grad_w = grad_b = None
        p = probs.to(x.dtype)  # bf16: the rounding autocast applies to the scores' gradient
        if ctx.needs_input_grad[0]:
            grad_x = (_product(p, weight.t()).float() * g[:, None]).to(ctx.x_dtype)
        if ctx.needs_input_grad[1]:
            scaled = (x.float() * g[:, None]).to(x.dtype)
            # [H, V] then transposed to the weight's row-major layout once, so the (tied) parameter's
            # gradient sum and the optimizer read dense memory
            grad_w = _sum_over_rows(scaled, p).t().contiguous().to(ctx.weight_dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = torch.mv(probs.t(), g)
        return grad_x, grad_w, grad_b, None, None
