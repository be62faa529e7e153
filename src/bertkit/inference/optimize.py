"""Prepared dense-layer kernels and :func:`optimize_for_inference`, which attaches them."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from bertkit import devices
from bertkit.devices import native_bf16
from bertkit.inference.finite import CAUSES, NonFiniteOutput
from bertkit.inference.precision import ALIASES, FLOATS
from bertkit.inference.quantized import checkpoint_dtype, static_plan
from bertkit.modeling import fast
from bertkit.modeling.fast import Linear, activate, gemm_backend, onednn_available, onednn_bf16_available
from bertkit.modeling.quantization import dequantize_weight, dequantized_message, quantize_weight, seven_bit

#: what ``dtype=`` takes here (the float names of :mod:`bertkit.dtypes`, their aliases; None keeps the model's)
TORCH_DTYPES = {None: None, **FLOATS, **{alias: FLOATS[name] for alias, name in ALIASES.items()}}
QUANTIZE = (None, "int8")


class _Kernel:
    """A weight prepared once from ``layer.weight`` (or from the weights of a tuple of layers) and rebuilt when a
    parameter changes (new storage, an in-place update, another dtype). Never pickled or deep-copied: a copy
    prepares its own. ``name``: the layer's name in the model, for error messages."""

    def __init__(self, name: str = ""):
        self.name = name
        self._key = None
        self._prepared = None

    @staticmethod
    def key(layer: Linear) -> tuple:
        """What identifies the weight's current value: storage, in-place version, dtype, device."""
        w = layer.weight
        return w.data_ptr(), w._version, w.dtype, w.device

    def prepared(self, layer: Linear | tuple[Linear, ...]):
        key = self.key(layer)
        if key != self._key:
            with torch.no_grad():
                self._prepared = self.prepare(layer)
            self._key = key
        return self._prepared

    def prepare(self, layer: Linear):
        raise NotImplementedError

    def __deepcopy__(self, memo):
        return type(self)(self.name)

    def __getstate__(self):
        return {"name": self.name}

    def __setstate__(self, state):
        self.__init__(state.get("name", ""))

    def __repr__(self):
        return f"{type(self).__name__}()"


class PackedKernel(_Kernel):
    """oneDNN's inner product on the weight reordered once into oneDNN's layout (float32 or bfloat16, CPU)."""

    def prepare(self, layer: Linear):
        return layer.weight.detach().to_mkldnn()

    def __call__(self, x: torch.Tensor, layer: Linear, activation: str | None = None) -> torch.Tensor:
        w = layer.weight
        if x.device.type != "cpu" or x.dtype != w.dtype or w.device.type != "cpu" or x.dim() < 2 or not x.numel():
            return activate(F.linear(x, w, layer.bias), activation)
        return fast.onednn_linear(x, self.prepared(layer), layer.bias, activation)


class FusedPackedKernel(_Kernel):
    """oneDNN's inner product on several layers' weights (and biases) concatenated along the output and reordered
    once: the query, key and value projections of a self-attention as one product three times wider (~1.4x
    faster than three on a 2-core AVX512-BF16 CPU). Attached for bfloat16 only, where the sum order of a
    product is not part of the contract; float32 keeps its three products and their exact numbers."""

    @staticmethod
    def key(layers: tuple[Linear, ...]) -> tuple:
        return tuple(_Kernel.key(m) for m in layers)

    def prepare(self, layers: tuple[Linear, ...]):
        biased = [m.bias is not None for m in layers]
        if any(biased) and not all(biased):
            return None
        bias = torch.cat([m.bias.detach() for m in layers]) if all(biased) else None
        return torch.cat([m.weight.detach() for m in layers]).to_mkldnn(), bias

    def __call__(self, x: torch.Tensor, layers: tuple[Linear, ...]) -> torch.Tensor | None:
        """``[..., sum of out_features]``: the layers' outputs side by side, or None where the kernel does not apply
        (another dtype or device than the weights', a 1-D or empty input, some layers biased and others not)."""
        w = layers[0].weight
        if (x.device.type != "cpu" or w.device.type != "cpu" or x.dim() < 2 or not x.numel()
                or any(m.weight.dtype != x.dtype for m in layers)):
            return None
        prepared = self.prepared(layers)
        return None if prepared is None else fast.onednn_linear(x, *prepared)


