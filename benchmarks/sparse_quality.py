"""Training learned-sparse retrievers: bertkit's ``bertkit finetune sparse`` beside sentence-transformers'
``SparseEncoderTrainer``, both with ``SpladeLoss(SparseMultipleNegativesRankingLoss)``, from the same MLM base, on
the same pairs with the same hyperparameters and seeds; quality on held-out retrieval (NDCG@10) and sparsity
(query and document active dimensions), mean ± sd over the seeds.

Two variants: **splade** (one MLM + max-pooled log(1 + ReLU) for queries and documents) and **inference-free**
(a ``Router``: a learned static weight per vocabulary entry for queries, initialised to BM25's IDF over the
training documents (bertkit's ``idf_weights``, given to sentence-transformers' ``SparseStaticEmbedding`` too, whose
own default is all ones), its own learning rate; SPLADE for documents; no query regulariser).

Data: ``sparse_data.py`` (inverse cloze from the bundled novels, split by book: pairs from five novels, the
held-out retrieval set from *Persuasion*). Base: ``--base`` (default ``runs/demo/model``, what ``make demo``
writes: a tiny BERT, 2 layers of 128, a 4,000-entry WordPiece vocabulary learnt by bertkit, masked-LM pretrained
on the six novels; the small vocabulary keeps a SPLADE run to a minute or two on two cores). Both trainers' models
are scored by one evaluator, sentence-transformers' ``SparseInformationRetrievalEvaluator`` (bertkit saves
sentence-transformers' directory layout, so its models load there too).

    python benchmarks/sparse_quality.py                           # both trainers, both variants, seeds 1 2 3
    python benchmarks/sparse_quality.py --trainers sentence-transformers --variants splade --seeds 1

Writes ``benchmarks/results/sparse_quality.json`` (``--json``): every run and, per trainer and variant, the mean
and sd of each metric. Needs the test extras (sentence-transformers, accelerate, datasets). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402  (sibling scripts, not a package)
from sparse_data import write_data  # noqa: E402

TRAINERS = ("bertkit", "sentence-transformers")
VARIANTS = ("splade", "inference-free")
METRICS = ("ndcg@10", "mrr@10", "recall@10", "query_active_dims", "corpus_active_dims")


@dataclass(frozen=True)
class Hyper:
    """The hyperparameters both trainers get (a linear learning-rate schedule with warm-up, AdamW, fp32)."""

    epochs: float = 1.0
    batch_size: int = 32
    learning_rate: float = 5e-4
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    max_seq_length: int = 64
    query_regularizer_weight: float = 5e-4  # splade only: the inference-free query side is not regularised
    document_regularizer_weight: float = 3e-4
    static_learning_rate: float = 1e-3  # inference-free: the static query weights' own learning rate


# ------------------------------------------------------------------------------------------------- data
def read_train(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def evaluator(beir: Path):
    """sentence-transformers' sparse IR evaluator over the held-out BEIR directory."""
    from sentence_transformers.sparse_encoder.evaluation import SparseInformationRetrievalEvaluator

    from bertkit.sentence.evaluation.beir import load_beir

    data = load_beir(beir)
    return SparseInformationRetrievalEvaluator(
        queries=data.queries, corpus=data.corpus,
        relevant_docs={q: {d for d, score in judged.items() if score > 0} for q, judged in data.qrels.items()},
        mrr_at_k=[10], ndcg_at_k=[10], accuracy_at_k=[10], precision_recall_at_k=[10], map_at_k=[10],
        batch_size=64, write_csv=False, name="heldout")


def score(model_dir: Path, beir: Path) -> dict[str, float]:
    from sentence_transformers import SparseEncoder

    model = SparseEncoder(str(model_dir), device="cpu")
    found = evaluator(beir)(model)
    wanted = {"ndcg@10": "heldout_dot_ndcg@10", "mrr@10": "heldout_dot_mrr@10",
              "recall@10": "heldout_dot_recall@10", "query_active_dims": "heldout_query_active_dims",
              "corpus_active_dims": "heldout_corpus_active_dims"}
    return {name: float(found[key]) for name, key in wanted.items()}


