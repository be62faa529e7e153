"""``bertkit export MODEL -o DIR [--format onnx] [--quantize int8] [--task T] [--opset 18]``: an ONNX model, verified.

MODEL is anything bertkit loads (an HF or bertkit directory, the model/ a ``bertkit finetune`` run wrote, a
sentence-transformers directory, a TF checkpoint, a registry name). An int8 checkpoint (``bertkit convert --dtype
int8``) gets model.int8.onnx without --quantize, compared with bertkit's int8 kernels as well; a static (calibrated)
one's holds its calibrated activation scales as QuantizeLinear / DequantizeLinear nodes. DIR gets model.onnx
(model.int8.onnx with --quantize int8), the tokenizer files, config.json and export.json. The export is run by ONNX
Runtime and compared with PyTorch before anything is written; one line per ONNX file gives the largest difference
per output.
"""

from __future__ import annotations

from bertkit.cli import ArgumentParser
from bertkit.io import refuse_output_over_input

TASK_HELP = ("the model class to export (default: what MODEL records: modules.json, task.json, config.json's "
             "architectures): backbone, sequence-classification, token-classification, question-answering, "
             "masked-lm, causal-lm, pretraining, next-sentence-prediction, multiple-choice, sentence-embedding, "
             "a bertkit finetune task (classify, tag, qa, choice) or an HF architecture name")


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit export", description=__doc__)
    parser.add_argument("model", help="a checkpoint directory, file or registry name")
    parser.add_argument("-o", "--output", required=True, help="the directory to write into")
    parser.add_argument("--format", choices=("onnx",), default="onnx", help="the export format (ONNX only)")
    parser.add_argument("--quantize", choices=("int8",), help="also write model.int8.onnx (dynamic quantization)")
    parser.add_argument("--task", help=TASK_HELP)
    parser.add_argument("--opset", type=int, default=18,
                        help="ONNX opset, from 17 to the highest the installed torch and onnx export (default 18)")
    args = parser.parse_args(argv)
    refuse_output_over_input(("-o", args.output), [], models=[("MODEL", args.model)])

    from bertkit.export import export_onnx

    report = export_onnx(args.model, args.output, task=args.task, opset=args.opset, quantize=args.quantize)
    print(f"{report.onnx_path}: {report.model}, opset {report.opset} ({report.exporter} exporter), "
          f"{report.seconds:.1f} s; {_diffs(report.max_abs_diff)}")
    if report.int8_path is not None:
        how = ("static: the checkpoint's calibrated activation scales" if report.int8_activations == "static"
               else "dynamic quantization")
        print(f"{report.int8_path}: int8 ({how}); {_diffs(report.int8_max_abs_diff)}")
    if report.int8_vs_bertkit_max_abs_diff is not None:
        print(f"{report.int8_path}: against bertkit's int8 kernels, "
              f"{_diffs(report.int8_vs_bertkit_max_abs_diff).replace('PyTorch', 'bertkit int8')}")
    return 0


def _diffs(diffs: dict[str, float]) -> str:
    return "max |ONNX Runtime - PyTorch|: " + ", ".join(f"{name} {diff:.2e}" for name, diff in diffs.items())
