"""``bertkit embed MODEL --input FILE -o OUT.{npy,jsonl}``: sentence embeddings of every line, streamed; ``bertkit
embed MODEL --input CORPUS -o OUTDIR``: a whole corpus into a sharded embedding store.

Which one runs: -o OUT.npy / OUT.jsonl writes one file (below); -o a directory, or a path without a suffix, or
--format parquet|npy runs the sharded job (see "The embedding job" below).

MODEL: a sentence-transformers directory (its pooling, Dense and Normalize modules run) or any BERT bertkit
loads (mean pooling). FILE: .txt (a text per line), .jsonl (a text or {"text": ...} per line) or .csv (a
"text" column). Row i of the output is line i of a .txt / .jsonl FILE: a blank line is embedded as the
empty text (marked "empty": true in .jsonl output), so rows always line up with lines. Texts are embedded in
length-sorted batches a chunk at a time, so a file larger than memory is fine; OUT.npy is one float32
[N, D] array (its space reserved before the first row is written), OUT.jsonl one {"index", "embedding"}
line per text, both in input order and moved into place only when complete. -o must not be (or resolve
to) MODEL or FILE, nor lie inside MODEL.

The embedding job: CORPUS is a text, JSON-lines, CSV/TSV, Parquet or Arrow file, a directory of them, or a glob;
--text-column names the field/column holding the text (default "text"; a text file's lines are its rows).
OUTDIR gets index.json (the model, its fingerprint, the corpus, the shards) and part-NNNNN.parquet shards of at
most --shard-rows rows, each an "id" column beside an "embedding" column (or "indices" + "values" for a sparse
model; a list of token vectors for a multi-vector one); --format npy writes part-NNNNN.npy + .ids.npy instead
(both: --format parquet,npy). Ids are the --id-column values (as text; checked unique across the corpus), else
each row's position in the corpus (int: lines of text/JSON-lines files, records of tables, counted from 0 across
the files in order). --workers N runs N processes here, each with one model and cores/N threads; --dask ADDRESS
runs the shards on a Dask cluster (started with `dask scheduler` / `dask worker ADDRESS`; OUTDIR, MODEL and CORPUS
must be reachable by the same paths from every worker). Every shard is written atomically and recorded in
index.json as it finishes: after a crash or kill, the same command with --resume skips the recorded shards and
writes the rest, so every row is present exactly once. MODEL may be dense (sentence-transformers or any BERT),
static (Model2Vec / StaticEmbedding), sparse (SparseEncoder) or multi-vector (ColBERT).

``bertkit embed mine MODEL --data PAIRS -o OUT.jsonl``: hard negatives for (query, positive) pairs; see
``bertkit embed mine --help`` and :mod:`bertkit.sentence.mining`. (A model directory called ``mine`` is still
embedded with ``bertkit embed mine --input FILE ...``: with ``--input`` the first word is the MODEL.)
``bertkit embed dedup OUTDIR --threshold 0.95 -o KEEP.jsonl``: the rows of an embedding store left once its
near-duplicates are dropped; see ``bertkit embed dedup --help``.
"""

from __future__ import annotations

import argparse
import errno
import functools
import itertools
import os
import sys
from collections.abc import Iterator

import numpy as np

from bertkit.cli import ArgumentParser, add_dtype_argument
from bertkit.io import refuse_output_over_input


