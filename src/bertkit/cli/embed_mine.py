"""``bertkit embed mine MODEL --data PAIRS -o OUT.jsonl``: hard negatives for (query, positive) pairs.

MODEL: a sentence-transformers directory (or any BERT bertkit loads, mean pooling); its "query" prompt, if it
has one, is used for the queries and its "document" / "passage" / "corpus" prompt for the corpus, as
sentence-transformers' ``mine_hard_negatives`` does. PAIRS: a .jsonl, .csv or .tsv file of (query, positive)
rows: the columns "anchor" (or "query") and "positive" (or "document", "passage") by name, else the first two
columns by position (--anchor-column / --positive-column name others). --corpus FILE adds candidate texts
(.txt: one a line; .jsonl / .csv: a "text" column) to the positives, which are candidates too.

Each query's candidates are its --range-max most similar texts (its positives and exact copies of them left
out), filtered by --absolute-margin / --relative-margin to its positive and --max-score / --min-score,
optionally rescored first by a cross-encoder (--rescore MODEL); --range-min of the survivors are skipped and
the next --num-negatives kept. The search is exact, chunked in memory (or a flat FAISS index with --faiss,
which needs `pip install faiss-cpu`). OUT.jsonl gets one {"anchor", "positive", "negative_1".."negative_n"}
row per pair that found --num-negatives negatives (others are dropped, as sentence-transformers' n-tuple
output drops them), written atomically; the summary is printed as JSON on stdout.

From an embedding store (what ``bertkit embed MODEL --input CORPUS -o OUTDIR`` wrote, by this MODEL):
--corpus-embeddings OUTDIR takes the corpus side from its shards instead of encoding it. The search is exact, one
pass over the shards --chunk-size rows at a time (memory: the queries and one shard, whatever the corpus size);
the texts come from the corpus the store names (its index.json: files, --text-column, --id-column), which must
be unchanged. The positives are matched to corpus rows by text: a row holding a query's positive is never its
negative; a positive no row holds is encoded and joins the candidates, as with --corpus. The store's rows are
not deduplicated (run ``bertkit embed dedup`` first): on a corpus without repeated texts the rows equal the
re-encoding's. --query-embeddings QDIR takes the queries' vectors from a store of the --data file's query
column (``bertkit embed MODEL --input PAIRS --text-column anchor -o QDIR``). The output is the same
anchor, positive, negative_1..n texts.
"""

from __future__ import annotations

import argparse
import json
import sys

from bertkit.cli import ArgumentParser, add_dtype_argument
from bertkit.io import refuse_output_over_input

