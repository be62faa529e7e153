"""``bertkit embed MODEL --input FILE -o OUT.{npy,jsonl}``: sentence embeddings of every line, streamed.

MODEL: a sentence-transformers directory (its pooling, Dense and Normalize modules run) or any BERT bertkit
loads (mean pooling). FILE: .txt (a text per line), .jsonl (a text or {"text": ...} per line) or .csv (a
"text" column). Texts are embedded in length-sorted batches a chunk at a time, so a file larger than memory
is fine; OUT.npy is one float32 [N, D] array (written through a memory map), OUT.jsonl one
{"index", "embedding"} line per text, both in input order and moved into place only when complete.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from bertkit.cli import ArgumentParser


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit embed", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a sentence-transformers directory, or any BERT bertkit loads")
    parser.add_argument("--input", required=True, help="a .txt, .jsonl or .csv file of texts")
    parser.add_argument("-o", "--output", required=True, help="OUT.npy or OUT.jsonl")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--normalize", action="store_true", help="L2-normalise every vector")
    parser.add_argument("--device", help="cpu (default), cuda, gpu")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--encoding", default="utf-8", help="of the input file (default utf-8), e.g. utf-16, cp1252")
    args = parser.parse_args(argv)
    suffix = os.path.splitext(args.output)[1].lower()
    if suffix not in (".npy", ".jsonl"):
        raise ValueError(f"-o {args.output}: write .npy or .jsonl.")
    import torch

    from bertkit.pipelines import pipeline
    from bertkit.pipelines.files import count_inputs, read_inputs

    pipe = pipeline("embeddings", model=args.model, device=args.device, batch_size=args.batch_size,
                    dtype=torch.bfloat16 if args.dtype == "bf16" else None, normalize=args.normalize)
    texts = (t if isinstance(t, str) else _text(t) for t in read_inputs(args.input, args.encoding))
    vectors = (np.asarray(v, dtype=np.float32) for v in pipe.stream(texts))
    count = write_npy(vectors, count_inputs(args.input, args.encoding), args.output) if suffix == ".npy" \
        else write_jsonl(vectors, args.output)
    print(f"{count} embeddings: {args.output}", file=sys.stderr)
    return 0


def _text(item: dict) -> str:
    if "text" not in item or "text_pair" in item:
        raise ValueError(f"embed takes one text per line; got {sorted(item)}.")
    return item["text"]


def write_npy(vectors, rows: int, path: str) -> int:
    """Rows of ``vectors`` into a float32 ``[rows, D]`` .npy through a memory map; atomic."""
    from numpy.lib.format import open_memmap

    from bertkit.io import atomic_path

    count = 0
    with atomic_path(path) as tmp:
        array = None
        for vector in vectors:
            if array is None:
                array = open_memmap(tmp, mode="w+", dtype=np.float32, shape=(rows, vector.shape[-1]))
            array[count] = vector
            count += 1
        if array is None:  # no text: an empty [0, 0] array
            with open(tmp, "wb") as handle:
                np.save(handle, np.zeros((0, 0), dtype=np.float32))
        else:
            array.flush()
            del array
    return count


def write_jsonl(vectors, path: str) -> int:
    from bertkit.cli.predict import write_jsonl as write_records

    return write_records(({"index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)), path)
