"""``bertkit tokenizer train INPUTS... --vocab-size N -o DIR`` and ``bertkit tokenizer encode DIR TEXT``.

``train`` reads its inputs as ``bertkit data create`` does (text layouts, .jsonl, .parquet, Arrow; files,
directories, globs; compressed), at most ``--tokenizer-sample-bytes`` of text spread over the corpus.
"""

from __future__ import annotations

from bertkit.cli import ArgumentParser, parse_size
from bertkit.io import refuse_output_over_input


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit tokenizer", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    train = sub.add_parser("train", help="learn a WordPiece vocabulary from text files")
    train.add_argument("files", nargs="+", metavar="INPUT", help="text, .jsonl, .parquet: files, directories or globs")
    train.add_argument("--text-field", default="text", help="of .jsonl / .parquet / Arrow inputs (default: text)")
    train.add_argument("--format", choices=("auto", "google", "prose", "paragraphs"), default="auto",
                       help="layout of text files (default: decided per file)")
    train.add_argument("--encoding", default="utf-8", help="of the files (default utf-8)")
    train.add_argument("--tokenizer-sample-bytes", type=parse_size, default=None, metavar="SIZE",
                       help="learn from at most this much text, spread over the corpus (default 256M)")
    train.add_argument("--vocab-size", type=int, default=30522,
                       help="entries of the vocabulary, special tokens included (default 30522)")
    train.add_argument("--min-frequency", type=int, default=2,
                       help="a merged piece must occur at least this often (default 2)")
    train.add_argument("--cased", action="store_true", help="keep case and accents (default: lower-case)")
    train.add_argument("-o", "--output", required=True, help="directory for vocab.txt and tokenizer_config.json")
    encode = sub.add_parser("encode", help="print the tokens and ids of a text")
    encode.add_argument("tokenizer", help="tokenizer directory or vocab.txt")
    encode.add_argument("text", help="the text to tokenize")
    encode.add_argument("text_pair", nargs="?", help="a second text, encoded as a pair with TEXT")
    args = parser.parse_args(argv)
    if args.action == "train":
        refuse_output_over_input(("-o", args.output), [("FILES", args.files)])

    from bertkit.tokenization import BERTTokenizerFast

    if args.action == "train":
        from bertkit.data.create import PARTITION_BYTES
        from bertkit.data.partitions import ReadSettings, expand_inputs
        from bertkit.data.reading import sample_texts
        from bertkit.tasks.text_data import TOKENIZER_SAMPLE_BYTES

        files = [f for f in expand_inputs(args.files) if isinstance(f, str)]
        texts = sample_texts(files, args.tokenizer_sample_bytes or TOKENIZER_SAMPLE_BYTES,
                             ReadSettings(args.format, args.encoding, args.text_field), PARTITION_BYTES)
        if not any(text.strip() for text in texts):
            raise ValueError(f"the training file{'s' if len(files) > 1 else ''} {', '.join(files)} hold"
                             f"{'' if len(files) > 1 else 's'} no text to learn a vocabulary from (nothing but "
                             "white space and control characters); train on text.")
        tokenizer = BERTTokenizerFast.train(iter(texts), vocab_size=args.vocab_size, min_frequency=args.min_frequency,
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
