"""Making the ONNX graph of a model (torch.onnx's two exporters) and its int8 version (ONNX Runtime's quantizer),
with their chatter kept off the terminal.

``torch.onnx.export(..., dynamo=True)`` (torch.export) makes opset 18 and up; asked for 17 it exports 18 and
fails to convert it down, so opset 17 is the TorchScript exporter's, which also stands in (with a warning)
when torch.export fails. Neither result is trusted: :mod:`bertkit.export.onnx` verifies the graph.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit import devices
from bertkit.export.models import ExportedModule, Signature

logger = logging.getLogger("bertkit.export")

DYNAMO_MIN_OPSET = 18


#: the highest opset whose export ONNX Runtime runs: at 23 torch.onnx emits ONNX's Attention operator, whose CPU
#: kernel (ONNX Runtime 1.32) refuses the mask the graph gives it, so the export's own check fails
HIGHEST_VERIFIED_OPSET = 22


def max_opset(min_opset: int) -> int:
    """The highest ONNX opset bertkit exports: the lowest of torch.onnx's highest (``ONNX_MAX_OPSET``), the
    installed onnx package's (its own opset version) and :data:`HIGHEST_VERIFIED_OPSET`; never below
    ``min_opset``."""
    from torch.onnx import _constants

    highs = [getattr(_constants, "ONNX_MAX_OPSET", None)]
    with contextlib.suppress(ImportError):
        import onnx

        highs.append(onnx.defs.onnx_opset_version())
    highs = [high for high in highs if isinstance(high, int)] + [HIGHEST_VERIFIED_OPSET]
    return max(min_opset, min(highs))


def export_graph(module: ExportedModule, batch: dict[str, torch.Tensor], signature: Signature, opset: int,
                 max_length: int) -> tuple[bytes, str]:
    """``(serialized graph, exporter)``: ``module`` traced on ``batch`` (its inputs by name, in the order of the
    graph's inputs) with the axes of ``signature`` dynamic (sequences up to ``max_length``), by torch.export from
    opset 18, else by the TorchScript exporter."""
    names = tuple(batch)
    args = tuple(batch[name] for name in names)
    if opset >= DYNAMO_MIN_OPSET:
        try:
            with _quiet():
                return _export_dynamo(module, names, args, signature, opset, max_length), "dynamo"
        except Exception as error:  # any failure of torch.export: the other exporter is verified just the same
            logger.warning("torch.export could not export %s (%s: %s); using the TorchScript exporter instead.",
                           type(module.model).__name__, type(error).__name__, " ".join(str(error).split())[:300])
    with _quiet():
        return _export_torchscript(module, names, args, signature, opset), "torchscript"


def _export_dynamo(module: nn.Module, names: tuple[str, ...], args: tuple[torch.Tensor, ...], signature: Signature,
                   opset: int, max_length: int) -> bytes:
    dims = {axis: torch.export.Dim(axis, max=max_length if axis == "sequence" else None) for axis in signature.inputs}
    shapes = {name: {i: dims[axis] for i, axis in enumerate(signature.inputs)} for name in names}
    program = torch.onnx.export(module, args, None, input_names=list(names),
                                output_names=list(signature.outputs), dynamic_shapes=shapes, opset_version=opset,
                                dynamo=True, external_data=False, verbose=False)
    return program.model_proto.SerializeToString()


def _export_torchscript(module: nn.Module, names: tuple[str, ...], args: tuple[torch.Tensor, ...],
                        signature: Signature, opset: int) -> bytes:
    axes = {name: dict(enumerate(signature.inputs)) for name in names}
    axes.update({name: {i: axis for i, axis in enumerate(names) if axis} for name, names in signature.outputs.items()})
    buffer = io.BytesIO()
    torch.onnx.export(module, args, buffer, input_names=list(names), output_names=list(signature.outputs),
                      dynamic_axes=axes, opset_version=opset, dynamo=False)
    return buffer.getvalue()


def quantize_int8(source: Path, target: str, *, products_only: bool = False) -> None:
    """ONNX Runtime's dynamic quantization of ``source`` into ``target``: int8 weights, MatMul's per output
    channel (on all-MiniLM-L6-v2 half the error of one scale per matrix); ``products_only``: only the
    MatMul / Gemm weights (embedding tables stay float32, as in bertkit's int8 models). On a CPU whose int8
    products saturate (:func:`bertkit.devices.int8_saturates`: ONNX Runtime's AVX2 u8 x s8 kernel does too) the
    weights get 7 bits (``reduce_range``), as bertkit's int8 kernel does there."""
    quantization = require("onnxruntime.quantization")
    options = {"op_types_to_quantize": ["MatMul", "Gemm"]} if products_only else {}
    with _quiet():
        quantization.quantize_dynamic(source, target, per_channel=True, weight_type=quantization.QuantType.QInt8,
                                      reduce_range=devices.int8_saturates(), **options)


def require(module: str) -> Any:
    """Import ``module``; a missing package is an ImportError saying how to install the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"exporting to ONNX needs the {module.split('.')[0]} package ({error}): "
                          "pip install 'bertkit[onnx]'") from error


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Keep the exporters' and the quantizer's chatter (tracer warnings, torch.onnx's log, ONNX Runtime's
    advice to pre-process, logged on the root logger) off the terminal; errors still raise."""
    loggers = [logging.getLogger("torch.onnx"), logging.getLogger()]
    levels = [log.level for log in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for log in loggers:
                log.setLevel(logging.ERROR)
            yield
        finally:
            for log, level in zip(loggers, levels):
                log.setLevel(level)
