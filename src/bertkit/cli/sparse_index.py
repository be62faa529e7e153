"""``bertkit sparse-index``: a sparse inverted index of a corpus on disk, built with a sparse encoder (SPLADE,
inference-free) and searched by ``bertkit search``; or exported for Elasticsearch, OpenSearch or Qdrant.

    bertkit sparse-index build MODEL --corpus corpus.jsonl -o INDEX    # BEIR corpus.jsonl or .parquet
    bertkit sparse-index build MODEL --corpus corpus.jsonl -o INDEX --resume    # after a kill
    bertkit sparse-index build MODEL --corpus docs.parquet -o INDEX --max-postings 2000000 --chunk-documents 512
    bertkit sparse-index export INDEX --model MODEL --to elasticsearch -o OUT   # mapping.json, bulk.ndjson
    bertkit sparse-index export INDEX --model MODEL --to qdrant -o OUT          # collection.json, points.jsonl

``build``: MODEL is a sentence-transformers sparse encoder directory (:class:`bertkit.SparseEncoder`); every
document is encoded with its document side (``encode_document``). Memory is bounded by ``--chunk-documents``
(texts and vectors of one chunk) and ``--max-postings`` (x 20 bytes, buffered before a segment is written). The
forward runs on every core this process may use (torch's intra-op threads, ``--threads``). A killed build, run
again with ``--resume`` and the same arguments, continues after its last segment and gives the same index. The
index records the model (its directory's name and a digest of its files), the documents' ids and a checksum of
every file.

``export``: Elasticsearch / OpenSearch get the create-index body (a ``rank_features`` field) and the bulk file
(``curl -H 'Content-Type: application/x-ndjson' --data-binary @bulk.ndjson URL/_bulk``), each token a feature
name with ``%``, ``.``, whitespace and a leading ``_`` percent-escaped (``--names ids``: the term ids); Qdrant
the create-collection body (one sparse vector) and one point per line (``id``: the document's position, the
document id in the payload).
"""

from __future__ import annotations

import argparse
import sys
import time

from bertkit.cli import ArgumentParser, add_dtype_argument, cores
from bertkit.io import refuse_output_over_input


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit sparse-index", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    sparse = sub.add_parser("build", help="a sparse inverted index of a .jsonl / .parquet corpus, with its ids")
    sparse.add_argument("model", help="a sentence-transformers sparse encoder directory (SPLADE, inference-free)")
    sparse.add_argument("--corpus", required=True, help="BEIR's corpus.jsonl ({\"_id\", \"title\", \"text\"} per "
                                                        "line) or a .parquet file with those columns")
    sparse.add_argument("-o", "--output", required=True, help="the index directory (new or empty; with --resume "
                                                              "an unfinished build)")
    sparse.add_argument("--resume", action="store_true", help="continue an unfinished build in -o (same corpus "
                                                              "and model) after its last segment")
    sparse.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default 32)")
    sparse.add_argument("--chunk-documents", type=int, default=1024,
                        help="documents read and encoded at a time, sorted by length (default 1024)")
    sparse.add_argument("--max-postings", type=int, default=10_000_000,
                        help="postings held in memory (20 bytes each) before a segment is written; a resumed build "
                             "continues after the last segment (default 10000000)")
    sparse.add_argument("--id-field", help="the id field / column (default: _id, else id)")
    sparse.add_argument("--text-field", default="text", help="the text field / column (default: text)")
    sparse.add_argument("--title-field", default="title",
                        help="joined before the text where present, as BEIR does (default: title); '' for none")
    sparse.add_argument("--encoding", default="utf-8", help="of a .jsonl corpus (default utf-8)")
    sparse.add_argument("--threads", type=int, help="torch threads of the forward (default: every core this "
                                                    "process may use)")
    sparse.add_argument("--device", help="cpu (default), cuda, gpu")
    sparse.add_argument("--quiet", action="store_true", help="no progress bar")
    add_dtype_argument(sparse)
    export = sub.add_parser("export", help="the index as Elasticsearch / OpenSearch rank_features documents or "
                                           "Qdrant sparse vectors")
    export.add_argument("index", help="an index directory that `bertkit sparse-index build` wrote")
    export.add_argument("--model", required=True, help="the sparse encoder directory that built the index (its "
                                                       "tokens name the features)")
    export.add_argument("--to", required=True, choices=("elasticsearch", "opensearch", "qdrant"),
                        help="the engine the files are for")
    export.add_argument("-o", "--output", required=True, help="a directory for the files")
    export.add_argument("--field", default="sparse", help="the rank_features field / Qdrant sparse vector name "
                                                          "(default: sparse)")
    export.add_argument("--index-name", default="documents", help="the Elasticsearch / OpenSearch index the bulk "
                                                                  "actions name (default: documents)")
    export.add_argument("--names", choices=("tokens", "ids"), default="tokens",
                        help="rank_features feature names: the model's tokens, escaped (default), or the term ids")
    args = parser.parse_args(argv)
    return build(args) if args.action == "build" else export_files(args)


