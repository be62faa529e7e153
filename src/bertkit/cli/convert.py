"""``bertkit convert SRC DST [--to hf|tf] [--overwrite]``: any readable checkpoint to an HF or a Google TF1 folder.

DST must be new or empty; ``--overwrite`` replaces a non-empty DST's contents (only once the
conversion is complete: a failure leaves DST as it was).
"""

from __future__ import annotations

from bertkit.cli import ArgumentParser
from bertkit.io import refuse_output_over_input


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit convert", description=__doc__)
    parser.add_argument("source", help="checkpoint directory, weights file, TF checkpoint prefix, or .zip/.tar.gz")
    parser.add_argument("dest", help="output directory")
    parser.add_argument("--to", choices=("hf", "tf"), default="hf")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the contents of DST if it is not empty (kept until the conversion succeeds)")
    casing = parser.add_mutually_exclusive_group()
    casing.add_argument("--uncased", dest="do_lower_case", action="store_true", default=None,
                        help="the tokenizer lower-cases (default: from the source, else from its name)")
    casing.add_argument("--cased", dest="do_lower_case", action="store_false")
    args = parser.parse_args(argv)
    refuse_output_over_input(("DST", args.dest), [], models=[("SRC", args.source)])

    from bertkit.weights.convert import convert

    out = convert(args.source, args.dest, to=args.to, do_lower_case=args.do_lower_case, overwrite=args.overwrite)
    print(f"wrote {args.to.upper()} checkpoint to {out}")
    return 0
