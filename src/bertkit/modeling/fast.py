"""The fast path's switches and its dense layer: GEMMs on the faster CPU backend, chosen from the hardware.

Every dense layer of the engine is a :class:`Linear`: an ``nn.Linear`` (same ``weight`` / ``bias``
parameters, same ``state_dict``) whose float32 CPU product runs on oneDNN's inner product instead of
torch's default BLAS. On some AMD CPUs MKL's sgemm reaches ~40 % of the FMA peak where oneDNN reaches
~90 %; on others the two are within ~10 %. The two round differently, so the backend decides the numbers
of every float32 run: it is **chosen from the hardware and the build, never by timing**
(:func:`hardware_gemm`): oneDNN where this torch has oneDNN's inner product and the CPU is x86-64 with
AVX2 or AVX-512 (its JIT kernels), the plain ``F.linear`` elsewhere. A choice measured per process would
flip under load (the two are within the noise of a busy machine on some CPUs), and a seeded run would then
give other weights. :func:`measure_gemm` still times both, for information (benchmarks).
Gradients run on the same backend (``x̄ = ḡ W``, ``W̄ = ḡᵀ x``, both as oneDNN products), so training
gains too.

What stays on ``F.linear``: CUDA and other devices (cuBLAS is right there), bfloat16/float16 (torch
already sends those to oneDNN on CPU), autocast regions, tracing / ONNX export / ``torch.compile``.

The fast path also drops padding before the encoder (:mod:`bertkit.modeling.unpad`) and draws dropout
masks faster than torch's CPU ``bernoulli_`` (:func:`dropout`). All are on by default and switched
together by :func:`fast_path` (a context manager) or :func:`set_fast_path`;
``BERTKIT_FAST_PATH=0`` turns them off, ``BERTKIT_GEMM=onednn|plain`` overrides the hardware's choice.
The settings are process-wide.

Inference may attach a prepacked kernel to a layer (``Linear.packed``, see :mod:`bertkit.inference`);
it is used whenever no gradient is needed for the layer's weight.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import platform
import statistics
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import nn

#: a measurement (:func:`measure_gemm`) calls oneDNN the faster when it is at least this much faster
MIN_GAIN = 1.05
GEMM_CHOICES = ("auto", "onednn", "plain")


@dataclass(frozen=True)
class FastPathSettings:
    """``enabled``: the fast path at all; ``gemm``: ``auto`` (measure) | ``onednn`` | ``plain``;
    ``min_padding``: drop padding when at least this fraction of a batch's tokens is padding."""

    enabled: bool = True
    gemm: str = "auto"
    min_padding: float = 0.05

    def __post_init__(self):
        if self.gemm not in GEMM_CHOICES:
            raise ValueError(f"gemm must be one of {GEMM_CHOICES}, got {self.gemm!r}.")
        if not 0.0 <= self.min_padding <= 1.0:
            raise ValueError(f"min_padding must be a fraction in [0, 1], got {self.min_padding!r}.")


def _from_environment() -> FastPathSettings:
    enabled = os.environ.get("BERTKIT_FAST_PATH", "1").strip().lower() not in ("0", "false", "no", "off")
    gemm = os.environ.get("BERTKIT_GEMM", "auto").strip().lower() or "auto"
    if gemm not in GEMM_CHOICES:
        raise ValueError(f"BERTKIT_GEMM must be one of {GEMM_CHOICES}, got {gemm!r}.")
    return FastPathSettings(enabled=enabled, gemm=gemm)


_settings = _from_environment()


@dataclass
class GemmMeasurement:
    """What :func:`measure_gemm` found: GFLOP/s of each backend on one float32 product (``chosen``: the faster
    by :data:`MIN_GAIN`; information only, ``auto`` never follows it)."""

    plain_gflops: float
    onednn_gflops: float
    shape: tuple[int, int, int]
    threads: int
    chosen: str = field(init=False)

    def __post_init__(self):
        self.chosen = "onednn" if self.onednn_gflops >= MIN_GAIN * self.plain_gflops else "plain"