ANCHORS = ("anchor", "query")
POSITIVES = ("positive", "document", "passage")


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="bertkit embed mine", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a sentence-transformers directory, or any BERT bertkit loads")
    parser.add_argument("--data", required=True, help="(query, positive) pairs: .jsonl, .csv or .tsv")
    parser.add_argument("--corpus", help="more candidate texts: .txt (one a line), .jsonl or .csv ('text')")
    parser.add_argument("-o", "--output", required=True, help="OUT.jsonl: anchor, positive, negative_1..n rows")
    parser.add_argument("--anchor-column", help="the query column of --data (default: anchor/query, else the first)")
    parser.add_argument("--positive-column", help="the positive column (default: positive/document/passage, "
                                                  "else the second)")
    parser.add_argument("--num-negatives", type=int, default=3, help="negatives per row (default 3); a row with "
                                                                      "fewer survivors is dropped")
    parser.add_argument("--range-min", type=int, default=0, help="survivors to skip (the very closest)")
    parser.add_argument("--range-max", type=int, default=100, help="candidates retrieved per query")
    parser.add_argument("--absolute-margin", type=float, help="keep a negative scoring <= positive - margin")
    parser.add_argument("--relative-margin", type=float, help="keep a negative scoring <= positive - |positive| * "
                                                               "margin")
    parser.add_argument("--max-score", type=float, help="drop candidates scoring above this")
    parser.add_argument("--min-score", type=float, help="drop candidates scoring below this")
    parser.add_argument("--sampling", choices=("top", "random"), default="top",
                        help="top: the best-scoring survivors; random: a seeded draw from them (default top)")
    parser.add_argument("--seed", type=int, default=0, help="of --sampling random")
    parser.add_argument("--rescore", metavar="CROSS_ENCODER", help="a reranker directory to rescore candidates with")
    parser.add_argument("--faiss", action="store_true", help="search a flat FAISS index (pip install faiss-cpu)")
    parser.add_argument("--corpus-embeddings", metavar="OUTDIR", help="the corpus side from this embedding store "
                                                                      "(bertkit embed MODEL --input CORPUS -o OUTDIR)")
    parser.add_argument("--query-embeddings", metavar="QDIR", help="the queries' vectors from a store of --data's "
                                                                   "query column")
    parser.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default 32)")
    parser.add_argument("--chunk-size", type=int, default=8192, help="corpus texts scored at a time")
    parser.add_argument("--device", help="cpu (default), cuda, gpu")
    parser.add_argument("--encoding", default="utf-8", help="of the input files (default utf-8)")
    add_dtype_argument(parser)
    args = parser.parse_args(argv)
    refuse_output_over_input(("-o", args.output), [("--data", args.data), ("--corpus", args.corpus)],
                             models=[("MODEL", args.model), ("--rescore", args.rescore),
                                     ("--corpus-embeddings", args.corpus_embeddings),
                                     ("--query-embeddings", args.query_embeddings)])
    _check_store_flags(args)
    if args.faiss:  # fail now, not after encoding
        _require_faiss()
    from bertkit.sentence import SentenceTransformer
    from bertkit.sentence.mining import mine_hard_negatives, write_rows
    from bertkit.sentence.sides import side_prompts

    queries, positives, anchor = read_pair_columns(args.data, args.anchor_column, args.positive_column,
                                                   args.encoding)
    corpus = read_corpus(args.corpus, args.encoding) if args.corpus else []
    stores = _open_stores(args, anchor, len(queries))  # checked before the model loads
    model = SentenceTransformer(args.model, device=args.device, dtype=args.dtype)
    query_prompt, document_prompt = side_prompts(model.prompts).values()
    options = dict(range_min=args.range_min, range_max=args.range_max, num_negatives=args.num_negatives,
                   absolute_margin=args.absolute_margin, relative_margin=args.relative_margin,
                   max_score=args.max_score, min_score=args.min_score, similarity=_similarity(model),
                   sampling=args.sampling, batch_size=args.batch_size, chunk_size=args.chunk_size, seed=args.seed,
                   rescore=cross_encoder(args.rescore, args.batch_size, args.device, args.dtype)
                   if args.rescore else None,
                   encode_queries=lambda texts: model.encode(texts, batch_size=args.batch_size,
                                                             prompt_name=query_prompt))

    def encode(texts: list[str]):
        return model.encode(texts, batch_size=args.batch_size, prompt_name=document_prompt)

    if stores is not None:
        from bertkit.embed_job.mine import mine_from_store, store_corpus

        store, query_vectors = stores
        mined = mine_from_store(queries, positives, store, store_corpus(store), encode, query_vectors=query_vectors,
                                **options)
    else:
        mined = mine_hard_negatives(queries, positives, corpus, encode, use_faiss=args.faiss, **options)
    write_rows(mined.rows, args.output)
    print(json.dumps(mined.summary))
    print(f"{mined.summary['rows']} rows: {args.output}", file=sys.stderr)
    return 0


def _check_store_flags(args: argparse.Namespace) -> None:
    """The flags that do not go with an embedding store, refused before anything is loaded."""
    if args.query_embeddings and not args.corpus_embeddings:
        raise ValueError("--query-embeddings goes with --corpus-embeddings OUTDIR (the corpus side from a store).")
    if args.corpus_embeddings and args.corpus:
        raise ValueError("--corpus adds texts to encode; with --corpus-embeddings the corpus is the store's: leave "
                         "--corpus out (or embed it into the store).")
    if args.corpus_embeddings and args.faiss:
        raise ValueError("--faiss indexes a corpus held in memory; with --corpus-embeddings the search is exact over "
                         "the store's shards: leave --faiss out.")


