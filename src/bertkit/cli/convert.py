"""``bertkit convert SRC DST [--to hf|tf] [--dtype fp32|int8 [--calibration FILE]] [--overwrite]``: any readable
checkpoint to an HF or a Google TF1 folder (DST may also be given as ``-o DST``).

DST must be new or empty; ``--overwrite`` replaces a non-empty DST's contents (only once the
conversion is complete: a failure leaves DST as it was). ``--dtype int8`` writes bertkit's static int8 checkpoint:
dense weights int8 + float32 scales, each layer's activation scale calibrated on ``--calibration FILE`` (one text
per line, at least 64, in the model's language; default: a set shipped with bertkit), the layers whose int8 error
hurts retrieval kept float, the calibration and its measured quality recorded in config.json. It loads and runs
int8 everywhere, and ``bertkit export`` makes an int8 ONNX of it. ``--dtype fp32`` writes float weights (an int8
checkpoint's dequantized ones); default: the source's. With ``--dtype`` a sentence-transformers directory is
written as one (pooling, normalisation and settings kept) and calibrated on its own embeddings.
"""

from __future__ import annotations

from bertkit.cli import ArgumentParser, add_flags
from bertkit.io import refuse_output_over_input

#: the conversion's flags (the casing pair apart: a mutually exclusive group)
CONVERT_FLAGS = (
    ("--to", dict(choices=("hf", "tf"), default="hf",
                  help="hf: an HF transformers folder (default); tf: a Google TF1 checkpoint folder")),
    ("--dtype", dict(choices=("fp32", "int8"),
                     help="weights format: int8 (bertkit's int8 checkpoint) or fp32 (default: the source's)")),
    ("--calibration", dict(metavar="FILE",
                           help="with --dtype int8: the texts that calibrate the activation scales, one per line (at "
                                "least 64, in the model's language; default: a set of English sentences shipped "
                                "with bertkit)")),
    ("--encoding", dict(default="utf-8", help="the --calibration file's text encoding (default utf-8; a byte-order "
                                              "mark is dropped)")),
    ("--task", dict(help="a Jina embeddings v3 checkpoint (original layout): the task adapter to merge into the "
                         "written weights (default: the base weights, no adapter)")),
    ("--overwrite", dict(action="store_true", help="replace the contents of DST if it is not empty (kept until the "
                                                   "conversion succeeds)")),
)


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit convert", description=__doc__)
    parser.add_argument("source", help="checkpoint directory, weights file, TF checkpoint prefix, or .zip/.tar.gz")
    parser.add_argument("dest", nargs="?", help="output directory")
    parser.add_argument("-o", "--output", help="output directory (instead of DST)")
    add_flags(parser, CONVERT_FLAGS)
    casing = parser.add_mutually_exclusive_group()
    casing.add_argument("--uncased", dest="do_lower_case", action="store_true", default=None,
                        help="the tokenizer lower-cases (default: from the source, else from its name)")
    casing.add_argument("--cased", dest="do_lower_case", action="store_false",
                        help="the tokenizer keeps case (default: from the source, else from its name)")
    args = parser.parse_args(argv)
    if (args.dest is None) == (args.output is None):
        parser.error("give the output directory once: as DST or as -o DST.")
    dest = args.dest if args.dest is not None else args.output
    if args.calibration is not None and (args.dtype != "int8" or args.to != "hf"):
        parser.error("--calibration calibrates a static int8 checkpoint: add --dtype int8 (with --to hf).")
    refuse_output_over_input(("DST", dest), [("--calibration", args.calibration)] if args.calibration else [],
                             models=[("SRC", args.source)])

    from bertkit.sentence import is_sentence_transformer

    what = f"{args.dtype} " if args.dtype else ""
    if args.dtype is not None and args.to == "hf" and is_sentence_transformer(args.source):
        from bertkit.sentence.saving import convert_sentence_transformer

        out = convert_sentence_transformer(args.source, dest, dtype=args.dtype, overwrite=args.overwrite,
                                           calibration=args.calibration, encoding=args.encoding)
        print(f"wrote {what}sentence-transformers model to {out}{_calibration_note(out)}")
        return 0
    from bertkit.tasks.calibrated import calibrator
    from bertkit.weights.convert import convert

    prepare = calibrator(args.source, args.calibration, args.encoding) if args.dtype == "int8" else None
    out = convert(args.source, dest, to=args.to, do_lower_case=args.do_lower_case, overwrite=args.overwrite,
                  dtype=args.dtype, prepare=prepare, task=args.task)
    print(f"wrote {what}{args.to.upper()} checkpoint to {out}{_calibration_note(out)}")
    return 0


def _calibration_note(directory) -> str:
    """``"; static int8: ..."``, what the written static int8 checkpoint in ``directory`` records (its layers in
    int8, the fallbacks, the calibration, the measured quality); ``""`` for any other checkpoint."""
    from bertkit.weights.int8 import describe_block

    return describe_block(directory)