def settings() -> FastPathSettings:
    """The current process-wide settings."""
    return _settings


def set_fast_path(enabled: bool | None = None, *, gemm: str | None = None,
                  min_padding: float | None = None) -> FastPathSettings:
    """Change the process-wide fast-path settings (None keeps a setting); returns the previous ones."""
    global _settings
    previous, _settings = _settings, _changed(enabled, gemm, min_padding)
    return previous


def _changed(enabled: bool | None, gemm: str | None, min_padding: float | None) -> FastPathSettings:
    """The current settings with the given (non-None) ones replaced, validated."""
    changes = {k: v for k, v in (("enabled", enabled), ("gemm", gemm), ("min_padding", min_padding))
               if v is not None}
    return replace(_settings, **changes)


@contextlib.contextmanager
def _applied(settings_: FastPathSettings) -> Iterator[None]:
    """Run a block under ``settings_``, restoring the settings it found."""
    global _settings
    previous, _settings = _settings, settings_
    try:
        yield
    finally:
        _settings = previous


def fast_path(enabled: bool = True, *, gemm: str | None = None, min_padding: float | None = None):
    """A context manager: run a block with the fast path on or off (``fast_path(False)``: the plain PyTorch path)."""
    return _applied(_changed(enabled, gemm, min_padding))


def pinned(fn):
    """``fn`` that runs under the settings current now, whenever it is called (gradient checkpointing
    recomputes a layer during backward, which must take the same kernels as the forward did)."""
    current = _settings

    def run(*args, **kwargs):
        with _applied(current):
            return fn(*args, **kwargs)

    return run


@functools.cache
def onednn_available() -> bool:
    """Whether this torch build has oneDNN and its inner-product operator."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


@functools.cache
def onednn_bf16_available() -> bool:
    """Whether oneDNN's inner product runs bfloat16 on this CPU: it needs AVX-512 (an AVX2 CPU has none, and
    asking builds no kernel: "could not create a primitive descriptor"), so a tiny product is tried once per
    process. Where it fails, bfloat16 products stay with torch's own (emulated) ones."""
    if not onednn_available():
        return False
    ones = torch.ones(2, 4, dtype=torch.bfloat16)
    try:
        return bool(onednn_linear(ones, ones.to_mkldnn(), None, bucket=False)[0, 0] == 4)
    except RuntimeError:
        return False


def measure_gemm(m: int = 512, k: int = 768, n: int = 1024, repeats: int = 7) -> GemmMeasurement:
    """Time ``F.linear`` against oneDNN's inner product on one float32 ``[m, k] x [k, n]``, interleaved."""
    g = torch.Generator().manual_seed(0)  # its own: measuring must not move the caller's random state
    x, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    runs = {"plain": lambda: F.linear(x, w), "onednn": lambda: onednn_linear(x, w, None)}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(repeats + 2):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            if i >= 2:  # the first two are warm-up
                times[name].append(time.perf_counter() - start)
    flops = 2.0 * m * k * n
    return GemmMeasurement(flops / statistics.median(times["plain"]) / 1e9,
                           flops / statistics.median(times["onednn"]) / 1e9, (m, k, n), torch.get_num_threads())


@functools.cache
def hardware_gemm() -> tuple[str, str]:
    """``(backend, reason)`` of ``auto``: from this torch build and the CPU, the same in every process on this
    machine whatever its load (no timing). oneDNN where its inner product exists and the CPU is x86-64 with
    AVX2 or AVX-512; ``plain`` (torch's BLAS) elsewhere."""
    machine = platform.machine().lower()
    capability = torch.backends.cpu.get_cpu_capability()
    if not onednn_available():
        return "plain", "this torch build has no oneDNN inner product"
    if machine in ("x86_64", "amd64") and capability in ("AVX2", "AVX512"):
        return "onednn", f"x86-64 with {capability}: oneDNN's inner product"
    return "plain", f"{machine} ({capability}): torch's BLAS (oneDNN is taken on x86-64 AVX2/AVX-512 only)"