class Int8Kernel(_Kernel):
    """int8 dynamic quantization: weights per output channel (symmetric) once, activations per call.

    The weights are :func:`bertkit.modeling.quantization.quantize_weight`'s (float32 scales), which an int8
    checkpoint stores: a model loaded from one prepares the very same int8 weights.

    Activations use the full 8-bit range on every CPU. Where 8-bit products saturate (x86 without VNNI,
    :func:`bertkit.devices.int8_saturates`) the weights run at 7 bits (:func:`seven_bit`) rather than the
    activations (torch's ``reduce_range``): all-MiniLM-L6-v2 on an AVX2 CPU, mean / min cosine to fp32 of 48
    paragraphs 0.990 / 0.984 with 7-bit weights, 0.976 / 0.954 with 7-bit activations, 0.992 / 0.984 at 8 bits
    saturating (0.55 off exact on a random layer), 0.993 / 0.989 for exact 8-bit arithmetic (VNNI). The 7 bits
    are the kernel's, made from the stored 8-bit weights: an int8 checkpoint is the same file on every CPU.
    """

    def prepare(self, layer: Linear):
        return self.prepack(layer.weight, layer.bias)

    @staticmethod
    def prepack(weight: torch.Tensor, bias: torch.Tensor | None):
        """fbgemm's packed int8 weight (and float bias) of a float ``weight``."""
        q, scales = quantize_weight(weight)  # float32 scales: an int8 checkpoint stores exactly these
        if devices.int8_saturates():
            q, scales = seven_bit(q, scales)
        with warnings.catch_warnings():  # torch marks the quantized tensor API deprecated; it is what fbgemm takes
            warnings.simplefilter("ignore", UserWarning)
            qweight = torch._make_per_channel_quantized_tensor(
                q, scales.double(), torch.zeros(q.shape[0], dtype=torch.long), 0)
        bias = bias.detach().float() if bias is not None else None
        return torch.ops.quantized.linear_prepack(qweight, bias)

    def __call__(self, x: torch.Tensor, layer: Linear, activation: str | None = None) -> torch.Tensor:
        if x.device.type != "cpu" or x.dtype != torch.float32 or not x.numel():
            return activate(F.linear(x, layer.weight, layer.bias), activation)
        try:
            out = torch.ops.quantized.linear_dynamic(x, self.prepared(layer), False)
        except RuntimeError:
            if bool(torch.isfinite(x).all()):
                raise
            # torch's own words ("In ChooseQuantizationParams, min should be less than or equal to max") say
            # nothing of the cause: a NaN or infinity from an earlier layer reached this one's activations
            raise NonFiniteOutput(f"the input of the int8 layer {self.name or 'dense'} is non-finite (NaN or "
                                  f"infinity): a layer before it overflowed; {CAUSES}.") from None
        return activate(out, activation)


