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
    parser.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default 32)")
    parser.add_argument("--chunk-size", type=int, default=8192, help="corpus texts scored at a time")
    parser.add_argument("--device", help="cpu (default), cuda, gpu")
    parser.add_argument("--encoding", default="utf-8", help="of the input files (default utf-8)")
    add_dtype_argument(parser)
    args = parser.parse_args(argv)
    refuse_output_over_input(("-o", args.output), [("--data", args.data), ("--corpus", args.corpus)],
                             models=[("MODEL", args.model), ("--rescore", args.rescore)])
    if args.faiss:  # fail now, not after encoding
        _require_faiss()
    from bertkit.sentence import SentenceTransformer
    from bertkit.sentence.mining import mine_hard_negatives, write_rows
    from bertkit.sentence.sides import side_prompts

    queries, positives = read_pairs(args.data, args.anchor_column, args.positive_column, args.encoding)
    corpus = read_corpus(args.corpus, args.encoding) if args.corpus else []
    model = SentenceTransformer(args.model, device=args.device, dtype=args.dtype)
    query_prompt, document_prompt = side_prompts(model.prompts).values()
    mined = mine_hard_negatives(
        queries, positives, corpus,
        lambda texts: model.encode(texts, batch_size=args.batch_size, prompt_name=document_prompt),
        encode_queries=lambda texts: model.encode(texts, batch_size=args.batch_size, prompt_name=query_prompt),
        range_min=args.range_min, range_max=args.range_max, num_negatives=args.num_negatives,
        absolute_margin=args.absolute_margin, relative_margin=args.relative_margin, max_score=args.max_score,
        min_score=args.min_score, similarity=_similarity(model), sampling=args.sampling, batch_size=args.batch_size,
        chunk_size=args.chunk_size, rescore=cross_encoder(args.rescore, args.batch_size, args.device, args.dtype)
        if args.rescore else None, use_faiss=args.faiss, seed=args.seed)
    write_rows(mined.rows, args.output)
    print(json.dumps(mined.summary))
    print(f"{mined.summary['rows']} rows: {args.output}", file=sys.stderr)
    return 0


def read_pairs(path: str, anchor: str | None, positive: str | None, encoding: str) -> tuple[list[str], list[str]]:
    """The (query, positive) texts of ``path``: named columns, else the first two; a missing or empty text
    raises ``ValueError`` naming the file, line and column."""
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
    return queries, positives


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