def gemm_backend() -> str:
    """``onednn`` or ``plain``: the backend of float32 CPU products now (``auto``: :func:`hardware_gemm`)."""
    if not _settings.enabled or _settings.gemm == "plain" or not onednn_available():
        return "plain"
    if _settings.gemm == "onednn":
        return "onednn"
    return hardware_gemm()[0]


def gemm_reason() -> str:
    """Why :func:`gemm_backend` is what it is, in a few words (for ``run.json``, ``bertkit info``, ``/info``)."""
    if not _settings.enabled:
        return "the fast path is off (BERTKIT_FAST_PATH=0 or fast_path(False))"
    if _settings.gemm != "auto":
        return f"set to {_settings.gemm} (BERTKIT_GEMM or set_fast_path)"
    return hardware_gemm()[1]


class GemmChoice:
    """The float32 GEMM backend as checkpoint state (a ``Trainer`` ``stateful`` object): a resumed run keeps
    the backend its run used (the two round differently, so every later number would move), also when it is
    resumed on another machine whose hardware would choose the other one. Loading a state pins ``gemm``
    process-wide, unless the user chose one (``BERTKIT_GEMM``, :func:`set_fast_path`): then, as when the run's
    backend is missing here, a warning says that the resumed run cannot equal an uninterrupted one."""

    def state_dict(self) -> dict[str, str | None]:
        return {"gemm": gemm_backend()}

    def load_state_dict(self, state: dict[str, str | None]) -> None:
        choice = state.get("gemm")
        if choice not in GEMM_CHOICES[1:]:
            return
        if _settings.gemm == "auto" and (choice == "plain" or onednn_available()):
            set_fast_path(gemm=choice)
        elif choice != gemm_backend():
            warnings.warn(f"the run was trained with float32 products on {choice} and resumes on {gemm_backend()} "
                          f"({gemm_reason()}): the two round differently, so the resumed run will not equal an "
                          "uninterrupted one bit for bit; set BERTKIT_GEMM=" + choice + " to keep the run's.",
                          stacklevel=2)


#: activations a product can end with, fused into oneDNN's kernel (bit-identical to the unfused function)
ACTIVATIONS = {"gelu": F.gelu}


def bucket_rows(m: int) -> int:
    """``m`` rounded up to the next of 32 row counts per octave (multiples of 8 below 256): the row counts
    oneDNN sees.

    oneDNN builds and caches a kernel per operand shape (its primitive cache keeps up to 1,024), so products
    whose row count changes every step (unpadded batches: the number of real tokens; the MLM head: the
    number of masked positions) gather a kernel per new count: the resident set of a tiny model's
    pretraining grew from 0.5 to 1.5 GB over 300 steps (issue 28). Rounded, a run sees a few dozen counts,
    built once; the zero rows cost at most 1/32 of a product (1/64 on average).
    """
    granule = 1 << max(3, m.bit_length() - 6)
    return -(-m // granule) * granule


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    """2-D ``t`` with zero rows appended up to ``rows`` (``t`` itself when it has them)."""
    if t.shape[0] == rows:
        return t
    padded = t.new_zeros(rows, t.shape[1])
    padded[: t.shape[0]] = t
    return padded


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  activation: str | None = None, *, bucket: bool = True) -> torch.Tensor:
    """``act(x Wᵀ + b)`` by oneDNN's inner product (``weight`` dense or prepacked by ``to_mkldnn()``); no autograd.

    ``activation``: None or ``"gelu"`` (the exact erf GELU, as a oneDNN post-op). Operands that are neither
    row- nor column-major (a slice such as ``hidden[:, 0]``) are copied first: oneDNN's kernels for other
    strides run ~500x slower than the copy. ``bucket``: the product runs on :func:`bucket_rows` rows of
    ``x`` (zero rows appended, their outputs dropped), so a varying row count builds few kernels; off where
    the rows of ``x`` are a fixed dimension (features, in a weight gradient).
    """
    lead, features = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(-1, features) if x.dim() != 2 else x
    rows = x2.shape[0]
    if bucket:
        x2 = _pad_rows(x2, bucket_rows(rows))
    y = _inner_product(_dense(x2), _dense(weight), bias, activation)
    if y.shape[0] != rows:
        y = y[:rows]
    return y if x.dim() == 2 else y.reshape(*lead, y.shape[-1])


