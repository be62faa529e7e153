"""``bertkit tokenizer train FILES... --vocab-size N -o DIR`` and ``bertkit tokenizer encode DIR TEXT``."""

from __future__ import annotations

from bertkit.cli import ArgumentParser
from bertkit.io import refuse_output_over_input


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit tokenizer", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    train = sub.add_parser("train", help="learn a WordPiece vocabulary from text files")
    train.add_argument("files", nargs="+", help="UTF-8 text files")
    train.add_argument("--vocab-size", type=int, default=30522)
    train.add_argument("--min-frequency", type=int, default=2)
    train.add_argument("--cased", action="store_true", help="keep case and accents (default: lower-case)")
    train.add_argument("-o", "--output", required=True, help="directory for vocab.txt and tokenizer_config.json")
    encode = sub.add_parser("encode", help="print the tokens and ids of a text")
    encode.add_argument("tokenizer", help="tokenizer directory or vocab.txt")
    encode.add_argument("text")
    encode.add_argument("text_pair", nargs="?")
    args = parser.parse_args(argv)
    if args.action == "train":
        refuse_output_over_input(("-o", args.output), [("FILES", args.files)])

    from bertkit.tokenization import BERTTokenizerFast

    if args.action == "train":
        tokenizer = BERTTokenizerFast.train(args.files, vocab_size=args.vocab_size, min_frequency=args.min_frequency,
                                            do_lower_case=not args.cased)
        tokenizer.save_pretrained(args.output)
        short = (f" (fewer than --vocab-size {args.vocab_size}: no further pair of pieces occurs --min-frequency "
                 f"{args.min_frequency} times in the text)" if tokenizer.vocab_size < args.vocab_size else "")
        print(f"trained a {tokenizer.vocab_size}-token vocabulary{short}; saved to {args.output}")
    else:
        tokenizer = BERTTokenizerFast.from_pretrained(args.tokenizer)
        enc = tokenizer(args.text, args.text_pair)
        print(" ".join(enc.tokens()))
        print(" ".join(map(str, enc["input_ids"])))
    return 0
