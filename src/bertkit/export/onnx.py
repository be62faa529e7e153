"""Exporting a model to ONNX, verified against PyTorch on ONNX Runtime, optionally quantized to int8.

:func:`export_onnx` writes into a directory:

* ``model.onnx``: float32, inputs and outputs as :mod:`bertkit.export.models` lists them, the batch, sequence
  (and choices) axes dynamic;
* ``model.int8.onnx`` with ``quantize="int8"``: ONNX Runtime's dynamic quantization (int8 MatMul weights per
  output channel, int8 embedding tables; activations quantized per batch as it runs). An int8 checkpoint's
  model (:mod:`bertkit.weights.int8`) gets it without asking: its float graph holds the dequantized weights, which
  ORT re-quantizes (products only: bertkit keeps embeddings float32), and the report compares it with bertkit's
  own int8 kernels too. A static int8 model (a calibrated checkpoint's, or one carrying ``int8_plan``) gets its
  plan instead: QuantizeLinear / DequantizeLinear around each int8 product with the calibrated activation scales
  and bertkit's own int8 weights (:mod:`bertkit.export.qdq`), its float layers float;
* the tokenizer files (``vocab.txt`` or ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``)
  and ``config.json``;
  for a sentence-transformers model also its ``sentence_bert_config.json`` (``max_seq_length``, ``do_lower_case``),
  with the tokenizer's ``model_max_length`` set to ``max_seq_length``, so that truncating at the tokenizer's
  limit gives the model's embeddings;
* ``export.json``: the :class:`ExportReport` (inputs, outputs, opset, exporter, differences from PyTorch).

The graph is traced (:mod:`bertkit.export.exporters`) with the fast path off and the model in eval mode: plain
PyTorch operators on the padded batch (unpadded execution has data-dependent shapes and stays out of graphs).
It is then run by ONNX Runtime's CPU provider on the traced batch and on a second one of other sizes, each
with sequences of different lengths and padding, and compared with PyTorch (fast path off, the same padded
computation) on the same batches: a float32 difference above ``tolerance`` raises
:class:`ExportVerificationError` before anything is written. Files are written atomically, one by one.

onnx, onnxscript and onnxruntime are the optional extra ``bertkit[onnx]``, imported only when exporting.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertkit.config import BERTConfig
from bertkit.export.exporters import export_graph, max_opset, quantize_int8, require
from bertkit.export.models import (
    ExportedModule,
    Signature,
    described_by,
    input_names,
    load_for_export,
    sample_batch,
    signature_of,
)
from bertkit.export.qdq import static_int8_graph
from bertkit.inference.quantized import checkpoint_dtype, running_dtype, static_plan
from bertkit.io import atomic_write, atomic_write_text
from bertkit.modeling.fast import fast_path

TOLERANCE = 1e-4
DEFAULT_OPSET = 18
MIN_OPSET = 17
QUANTIZATIONS = ("int8",)
MODEL_FILE, INT8_FILE, REPORT_FILE = "model.onnx", "model.int8.onnx", "export.json"
SENTENCE_CONFIG = "sentence_bert_config.json"


class ExportVerificationError(RuntimeError):
    """ONNX Runtime's outputs differ from PyTorch's beyond the tolerance (or in shape)."""


@dataclass
class ExportReport:
    """What :func:`export_onnx` wrote and measured.

    ``inputs`` / ``outputs``: name -> axes (a name for a dynamic axis, None for a fixed one).
    ``max_abs_diff``: per output, the largest ``|ONNX Runtime - PyTorch|`` over both verification batches;
    ``int8_max_abs_diff`` the same for ``model.int8.onnx`` (None without it; held to no tolerance);
    ``int8_vs_bertkit_max_abs_diff``: ``model.int8.onnx`` against bertkit's own int8 kernels, for an int8 model
    (an int8 checkpoint's; None otherwise), per-token outputs at the texts' tokens (not padding, which bertkit's
    unpadded path leaves out). ``int8_activations``: ``"dynamic"`` (ONNX Runtime's quantization) or
    ``"static"`` (the model's calibrated plan, QDQ), None without ``model.int8.onnx``.
    ``tolerance``: what float32 was held to. ``seconds``: the whole export, loading included.
    """

    directory: Path
    model: str
    exporter: str
    opset: int
    inputs: dict[str, list[str]]
    outputs: dict[str, list[str | None]]
    max_abs_diff: dict[str, float]
    int8_max_abs_diff: dict[str, float] | None
    tolerance: float
    seconds: float
    int8_vs_bertkit_max_abs_diff: dict[str, float] | None = None
    int8_activations: str | None = None

    @property
    def onnx_path(self) -> Path:
        return self.directory / MODEL_FILE

    @property
    def int8_path(self) -> Path | None:
        return None if self.int8_max_abs_diff is None else self.directory / INT8_FILE

    def to_json(self) -> dict[str, Any]:
        """``export.json``'s record: the fields (files by name, not path) and the versions that made them."""
        record = {k: v for k, v in asdict(self).items() if k != "directory"}
        files = [MODEL_FILE] + ([INT8_FILE] if self.int8_path else [])
        versions = {name: require(name).__version__ for name in ("torch", "onnx", "onnxruntime")}
        return {"files": files, **record, "versions": versions}


def export_onnx(model_or_source: nn.Module | str | os.PathLike, directory: str | os.PathLike, *,
                task: str | None = None, opset: int = DEFAULT_OPSET, quantize: str | None = None,
                tokenizer: Any = None, tolerance: float = TOLERANCE) -> ExportReport:
    """Export a model to ``directory/model.onnx`` (see the module doc), verified; returns the report.

    ``model_or_source``: a bertkit model (BERT, a task model, a SentenceTransformer; float32 on the CPU,
    exported as it is) or anything bertkit loads (see :func:`bertkit.export.models.load_for_export`; ``task``
    chooses the class; its tokenizer is saved unless ``tokenizer`` is given). ``opset``: 17 up to
    :func:`~bertkit.export.exporters.max_opset` (what the installed torch.onnx and onnx export);
    ``quantize``: None or ``"int8"``. The model is left in the train/eval mode it was in.

    Raises ``ValueError`` for bad options or a model bertkit does not export, ``ImportError`` without the
    ``bertkit[onnx]`` extra, :class:`ExportVerificationError` when ONNX Runtime disagrees with PyTorch.
    """
    start = time.perf_counter()
    _check_options(opset, quantize, tolerance)
    for name in ("onnx", "onnxscript", "onnxruntime"):
        require(name)
    if isinstance(model_or_source, nn.Module):
        if task is not None:
            raise ValueError("task= chooses the class a source is loaded as; a model is exported as it is.")
        model = model_or_source
    else:
        model, loaded = load_for_export(model_or_source, task)
        tokenizer = loaded if tokenizer is None else tokenizer
    _check_exportable(model)
    int8_model = running_dtype(model) == "int8"  # an int8 checkpoint's model (or one optimized to int8)
    signature, bert = signature_of(model), described_by(model)  # a model bertkit does not export is refused here
    plan = static_plan(bert)
    if quantize is None and (checkpoint_dtype(model) == "int8" or plan is not None):
        quantize = "int8"  # an int8 checkpoint exports as one ORT runs int8
    batches = _batches(bert.config, signature)
    module = ExportedModule(model)
    with _evaluating(module), fast_path(False), torch.no_grad():
        expected = [[t.numpy() for t in module(**batch)] for batch in batches]
    with _evaluating(module), fast_path(True), torch.no_grad():  # bertkit's own int8 kernels run
        expected_int8 = [[t.numpy() for t in module(**batch)] for batch in batches] if int8_model else None
    with _evaluating(module), fast_path(False), torch.no_grad():
        graph, exporter = export_graph(module, batches[0], signature, opset, bert.config.max_position_embeddings)
    diffs = max_abs_diffs(graph, batches, expected, list(signature.outputs))
    bad = {name: diff for name, diff in diffs.items() if not diff <= tolerance}  # NaN fails too
    if bad:
        raise ExportVerificationError(f"the {exporter} exporter's graph of {type(model).__name__} disagrees with "
                                      f"PyTorch: max |ONNX Runtime - PyTorch| {_shown(bad)} exceeds {tolerance:g}.")

    directory = Path(directory)
    atomic_write(directory / MODEL_FILE, lambda tmp: Path(tmp).write_bytes(graph))
    int8_diffs = bertkit_diffs = activations = None
    if quantize == "int8" and plan is not None:  # the calibrated plan's numbers, not ORT's own quantization
        activations = "static"
        atomic_write(directory / INT8_FILE, lambda tmp: static_int8_graph(directory / MODEL_FILE, tmp,
                                                                          bert, plan))
    elif quantize == "int8":
        # an int8 model keeps its embeddings float32 in bertkit; ORT then quantizes only the products
        activations = "dynamic"
        atomic_write(directory / INT8_FILE, lambda tmp: quantize_int8(directory / MODEL_FILE, tmp,
                                                                      products_only=int8_model))
    if quantize == "int8":
        int8_diffs = max_abs_diffs(directory / INT8_FILE, batches, expected, list(signature.outputs))
        if expected_int8 is not None:  # at the texts' tokens: bertkit's unpadded path leaves padding out
            bertkit_diffs = max_abs_diffs(directory / INT8_FILE, batches, expected_int8, list(signature.outputs),
                                          tokens_only=signature.outputs)
    elif (directory / INT8_FILE).exists():  # an earlier export's: it would not match this model.onnx
        (directory / INT8_FILE).unlink()
    _save_tokenizer(tokenizer, model, directory)
    config = bert.config.to_hf_dict(architecture=bert.hf_architecture)
    atomic_write_text(directory / "config.json", json.dumps(config, indent=2, sort_keys=True) + "\n")
    report = ExportReport(directory, type(model).__name__, exporter, opset,
                          {name: list(signature.inputs) for name in input_names(bert.config)},
                          {name: list(axes) for name, axes in signature.outputs.items()}, diffs, int8_diffs,
                          tolerance, round(time.perf_counter() - start, 3), bertkit_diffs, activations)
    atomic_write_text(directory / REPORT_FILE, json.dumps(report.to_json(), indent=2) + "\n")
    return report


def _save_tokenizer(tokenizer: Any | None, model: nn.Module, directory: Path) -> None:
    """The tokenizer's files (when there is a tokenizer); for a sentence-transformers model its
    ``sentence_bert_config.json`` and the tokenizer's limit set to its ``max_seq_length`` (an earlier export's
    settings file is removed otherwise: it would describe another model)."""
    from bertkit.sentence import SentenceTransformer

    settings = directory / SENTENCE_CONFIG
    if isinstance(model, SentenceTransformer):
        atomic_write_text(settings, json.dumps({"max_seq_length": model.max_seq_length,
                                                "do_lower_case": model.layout.do_lower_case}, indent=2) + "\n")
        if tokenizer is not None:
            tokenizer = copy.copy(tokenizer)  # the caller's keeps its own limit
            tokenizer.model_max_length = model.max_seq_length
    elif settings.exists():
        settings.unlink()
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)


def max_abs_diffs(graph: bytes | str | os.PathLike, batches: list[dict[str, torch.Tensor]],
                  expected: list[list[np.ndarray]], names: list[str],
                  tokens_only: dict[str, list[str | None]] | None = None) -> dict[str, float]:
    """Per output, the largest ``|ONNX Runtime - expected|`` over ``batches`` (ONNX Runtime's CPU provider
    running ``graph``: serialized bytes or a path); ``tokens_only`` (output name -> axes): an output whose second
    axis is ``"sequence"`` is compared at the batch's tokens only (attention mask 1), not at padding. Raises
    :class:`ExportVerificationError` when the graph's inputs are not the batches' (by name, in order) or an
    output's shape differs from the expected one."""
    ort = require("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only
    options.intra_op_num_threads = torch.get_num_threads()
    session = ort.InferenceSession(graph if isinstance(graph, bytes) else os.fspath(graph), options,
                                   providers=["CPUExecutionProvider"])
    inputs, wanted = tuple(i.name for i in session.get_inputs()), tuple(batches[0])
    if inputs != wanted:
        raise ExportVerificationError(f"the exported graph takes {list(inputs)}, not {list(wanted)}.")
    diffs: dict[str, list[float]] = {name: [] for name in names}
    for batch, wanted in zip(batches, expected):
        got = session.run(names, {name: tensor.numpy() for name, tensor in batch.items()})
        for name, ours, theirs in zip(names, got, wanted):
            if ours.shape != theirs.shape:
                raise ExportVerificationError(f"{name}: ONNX Runtime gives shape {list(ours.shape)}, PyTorch "
                                              f"{list(theirs.shape)} (inputs {list(batch['input_ids'].shape)}).")
            difference = np.abs(ours - theirs)
            axes = (tokens_only or {}).get(name) or []
            if len(axes) > 1 and axes[1] == "sequence" and batch["attention_mask"].dim() == 2:
                difference = difference[batch["attention_mask"].numpy().astype(bool)]
            diffs[name].append(float(difference.max()))
    return {name: float(np.max(values)) for name, values in diffs.items()}  # np.max keeps a NaN


def _batches(config: BERTConfig, signature: Signature) -> list[dict[str, torch.Tensor]]:
    """The batch that is traced and a second one whose sizes all differ from it (batch 2 / 3, choices 3 / 2,
    sequence 16 / 11, within the model's positions), so verification shows the axes are dynamic."""
    length = min(16, config.max_tokens)
    return [sample_batch(config, signature, rows=2, choices=3, length=length, seed=0),
            sample_batch(config, signature, rows=3, choices=2, length=max(2, length - 5), seed=1)]


# ---------------------------------------------------------------------------- checks and context
def _check_options(opset: int, quantize: str | None, tolerance: float) -> None:
    high = max_opset(MIN_OPSET)
    if not isinstance(opset, int) or isinstance(opset, bool) or not MIN_OPSET <= opset <= high:
        raise ValueError(f"opset {opset!r} is not supported: this installation exports opsets {MIN_OPSET} to {high} "
                         f"(torch {torch.__version__}'s exporter, the installed onnx, and what ONNX Runtime runs); "
                         f"pass --opset {DEFAULT_OPSET} (the default) or another in that range.")
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize must be None or one of {QUANTIZATIONS}, got {quantize!r}.")
    if not tolerance > 0:
        raise ValueError(f"tolerance must be positive, got {tolerance!r}.")


def _check_exportable(model: nn.Module) -> None:
    """The graph is float32 and verified on the CPU: the model's parameters must be float32 CPU tensors."""
    kinds = {(p.dtype, p.device.type) for p in model.parameters()} - {(torch.float32, "cpu")}
    if kinds:
        shown = ", ".join(sorted(f"{dtype} on {device}" for dtype, device in kinds))
        raise ValueError(f"export takes a float32 model on the CPU; this one has parameters in {shown}. "
                         "Export model.float().cpu().")


@contextlib.contextmanager
def _evaluating(module: nn.Module) -> Iterator[None]:
    """Run a block with ``module`` in eval mode, then give every submodule back the mode it had."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def _shown(diffs: dict[str, float]) -> str:
    return ", ".join(f"{name} {diff:.3g}" for name, diff in diffs.items())