def main(argv: list[str]) -> int:
    if argv[:1] == ["mine"] and "--input" not in argv:
        from bertkit.cli.embed_mine import main as mine

        return mine(argv[1:])
    if argv[:1] == ["dedup"] and "--input" not in argv:
        from bertkit.cli.embed_dedup import main as dedup

        return dedup(argv[1:])
    parser = ArgumentParser(prog="bertkit embed", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a sentence-transformers directory, or any BERT bertkit loads")
    parser.add_argument("--input", required=True, help="a .txt, .jsonl or .csv file of texts (a blank line gets a "
                                                       "row too: the empty text's embedding); for the job also "
                                                       "Parquet, Arrow, a directory or a glob")
    parser.add_argument("-o", "--output", required=True, help="OUT.npy or OUT.jsonl (one row per input line), or "
                                                              "OUTDIR (no suffix, or a directory): the sharded job")
    parser.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default 32)")
    parser.add_argument("--normalize", action="store_true", help="L2-normalise every vector")
    parser.add_argument("--device", help="cpu (default), cuda, gpu")
    add_dtype_argument(parser)
    parser.add_argument("--encoding", default="utf-8", help="of the input file (default utf-8), e.g. utf-16, cp1252")
    parser.add_argument("--task", help="a Jina embeddings v3 model's task adapter (retrieval.query, "
                                       "retrieval.passage, separation, classification, text-matching), merged into "
                                       "its weights, with that task's prompt")
    from bertkit.cli.embed_job import add_job_arguments, is_job, run_job

    add_job_arguments(parser)
    args = parser.parse_args(argv)
    if is_job(args):
        if args.task is not None:
            raise ValueError("--task goes with -o OUT.npy / OUT.jsonl; the sharded job does not take it yet: embed "
                             "into one file, or convert the model with its task first (bertkit convert --task).")
        return run_job(args)
    refuse_output_over_input(("-o", args.output), [("--input", args.input)], models=[("MODEL", args.model)])
    suffix = os.path.splitext(args.output)[1].lower()
    if suffix not in (".npy", ".jsonl"):
        raise ValueError(f"-o {args.output}: write .npy or .jsonl, or a directory (no suffix, or --format "
                         "parquet|npy) for the sharded job.")
    from bertkit.inference.finite import check_value
    from bertkit.pipelines import pipeline
    from bertkit.pipelines.files import count_inputs, locate_input, read_inputs

    pipe = pipeline("embeddings", model=args.model, device=args.device, batch_size=args.batch_size,
                    dtype=args.dtype, normalize=args.normalize, **({"adapter": args.task} if args.task else {}))
    texts, embedded = itertools.tee(_text(t) for t in read_inputs(args.input, args.encoding, keep_blank=True))
    # a NaN vector stops the write (the output file is left as it was), naming its line
    place = functools.partial(locate_input, args.input, encoding=args.encoding)
    vectors = (check_value(np.asarray(v, dtype=np.float32), functools.partial(place, index=i))
               for i, v in enumerate(pipe.stream(embedded)))
    if suffix == ".npy":
        count = write_npy(vectors, count_inputs(args.input, args.encoding, keep_blank=True), args.output)
    else:
        count = write_jsonl(zip(texts, vectors), args.output)
    print(f"{count} embeddings: {args.output}", file=sys.stderr)
    return 0


def _text(item: str | dict) -> str:
    if isinstance(item, str):
        return item
    if "text" not in item or "text_pair" in item:
        raise ValueError(f"embed takes one text per line; got {sorted(item)}.")
    return item["text"]


def write_npy(vectors: Iterator[np.ndarray], rows: int, path: str) -> int:
    """Write the ``[D]`` vectors of ``vectors`` as one float32 ``[rows, D]`` .npy at ``path``, atomically.

    The rows are written with plain writes (never through a memory map, which a full disk turns into SIGBUS),
    into space reserved up front where the file system allows: a full disk raises ``OSError(ENOSPC)`` naming
    ``path`` before the first row, and the temp file is removed. No vector at all gives a ``[0, 0]`` array;
    a count other than ``rows``, or vectors of different sizes, raise ``ValueError`` (nothing is written).
    """
    from numpy.lib import format as npy

    from bertkit.io import atomic_path

    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        first = next(vectors, None)
        if first is None:
            np.save(handle, np.zeros((0, 0), dtype=np.float32))
            return 0
        width = first.shape[-1]
        npy.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": (rows, width)})
        handle.flush()
        _reserve(handle.fileno(), handle.tell(), rows * width * 4)
        count = 0
        for vector in itertools.chain([first], vectors):
            if vector.shape != (width,):
                raise ValueError(f"embedding {count} has shape {vector.shape}, the first one ({width},).")
            handle.write(np.ascontiguousarray(vector, dtype="<f4").tobytes())
            count += 1
        if count != rows:
            raise ValueError(f"{count} embeddings for {rows} inputs: was the input file changed while it was read?")
    return count


def _reserve(fd: int, offset: int, size: int) -> None:
    """Allocate ``size`` bytes of ``fd`` from ``offset`` (ENOSPC now, not mid-write); a no-op where unsupported."""
    if size <= 0 or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, offset, size)
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise


def write_jsonl(texts_and_vectors: Iterator[tuple[str, np.ndarray]], path: str) -> int:
    """One ``{"index", "embedding"}`` line per vector (``"empty": true`` added for a blank text); atomic."""
    from bertkit.cli.predict import write_jsonl as write_records

    def records() -> Iterator[dict]:
        for index, (text, vector) in enumerate(texts_and_vectors):
            record = {"index": index, "embedding": vector.tolist()}
            if not text.strip():
                record["empty"] = True
            yield record

    return write_records(records(), path)
