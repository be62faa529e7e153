"""``bertkit index build|compress|append``: a late-interaction (ColBERT) index of a .jsonl / .parquet corpus.

    bertkit index build COLBERT_DIR --corpus corpus.jsonl -o exact-index
    bertkit index compress exact-index -o plaid-index --nbits 2
    bertkit index append exact-index --model COLBERT_DIR --corpus more.jsonl
    bertkit search plaid-index --model COLBERT_DIR --query "who wrote persuasion" -k 10

``build``: every document encoded with the model's document side (markers, skiplist, projection) into an exact
multi-vector index (each document's token vectors, float16 by default) with its id, a chunk of documents at a time
(memory: one chunk plus ``--max-tokens`` vectors before a segment is written), the forward on every core this
process may use. Killed, run again with ``--resume`` and the same arguments: it continues after its last segment.

``compress``: the exact index compressed in the PLAID manner: k-means centroids of a sample of its vectors, each
vector its centroid plus its residual in ``--nbits`` 2 or 4 bits per dimension. Killed after the centroids were
found, the same command goes on from where it stopped. ``bertkit search`` on the compressed index scores its short
list on the decompressed vectors, or exactly with ``--rerank`` (the exact index kept beside it).

``append``: new documents added to a finished index, exact or compressed (encoded by the same model; a compressed
index compresses them with its existing centroids and buckets). The new files are written beside the old ones and
swapped in at once: a killed append, run again, resumes (or finishes its swap); the index never loads half-appended.

Every index records the model (its directory's name and a digest of its files): an index of another model or
projection size is refused in one line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bertkit.cli import ArgumentParser, add_dtype_argument, cores
from bertkit.io import refuse_output_over_input


def _corpus_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", required=True, help="BEIR's corpus.jsonl ({\"_id\", \"title\", \"text\"} per "
                                                        "line) or a .parquet file with those columns")
    parser.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default 32)")
    parser.add_argument("--chunk-documents", type=int, default=1024,
                        help="documents read and encoded at a time (default 1024)")
    parser.add_argument("--max-tokens", type=int, default=1_000_000,
                        help="token vectors held in memory before a segment is written; a resumed build continues "
                             "after the last segment (default 1000000)")
    parser.add_argument("--id-field", help="the id field / column (default: _id, else id)")
    parser.add_argument("--text-field", default="text", help="the text field / column (default: text)")
    parser.add_argument("--title-field", default="title",
                        help="joined before the text where present, as BEIR does (default: title); '' for none")
    parser.add_argument("--encoding", default="utf-8", help="of a .jsonl corpus (default utf-8)")
    parser.add_argument("--threads", type=int, help="torch threads of the forward (default: every core this "
                                                    "process may use)")
    parser.add_argument("--device", help="cpu (default), cuda, gpu")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_dtype_argument(parser)


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit index", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    build = sub.add_parser("build", help="an exact multi-vector index of a .jsonl / .parquet corpus, with its ids")
    build.add_argument("model", help="a ColBERT directory (sentence-transformers 6, PyLate or Stanford layout)")
    build.add_argument("-o", "--output", required=True, help="the index directory (new or empty; with --resume an "
                                                             "unfinished build)")
    build.add_argument("--resume", action="store_true", help="continue an unfinished build in -o (same corpus and "
                                                             "model) after its last segment")
    build.add_argument("--store", choices=("float16", "float32"), default="float16",
                       help="how the token vectors are stored (default float16: half the bytes)")
    _corpus_arguments(build)
    compress = sub.add_parser("compress", help="a PLAID-style compressed index of an exact one")
    compress.add_argument("index", help="an exact index that `bertkit index build` wrote")
    compress.add_argument("-o", "--output", required=True, help="the compressed index directory (new or empty, or "
                                                                "an interrupted compress of the same index)")
    compress.add_argument("--nbits", type=int, choices=(2, 4), default=2,
                          help="bits per dimension of each residual (default 2)")
    compress.add_argument("--centroids", type=int, help="k-means centroids (default: the power of two at or below "
                                                        "16 * sqrt(tokens), as PLAID)")
    compress.add_argument("--sample", type=int, default=262_144, help="token vectors k-means is fit to (default "
                                                                       "262144)")
    compress.add_argument("--iterations", type=int, default=8, help="k-means iterations (default 8)")
    compress.add_argument("--seed", type=int, default=0, help="of the sample and the initial centroids (default 0)")
    compress.add_argument("--threads", type=int, help="torch threads (default: every core this process may use)")
    append = sub.add_parser("append", help="new documents added to a finished index, exact or compressed")
    append.add_argument("index", help="an index that `bertkit index build` or `compress` wrote")
    append.add_argument("--model", required=True, help="the ColBERT directory that built the index")
    _corpus_arguments(append)
    args = parser.parse_args(argv)
    if getattr(args, "threads", None) is not None and args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    return {"build": build_index, "compress": compress_index, "append": append_index}[args.action](args)


def _encoder(args: argparse.Namespace, model: str):
    """The model's document encoder (texts -> token vectors) and its vectors' width; torch on every core."""
    import torch

    from bertkit.sentence.multi_vector import MultiVectorEncoder

    torch.set_num_threads(args.threads or cores())
    encoder = MultiVectorEncoder(model, device=args.device, dtype=args.dtype)

    def encode(texts: list[str]):
        return encoder.encode_document(texts, batch_size=args.batch_size, show_progress_bar=False)

    return encode, encoder.get_sentence_embedding_dimension()


def _fields(args: argparse.Namespace):
    from bertkit.retrieval.sparse_corpus import CorpusFields

    return CorpusFields(id=args.id_field, text=args.text_field, title=args.title_field or None)


def _said(index, what: str, start: float) -> None:
    import torch

    size = sum(record["bytes"] for record in index.manifest["files"].values())
    print(f"{what}: {index.documents} documents, {index.tokens} token vectors, {size / 2**20:.1f} MiB "
          f"({size / index.tokens:.1f} bytes per token): {index.directory} ({time.perf_counter() - start:.1f} s, "
          f"{torch.get_num_threads()} threads)", file=sys.stderr)


def build_index(args: argparse.Namespace) -> int:
    refuse_output_over_input(("-o", args.output), [("--corpus", args.corpus)], models=[("MODEL", args.model)])
    from bertkit.retrieval.multivector_corpus import build_multivector_corpus_index
    from bertkit.retrieval.sparse_corpus import model_fingerprint

    start = time.perf_counter()
    encode, dim = _encoder(args, args.model)
    index = build_multivector_corpus_index(
        encode, args.corpus, args.output, dim=dim, model=model_fingerprint(args.model), fields=_fields(args),
        encoding=args.encoding, chunk_documents=args.chunk_documents, max_tokens=args.max_tokens, dtype=args.store,
        resume=args.resume, progress=not args.quiet)
    _said(index, "exact index", start)
    return 0


def compress_index(args: argparse.Namespace) -> int:
    refuse_output_over_input(("-o", args.output), [], models=[("INDEX", args.index)])
    import torch

    from bertkit.retrieval.multivector import MultiVectorIndex
    from bertkit.retrieval.plaid import build_plaid_index

    torch.set_num_threads(args.threads or cores())
    start = time.perf_counter()
    index = build_plaid_index(MultiVectorIndex.load(args.index), args.output, nbits=args.nbits,
                              centroids=args.centroids, sample=args.sample, iterations=args.iterations, seed=args.seed)
    _said(index, f"PLAID index ({index.nbits} bits, {len(index.codec.centroids)} centroids)", start)
    return 0


def append_index(args: argparse.Namespace) -> int:
    refuse_output_over_input(("INDEX", args.index), [("--corpus", args.corpus)], models=[("--model", args.model)])
    from bertkit.retrieval.index_files import finish_replace, index_format
    from bertkit.retrieval.multivector import MultiVectorIndex, append_multivector_index, append_staging
    from bertkit.retrieval.multivector_corpus import add_corpus
    from bertkit.retrieval.plaid import PlaidIndex, append_plaid_index
    from bertkit.retrieval.sparse_corpus import checked_corpus, corpus_info, model_fingerprint

    start = time.perf_counter()
    finished = finish_replace(Path(args.index))  # an append killed after its commit: only its swap was left
    kind = index_format(args.index, ("bertkit-multivector-index", "bertkit-plaid-index"))
    loader, append = ((MultiVectorIndex, append_multivector_index) if kind == "bertkit-multivector-index" else
                      (PlaidIndex, append_plaid_index))
    index = loader.load(args.index, model=model_fingerprint(args.model))
    if finished:
        _said(index, "an interrupted append was finished; nothing else added", start)
        return 0
    corpus, total = checked_corpus(args.corpus, args.chunk_documents)
    encode, dim = _encoder(args, args.model)
    if dim != index.dim:
        raise ValueError(f"--model {args.model} makes {dim}-dimensional vectors; the index in {args.index!r} holds "
                         f"{index.dim}-dimensional ones: append with the model that built it.")
    staging = append_staging(index, max_tokens=args.max_tokens, info=corpus_info(corpus, _fields(args)))
    if not isinstance(staging, MultiVectorIndex):
        add_corpus(staging, encode, corpus, total, fields=_fields(args), encoding=args.encoding,
                   chunk_documents=args.chunk_documents, progress=not args.quiet)
        staging = staging.finish()
    index = append(index, staging)
    _said(index, f"appended {staging.documents} documents", start)
    return 0
