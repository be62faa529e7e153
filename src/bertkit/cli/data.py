"""``bertkit data``: pretraining data from a corpus (``create``), and what a data directory holds (``info``).

    bertkit data create corpus/*.jsonl.gz --tokenizer vocab.txt -o DATA            # every core
    bertkit data create shards/ --text-field content --tokenizer DIR -o DATA --workers 8
    bertkit data create wiki.parquet --tokenizer DIR -o DATA --dask tcp://scheduler:8786
    bertkit data create corpus.txt --tokenizer DIR -o DATA --holdout 0.05   # and DATA/heldout
    bertkit data info DATA

A killed ``create`` run, started again with the same arguments, continues where it stopped.
"""

from __future__ import annotations

import argparse
import os

from bertkit.cli import ArgumentParser, cores
from bertkit.io import refuse_output_over_input


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit data", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    create = sub.add_parser("create", help="build pretraining shards from a corpus")
    create.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="files, directories or glob patterns: text (one sentence per line with blank lines "
                             "between documents (Google's format), prose split at chapters, or a paragraph per "
                             "line), .jsonl, .parquet, a datasets.save_to_disk directory; .gz/.bz2/.xz/.zst")
    create.add_argument("--tokenizer", required=True, help="tokenizer directory or vocab.txt")
    create.add_argument("-o", "--output", required=True, help="output data directory")
    create.add_argument("--max-seq-length", type=int, default=128, help="tokens per instance, [CLS] and [SEP]s "
                                                                           "included (default 128)")
    create.add_argument("--dupe-factor", type=int, default=1, help="passes over the corpus, each paired anew")
    create.add_argument("--short-seq-prob", type=float, default=0.1,
                        help="share of instances given a shorter random target length (default 0.1)")
    create.add_argument("--masked-lm-prob", type=float, default=0.15, help="share of tokens masked (default 0.15)")
    create.add_argument("--max-predictions-per-seq", type=int, default=20,
                        help="masked tokens per instance at most (default 20)")
    create.add_argument("--whole-word-masking", action="store_true",
                        help="mask every piece of a chosen word together")
    create.add_argument("--static-masking", action="store_true", help="mask once here (Google) instead of per batch")
    create.add_argument("--seed", type=int, default=12345,
                        help="of the pairing (and of --static-masking): the same seed and arguments give the same "
                             "files (default 12345)")
    create.add_argument("--shard-size", type=int, default=100_000, help="instances per shard at most")
    create.add_argument("--format", choices=("auto", "google", "prose", "paragraphs"), default="auto",
                        help="layout of text files (default: decided per file)")
    create.add_argument("--encoding", default="utf-8", help="of the files, e.g. latin-1, cp1252 (default utf-8)")
    create.add_argument("--text-field", default="text", help="the field / column holding a document's text in "
                                                             ".jsonl, .parquet and Arrow inputs (default: text)")
    create.add_argument("--partition-size", type=float, metavar="MB",
                        help="input megabytes per partition (default: a sixteenth of the input, 1 to 8): the unit "
                             "a worker reads and tokenizes; a line longer than that is refused")
    create.add_argument("--holdout", type=float, metavar="FRACTION",
                        help="hold out this share of the documents (every 1/FRACTION-th, by its place in the "
                             "corpus) as a second data directory, for pretrain --eval-data")
    create.add_argument("--holdout-output", metavar="DIR", help="where the held-out data goes (default: "
                                                                "OUTPUT/heldout)")
    where = create.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, help="processes on this machine (default: every core)")
    where.add_argument("--dask", metavar="ADDRESS", help="a dask.distributed scheduler (tcp://HOST:8786) whose "
                                                         "workers see -o at the same path")
    create.add_argument("--overwrite", action="store_true", help="replace data created with other arguments")
    create.add_argument("--quiet", action="store_true", help="no progress bar")
    info = sub.add_parser("info", help="what a data directory holds")
    info.add_argument("directory", help="a data directory written by data create")
    args = parser.parse_args(argv)
    if args.action == "info":
        return _info(args.directory)
    refuse_output_over_input(("-o", args.output), [("INPUT", args.inputs)], models=[("--tokenizer", args.tokenizer)])
    if args.partition_size is not None and args.partition_size <= 0:
        parser.error(f"--partition-size must be a positive number of megabytes, got {args.partition_size}")
    partition_bytes = None if args.partition_size is None else int(args.partition_size * (1 << 20))
    workers = args.workers if args.workers is not None else cores()
    if workers < 1:
        parser.error(f"--workers must be >= 1, got {workers}")
    every = _holdout_every(parser, args.holdout)
    if args.holdout_output is not None and every is None:
        parser.error("--holdout-output needs --holdout FRACTION")

    from bertkit.data.create import create_pretraining_data

    common = dict(max_seq_length=args.max_seq_length, short_seq_prob=args.short_seq_prob,
                  dupe_factor=args.dupe_factor, masked_lm_prob=args.masked_lm_prob,
                  max_predictions_per_seq=args.max_predictions_per_seq, whole_word=args.whole_word_masking,
                  static_masking=args.static_masking, seed=args.seed, shard_size=args.shard_size, format=args.format,
                  encoding=args.encoding, text_field=args.text_field, partition_bytes=partition_bytes,
                  workers=workers, dask=args.dask, overwrite=args.overwrite, progress=not args.quiet,
                  heldout_every=every)
    out = create_pretraining_data(args.inputs, args.tokenizer, args.output, **common)
    _info(out, summary_only=True)
    if every is not None:
        heldout = args.holdout_output or os.path.join(args.output, "heldout")
        refuse_output_over_input(("--holdout-output", heldout), [("INPUT", args.inputs),
                                                                 ("--tokenizer", args.tokenizer)])
        _info(create_pretraining_data(args.inputs, args.tokenizer, heldout, heldout=True, **common),
              summary_only=True)
        print(f"held out every {every}th document: pretrain --data {out} --eval-data {heldout}")
    return 0