def onednn_sum_over_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``aᵀ b`` (``[M, p]``, ``[M, q]`` -> ``[p, q]``, a weight gradient) by oneDNN. ``M``, the summed length,
    varies with the batch: zero rows up to :func:`bucket_rows` ``(M)`` add nothing and keep the kernels few."""
    rows = bucket_rows(a.shape[0])
    return onednn_linear(_pad_rows(a, rows).t(), _pad_rows(b, rows).t(), None, bucket=False)


def _inner_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                   activation: str | None) -> torch.Tensor:
    """oneDNN's inner product on 2-D ``x`` (the one call every oneDNN product of bertkit goes through)."""
    if activation is None:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, activation, [], "none")


def _dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself when row-major or (2-D) column-major, else a row-major copy."""
    if t.is_mkldnn or t.is_contiguous() or (t.dim() == 2 and t.t().is_contiguous()):
        return t
    return t.contiguous()


#: the same activations in place, for a product's fresh output that no gradient needs (the same numbers)
INPLACE_ACTIVATIONS = {"gelu": torch.ops.aten.gelu_}


def activate(y: torch.Tensor, activation: str | None) -> torch.Tensor:
    """``y`` (a product's fresh output) through the named activation of :data:`ACTIVATIONS` (None: unchanged); in
    place where no gradient needs ``y``: inference then allocates no second ``[N, intermediate]`` tensor."""
    if activation is None:
        return y
    if not (torch.is_grad_enabled() and y.requires_grad) and not tracing():
        return INPLACE_ACTIVATIONS[activation](y)
    return ACTIVATIONS[activation](y)


class _OneDNNLinear(torch.autograd.Function):
    """``F.linear`` with forward and both gradients as oneDNN products (strided views, no copies)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return onednn_linear(x, weight, bias)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = onednn_linear(grad, weight.t(), None)  # [.., out] x [out, in] -> [.., in]
        if ctx.needs_input_grad[1] or (ctx.has_bias and ctx.needs_input_grad[2]):
            g2 = grad.reshape(-1, grad.shape[-1])  # [M, out]
            if ctx.needs_input_grad[1]:
                x2 = x.reshape(-1, x.shape[-1])  # [M, in]
                # oneDNN copies a transposed left operand: transpose the smaller of the two
                if weight.shape[0] > weight.shape[1]:  # out > in: (xᵀ g)ᵀ
                    grad_w = onednn_sum_over_rows(x2, g2).t()
                else:  # gᵀ x
                    grad_w = onednn_sum_over_rows(g2, x2)
            if ctx.has_bias and ctx.needs_input_grad[2]:
                grad_b = g2.sum(0)
        return grad_x, grad_w, grad_b


def tracing() -> bool:
    """Tracing, scripting, export or compile: graphs keep to standard operators."""
    return (torch.jit.is_tracing() or torch.jit.is_scripting() or torch.compiler.is_compiling()
            or torch.onnx.is_in_onnx_export())


def _plain_context(x: torch.Tensor) -> bool:
    """Places the fast products must stay out of: graphs, and autocast (which picks their dtype itself)."""
    return tracing() or torch.is_autocast_enabled(x.device.type)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
           activation: str | None = None) -> torch.Tensor:
    """``act(F.linear(x, weight, bias))`` on the fast backend when it applies (float32 on CPU, oneDNN chosen);
    the activation is fused into the product when no gradient is needed."""
    if (x.device.type != "cpu" or x.dtype != torch.float32 or weight.dtype != torch.float32 or x.dim() < 2
            or x.numel() == 0 or _plain_context(x) or gemm_backend() != "onednn"):
        return activate(F.linear(x, weight, bias), activation)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        return activate(_OneDNNLinear.apply(x, weight, bias), activation)
    return onednn_linear(x, weight, bias, activation)


