"""Static int8 checkpoints (format version 2): the calibration plan written beside the int8 weights and read back by
every loader, which then runs the plan's static kernels bit for bit as the in-memory model; version 1 (dynamic)
still loads; unknown versions, damaged plans and bad calibration files are one-line errors naming the file;
``bertkit convert --dtype int8 --calibration FILE`` writes nothing when it fails or is killed; the ONNX export of
a static checkpoint holds the plan as QDQ nodes that ONNX Runtime runs near bertkit's kernels."""

from __future__ import annotations

import gzip
import json
import lzma
import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

import bertkit
from bertkit.inference import running_dtype
from bertkit.inference.int8_plan import CalibrationSource, Int8Plan, LayerPlan, apply
from bertkit.inference.optimize import StaticInt8Kernel
from bertkit.modeling.fast import Linear
from bertkit.resources import BERT_BASE_UNCASED_VOCAB
from bertkit.tasks.calibration_set import fragmented_share, read_calibration
from conftest import model_of

AUSTEN = pathlib.Path(bertkit.__file__).parent / "resources" / "austen" / "persuasion.txt.xz"


def paragraphs(count: int) -> list[str]:
    with lzma.open(AUSTEN, "rt") as f:
        return [" ".join(p.split()) for p in f.read().split("\n\n") if len(p.split()) > 8][:count]


def hand_plan(model: torch.nn.Module, seed: int = 0) -> Int8Plan:
    """A plan as calibrate makes one: every third layer smoothed, every fifth kept float, grids near the inputs'."""
    g = torch.Generator().manual_seed(seed)
    layers = {}
    dense = [(name, m) for name, m in model.named_modules() if isinstance(m, Linear)]
    for i, (name, module) in enumerate(dense):
        smooth = torch.rand(module.in_features, generator=g) + 0.5 if i % 3 == 0 else None
        layers[name] = LayerPlan("float" if i % 5 == 4 else "int8", 0.02 + 0.01 * (i % 4), 120 + i % 9,
                                 reason="kept" if i % 5 != 4 else "top-10 0.91 alone", smooth=smooth,
                                 impact=0.01 * i)
    return Int8Plan(layers, CalibrationSource("texts.txt", "ab" * 32, 96, 29), smooth_alpha=0.5,
                    quality={"top10": 0.981, "ndcg10": 0.997})


def english_dir(directory: pathlib.Path, cls=bertkit.BERTForSequenceClassification, **overrides) -> pathlib.Path:
    """A tiny model on bert-base-uncased's vocabulary (so English text is English to its tokenizer), saved."""
    model = model_of(cls, vocab_size=30522, max_position_embeddings=64, **overrides)
    model.save_pretrained(directory)
    bertkit.BERTTokenizerFast(vocab_file=BERT_BASE_UNCASED_VOCAB).save_pretrained(directory)
    return directory


def static_dir(tmp_path: pathlib.Path, **overrides) -> tuple[pathlib.Path, Int8Plan]:
    """:func:`english_dir` at ``tmp_path/fp32`` and its static int8 checkpoint (the :func:`hand_plan`) at
    ``tmp_path/int8`` with the tokenizer's files beside it: (the float source, the plan)."""
    source = english_dir(tmp_path / "fp32", **overrides)
    model = bertkit.BERTForSequenceClassification.from_pretrained(source)
    model.int8_plan = hand_plan(model)
    model.save_pretrained(tmp_path / "int8", dtype="int8")
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (tmp_path / "int8" / name).write_bytes((source / name).read_bytes())
    return source, model.int8_plan


def batch() -> dict[str, torch.Tensor]:
    tokenizer = bertkit.BERTTokenizerFast(vocab_file=BERT_BASE_UNCASED_VOCAB)
    return dict(tokenizer(paragraphs(3), padding=True, truncation=True, max_length=40, return_tensors="pt"))