def _open_stores(args: argparse.Namespace, anchor: str, pairs: int) -> tuple | None:
    """The --corpus-embeddings store and the query vectors of --query-embeddings (the ``anchor`` column's, one
    row per pair; None without it), each store checked to be MODEL's; None without --corpus-embeddings."""
    if not args.corpus_embeddings:
        return None
    from bertkit.embed_job import open_store
    from bertkit.embed_job.mine import check_model, pair_vectors

    store = open_store(args.corpus_embeddings)
    check_model(store, args.model, "--corpus-embeddings")
    if not args.query_embeddings:
        return store, None
    asked = open_store(args.query_embeddings)
    check_model(asked, args.model, "--query-embeddings")
    return store, pair_vectors(asked, args.data, anchor, pairs)


def read_pairs(path: str, anchor: str | None, positive: str | None, encoding: str) -> tuple[list[str], list[str]]:
    """The (query, positive) texts of ``path``: named columns, else the first two; a missing or empty text
    raises ``ValueError`` naming the file, line and column."""
    return read_pair_columns(path, anchor, positive, encoding)[:2]


def read_pair_columns(path: str, anchor: str | None, positive: str | None,
                      encoding: str) -> tuple[list[str], list[str], str]:
    """:func:`read_pairs` and the name of the query column it read."""
    from bertkit.tasks.readers import column, read_rows, where

    rows = read_rows(path, encoding=encoding)
    if not rows:
        raise ValueError(f"{path} has no rows: it needs (query, positive) pairs.")
    names = list(rows[0].values)
    anchor = column(path, rows, anchor, "--anchor-column") if anchor else _named(names, ANCHORS, 0, path)
    rest = [n for n in names if n != anchor]
    positive = column(path, rows, positive, "--positive-column") if positive else _named(rest, POSITIVES, 0, path)
    queries, positives = [], []
    for row in rows:
        for name, texts in ((anchor, queries), (positive, positives)):
            text = row.values.get(name)
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{where(path, row.line)}: column {name!r} is {text!r}; every pair needs a "
                                 "non-empty query and positive text.")
            texts.append(text)
    return queries, positives, anchor


def _named(names: list[str], candidates: tuple[str, ...], position: int, path: str) -> str:
    for name in candidates:
        if name in names:
            return name
    if len(names) <= position:
        raise ValueError(f"{path}: expected a query and a positive column, found {names}; name them anchor and "
                         "positive (or pass --anchor-column / --positive-column).")
    return names[position]


def read_corpus(path: str, encoding: str) -> list[str]:
    """The texts of a corpus file (blank lines skipped)."""
    from bertkit.cli.embed import _text
    from bertkit.pipelines.files import read_inputs

    return [text for text in (_text(item) for item in read_inputs(path, encoding)) if text.strip()]


def cross_encoder(path: str, batch_size: int, device: str | None, dtype: str = "auto"):
    """A ``(query, passage)`` pairs -> scores function of bertkit's reranker pipeline on ``path`` (a model without
    a trained scoring head is refused, naming --rescore)."""
    from bertkit.pipelines import pipeline
    from bertkit.tasks.sources import require_scoring_head

    require_scoring_head(path, "--rescore")
    pipe = pipeline("rerank", model=path, device=device, batch_size=batch_size, dtype=dtype)

    def rescore(pairs: list[tuple[str, str]]) -> list[float]:
        scores: list[float] = []
        start = 0
        while start < len(pairs):  # consecutive pairs of one query: one call
            query = pairs[start][0]
            stop = start
            while stop < len(pairs) and pairs[stop][0] == query:
                stop += 1
            ranked = pipe(query, [passage for _, passage in pairs[start:stop]])
            scores.extend(item["score"] for item in sorted(ranked, key=lambda item: item["index"]))
            start = stop
        return scores

    return rescore


def _similarity(model) -> str:
    name = model.similarity_fn_name
    return {"cos_sim": "cosine", "dot_score": "dot"}.get(name, name)


def _require_faiss() -> None:
    try:
        import faiss  # noqa: F401
    except ImportError:
        raise ImportError("--faiss needs FAISS, which is not installed: pip install faiss-cpu") from None
