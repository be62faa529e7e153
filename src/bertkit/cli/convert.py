"""``bertkit convert SRC DST [--to hf|tf] [--dtype fp32|int8] [--overwrite]``: any readable checkpoint to an HF or a
Google TF1 folder (DST may also be given as ``-o DST``).

DST must be new or empty; ``--overwrite`` replaces a non-empty DST's contents (only once the
conversion is complete: a failure leaves DST as it was). ``--dtype int8`` writes bertkit's int8 checkpoint (dense
weights int8 + float32 scales; it loads and runs int8, and ``bertkit export`` makes an int8 ONNX of it);
``--dtype fp32`` float weights (an int8 checkpoint's dequantized ones); default: the source's. With ``--dtype``
a sentence-transformers directory is written as one (pooling, normalisation and settings kept).
"""

from __future__ import annotations

from bertkit.cli import ArgumentParser
from bertkit.io import refuse_output_over_input


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit convert", description=__doc__)
    parser.add_argument("source", help="checkpoint directory, weights file, TF checkpoint prefix, or .zip/.tar.gz")
    parser.add_argument("dest", nargs="?", help="output directory")
    parser.add_argument("-o", "--output", help="output directory (instead of DST)")
    parser.add_argument("--to", choices=("hf", "tf"), default="hf",
                        help="hf: an HF transformers folder (default); tf: a Google TF1 checkpoint folder")
    parser.add_argument("--dtype", choices=("fp32", "int8"),
                        help="weights format: int8 (bertkit's int8 checkpoint) or fp32 (default: the source's)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the contents of DST if it is not empty (kept until the conversion succeeds)")
    casing = parser.add_mutually_exclusive_group()
    casing.add_argument("--uncased", dest="do_lower_case", action="store_true", default=None,
                        help="the tokenizer lower-cases (default: from the source, else from its name)")
    casing.add_argument("--cased", dest="do_lower_case", action="store_false",
                        help="the tokenizer keeps case (default: from the source, else from its name)")
    args = parser.parse_args(argv)
    if (args.dest is None) == (args.output is None):
        parser.error("give the output directory once: as DST or as -o DST.")
    dest = args.dest if args.dest is not None else args.output
    refuse_output_over_input(("DST", dest), [], models=[("SRC", args.source)])

    from bertkit.sentence import is_sentence_transformer

    what = f"{args.dtype} " if args.dtype else ""
    if args.dtype is not None and args.to == "hf" and is_sentence_transformer(args.source):
        from bertkit.sentence.saving import convert_sentence_transformer

        out = convert_sentence_transformer(args.source, dest, dtype=args.dtype, overwrite=args.overwrite)
        print(f"wrote {what}sentence-transformers model to {out}")
        return 0
    from bertkit.weights.convert import convert

    out = convert(args.source, dest, to=args.to, do_lower_case=args.do_lower_case, overwrite=args.overwrite,
                  dtype=args.dtype)
    print(f"wrote {what}{args.to.upper()} checkpoint to {out}")
    return 0