def logits(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        out = model(**inputs)
    return out if isinstance(out, torch.Tensor) else out[0]


# ---------------------------------------------------------------------------- the format
def test_a_static_checkpoint_stores_the_plan_and_loads_as_the_in_memory_static_model_bit_for_bit(tmp_path):
    source = english_dir(tmp_path / "fp32", num_labels=3)
    model = bertkit.BERTForSequenceClassification.from_pretrained(source)
    plan = hand_plan(model)
    model.int8_plan = plan
    model.save_pretrained(tmp_path / "int8", dtype="int8")

    block = json.loads((tmp_path / "int8" / "config.json").read_text())["quantization"]
    assert (block["format_version"], block["activations"], block["method"]) == (2, "static", "bertkit-int8")
    assert block["plan"]["calibration"]["source"] == "texts.txt" and block["plan"]["quality"]["top10"] == 0.981
    assert block["plan"]["method_version"] == 1
    assert sorted(block["modules"]) == sorted(plan.int8_layers)
    tensors = load_file(tmp_path / "int8" / "model.safetensors")
    fallen = next(iter(plan.fallbacks))
    assert tensors[f"{fallen}.weight"].dtype == torch.float32 and f"{fallen}.weight_scale" not in tensors
    smoothed = [name for name, p in plan.layers.items() if p.smooth is not None]
    assert {f"int8_plan.{name}.smooth" for name in smoothed} <= set(tensors)

    reference = apply(bertkit.BERTForSequenceClassification.from_pretrained(source), plan)
    loaded = bertkit.BERTForSequenceClassification.from_pretrained(tmp_path / "int8")
    kernels = {name: m.packed for name, m in loaded.named_modules() if isinstance(m, Linear)}
    assert {name for name, k in kernels.items() if isinstance(k, StaticInt8Kernel)} == set(plan.int8_layers)
    assert running_dtype(loaded) == "int8"
    inputs = batch()
    assert torch.equal(logits(loaded, inputs), logits(reference, inputs))
    # saved again as loaded: the same static checkpoint
    loaded.save_pretrained(tmp_path / "again")
    again = load_file(tmp_path / "again" / "model.safetensors")
    assert set(again) == set(tensors) and all(torch.equal(again[n], t) for n, t in tensors.items())


def test_every_loader_runs_a_static_checkpoint_with_its_plan(tmp_path):
    from bertkit.pipelines import pipeline
    from bertkit.sentence import CrossEncoder, SentenceTransformer
    from bertkit.tasks.sources import load_model_and_tokenizer

    source, plan = static_dir(tmp_path, num_labels=1)
    reference = apply(bertkit.BERTForSequenceClassification.from_pretrained(source), plan)
    inputs = batch()

    def static(module) -> bool:
        return any(isinstance(m.packed, StaticInt8Kernel) for m in module.modules() if isinstance(m, Linear))

    loaded, _ = load_model_and_tokenizer(tmp_path / "int8", bertkit.BERTForSequenceClassification)
    assert static(loaded) and torch.equal(logits(loaded, inputs), logits(reference, inputs))
    cross = CrossEncoder(tmp_path / "int8")
    assert static(cross.model) and torch.equal(logits(cross.model, inputs), logits(reference, inputs))
    assert static(pipeline("text-classification", tmp_path / "int8").model)
    bi_encoder = SentenceTransformer(tmp_path / "int8")  # a task checkpoint's plan fits its bare encoder
    assert static(bi_encoder) and bi_encoder.bert.int8_plan is not None
    assert "classifier" not in json.dumps(bi_encoder.bert.int8_plan.meta["layers"])
    bi_encoder.save(tmp_path / "st")
    again = SentenceTransformer(tmp_path / "st")
    texts = paragraphs(4)
    assert torch.equal(again.encode(texts, convert_to_tensor=True), bi_encoder.encode(texts, convert_to_tensor=True))


def test_loading_a_static_checkpoint_as_fp32_gives_the_dequantized_weights_and_float_layers_as_saved(tmp_path):
    from bertkit.modeling.quantization import dequantize_weight, quantize_weight

    model = model_of(bertkit.BERT)
    plan = hand_plan(model)
    model.int8_plan = plan
    model.save_pretrained(tmp_path, dtype="int8")
    with pytest.warns(bertkit.LoadWarning, match="int8 checkpoint running in float"):
        float_model = bertkit.BERT.from_pretrained(tmp_path, dtype="fp32")
    assert running_dtype(float_model) == "fp32"
    smoothed = next(name for name, p in plan.layers.items() if p.smooth is not None and p.mode == "int8")
    kept = next(iter(plan.fallbacks))
    assert torch.equal(float_model.get_submodule(smoothed).weight,
                       dequantize_weight(*quantize_weight(model.get_submodule(smoothed).weight)))
    assert torch.equal(float_model.get_submodule(kept).weight, model.get_submodule(kept).weight)


def test_version_one_dynamic_checkpoints_still_load_dynamic(tmp_path):
    from bertkit.inference.optimize import Int8Kernel

    model_of(bertkit.BERT).save_pretrained(tmp_path, dtype="int8")  # no plan: format version 1
    block = json.loads((tmp_path / "config.json").read_text())["quantization"]
    assert "format_version" not in block and block["activations"] == "dynamic"
    loaded = bertkit.BERT.from_pretrained(tmp_path)
    kinds = {type(m.packed) for m in loaded.modules() if isinstance(m, Linear)}
    assert kinds == {Int8Kernel} and loaded.int8_plan is None


@pytest.mark.parametrize("damage, message", [
    ("format_version", r"config.json's 'quantization' is int8 format version 3; this bertkit reads versions "
                       r"\[1, 2\]: upgrade bertkit, or convert the float model again"),
    ("method_version", r"static int8 plan of method 'bertkit-static-int8' version 99; this bertkit reads"),
    ("no_plan", "static int8 \\(format version 2\\) without a 'plan' object"),
    ("drop_smooth", "the static int8 plan smooths '.*' but model.safetensors lacks its tensor"),
    ("stray_smooth", "model.safetensors holds int8_plan.nowhere.smooth, which belongs to no layer"),
    ("smooth_shape", r"the static int8 plan's smooth vector for .* has shape \(5,\), the layer takes 36 inputs"),
])
def test_a_static_checkpoint_of_another_version_or_damaged_is_one_line_naming_the_file(damage, message, tmp_path):
    model = model_of(bertkit.BERT)
    model.int8_plan = hand_plan(model)
    model.save_pretrained(tmp_path, dtype="int8")
    config_path, weights_path = tmp_path / "config.json", tmp_path / "model.safetensors"
    config, tensors = json.loads(config_path.read_text()), load_file(weights_path)
    smooth = sorted(k for k in tensors if k.startswith("int8_plan."))
    if damage == "format_version":
        config["quantization"]["format_version"] = 3
    elif damage == "method_version":
        config["quantization"]["plan"]["method_version"] = 99
    elif damage == "no_plan":
        del config["quantization"]["plan"]
    elif damage == "drop_smooth":
        del tensors[smooth[0]]
    elif damage == "stray_smooth":
        tensors["int8_plan.nowhere.smooth"] = torch.ones(3)
    elif damage == "smooth_shape":
        int8_smoothed = [k for k in smooth if k.removeprefix("int8_plan.").removesuffix(".smooth")
                         in config["quantization"]["modules"]]
        tensors[int8_smoothed[0]] = torch.ones(5)
    config_path.write_text(json.dumps(config))
    save_file(tensors, weights_path)
    with pytest.raises(ValueError, match=message) as caught:
        bertkit.BERT.from_pretrained(tmp_path)
    assert str(tmp_path) in str(caught.value) and "\n" not in str(caught.value)


# ---------------------------------------------------------------------------- calibration files
def test_the_language_check_measures_the_tokenizers_own_view():
    tokenizer = bertkit.BERTTokenizerFast(vocab_file=BERT_BASE_UNCASED_VOCAB)
    assert fragmented_share(paragraphs(40), tokenizer) < 0.1
    assert fragmented_share(["Собака вчера вечером быстро бежала по мокрому лугу за нашим домом."] * 3,
                            tokenizer) > 0.9
    assert fragmented_share(["夏天我们在山里进行了一次长途旅行，看到了很多东西。"], tokenizer) > 0.9


@pytest.mark.parametrize("content, message", [
    (b"", "are empty; give at least 48 texts, one per line"),
    (b"\n  \n\n", "are empty"),
    ("\n".join(["The first text.", "A second one."]).encode(), "2 texts, too few to calibrate; give at least 48"),
    (("\n".join(["Собака вчера вечером быстро бежала по мокрому лугу за нашим домом."] * 70)).encode(),
     "looks like another language than the model's tokenizer expects: 98% of its word pieces"),
    ("\n".join(["Caf\xe9 au lait, s'il vous pla\xeet."] * 70).encode("latin-1"), "is not valid utf-8 text"),
])
def test_a_bad_calibration_file_is_one_line_naming_the_flag_and_the_file(content, message, tmp_path, capsys):
    from bertkit.cli import main

    source = english_dir(tmp_path / "fp32", num_labels=2)
    texts = tmp_path / "calibration.txt"
    texts.write_bytes(content)
    assert main(["convert", str(source), "-o", str(tmp_path / "int8"), "--dtype", "int8",
                 "--calibration", str(texts)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--calibration {texts}" in err[0]
    assert re.search(message, err[0]), err[0]
    assert not (tmp_path / "int8").exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "calibration.txt", "fp32"]


def test_a_calibration_file_is_read_as_lines_compressed_or_not(tmp_path):
    texts = paragraphs(70)
    plain, packed = tmp_path / "texts.txt", tmp_path / "texts.txt.gz"
    plain.write_text("\n\n".join(texts) + "\n", encoding="utf-8")
    packed.write_bytes(gzip.compress(("\ufeff" + "\n".join(texts)).encode("utf-8")))
    tokenizer = bertkit.BERTTokenizerFast(vocab_file=BERT_BASE_UNCASED_VOCAB)
    read, unpacked = read_calibration(plain, tokenizer), read_calibration(packed, tokenizer)
    assert read.texts == unpacked.texts == texts and read.sha256 == unpacked.sha256
    with pytest.raises(ValueError, match=r"--calibration .*missing\.txt: no such file"):
        read_calibration(tmp_path / "missing.txt")
    legacy = tmp_path / "latin-1.txt"  # the encoding the error advises reads it
    legacy.write_bytes("\n".join(t + " Caf\xe9." for t in texts).encode("latin-1", "replace"))
    with pytest.raises(ValueError, match=r"is not valid utf-8 text .*--encoding latin-1"):
        read_calibration(legacy, tokenizer)
    assert read_calibration(legacy, tokenizer, encoding="latin-1").texts[0].endswith(" Café.")


def test_calibration_without_dtype_int8_is_refused(tmp_path, capsys):
    from bertkit.cli import main

    with pytest.raises(SystemExit):
        main(["convert", str(tmp_path), "-o", str(tmp_path / "out"), "--calibration", str(tmp_path / "t.txt")])
    assert "--calibration calibrates a static int8 checkpoint: add --dtype int8" in capsys.readouterr().err


KILLED = """
import os, signal, sys
import bertkit.inference.int8_plan as plan
def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
plan.calibrate = killed
from bertkit.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_calibration_killed_half_way_writes_nothing(tmp_path):
    source = english_dir(tmp_path / "fp32", num_labels=2)
    texts = tmp_path / "calibration.txt"
    texts.write_text("\n".join(paragraphs(80)) + "\n", encoding="utf-8")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "kept.txt").write_text("an earlier conversion's file")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pathlib.Path(bertkit.__file__).parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", KILLED, "convert", str(source), "-o", str(tmp_path / "out"),
                          "--dtype", "int8", "--calibration", str(texts), "--overwrite"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.txt", "fp32", "out"]  # no staging folder
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["kept.txt"]


# ---------------------------------------------------------------------------- ONNX
def test_the_onnx_export_of_a_static_checkpoint_holds_its_plan_as_qdq_nodes(tmp_path, capsys):
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    from bertkit.cli import main

    source, plan = static_dir(tmp_path, num_labels=3)
    assert main(["export", str(tmp_path / "int8"), "-o", str(tmp_path / "onnx")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "int8 (static: the checkpoint's calibrated activation scales)" in lines[1]
    record = json.loads((tmp_path / "onnx" / "export.json").read_text())
    assert record["int8_activations"] == "static"
    graph = onnx.load(tmp_path / "onnx" / "model.int8.onnx").graph
    ops = [node.op_type for node in graph.node]
    assert ops.count("QuantizeLinear") == len(plan.int8_layers)
    assert ops.count("DequantizeLinear") == 2 * len(plan.int8_layers)
    scales = {numpy_value(graph, node.input[1]) for node in graph.node if node.op_type == "QuantizeLinear"}
    assert scales == {round(p.scale, 6) for p in plan.layers.values() if p.mode == "int8"}

    session = ort.InferenceSession(str(tmp_path / "onnx" / "model.int8.onnx"), providers=["CPUExecutionProvider"])
    inputs = batch()
    got = torch.from_numpy(session.run(None, {k: v.numpy() for k, v in inputs.items()})[0])
    ours = logits(bertkit.BERTForSequenceClassification.from_pretrained(tmp_path / "int8"), inputs)
    reference = logits(bertkit.BERTForSequenceClassification.from_pretrained(source), inputs)
    # ONNX Runtime's int8 products against bertkit's: rounding apart; both near the float model
    assert (got - ours).abs().max() <= 0.25 * (ours - reference).abs().max() + 1e-3
    assert max(record["int8_vs_bertkit_max_abs_diff"].values()) < 0.05
    # a sentence model's graph never runs the encoder's pooler, which the plan has: the rest is rewritten
    from bertkit.export import export_onnx
    from bertkit.sentence import SentenceTransformer

    report = export_onnx(SentenceTransformer(tmp_path / "int8"), tmp_path / "st-onnx")
    assert report.int8_activations == "static" and max(report.int8_vs_bertkit_max_abs_diff.values()) < 0.05


def numpy_value(graph, name: str) -> float:
    from onnx import numpy_helper

    return round(float(next(numpy_helper.to_array(i) for i in graph.initializer if i.name == name)), 6)


def test_bertkit_serve_runs_a_static_checkpoint_with_its_plan(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from bertkit.serving import create_app

    source, _ = static_dir(tmp_path, num_labels=3, id2label={0: "a", 1: "b", 2: "c"})
    text = " ".join(paragraphs(1)[0].split()[:30])
    pipe = bertkit.pipeline("text-classification", model=tmp_path / "int8", top_k=None)
    assert any(isinstance(m.packed, StaticInt8Kernel) for m in pipe.model.modules() if isinstance(m, Linear))
    float_scores = bertkit.pipeline("text-classification", model=source, top_k=None, dtype="fp32")(text)
    with TestClient(create_app(tmp_path / "int8")) as client:
        assert client.get("/info").json()["model_dtype"] == "int8"
        served = client.post("/predict", json={"inputs": text}).json()

    def scores(answer) -> dict[str, float]:
        return {d["label"]: d["score"] for d in answer}

    assert scores(served) == pytest.approx(scores(pipe(text)), abs=1e-6)
    assert scores(served) != pytest.approx(scores(float_scores), abs=1e-6)  # int8's numbers, not float's