def _holdout_every(parser: argparse.ArgumentParser, fraction: float | None) -> int | None:
    """``--holdout FRACTION`` as "every N-th document" (N = round(1 / FRACTION) >= 2), or None."""
    if fraction is None:
        return None
    if not 0 < fraction <= 0.5:
        parser.error(f"--holdout must be a share of the documents in (0, 0.5], e.g. 0.05, got {fraction}")
    return max(2, round(1 / fraction))


def _info(directory: str | os.PathLike, summary_only: bool = False) -> int:
    from pathlib import Path

    from bertkit.data.writing import INDEX_NAME
    from bertkit.io import read_json_object

    path = Path(directory) / INDEX_NAME
    if not path.is_file():
        raise ValueError(f"{directory} holds no {INDEX_NAME}: not a (complete) pretraining data directory; "
                         "create it with bertkit data create, or finish a killed run by running it again.")
    index = read_json_object(path, "a pretraining data index")
    print(f"{directory}: {index['num_instances']:,} instances, {index['num_tokens']:,} tokens, "
          f"{index['num_documents']:,} documents, {len(index['shards'])} shard(s)"
          + (f" from {index['num_partitions']} partition(s) of {index['input_bytes'] / 1e6:,.1f} MB of input"
             if "num_partitions" in index else "")
          + (f", paired in {index['num_blocks']} block(s)" if "num_blocks" in index else ""))
    if summary_only:
        return 0
    settings = {k: v for k, v in index.items() if k not in ("shards", "partitions", "blocks", "inputs", "tokenizer")
                and not k.startswith("num_") and k not in ("format", "input_bytes")}
    for key, value in settings.items():
        print(f"  {key}: {value}")
    tokenizer = index.get("tokenizer", {})
    print(f"  tokenizer: {tokenizer.get('dir')} (lower case: {tokenizer.get('do_lower_case')})")
    inputs = index.get("inputs", [])
    if inputs:
        print(f"  inputs ({len(inputs)}): " + ", ".join(i["source"] for i in inputs[:5])
              + (", ..." if len(inputs) > 5 else ""))
    return 0
