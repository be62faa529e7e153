"""``bertkit data create FILES... --tokenizer DIR -o DIR``: pretraining shards with Google's NSP pairs and masking."""

from __future__ import annotations

from bertkit.cli import ArgumentParser
from bertkit.io import refuse_output_over_input


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit data", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    create = sub.add_parser("create", help="build pretraining shards from text files")
    create.add_argument("files", nargs="+", help="text (.txt, .gz, .bz2, .xz): one sentence per line with blank lines "
                                                 "between documents (Google's format), or prose split at chapters")
    create.add_argument("--tokenizer", required=True, help="tokenizer directory or vocab.txt")
    create.add_argument("-o", "--output", required=True, help="output data directory")
    create.add_argument("--max-seq-length", type=int, default=128)
    create.add_argument("--dupe-factor", type=int, default=1, help="passes over the corpus, each paired anew")
    create.add_argument("--short-seq-prob", type=float, default=0.1)
    create.add_argument("--masked-lm-prob", type=float, default=0.15)
    create.add_argument("--max-predictions-per-seq", type=int, default=20)
    create.add_argument("--whole-word-masking", action="store_true")
    create.add_argument("--static-masking", action="store_true", help="mask once here (Google) instead of per batch")
    create.add_argument("--seed", type=int, default=12345)
    create.add_argument("--shard-size", type=int, default=100_000, help="instances per shard")
    create.add_argument("--format", choices=("auto", "google", "prose", "paragraphs"), default="auto",
                        help="layout of the files (default: detected per file)")
    create.add_argument("--encoding", default="utf-8", help="of the files, e.g. latin-1, cp1252 (default utf-8)")
    create.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    refuse_output_over_input(("-o", args.output), [("FILES", args.files), ("--tokenizer", args.tokenizer)])

    from bertkit.data import PretrainingDataset, create_pretraining_data

    out = create_pretraining_data(
        args.files, args.tokenizer, args.output, max_seq_length=args.max_seq_length, short_seq_prob=args.short_seq_prob,
        dupe_factor=args.dupe_factor, masked_lm_prob=args.masked_lm_prob,
        max_predictions_per_seq=args.max_predictions_per_seq, whole_word=args.whole_word_masking,
        static_masking=args.static_masking, seed=args.seed, shard_size=args.shard_size, format=args.format,
        encoding=args.encoding, progress=not args.quiet)
    index = PretrainingDataset(out).index
    print(f"wrote {index['num_instances']} instances ({index['num_tokens']} tokens, {index['num_documents']} "
          f"documents) in {len(index['shards'])} shard(s) to {out}")
    return 0