def build(args: argparse.Namespace) -> int:
    refuse_output_over_input(("-o", args.output), [("--corpus", args.corpus)], models=[("MODEL", args.model)])
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be at least 1, got {args.threads}.")
    import torch

    from bertkit.retrieval.sparse_corpus import CorpusFields, build_sparse_corpus_index, model_fingerprint
    from bertkit.sentence.sparse import SparseEncoder

    torch.set_num_threads(args.threads or cores())
    encoder = SparseEncoder(args.model, device=args.device, dtype=args.dtype)

    def encode(texts: list[str]):
        return encoder.encode_document(texts, batch_size=len(texts), show_progress_bar=False)

    start = time.perf_counter()
    index = build_sparse_corpus_index(
        encode, args.corpus, args.output, vocab_size=encoder.get_sentence_embedding_dimension(),
        model=model_fingerprint(args.model), encoding=args.encoding, batch_size=args.batch_size,
        chunk_documents=args.chunk_documents, max_postings=args.max_postings, resume=args.resume,
        fields=CorpusFields(id=args.id_field, text=args.text_field, title=args.title_field or None),
        progress=not args.quiet)
    size = sum(record["bytes"] for record in index.manifest["files"].values())
    print(f"{index.documents} documents, {index.manifest['postings']} postings, {size / 2**20:.1f} MiB: "
          f"{args.output} ({time.perf_counter() - start:.1f} s, {torch.get_num_threads()} threads)", file=sys.stderr)
    return 0


def export_files(args: argparse.Namespace) -> int:
    refuse_output_over_input(("-o", args.output), [], models=[("INDEX", args.index), ("--model", args.model)])
    from bertkit.retrieval.sparse import SparseIndex
    from bertkit.retrieval.sparse_corpus import model_fingerprint
    from bertkit.retrieval.sparse_export import export_index, rank_feature_names

    index = SparseIndex.load(args.index, model=model_fingerprint(args.model))
    names = None
    if args.to != "qdrant":
        names = [str(t) for t in range(index.vocab_size)] if args.names == "ids" else \
            rank_feature_names(_tokens(args.model, index.vocab_size), index.vocab_size)
    files = export_index(index, args.to, args.output, names=names, field=args.field, index_name=args.index_name)
    print(f"{index.documents} documents for {args.to}: {', '.join(str(f) for f in files)}", file=sys.stderr)
    return 0


def _tokens(model: str, vocab_size: int) -> list[str]:
    """The model's token of each term id (an id past the tokenizer's, as a head padded to a multiple, has none);
    ``ValueError`` for a CSR model, whose terms are latents, not tokens."""
    from bertkit.sentence.sparse import SparseEncoder

    encoder = SparseEncoder(model, dtype="fp32")
    if encoder.layout.autoencoder is not None:
        raise ValueError(f"--model {model}: a CSR model's terms are latents, not tokens; export with --names ids.")
    tokenizer = encoder.tokenizer
    return tokenizer.convert_ids_to_tokens(list(range(min(len(tokenizer), vocab_size))))