class Linear(nn.Linear):
    """``nn.Linear`` on the fast path: same parameters, ``state_dict`` and results (float32 to ~1e-6 relative).

    ``packed``: an inference kernel attached by :func:`bertkit.inference.optimize_for_inference`
    (prepacked oneDNN weights, int8); called as ``packed(x, self, activation)`` whenever the weight needs no
    gradient and the fast path is on. It is not part of the ``state_dict``.
    """

    packed = None

    def forward(self, x: torch.Tensor, activation: str | None = None) -> torch.Tensor:
        """``act(x Wᵀ + b)``; ``activation``: None or a name in :data:`ACTIVATIONS`, fused where the kernel can."""
        if (self.packed is not None and _settings.enabled and not _plain_context(x)
                and not (torch.is_grad_enabled() and self.weight.requires_grad)):
            return self.packed(x, self, activation)
        return linear(x, self.weight, self.bias, activation)  # F.linear when the fast path is off


# ---------------------------------------------------------------------------- dropout
#: The fast dropout's probability resolution: each element's draw is 16 random bits.
DROPOUT_LEVELS = 1 << 16


def keep_mask(shape: torch.Size, p: float, device: torch.device | str = "cpu") -> tuple[torch.Tensor, float]:
    """``(keep, q)``: a bool mask keeping each element independently with probability ``1 - q``, where ``q`` is
    ``p`` rounded to a multiple of 2⁻¹⁶ (0.1 -> 0.10000610).

    Four elements per 64-bit draw of torch's generator (seeded by ``torch.manual_seed``): torch's CPU
    ``rand``/``bernoulli_`` draw one number per element serially, 12-17 % of a small BERT's pretraining
    step; this draws a quarter as many and compares 16-bit lanes, ~3x faster.
    """
    n = math.prod(shape)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(1 << 63), None)  # all 64 bits
    dropped = round(p * DROPOUT_LEVELS)
    keep = words.view(torch.int16)[:n] >= dropped - DROPOUT_LEVELS // 2  # P = 1 - dropped / 2^16
    return keep.view(shape), dropped / DROPOUT_LEVELS


class _Dropout(torch.autograd.Function):
    """Inverted dropout on :func:`keep_mask`'s mask, scaled by ``1 / (1 - q)``; the mask is kept as bool."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        keep, q = keep_mask(x.shape, p, x.device)
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - q)
        return torch.where(keep, x, 0).mul_(ctx.scale)  # x.mul(keep) first converts the mask: 3x slower

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor):
        (keep,) = ctx.saved_tensors
        return torch.where(keep, grad, 0).mul_(ctx.scale), None


def fast_dropout_applies(x: torch.Tensor, p: float, training: bool) -> bool:
    """Whether :func:`dropout` takes its fast kernel here (CPU, training, fast path on, ``p`` at least one
    2⁻¹⁶ step from 0 and 1)."""
    return (training and 1 <= round(p * DROPOUT_LEVELS) < DROPOUT_LEVELS and _settings.enabled
            and x.device.type == "cpu" and x.is_floating_point() and not tracing())


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout`` up to ``p``'s rounding to a multiple of 2⁻¹⁶ (:func:`keep_mask`): each element kept with
    probability ``1 - q`` and scaled by ``1 / (1 - q)``, so the expectation is exactly ``x``; ~3x faster than
    torch's CPU kernel. It draws from torch's generator differently, so a seeded run's masks differ from
    ``F.dropout``'s."""
    if not fast_dropout_applies(x, p, training):
        return F.dropout(x, p, training)
    return _Dropout.apply(x, p)


class Dropout(nn.Dropout):
    """``nn.Dropout`` through :func:`dropout` (the fast kernel on the fast path)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inplace:
            return F.dropout(x, self.p, self.training, inplace=True)
        return dropout(x, self.p, self.training)