class StaticInt8Kernel(Int8Kernel):
    """int8 static quantization (:mod:`bertkit.inference.int8_plan`): the weights as :class:`Int8Kernel`'s, the
    activations on a FIXED uint8 grid from calibration, ``q = clamp(round(x / scale) + zero_point, 0, 255)``; with
    a SmoothQuant vector ``smooth`` the product is ``(x / smooth)`` times the weight with its input columns
    multiplied by ``smooth`` (the same product in exact arithmetic, an easier range for the activations).

    Saves the dynamic kernel's per-call range search over the activations; the output is float32 (fbgemm
    dequantizes the int32 sums), so no output quantization is added. ``x`` values outside the grid's range are
    clipped: the observer chose to (percentile, MSE) or saw none (min/max)."""

    def __init__(self, name: str = "", scale: float = 1.0, zero_point: int = 0, smooth: torch.Tensor | None = None):
        super().__init__(name)
        self.scale, self.zero_point = float(scale), int(zero_point)
        self.smooth = smooth
        self.inverse = None if smooth is None else torch.reciprocal(smooth.float())

    def prepare(self, layer: Linear):
        weight = layer.weight
        if self.smooth is not None:
            # smooth the int8 checkpoint's weight (the float weight through quantize_weight and back), not the float
            # one: a model loaded from that checkpoint then prepares the very same kernel weights
            weight = dequantize_weight(*quantize_weight(weight)) * self.smooth.to(weight)
        return self.prepack(weight, layer.bias)

    def __deepcopy__(self, memo):
        return type(self)(self.name, self.scale, self.zero_point, self.smooth)

    def __getstate__(self):
        return {"name": self.name, "scale": self.scale, "zero_point": self.zero_point, "smooth": self.smooth}

    def __setstate__(self, state):
        self.__init__(**state)

    def __repr__(self):
        smooth = "" if self.smooth is None else ", smooth"
        return f"{type(self).__name__}(scale={self.scale:.4g}, zero_point={self.zero_point}{smooth})"

    def __call__(self, x: torch.Tensor, layer: Linear, activation: str | None = None) -> torch.Tensor:
        if x.device.type != "cpu" or x.dtype != torch.float32 or not x.numel():
            return activate(F.linear(x, layer.weight, layer.bias), activation)
        if self.inverse is not None:
            x = x * self.inverse
        out = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
            x, self.scale, self.zero_point, self.prepared(layer))
        return activate(out, activation)


def float_kernel(model_dtype: torch.dtype) -> type[_Kernel] | None:
    """The float kernel class a CPU model of ``model_dtype`` gets (None: the eager product serves)."""
    if not onednn_available():
        return None
    if ((model_dtype == torch.bfloat16 and onednn_bf16_available())
            or (model_dtype == torch.float32 and gemm_backend() == "onednn")):
        return PackedKernel
    return None


def attach_static_int8(model: nn.Module, plan) -> nn.Module:
    """:func:`bertkit.inference.int8_plan.apply`: the plan's int8 layers get a :class:`StaticInt8Kernel`, every
    other dense layer the float32 kernel; in place, eval mode, CPU float32. Returns ``model``."""
    dense = {name: m for name, m in model.named_modules() if isinstance(m, Linear)}
    unknown = sorted(set(plan.layers) - set(dense))
    if unknown:
        raise ValueError(f"the static int8 plan names {unknown[0]!r}, which is not a dense layer of this "
                         f"{type(model).__name__} ({len(unknown)} such); calibrate this model: "
                         "bertkit.inference.int8_plan.calibrate(model, texts).")
    model.eval()
    weight = next(model.parameters())
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        raise ValueError(f"static int8 runs a float32 model on CPU; this one is {weight.dtype} on {weight.device}: "
                         "load it in float32 (dtype='fp32') on the CPU.")
    if "x86" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "x86"
    fallback = float_kernel(torch.float32)
    for name, module in dense.items():
        entry = plan.layers.get(name)
        if entry is not None and entry.mode == "int8":
            if entry.smooth is not None and entry.smooth.shape != (module.in_features,):
                raise ValueError(f"the static int8 plan's smooth vector for {name} has shape "
                                 f"{tuple(entry.smooth.shape)}, the layer takes {module.in_features} inputs; "
                                 "calibrate this model again.")
            module.packed = StaticInt8Kernel(name, entry.scale, entry.zero_point, entry.smooth)
        else:
            module.packed = fallback(name) if fallback is not None else None
    for module in model.modules():
        if hasattr(module, "fused_packed"):
            module.fused_packed = None
    return model


