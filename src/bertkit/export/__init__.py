"""Exporting bertkit models for other runtimes: :func:`export_onnx` writes a verified ONNX model (and an int8
one on request) with its tokenizer, config and a report (``bertkit export`` on the command line).

Which models export, and their inputs and outputs: :mod:`bertkit.export.models`; how the graph is made,
checked and written: :mod:`bertkit.export.onnx`. onnx, onnxscript and onnxruntime (``pip install
'bertkit[onnx]'``) are imported only when exporting.
"""

from bertkit.export.onnx import ExportReport, ExportVerificationError, export_onnx

__all__ = ["ExportReport", "ExportVerificationError", "export_onnx"]
