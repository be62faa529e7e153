"""The flags of ``bertkit embed MODEL --input CORPUS -o OUTDIR`` (the sharded embedding job) and its run; the
command's help is :mod:`bertkit.cli.embed`'s."""

from __future__ import annotations

import argparse
import os
import sys

#: flags only the job takes, as argparse dests -> their spelling
JOB_FLAGS = {"format": "--format", "workers": "--workers", "dask": "--dask", "resume": "--resume",
             "text_column": "--text-column", "id_column": "--id-column", "shard_rows": "--shard-rows",
             "prompt_name": "--prompt-name"}


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    job = parser.add_argument_group("the embedding job (-o OUTDIR)")
    job.add_argument("--format", help="shard files: parquet (default), npy, or parquet,npy; selects the job")
    job.add_argument("--workers", type=int, help="processes on this machine, each with one model and cores/N torch "
                                                 "threads (default 1: this process)")
    job.add_argument("--dask", metavar="ADDRESS", help="run the shards on the Dask scheduler at ADDRESS "
                                                       "(tcp://HOST:8786) instead")
    job.add_argument("--resume", action="store_true", help="continue a job that stopped: recorded shards are "
                                                           "skipped, the rest written")
    job.add_argument("--text-column", help="the field / column holding the text (default text)")
    job.add_argument("--id-column", help="the field / column holding each row's id (default: the row's position "
                                         "in the corpus)")
    job.add_argument("--shard-rows", type=int, help="rows per shard (default 50000)")
    job.add_argument("--prompt-name", help="a sentence-transformers model's prompt to put before each text")


def is_job(args: argparse.Namespace) -> bool:
    """Whether the command line asks for the job: --format, or -o a directory or a path without a suffix. A job
    flag with a single-file -o is a ValueError naming it."""
    out = args.output
    job = args.format is not None or os.path.isdir(out) or not os.path.splitext(out.rstrip("/"))[1]
    given = [flag for dest, flag in JOB_FLAGS.items() if getattr(args, dest) not in (None, False)]
    if given and not job:
        raise ValueError(f"{given[0]} goes with the sharded job, which writes a directory: give -o a directory (no "
                         f"suffix) instead of {out}.")
    return job


def run_job(args: argparse.Namespace) -> int:
    from bertkit.embed_job.plan import ReadOptions
    from bertkit.embed_job.run import JobConfig, embed_corpus

    formats = tuple(f.strip() for f in (args.format or "parquet").split(",") if f.strip())
    read = ReadOptions(args.text_column or "text", args.id_column, args.encoding)
    config = JobConfig(args.model, (args.input,), args.output, read, formats,
                       JobConfig.shard_rows if args.shard_rows is None else args.shard_rows, args.dtype, args.device,
                       args.batch_size, args.normalize, args.prompt_name, 1 if args.workers is None else args.workers,
                       args.dask, args.resume)
    meta = embed_corpus(config)
    print(f"{meta['rows']} embeddings in {len(meta['shards'])} shards: {args.output} ({meta['model']['kind']}, "
          f"dim {meta['model']['dim']})", file=sys.stderr)
    return 0