def optimize_for_inference(model: nn.Module, *, dtype: torch.dtype | str | None = None, quantize: str | None = None,
                           device: torch.device | str | None = None) -> nn.Module:
    """Prepare ``model`` (any bertkit model) for fast inference, in place; returns it, in eval mode.

    Args:
        dtype: None keeps the model's dtype (float32: exact to ~1e-6 relative of the eager model; int8 for a
            model loaded from an int8 checkpoint on the CPU, see :mod:`bertkit.inference.quantized`);
            ``torch.bfloat16`` (or ``"bf16"``) casts the model, for CPUs with native bf16 and GPUs (a
            warning where it would be emulated); ``torch.float16`` on GPUs. A dtype given for an int8
            checkpoint's model runs its dequantized weights in that dtype, with a warning.
        quantize: ``"int8"``: dynamic quantization of every dense layer (CPU, float32 only); its
            accuracy cost on a fine-tuned classifier is measured in ``benchmarks/run.py``.
        device: move the model there first.

    On CPU every :class:`~bertkit.modeling.fast.Linear` gets a prepared kernel: int8, or oneDNN on a
    weight reordered once (bfloat16 where oneDNN has bf16 kernels, see
    :func:`bertkit.modeling.fast.onednn_bf16_available`; float32 where this machine measures oneDNN faster, see
    :func:`bertkit.modeling.fast.gemm_backend`). On CUDA nothing is attached (cuBLAS serves). The
    kernels serve whenever no gradient is needed for a weight, never enter ``state_dict`` and are
    rebuilt when a weight changes; the fast path's unpadded execution applies as always.
    """
    if dtype not in TORCH_DTYPES and not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be None, a torch dtype or one of {[k for k in TORCH_DTYPES if k]}, "
                         f"got {dtype!r}.")
    dtype = TORCH_DTYPES.get(dtype, dtype)
    if quantize not in QUANTIZE:
        raise ValueError(f"quantize must be one of {QUANTIZE}, got {quantize!r}.")
    if device is not None:
        model.to(device)
    model.eval()
    target = next(model.parameters()).device
    if checkpoint_dtype(model) == "int8" and quantize is None:
        if dtype is None and target.type == "cpu":
            quantize = "int8"  # an int8 checkpoint's model keeps its dtype: int8 (a CPU kernel)
        else:
            warnings.warn(dequantized_message(f"{type(model).__name__} (dtype={dtype}, on {target.type})"),
                          stacklevel=2)
    if quantize == "int8":
        if target.type != "cpu":
            raise ValueError(f"quantize='int8' runs on CPU; the model is on {target}. Move it with device='cpu'.")
        if dtype not in (None, torch.float32):
            raise ValueError(f"quantize='int8' takes a float32 model; got dtype={dtype}. Leave dtype unset.")
        if "x86" in torch.backends.quantized.supported_engines:
            torch.backends.quantized.engine = "x86"
        plan = static_plan(model)
        if plan is not None:  # a static int8 checkpoint's model: its calibrated kernels, not dynamic ones
            return attach_static_int8(model, plan)
    if dtype is not None:
        if dtype in (torch.bfloat16, torch.float16) and target.type == "cpu" and not (
                dtype == torch.bfloat16 and native_bf16("cpu")):
            warnings.warn(f"this CPU has no native {dtype} arithmetic: it is emulated and slower than float32.",
                          stacklevel=2)
        model.to(dtype)
    model_dtype = next(model.parameters()).dtype
    kernel = None
    if target.type == "cpu" and onednn_available():
        kernel = Int8Kernel if quantize == "int8" else float_kernel(model_dtype)
    fuse = kernel is PackedKernel and model_dtype == torch.bfloat16
    for name, module in model.named_modules():
        if isinstance(module, Linear):
            module.packed = kernel(name) if kernel is not None else None
        elif hasattr(module, "fused_packed"):  # a self-attention whose projections can run as one product
            module.fused_packed = FusedPackedKernel() if fuse else None
    return model
