"""``bertkit embed dedup OUTDIR --threshold 0.95 -o KEEP.jsonl``: the rows of an embedding store left once its
near-duplicates are dropped.

OUTDIR: what ``bertkit embed MODEL --input CORPUS -o OUTDIR`` wrote, with a dense or static model. A row is a
near-duplicate when its cosine with an earlier row of the store (in store order: the corpus's) is at least
--threshold; the first of every group is kept (SemDeDup's rule, exact: every pair is compared, --chunk-size rows
at a time against the store streamed shard by shard, so memory stays bounded and time grows with the square of
the rows; see :mod:`bertkit.embed_job.dedup`). KEEP.jsonl gets one {"id": ID} line per kept row, in order;
--duplicates FILE one {"id", "duplicate_of", "similarity"} line per dropped row (its most similar earlier row).
Both are written atomically; the summary (rows, kept, duplicates, threshold) is printed as JSON on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from bertkit.cli import ArgumentParser
from bertkit.io import refuse_output_over_input


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit embed dedup", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store", metavar="OUTDIR", help="an embedding store (bertkit embed MODEL --input CORPUS -o "
                                                        "OUTDIR) of a dense or static model")
    parser.add_argument("--threshold", type=float, default=0.95,
                        help="the cosine at or above which a row duplicates an earlier one (default 0.95)")
    parser.add_argument("-o", "--output", required=True, help="KEEP.jsonl: one {\"id\"} line per kept row")
    parser.add_argument("--duplicates", metavar="FILE", help="a .jsonl of the dropped rows: id, duplicate_of, "
                                                             "similarity")
    parser.add_argument("--chunk-size", type=int, default=4096, help="rows compared at a time (default 4096)")
    args = parser.parse_args(argv)
    for flag, path in (("-o", args.output), ("--duplicates", args.duplicates)):
        refuse_output_over_input((flag, path), [], models=[("OUTDIR", args.store)])
    if args.duplicates is not None and args.duplicates == args.output:
        raise ValueError(f"--duplicates {args.duplicates} is -o too; give the dropped rows their own file.")
    from bertkit.embed_job import open_store
    from bertkit.embed_job.dedup import near_duplicates
    from bertkit.io import atomic_path

    verdicts = near_duplicates(open_store(args.store), args.threshold, args.chunk_size)
    counts = {"rows": 0, "kept": 0, "duplicates": 0}
    with contextlib.ExitStack() as stack:  # files closed, then moved into place, only when all went well
        keep, drop = (stack.enter_context(open(stack.enter_context(atomic_path(path)), "w", encoding="utf-8"))
                      if path is not None else None for path in (args.output, args.duplicates))
        for verdict in verdicts:
            counts["rows"] += 1
            if verdict.duplicate_of is None:
                counts["kept"] += 1
                keep.write(json.dumps({"id": verdict.id}, ensure_ascii=False) + "\n")
                continue
            counts["duplicates"] += 1
            if drop is not None:
                drop.write(json.dumps({"id": verdict.id, "duplicate_of": verdict.duplicate_of,
                                       "similarity": round(verdict.similarity, 6)}, ensure_ascii=False) + "\n")
    print(json.dumps({**counts, "threshold": args.threshold}))
    print(f"{counts['kept']} of {counts['rows']} rows kept: {args.output}", file=sys.stderr)
    return 0