# ------------------------------------------------------------------------------------------------ trainers
def st_model(base: str, variant: str, hyper: Hyper, train: Path):
    """A new sentence-transformers SparseEncoder over ``base``: SPLADE, or the inference-free Router."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Router, Transformer
    from sentence_transformers.sparse_encoder.modules import SparseStaticEmbedding, SpladePooling

    from bertkit.sentence.sparse_build import idf_weights

    mlm = Transformer(base, transformer_task="fill-mask", max_seq_length=hyper.max_seq_length)
    pooling = SpladePooling("max")
    if variant == "splade":
        return SparseEncoder(modules=[mlm, pooling], device="cpu")
    # the same starting weights as bertkit's --inference-free: BM25's IDF over the distinct training documents
    documents = list(dict.fromkeys(row["positive"] for row in read_train(train)))
    weight = idf_weights(documents, mlm.tokenizer, len(mlm.tokenizer.get_vocab()))
    router = Router.for_query_document(
        query_modules=[SparseStaticEmbedding(tokenizer=mlm.tokenizer, weight=weight, frozen=False)],
        document_modules=[mlm, pooling])
    return SparseEncoder(modules=[router], similarity_fn_name="dot", device="cpu")


def train_st(base: str, variant: str, hyper: Hyper, train: Path, out: Path, seed: int) -> float:
    """sentence-transformers' reference run; the model is saved to ``out/model``; returns training seconds."""
    import transformers
    from datasets import load_dataset
    from sentence_transformers import SparseEncoderTrainer, SparseEncoderTrainingArguments
    from sentence_transformers.sparse_encoder.losses import SparseMultipleNegativesRankingLoss, SpladeLoss

    transformers.set_seed(seed)  # the trainer seeds too, but only after the model is built
    model = st_model(base, variant, hyper, train)
    data = load_dataset("json", data_files=str(train), split="train")
    free = variant == "inference-free"
    loss = SpladeLoss(model, SparseMultipleNegativesRankingLoss(model),
                      query_regularizer_weight=0 if free else hyper.query_regularizer_weight,
                      document_regularizer_weight=hyper.document_regularizer_weight)
    extra = ({"router_mapping": {"anchor": "query", "positive": "document"},
              "learning_rate_mapping": {r"sub_modules\.query\.0\.weight": hyper.static_learning_rate}}
             if free else {})
    arguments = SparseEncoderTrainingArguments(
        output_dir=str(out), num_train_epochs=hyper.epochs, per_device_train_batch_size=hyper.batch_size,
        learning_rate=hyper.learning_rate, warmup_ratio=hyper.warmup_ratio, weight_decay=hyper.weight_decay,
        max_grad_norm=hyper.max_grad_norm, seed=seed, data_seed=seed, save_strategy="no", report_to="none",
        use_cpu=True, logging_steps=1000, disable_tqdm=True, **extra)
    trainer = SparseEncoderTrainer(model=model, args=arguments, train_dataset=data, loss=loss)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    model.save(str(out / "model"))
    return seconds


def train_bertkit(base: str, variant: str, hyper: Hyper, train: Path, out: Path, seed: int) -> float:
    """``bertkit finetune sparse`` with the same settings (its own process, as a user runs it); the model is
    ``out/model``; returns the command's seconds."""
    import torch

    command = [sys.executable, "-m", "bertkit.cli", "finetune", "sparse", "--model", base, "--train", str(train),
               "-o", str(out), "--loss", "mnrl", "--epochs", str(hyper.epochs), "--batch-size", str(hyper.batch_size),
               "--learning-rate", str(hyper.learning_rate), "--warmup-ratio", str(hyper.warmup_ratio),
               "--weight-decay", str(hyper.weight_decay), "--max-seq-length", str(hyper.max_seq_length),
               "--document-weight", str(hyper.document_regularizer_weight),
               "--precision", "fp32", "--device", "cpu", "--seed", str(seed), "--threads", str(torch.get_num_threads())]
    if variant == "inference-free":
        command += ["--inference-free", "--query-weight", "0",
                    "--static-learning-rate", str(hyper.static_learning_rate)]
    else:
        command += ["--query-weight", str(hyper.query_regularizer_weight)]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - start


RUNNERS = {"bertkit": train_bertkit, "sentence-transformers": train_st}


# ------------------------------------------------------------------------------------------------- report
def summary(runs: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """``{trainer/variant: {metric: {"mean", "sd", "n"}}}`` over the seeds' runs."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for key in sorted({(r["trainer"], r["variant"]) for r in runs}):
        mine = [r for r in runs if (r["trainer"], r["variant"]) == key]
        out["/".join(key)] = {
            m: {"mean": statistics.mean(r[m] for r in mine),
                "sd": statistics.stdev(r[m] for r in mine) if len(mine) > 1 else 0.0, "n": len(mine)}
            for m in (*METRICS, "seconds")}
    return out


def summary_rows(stats: dict) -> list[dict]:
    """One row per variant and trainer: each metric's mean ± sd, the seeds, the mean seconds per run."""
    return [{"variant": key.split("/")[1], "trainer": key.split("/")[0], "seeds": m["ndcg@10"]["n"],
             **{metric: f"{m[metric]['mean']:.3f} ± {m[metric]['sd']:.3f}" if "dims" not in metric
                else f"{m[metric]['mean']:.1f} ± {m[metric]['sd']:.1f}" for metric in METRICS},
             "s/run": round(m["seconds"]["mean"])}
            for key, m in sorted(stats.items(), key=lambda kv: (kv[0].split("/")[1], kv[0]))]


def sha256_dir(path: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(file.relative_to(path).as_posix().encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, default=Path("runs/demo/model"),
                        help="the MLM both trainers start from (default: runs/demo/model, what `make demo` writes)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--trainers", nargs="+", default=list(TRAINERS), choices=TRAINERS)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--work", type=Path, help="keep the data and models here (default: a temporary directory)")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "sparse_quality.json",
                        help="the result file (default benchmarks/results/sparse_quality.json)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every run (default 1: on a "
                        "shared machine more threads spin waiting for each other)")
    for field in fields(Hyper):
        parser.add_argument("--" + field.name.replace("_", "-"), type=int if field.type == "int" else float,
                            default=field.default, help=f"(default {field.default})")
    parser.add_argument("--merge", type=Path, nargs="+", metavar="RESULT",
                        help="train nothing: write --json from the runs of these result files (e.g. one per seed, "
                        "run side by side), which must share the base, data and hyperparameters")
    args = parser.parse_args(argv)
    if args.merge:
        import torch

        torch.set_num_threads(args.threads)  # recorded as the runs' threads (each run set --threads)
        return merge(args)
    hyper = Hyper(**{f.name: getattr(args, f.name) for f in fields(Hyper)})
    import torch

    torch.set_num_threads(args.threads)
    if not (args.base / "config.json").is_file():
        raise SystemExit(f"--base {args.base}: no config.json; pass an MLM checkpoint directory (`make demo` "
                         "writes one to runs/demo/model)")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        counts = write_data(work / "data")
        train, beir = work / "data" / "train.jsonl", work / "data" / "beir"
        print(f"data: {counts}; base {args.base}; {asdict(hyper)}", flush=True)
        base_scores = score_base(args.base, beir)
        print(f"base model (SPLADE head, untrained): {base_scores}", flush=True)
        runs = []
        for seed in args.seeds:
            for variant in args.variants:
                for trainer in args.trainers:
                    out = work / f"{trainer}-{variant}-{seed}"
                    seconds = RUNNERS[trainer](str(args.base), variant, hyper, train, out, seed)
                    runs.append({"trainer": trainer, "variant": variant, "seed": seed,
                                 **score(out / "model", beir), "seconds": seconds})
                    print(json.dumps(runs[-1]), flush=True)
                    write_results(args, hyper, counts, base_scores, runs)
    stats = summary(runs)
    print(record.markdown(summary_rows(stats)))
    return stats


def merge(args) -> dict:
    """``--merge``: the runs of several result files as one result (their base, data and hyperparameters must
    agree)."""
    results = [json.loads(path.read_text(encoding="utf-8")) for path in args.merge]
    for key in ("data", "base", "hyperparameters"):
        if any(r[key] != results[0][key] for r in results):
            raise SystemExit(f"--merge: the files' {key!r} differ; merge only runs of the same setting")
    runs = [run for r in results for run in r["runs"]]
    args.seeds, args.base = sorted({run["seed"] for run in runs}), Path(results[0]["base"]["path"])
    first = results[0]
    write_results(args, Hyper(**first["hyperparameters"]), first["data"], first["base"]["scores"], runs,
                  merged=len(results))
    stats = summary(runs)
    print(record.markdown(summary_rows(stats)))
    return stats


def score_base(base: Path, beir: Path) -> dict[str, float]:
    """The untrained starting point: the base's MLM head with SPLADE pooling, scored as every run is."""
    with tempfile.TemporaryDirectory() as tmp:
        st_model(str(base), "splade", Hyper(), Path()).save(tmp)
        return score(Path(tmp), beir)


def write_results(args, hyper: Hyper, counts: dict, base_scores: dict, runs: list[dict],
                  merged: int = 0) -> None:
    """The result file so far (``benchmarks/record.py``'s layout; rewritten after every run, atomically): the
    mean ± sd table, and every run, the data, the base and the hyperparameters as its data. ``merged``: the
    number of files ``--merge`` read (the command recorded is then the one run that does the same)."""
    import sentence_transformers
    import torch

    stats = summary(runs)
    rows = summary_rows(stats)
    notes = [f"held-out: {counts['queries']} queries over {counts['documents']} documents (Persuasion); "
             f"{counts['train_pairs']} training pairs from the other five novels (sparse_data.py)",
             f"base: {args.base} (sha256 {sha256_dir(args.base)[:12]}); untrained SPLADE head: NDCG@10 "
             f"{base_scores['ndcg@10']:.3f}, active dims {base_scores['query_active_dims']:.0f} / "
             f"{base_scores['corpus_active_dims']:.0f}",
             "hyperparameters: " + ", ".join(f"{k} {v}" for k, v in asdict(hyper).items()),
             f"one evaluator for both: sentence-transformers {sentence_transformers.__version__}'s "
             f"SparseInformationRetrievalEvaluator; torch {torch.__version__}, {torch.get_num_threads()} thread(s)"]
    argv = None
    if merged:
        argv = ["benchmarks/sparse_quality.py", "--base", str(args.base), "--seeds", *map(str, args.seeds)]
        notes.append(f"the seeds ran as {merged} processes side by side (--seeds S --json FILE each), joined with "
                     "--merge; s/run is each run's wall time with the others running")
    record.write_result(args.json, "sparse_quality", [record.table(
        "Learned-sparse training: bertkit vs sentence-transformers (mean ± sd over seeds)", rows, notes=notes)],
        title="Learned-sparse training quality (SPLADE, inference-free)",
        data={"data": counts, "base": {"path": str(args.base), "sha256": sha256_dir(args.base),
                                        "scores": base_scores},
              "hyperparameters": asdict(hyper), "seeds": args.seeds, "summary": stats, "runs": runs},
        argv=argv)


if __name__ == "__main__":
    main()
